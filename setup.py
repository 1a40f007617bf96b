# The C core (csrc/) is compiled by cffi at install time; everything else is in pyproject.toml.
from setuptools import setup

setup(cffi_modules=["csrc/build_core.py:ffibuilder"])

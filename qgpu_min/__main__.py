"""`python -m qgpu_min` runs the command line."""
from .cli import main

main()

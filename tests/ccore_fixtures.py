"""Settings every C-core kernel must give the same results under: thread counts and SIMD levels."""
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from qgpu_min.model import kernels as K

SIMD_LEVELS = K.ISA_NAMES[:K.ISA_NAMES.index(K.set_isa(None)) + 1]  # up to the best this CPU has


@contextmanager
def thread_count(n: int) -> Iterator[int]:
    """The C core on n threads inside the block, back to its default after (also when a test fails)."""
    K.set_threads(n)
    try:
        yield n
    finally:
        K.set_threads(None)


@pytest.fixture(params=[1, 2])
def threads(request):
    with thread_count(request.param):
        yield request.param


@pytest.fixture(params=SIMD_LEVELS)
def isa(request):
    K.set_isa(request.param)
    try:
        yield request.param
    finally:
        K.set_isa(None)

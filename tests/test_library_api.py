"""The library in one import (`qgpu_min.compile`, `qgpu_min.launch`): NumPy arrays of any shape and integer
dtype in and back, the CLI's default block, and errors that name the argument."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import qgpu_min

DOT = "examples/dot.cu"
COPY = """
__global__ void copy_u(const unsigned *src, unsigned *dst, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
"""


@pytest.fixture(scope="module")
def dot() -> qgpu_min.CompiledKernel:
    return qgpu_min.compile(DOT)


def test_import_is_lazy() -> None:
    """`import qgpu_min` loads neither NumPy nor the compiler; the first use of a name does."""
    code = ("import sys, qgpu_min; assert 'numpy' not in sys.modules, 'numpy'; "
            "assert 'qgpu_min.host.launch' not in sys.modules; qgpu_min.launch; "
            "assert 'qgpu_min.host.launch' in sys.modules; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_public_names_resolve() -> None:
    for name in qgpu_min.__all__:
        assert getattr(qgpu_min, name) is not None
    assert issubclass(qgpu_min.LaunchError, qgpu_min.QgpuError)
    assert issubclass(qgpu_min.MemoryFault, qgpu_min.QgpuError)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        qgpu_min.nope


def test_readme_example(dot) -> None:
    r = qgpu_min.launch(dot, [np.array([1, 2, 3]), np.array([4, 5, 6]), np.zeros(1, np.int32), 3])
    assert r.arrays["out"].dtype == np.int32 and r.arrays["out"].tolist() == [32]
    assert r.block == (3, 1)        # one thread per element, as on the command line


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
                                   np.uint64, ">i4"])
def test_arrays_come_back_in_their_shape_and_dtype(dot, dtype) -> None:
    rng = np.random.default_rng(7)
    a = rng.integers(0, 5, size=(2, 3)).astype(dtype)
    b = rng.integers(0, 5, size=(3, 2)).astype(dtype)
    out = np.zeros((1, 1, 1), dtype)
    r = qgpu_min.launch(dot, [a, b, out, 6])
    got = r.arrays["out"]
    assert got.shape == (1, 1, 1) and got.dtype == np.dtype(dtype)
    assert int(got[0, 0, 0]) == int((a.ravel().astype(np.int64) * b.ravel()).sum())
    assert r.arrays["a"].shape == (2, 3) and np.array_equal(r.arrays["a"], a)     # row-major, unchanged


def test_same_width_returns_the_bits() -> None:
    """An int32 array under an `unsigned*` parameter reads back as cudaMemcpy would: 0xFFFFFFFF is -1."""
    k = qgpu_min.compile(COPY)
    src = np.array([-1, 5, -2**31], np.int32)
    r = qgpu_min.launch(k, [src, np.zeros(3, np.int32), 3])
    assert r.arrays["dst"].dtype == np.int32 and r.arrays["dst"].tolist() == [-1, 5, -2**31]
    r = qgpu_min.launch(k, [src, np.zeros(3, np.int64), 3])        # wider: the unsigned values
    assert r.arrays["dst"].tolist() == [2**32 - 1, 5, 2**31]


def test_a_value_the_dtype_cannot_hold_is_an_error(dot) -> None:
    with pytest.raises(qgpu_min.LaunchError, match=r"argument out: the kernel left 10010 in element 0, which "
                                                    r"dtype int8 cannot hold.*dtype int32"):
        qgpu_min.launch(dot, [np.array([100, 2], np.int16), np.array([100, 5]), np.zeros(1, np.int8), 2])


@pytest.mark.parametrize("bad, message", [
    (np.array([1.0, 2.0]), "argument a: a NumPy array of dtype float64 is not an integer array"),
    (np.array([True, False]), "argument a: a NumPy array of dtype bool is not an integer array"),
    (np.zeros((0, 3), np.int32), "argument a: an empty array"),
    (np.array([2**40], np.int64), r"argument a\[0\]: 1099511627776 is outside"),
    (7, "argument a is a pointer"),
])
def test_bad_arrays_name_the_argument(dot, bad, message) -> None:
    with pytest.raises(qgpu_min.LaunchError, match=message):
        qgpu_min.launch(dot, [bad, np.array([1, 2]), np.zeros(1, np.int32), 2])


def test_default_block_is_the_clis(dot) -> None:
    """Without block=, one thread per element of the largest array (here 10), not one warp."""
    a = np.arange(10)
    r = qgpu_min.launch(dot, [a, np.ones(10, np.int64), np.zeros(1, np.int64), 10])
    assert r.block == (10, 1) and r.arrays["out"].tolist() == [45]
    r = qgpu_min.launch(dot, [np.arange(100), np.ones(100, np.int64), np.zeros(1, np.int64), 100])
    assert r.block == (32, 1) and r.arrays["out"].tolist() == [4950]

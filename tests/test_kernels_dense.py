"""C dense bf16 products vs the NumPy reference, at every SIMD level the CPU has and 1 or 2 threads."""
import numpy as np
import pytest

from qgpu_min.model import kernels as K
from qgpu_min.model import kernels_ref as R
from qgpu_min.model.bf16 import bf16_to_f32, f32_to_bf16

from ccore_fixtures import isa, thread_count, threads  # noqa: F401  (pytest fixtures)

# Odd sizes, sizes that are not multiples of 8 or 16, and sizes just around them; n = 1 included.
SHAPES = [(1, 1, 1), (3, 7, 1), (5, 17, 2), (16, 16, 4), (9, 15, 3), (33, 100, 5), (257, 300, 1),
          (130, 513, 7), (64, 2048, 9), (8, 24, 1)]


def _random_case(rng, out, n_in, n):
    w = f32_to_bf16(rng.standard_normal((out, n_in)).astype(np.float32))
    x = rng.standard_normal((n, n_in)).astype(np.float32)
    return w, x


def _summation_bound(w, x):
    """Two fp32 sums of the same products, in any orders, differ by at most in * 2^-23 * sum|w x|."""
    magnitude = np.abs(x.astype(np.float64)) @ np.abs(bf16_to_f32(w).astype(np.float64)).T
    return w.shape[1] * 2.0**-23 * magnitude + 1e-30


@pytest.mark.parametrize("out, n_in, n", SHAPES)
def test_matmul_matches_reference(isa, threads, out, n_in, n):
    rng = np.random.default_rng(out * 1000 + n_in + n)
    w, x = _random_case(rng, out, n_in, n)
    y = K.matmul_bf16(w, x)
    ref = R.matmul_bf16(w, x)
    assert y.shape == (n, out) and y.dtype == np.float32
    assert np.all(np.abs(y.astype(np.float64) - ref) <= _summation_bound(w, x))


@pytest.mark.parametrize("out, n_in, n", SHAPES)
def test_matvec_matches_reference_and_matmul_rows_bit_for_bit(isa, threads, out, n_in, n):
    rng = np.random.default_rng(out + n_in * 7 + n)
    w, x = _random_case(rng, out, n_in, n)
    y = K.matmul_bf16(w, x)
    for t in range(n):
        v = K.matvec_bf16(w, x[t])
        assert v.shape == (out,) and v.dtype == np.float32
        assert np.all(np.abs(v.astype(np.float64) - R.matvec_bf16(w, x[t])) <= _summation_bound(w, x[t:t + 1])[0])
        assert np.array_equal(v, y[t])  # prefill and decode give the same numbers


def test_thread_count_does_not_change_results(isa):
    rng = np.random.default_rng(5)
    w, x = _random_case(rng, 1000, 777, 6)
    with thread_count(1):
        one = K.matmul_bf16(w, x), K.matvec_bf16(w, x[0])
    with thread_count(2):
        two = K.matmul_bf16(w, x), K.matvec_bf16(w, x[0])
    assert np.array_equal(one[0], two[0]) and np.array_equal(one[1], two[1])


def test_small_integer_sums_are_exact(isa, threads):
    # Integers times powers of two: every partial sum is representable, so any order gives the exact value.
    rng = np.random.default_rng(3)
    out, n_in, n = 70, 2051, 3
    w_val = rng.integers(-8, 9, size=(out, n_in)) * 2.0 ** rng.integers(-2, 1, size=(out, n_in))
    x = (rng.integers(-8, 9, size=(n, n_in)) * 2.0 ** rng.integers(-2, 1, size=(n, n_in))).astype(np.float32)
    w = f32_to_bf16(w_val.astype(np.float32))
    exact = x.astype(np.float64) @ w_val.T
    assert np.array_equal(K.matmul_bf16(w, x), exact.astype(np.float32))
    assert np.array_equal(K.matvec_bf16(w, x[1]), exact[1].astype(np.float32))


def test_empty_shapes():
    w = np.zeros((4, 0), dtype=np.uint16)
    assert np.array_equal(K.matvec_bf16(w, np.zeros(0, np.float32)), np.zeros(4, np.float32))
    assert K.matmul_bf16(np.zeros((3, 5), np.uint16), np.zeros((0, 5), np.float32)).shape == (0, 3)
    assert K.matvec_bf16(np.zeros((0, 5), np.uint16), np.zeros(5, np.float32)).shape == (0,)


def test_read_only_memory_mapped_weight(tmp_path):
    rng = np.random.default_rng(11)
    w, x = _random_case(rng, 40, 33, 2)
    path = tmp_path / "w.bin"
    w.tofile(path)
    mapped = np.memmap(path, dtype=np.uint16, mode="r", shape=w.shape)
    assert np.array_equal(K.matmul_bf16(mapped, x), K.matmul_bf16(w, x))


def test_set_isa_and_threads_report_what_is_in_force():
    assert K.set_isa("generic") == "generic" and K.isa() == "generic"
    best = K.set_isa(None)
    assert best in K.ISA_NAMES and K.isa() == best
    K.set_threads(3)
    assert K.threads() == 3
    K.set_threads(None)
    assert K.threads() >= 1

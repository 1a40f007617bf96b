"""Q8 (int8 weights, a float32 scale per 32 columns): the C quantizer against its NumPy reference bit for bit,
and the C products against the reference math, at every SIMD level the CPU has and 1 or 2 threads."""
import numpy as np
import pytest

from qgpu_min.model import kernels as K
from qgpu_min.model import kernels_ref as R
from qgpu_min.model.bf16 import bf16_to_f32, f32_to_bf16

from ccore_fixtures import isa, thread_count, threads  # noqa: F401  (pytest fixtures)

SHAPES = [(1, 32, 1), (3, 64, 2), (5, 96, 1), (16, 32, 4), (33, 320, 5), (257, 256, 1), (130, 2048, 7)]


def _mixed_matrix(rng, out, n_in):
    """Rows of every kind a model has: trained-like values at very different magnitudes, small integers times
    powers of two (exact in Q8), all-zero blocks, subnormal-sized values and signed zeros."""
    v = rng.standard_normal((out, n_in)) * 10.0 ** rng.integers(-6, 4, size=(out, 1))
    kinds = rng.integers(0, 5, size=out)
    v[kinds == 1] = rng.integers(-127, 128, size=(int((kinds == 1).sum()), n_in)) * 2.0 ** rng.integers(-9, 9)
    v[kinds == 2, :32] = 0.0
    v[kinds == 3] *= 1e-36
    v[kinds == 4, ::7] = -0.0
    return f32_to_bf16(v.astype(np.float32))


def _bound(w: K.QuantQ8, x):
    """Two fp32 evaluations of sum_b s_b sum_k q_k x_k in different orders differ by at most
    (in + 2) * 2^-23 * sum |s q x| (each term is rounded at most twice more than in the exact sum)."""
    magnitude = np.abs(x.astype(np.float64)) @ np.abs(w.dequantize().astype(np.float64)).T
    return (w.shape[1] + 2) * 2.0**-23 * magnitude + 1e-30


@pytest.mark.parametrize("seed", range(4))
def test_c_quantizer_equals_the_reference_bit_for_bit(threads, seed):
    rng = np.random.default_rng(seed)
    w = _mixed_matrix(rng, 300, 32 * int(rng.integers(1, 40)))
    c, ref = K.quantize_q8(w), R.quantize_q8(w)
    assert np.array_equal(c.q, ref.q) and np.array_equal(c.scales, ref.scales)


def test_blocks_of_small_integers_times_a_power_of_two_are_exact():
    rng = np.random.default_rng(7)
    values = rng.integers(-127, 128, size=(40, 256)) * 2.0 ** rng.integers(-20, 20, size=(40, 1))
    values[3] = 0
    w = f32_to_bf16(values.astype(np.float32))
    q = K.quantize_q8(w)
    assert np.array_equal(q.dequantize(), bf16_to_f32(w))
    assert np.all(q.scales[3] == 0) and np.all(q.q[3] == 0)


def test_each_weight_is_within_half_a_step_of_its_value():
    rng = np.random.default_rng(8)
    w = _mixed_matrix(rng, 200, 512)
    q = K.quantize_q8(w)
    step = np.repeat(q.scales, R.Q8_BLOCK, axis=1)
    err = np.abs(q.dequantize().astype(np.float64) - bf16_to_f32(w))
    # half a step, plus the float32 rounding of q * scale (at most 127 * scale * 2^-24) and of a subnormal scale
    assert np.all(err <= step * (0.5 + 2.0**-16) + 2.0**-149 * 128)
    assert np.abs(q.q).max() <= 127


@pytest.mark.parametrize("out, n_in, n", SHAPES)
def test_products_match_the_reference_and_matvec_equals_matmul_rows(isa, threads, out, n_in, n):
    rng = np.random.default_rng(out * 31 + n_in + n)
    w = K.quantize_q8(_mixed_matrix(rng, out, n_in))
    x = rng.standard_normal((n, n_in)).astype(np.float32)
    y = K.matmul_bf16(w, x)
    assert y.shape == (n, out) and y.dtype == np.float32
    assert np.all(np.abs(y - R.matmul_q8(w, x)) <= _bound(w, x))
    for t in range(n):
        assert np.array_equal(K.matvec_bf16(w, x[t]), y[t])  # prefill and decode give the same numbers


def test_a_multi_product_mixing_bf16_q8_and_csr_equals_each_product_alone(isa):
    rng = np.random.default_rng(9)
    dense = f32_to_bf16(rng.standard_normal((70, 256)).astype(np.float32))
    q8 = K.quantize_q8(f32_to_bf16(rng.standard_normal((45, 256)).astype(np.float32)))
    sparse = K.SparseBF16.from_dense(np.where(rng.random((20, 256)) < 0.02, dense[:20], np.uint16(0)))
    ws = [q8, dense, sparse, q8] + [dense] * 16       # more than one C call's worth of matrices
    x = rng.standard_normal((3, 256)).astype(np.float32)
    for got, w in zip(K.matmul_bf16_multi(ws, x), ws):
        assert np.array_equal(got, K.matmul_bf16(w, x))
    for got, w in zip(K.matvec_bf16_multi(ws, x[1]), ws):
        assert np.array_equal(got, K.matvec_bf16(w, x[1]))


def test_thread_count_does_not_change_results(isa):
    rng = np.random.default_rng(5)
    w = K.quantize_q8(f32_to_bf16(rng.standard_normal((1000, 768)).astype(np.float32)))
    x = rng.standard_normal((6, 768)).astype(np.float32)
    with thread_count(1):
        one = K.matmul_bf16(w, x)
    with thread_count(2):
        two = K.matmul_bf16(w, x)
    assert np.array_equal(one, two)


def test_bad_matrices_are_refused_naming_the_problem():
    w = f32_to_bf16(np.ones((4, 64), np.float32))
    w[2, 5] = f32_to_bf16(np.array([np.inf], np.float32))[0]
    for quantize in (K.quantize_q8, R.quantize_q8):
        with pytest.raises(K.KernelInputError, match="row 2 holds a non-finite weight"):
            quantize(w)
        with pytest.raises(K.KernelInputError, match="48 columns are not a multiple of the block of 32"):
            quantize(np.zeros((2, 48), np.uint16))
        with pytest.raises(K.KernelInputError, match="2-D uint16"):
            quantize(np.zeros((2, 64), np.float32))
    with pytest.raises(K.KernelInputError, match="do not describe blocks of 32"):
        K.QuantQ8(np.zeros((2, 64), np.int8), np.zeros((2, 3), np.float32))
    with pytest.raises(K.KernelInputError, match="QuantQ8.q must be a contiguous 2-D int8"):
        K.QuantQ8(np.zeros((2, 64), np.int16), np.zeros((2, 2), np.float32))
    q = K.quantize_q8(f32_to_bf16(np.ones((4, 64), np.float32)))
    with pytest.raises(K.KernelInputError, match="x has shape"):
        K.matvec_bf16(q, np.zeros(32, np.float32))

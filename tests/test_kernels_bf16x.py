"""bf16 mode's products: bf16 activations (bf16_x=True) at every SIMD level the CPU has and 1 or 2 threads,
within fp32 summation error of the reference, a token's row the same bits in a matvec and in a matmul of any
size, one dispatch the same as separate products; on AMX tiles at the amx level. Results rounded to bf16 by
the product (bf16_y=True) are round_bf16 of the unrounded ones, bit for bit."""
import numpy as np
import pytest

from qgpu_min.model import kernels as K
from qgpu_min.model import kernels_ref as R
from qgpu_min.model.bf16 import f32_to_bf16, round_bf16

from ccore_fixtures import SIMD_LEVELS, isa, thread_count, threads  # noqa: F401  (pytest fixtures)
from test_kernels_dense import _summation_bound

# Around the tiles' sizes: 16 rows, 16 tokens, 32 columns (and the AVX levels' 4 x 4 and 16 lanes).
SHAPES = [(1, 1, 1), (5, 17, 2), (16, 32, 16), (17, 33, 17), (33, 100, 5), (50, 64, 33), (130, 513, 40),
          (64, 2048, 9), (48, 31, 1)]


def _case(rng, out, n_in, n):
    w = f32_to_bf16(rng.standard_normal((out, n_in)).astype(np.float32))
    x = round_bf16(rng.standard_normal((n, n_in)).astype(np.float32))
    return w, x


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


@pytest.mark.parametrize("out, n_in, n", SHAPES)
def test_bf16x_matmul_is_within_summation_error_and_rows_equal_matvec(isa, threads, out, n_in, n):
    rng = np.random.default_rng(out * 31 + n_in * 7 + n)
    w, x = _case(rng, out, n_in, n)
    y = K.matmul_bf16(w, x, bf16_x=True)
    assert y.shape == (n, out) and y.dtype == np.float32
    assert np.all(np.abs(y.astype(np.float64) - R.matmul_bf16(w, x, bf16_x=True)) <= _summation_bound(w, x))
    for t in range(n):  # decode (one token) and prefill (many) give the same numbers
        assert np.array_equal(_bits(K.matvec_bf16(w, x[t], bf16_x=True)), _bits(y[t]))
    for lo, hi in ((0, 1), (0, min(n, 17)), (min(n, 3), n)):  # any batch of the tokens, too
        assert np.array_equal(_bits(K.matmul_bf16(w, x[lo:hi], bf16_x=True)), _bits(y[lo:hi]))


def test_bf16x_results_do_not_depend_on_the_thread_count(isa):
    rng = np.random.default_rng(3)
    w, x = _case(rng, 1000, 777, 37)
    with thread_count(1):
        one = K.matmul_bf16(w, x, bf16_x=True)
    with thread_count(2):
        two = K.matmul_bf16(w, x, bf16_x=True)
    assert np.array_equal(_bits(one), _bits(two))


def test_bf16x_multi_equals_separate_products_with_every_kind_of_weight(isa, threads):
    rng = np.random.default_rng(4)
    n_in = 96
    dense = [f32_to_bf16(rng.standard_normal((o, n_in)).astype(np.float32)) for o in (40, 16, 7)]
    q8 = K.quantize_q8(dense[0])
    sparse_bits = dense[1].copy()
    sparse_bits[:, ::3] = 0
    sparse = R.maybe_sparse(sparse_bits, max_density=1.0)
    x = round_bf16(rng.standard_normal((20, n_in)).astype(np.float32))
    ws = [dense[0], q8, sparse, dense[2], dense[1]]
    together = K.matmul_bf16_multi(ws, x, bf16_x=True)
    for w, y in zip(ws, together):
        assert np.array_equal(_bits(y), _bits(K.matmul_bf16(w, x, bf16_x=True)))
    # Q8 and CSR weights compute as without bf16_x
    assert np.array_equal(_bits(together[1]), _bits(K.matmul_bf16(q8, x)))
    assert np.array_equal(_bits(together[2]), _bits(K.matmul_bf16(sparse, x)))
    vec = K.matvec_bf16_multi(ws, x[5], bf16_x=True)
    assert all(np.array_equal(_bits(v), _bits(y[5])) for v, y in zip(vec, together))


def test_bf16x_small_integer_sums_are_exact(isa, threads):
    # products and partial sums of small integers are exact in fp32 in any order (AMX's included)
    rng = np.random.default_rng(6)
    wi = rng.integers(-8, 9, (70, 200))
    xi = rng.integers(-8, 9, (19, 200))
    w = f32_to_bf16(wi.astype(np.float32))
    y = K.matmul_bf16(w, xi.astype(np.float32), bf16_x=True)
    assert np.array_equal(y, (xi @ wi.T).astype(np.float32))


def test_bf16x_only_changes_the_amx_level():
    rng = np.random.default_rng(7)
    w, x = _case(rng, 300, 2048, 20)
    try:
        for level in SIMD_LEVELS:
            K.set_isa(level)
            plain, tiles = K.matmul_bf16(w, x), K.matmul_bf16(w, x, bf16_x=True)
            if level == "amx":  # AMX's own summation order: some of 6,000 sums of 2,048 products differ
                assert not np.array_equal(_bits(plain), _bits(tiles))
            else:
                assert np.array_equal(_bits(plain), _bits(tiles))
    finally:
        K.set_isa(None)


@pytest.mark.parametrize("bad", [np.float32(0.1), np.float32(1 + 2**-10)])
def test_bf16x_refuses_a_value_that_is_not_a_bf16(bad):
    w = f32_to_bf16(np.ones((4, 8), np.float32))
    x = np.ones((3, 8), np.float32)
    x[2, 5] = bad
    for call in (lambda: K.matmul_bf16(w, x, bf16_x=True), lambda: K.matvec_bf16(w, x[2], bf16_x=True),
                 lambda: K.matmul_bf16_multi([w, w], x, bf16_x=True)):
        with pytest.raises(K.KernelInputError, match=r"bf16_x=True, but x\[.*5\] = .* is not a bf16 value"):
            call()
    with pytest.raises(K.KernelInputError, match="not a bf16"):
        R.matmul_bf16(w, x, bf16_x=True)


def test_bf16x_non_finite_values_propagate_like_the_reference(isa):
    w = f32_to_bf16(np.ones((20, 40), np.float32))
    x = np.ones((18, 40), np.float32)
    x[3, 7], x[9, 0], x[10, 39] = np.inf, np.nan, -np.inf
    y = K.matmul_bf16(w, x, bf16_x=True)
    ref = R.matmul_bf16(w, x, bf16_x=True)
    assert np.array_equal(np.isnan(y), np.isnan(ref)) and np.array_equal(y[np.isfinite(ref)], ref[np.isfinite(ref)])
    assert np.array_equal(y[np.isinf(ref)], ref[np.isinf(ref)])


@pytest.mark.parametrize("bf16_x", [False, True])
def test_bf16y_is_round_bf16_of_the_product(isa, threads, bf16_x):
    rng = np.random.default_rng(8)
    w, x = _case(rng, 70, 130, 21)
    q8 = K.quantize_q8(f32_to_bf16(rng.standard_normal((40, 128)).astype(np.float32)))
    sparse = R.maybe_sparse(np.where(rng.random((30, 130)) < 0.1, w[:30], np.uint16(0)).astype(np.uint16))
    for ws, xs in (([w, sparse], x), ([q8], x[:, :128])):
        plain = K.matmul_bf16_multi(ws, xs, bf16_x)
        rounded = K.matmul_bf16_multi(ws, xs, bf16_x, bf16_y=True)
        for p, r in zip(plain, rounded):
            assert np.array_equal(_bits(r), _bits(round_bf16(p)))
        for w_, r in zip(ws, rounded):
            assert np.array_equal(_bits(K.matmul_bf16(w_, xs, bf16_x, True)), _bits(r))
            assert np.array_equal(_bits(K.matvec_bf16(w_, xs[4], bf16_x, True)), _bits(r[4]))
            assert np.array_equal(_bits(R.matmul_bf16(w_, xs, bf16_x, True)),
                                  _bits(round_bf16(R.matmul_bf16(w_, xs, bf16_x).astype(np.float32))))

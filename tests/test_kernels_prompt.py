"""A prompt's products (matmul_bf16(..., prompt=True)): at the amx level fp32 activations run on AMX tiles as
three bf16 parts (x = hi + mid + lo), elsewhere as without the flag. At every SIMD level the CPU has and 1 or
2 threads: within fp32 summation error of the reference, a token's row the same bits in any prompt product
(any batch of the tokens, one included), one dispatch the same as separate products, non-finite values
propagated as the reference propagates them."""
import numpy as np
import pytest

from qgpu_min.model import kernels as K
from qgpu_min.model import kernels_ref as R
from qgpu_min.model.bf16 import f32_to_bf16

from ccore_fixtures import isa, threads  # noqa: F401  (pytest fixtures)
from test_kernels_bf16x import _bits
from test_kernels_dense import _summation_bound

# Around the tiles' sizes: 16 rows, 16 tokens, 32 columns (and the AVX levels' 4 x 4 tiles).
SHAPES = [(1, 1, 1), (5, 17, 2), (16, 32, 16), (17, 33, 17), (33, 100, 5), (130, 513, 40), (64, 2048, 9)]


def _case(rng, out, n_in, n):
    w = f32_to_bf16(rng.standard_normal((out, n_in)).astype(np.float32))
    x = (rng.standard_normal((n, n_in)) * np.exp2(rng.integers(-20, 20, (n, n_in)))).astype(np.float32)
    return w, x


@pytest.mark.parametrize("out, n_in, n", SHAPES)
def test_prompt_products_are_within_summation_error_and_rows_keep_their_bits(isa, threads, out, n_in, n):
    rng = np.random.default_rng(out * 13 + n_in * 3 + n)
    w, x = _case(rng, out, n_in, n)
    y = K.matmul_bf16(w, x, prompt=True)
    assert y.shape == (n, out) and y.dtype == np.float32
    assert np.all(np.abs(y.astype(np.float64) - R.matmul_bf16(w, x)) <= _summation_bound(w, x))
    for lo, hi in ((0, 1), (0, min(n, 17)), (min(n, 3), n), (n - 1, n)):  # any batch of the tokens
        assert np.array_equal(_bits(K.matmul_bf16(w, x[lo:hi], prompt=True)), _bits(y[lo:hi]))
    if isa != "amx":  # only the amx level has another way to multiply a prompt
        assert np.array_equal(_bits(K.matmul_bf16(w, x)), _bits(y))


def test_prompt_products_in_one_dispatch_equal_separate_ones(isa):
    rng = np.random.default_rng(7)
    ws = [f32_to_bf16(rng.standard_normal((o, 96)).astype(np.float32)) for o in (40, 16, 3)]
    x = rng.standard_normal((21, 96)).astype(np.float32)
    ys = K.matmul_bf16_multi(ws, x, prompt=True)
    for w, y in zip(ws, ys):
        assert np.array_equal(_bits(K.matmul_bf16(w, x, prompt=True)), _bits(y))


def test_prompt_products_do_not_depend_on_the_thread_count(isa):
    rng = np.random.default_rng(8)
    w, x = _case(rng, 300, 257, 19)
    K.set_threads(1)
    try:
        one = K.matmul_bf16(w, x, prompt=True)
    finally:
        K.set_threads(None)
    assert np.array_equal(_bits(K.matmul_bf16(w, x, prompt=True)), _bits(one))


def test_small_integer_sums_are_exact_and_non_finite_values_propagate(isa):
    rng = np.random.default_rng(9)
    w = f32_to_bf16(rng.integers(-3, 4, (20, 70)).astype(np.float32))
    x = rng.integers(-1000, 1000, (5, 70)).astype(np.float32)  # 10 significant bits: hi and mid parts
    assert np.array_equal(K.matmul_bf16(w, x, prompt=True), R.matmul_bf16(w, x))
    x[1, 3], x[2, 5], x[3, 0] = np.inf, np.nan, -np.inf
    with np.errstate(invalid="ignore"):
        got, want = K.matmul_bf16(w, x, prompt=True), R.matmul_bf16(w, x)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))
    assert np.array_equal(got[np.isinf(got)], want[np.isinf(want)])

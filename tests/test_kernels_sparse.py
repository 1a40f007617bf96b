"""CSR path for mostly-zero bf16 weights: format, C vs reference (bit for bit), sparse vs dense."""
import numpy as np
import pytest

from qgpu_min.model import kernels as K
from qgpu_min.model import kernels_ref as R
from qgpu_min.model.bf16 import f32_to_bf16

from ccore_fixtures import threads  # noqa: F401  (pytest fixture)


def _sparse_weight(rng, out, n_in, density):
    w = f32_to_bf16(rng.standard_normal((out, n_in)).astype(np.float32))
    w[rng.random((out, n_in)) >= density] = 0
    return w


def test_from_dense_round_trips_and_drops_both_zeros():
    w = np.array([[0x0000, 0x3F80, 0x8000], [0x0000, 0x0000, 0x0000], [0xC000, 0x0000, 0x0001]], np.uint16)
    sp = R.SparseBF16.from_dense(w)
    assert sp.nnz == 3 and sp.indptr.tolist() == [0, 1, 1, 3] and sp.indices.tolist() == [1, 0, 2]
    expected = w.copy()
    expected[0, 2] = 0  # -0 is dropped: it adds nothing to a sum that starts at +0
    assert np.array_equal(sp.to_dense(), expected)
    assert sp.density == pytest.approx(3 / 9)


@pytest.mark.parametrize("out, n_in, n, density", [
    (1, 1, 1, 1.0), (7, 13, 2, 0.3), (300, 200, 4, 0.02), (2000, 517, 3, 0.01), (50, 60, 1, 0.0)])
def test_c_sparse_equals_reference_bit_for_bit(threads, out, n_in, n, density):
    rng = np.random.default_rng(out + n_in)
    sp = R.SparseBF16.from_dense(_sparse_weight(rng, out, n_in, density))
    x = rng.standard_normal((n, n_in)).astype(np.float32)
    assert np.array_equal(K.matmul_bf16(sp, x), R.matmul_bf16(sp, x))
    assert np.array_equal(K.matvec_bf16(sp, x[0]), R.matvec_bf16(sp, x[0]))
    assert np.array_equal(K.sparse_matvec(sp, x[-1]), R.sparse_matvec(sp, x[-1]))


def test_sparse_agrees_with_dense():
    rng = np.random.default_rng(4)
    w = _sparse_weight(rng, 600, 300, 0.01)
    x = rng.standard_normal((5, 300)).astype(np.float32)
    sp = K.maybe_sparse(w)
    assert isinstance(sp, K.SparseBF16)
    np.testing.assert_allclose(K.matmul_bf16(sp, x), K.matmul_bf16(w, x), rtol=1e-5, atol=1e-5)
    # integer-valued weights and inputs: exact either way
    wi = f32_to_bf16(rng.integers(-3, 4, size=(600, 300)).astype(np.float32))
    wi[rng.random(wi.shape) > 0.01] = 0
    xi = rng.integers(-5, 6, size=(2, 300)).astype(np.float32)
    assert np.array_equal(K.matmul_bf16(K.maybe_sparse(wi), xi), K.matmul_bf16(wi, xi))


def test_maybe_sparse_threshold():
    rng = np.random.default_rng(2)
    dense = _sparse_weight(rng, 100, 100, 0.5)
    assert K.maybe_sparse(dense) is dense
    sparse = _sparse_weight(rng, 100, 100, 0.01)
    assert isinstance(K.maybe_sparse(sparse), K.SparseBF16)
    assert K.maybe_sparse(sparse, max_density=0.0) is sparse


def test_inconsistent_csr_is_rejected():
    ok = dict(shape=(2, 3), indptr=np.array([0, 1, 2], np.int64), indices=np.array([0, 2], np.int32),
              values=np.array([0x3F80, 0x4000], np.uint16))
    R.SparseBF16(**ok)
    with pytest.raises(K.KernelInputError, match="indices"):
        R.SparseBF16(**{**ok, "indices": np.array([0, 2], np.int64)})
    with pytest.raises(K.KernelInputError, match="column indices"):
        R.SparseBF16(**{**ok, "indices": np.array([0, 3], np.int32)})
    with pytest.raises(K.KernelInputError, match="indptr"):
        R.SparseBF16(**{**ok, "indptr": np.array([0, 2, 1], np.int64)})
    with pytest.raises(K.KernelInputError, match="2-D uint16"):
        R.SparseBF16.from_dense(np.zeros((2, 2), np.float32))


def test_from_dense_across_row_chunks():
    # 3000 x 2000 spans two of from_dense's row chunks (about 4M weights each).
    rng = np.random.default_rng(8)
    w = np.zeros((3000, 2000), np.uint16)
    rows, cols = rng.integers(0, 3000, 500), rng.integers(0, 2000, 500)
    w[rows, cols] = rng.integers(1, 0x7F80, 500).astype(np.uint16)
    w[2999, 1999] = 0x3F80
    sp = R.SparseBF16.from_dense(w)
    assert sp.nnz == R.count_nonzero_bf16(w) == np.count_nonzero(w)
    assert np.array_equal(sp.to_dense(), w)

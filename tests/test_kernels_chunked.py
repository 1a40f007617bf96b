"""chunked_matvec (the dense product without its all-zero chunks, for the circuit model's tied LM head)
against the dense C product at every SIMD level: the same bits; and the format's round trip."""
import numpy as np
import pytest

from qgpu_min.model import kernels as K
from qgpu_min.model import kernels_ref as R
from qgpu_min.model.bf16 import f32_to_bf16

from ccore_fixtures import isa, threads  # noqa: F401  (pytest fixtures)


def _sparse_rows(rng, out, n_in, density=0.04):
    """Mostly-zero rows with clustered nonzeros and -0 weights among the zeros (a -0 chunk is skipped)."""
    w = np.zeros((out, n_in), np.float32)
    mask = rng.random((out, n_in)) < density
    w[mask] = rng.standard_normal(int(mask.sum()))
    w[:, 3] = 1.0                                   # a column every row uses
    bits = f32_to_bf16(w)
    bits[(rng.random(bits.shape) < 0.01) & (bits == 0)] = 0x8000
    return bits


@pytest.mark.parametrize("shape", [(300, 2048), (37, 517), (5, 8), (64, 13)])
def test_chunked_equals_dense_bit_for_bit(isa, threads, shape):
    rng = np.random.default_rng(shape[0] + shape[1])
    w = _sparse_rows(rng, *shape)
    c = K.ChunkedBF16.from_dense(w, K.chunk_width())
    assert np.array_equal(c.to_dense() & 0x7FFF, w & 0x7FFF)  # only -0s of skipped chunks are lost
    x = rng.standard_normal(shape[1]).astype(np.float32)
    y = K.chunked_matvec(c, x)
    assert np.array_equal(y.view(np.uint32), K.matvec_bf16(w, x).view(np.uint32))
    np.testing.assert_allclose(y, R.chunked_matvec(c, x), rtol=1e-5, atol=1e-5)
    assert c.chunks < (shape[1] + c.width - 1) // c.width * shape[0] or shape[1] <= 16


def test_other_widths_and_non_finite_inputs_run_the_dense_product():
    rng = np.random.default_rng(3)
    w = _sparse_rows(rng, 50, 100)
    x = rng.standard_normal(100).astype(np.float32)
    other = K.ChunkedBF16.from_dense(w, 40 - K.chunk_width())  # the other level's width
    assert np.array_equal(K.chunked_matvec(other, x).view(np.uint32), K.matvec_bf16(w, x).view(np.uint32))
    x[7] = np.inf
    with np.errstate(invalid="ignore"):
        c = K.ChunkedBF16.from_dense(w, K.chunk_width())
        assert np.array_equal(K.chunked_matvec(c, x).view(np.uint32), K.matvec_bf16(w, x).view(np.uint32))


def test_chunked_argument_checks():
    with pytest.raises(K.KernelInputError, match="width must be 8 or 32 columns, not 16"):
        K.ChunkedBF16.from_dense(np.zeros((2, 8), np.uint16), 16)
    with pytest.raises(K.KernelInputError, match="uint16"):
        K.ChunkedBF16.from_dense(np.zeros((2, 8), np.float32), 8)
    c = K.ChunkedBF16.from_dense(np.zeros((2, 8), np.uint16), 8)
    assert c.chunks == 0 and not K.chunked_matvec(c, np.ones(8, np.float32)).any()
    with pytest.raises(K.KernelInputError, match="x"):
        K.chunked_matvec(c, np.ones(9, np.float32))


@pytest.mark.parametrize("shape", [(300, 2048), (37, 517), (64, 13)])
def test_small_integer_weights_read_as_int8_give_the_same_bits(isa, threads, shape):
    # a circuit embedding's weights (0, 1, 2, 9, 43): the int8 copy is read, the product's bits are the
    # dense bf16 product's; a -0 among the kept weights or a non-integer keeps the bf16 values
    rng = np.random.default_rng(shape[0])
    w = np.where(rng.random(shape) < 0.05, rng.choice([1.0, 2.0, 9.0, 43.0, -7.0, 127.0], shape), 0.0)
    bits = f32_to_bf16(w.astype(np.float32))
    c = K.ChunkedBF16.from_dense(bits, K.chunk_width())
    assert c.small is not None and np.array_equal(c.small.astype(np.float32), R.bf16_to_f32(c.values))
    x = (rng.standard_normal(shape[1]) * 3).astype(np.float32)
    y = K.chunked_matvec(c, x)
    assert np.array_equal(y.view(np.uint32), K.matvec_bf16(bits, x).view(np.uint32))
    for bad in (0.5, 128.0):
        b2 = bits.copy()
        b2[0, 3] = f32_to_bf16(np.float32([bad]))[0]
        assert K.ChunkedBF16.from_dense(b2, K.chunk_width()).small is None
    b3 = bits.copy()
    b3[np.nonzero(bits)[0][0], np.nonzero(bits)[1][0] ^ 1] = 0x8000  # a -0 beside a nonzero: a kept chunk
    assert K.ChunkedBF16.from_dense(b3, K.chunk_width()).small is None

"""C DeltaNet step, conv update and norms vs their NumPy references."""
import numpy as np
import pytest

from qgpu_min.model import kernels as K
from qgpu_min.model import kernels_ref as R

from ccore_fixtures import threads  # noqa: F401  (pytest fixture)


def _inputs(rng, h, dk, dv):
    q = R.l2norm(rng.standard_normal((h, dk)).astype(np.float32)) / np.float32(np.sqrt(dk))
    k = R.l2norm(rng.standard_normal((h, dk)).astype(np.float32))
    v = rng.standard_normal((h, dv)).astype(np.float32)
    g = (-3 * rng.random(h)).astype(np.float32)
    beta = rng.random(h).astype(np.float32)
    return q, k, v, g, beta


@pytest.mark.parametrize("h, dk, dv", [(1, 1, 1), (3, 5, 7), (2, 16, 33), (4, 64, 64), (16, 128, 128)])
def test_deltanet_sequence_matches_reference(threads, h, dk, dv):
    rng = np.random.default_rng(h * 100 + dk + dv)
    S = rng.standard_normal((h, dk, dv)).astype(np.float32)
    S_ref = S.copy()
    for _ in range(12):  # a run of tokens: errors must not grow
        args = _inputs(rng, h, dk, dv)
        o = K.deltanet_step(S, *args)
        o_ref = R.deltanet_step(S_ref, *args)
        assert o.shape == (h, dv) and o.dtype == np.float32
        np.testing.assert_allclose(o, o_ref, rtol=1e-5, atol=1e-5 * np.abs(o_ref).max())
        np.testing.assert_allclose(S, S_ref, rtol=1e-5, atol=1e-5 * np.abs(S_ref).max())


def test_deltanet_order_decay_write_read():
    # One head, dk = dv = 1: S' = S e^g + k (v - S e^g k) beta, o = S' q; a hand check of the order.
    S = np.array([[[2.0]]], np.float32)
    o = K.deltanet_step(S, np.array([[0.5]], np.float32), np.array([[1.0]], np.float32),
                        np.array([[3.0]], np.float32), np.array([np.log(0.5)], np.float32),
                        np.array([0.5], np.float32))
    assert S[0, 0, 0] == pytest.approx(2.0)  # 2 * 0.5 = 1; + 1 * (3 - 1) * 0.5 = 2
    assert o[0, 0] == pytest.approx(1.0)     # read after the write: 2 * 0.5


@pytest.mark.parametrize("c, k", [(1, 4), (7, 4), (6144, 4), (5, 1), (9, 2), (3, 6)])
def test_conv_update_equals_reference_bit_for_bit(c, k):
    rng = np.random.default_rng(c + k)
    state = rng.standard_normal((c, k - 1)).astype(np.float32)
    state_ref = state.copy()
    w = rng.standard_normal((c, k)).astype(np.float32)
    for _ in range(k + 1):  # long enough for every slot of the window to turn over
        x = rng.standard_normal(c).astype(np.float32)
        assert np.array_equal(K.conv_update(state, x, w), R.conv_update(state_ref, x, w))
        assert np.array_equal(state, state_ref)


@pytest.mark.parametrize("k", [4, 3])
def test_conv_update_signed_zeros_as_the_reference(k):
    # zero weights against negative state: -0 products, whose sums' signs the fast 4-tap loop must keep
    rng = np.random.default_rng(k)
    state = np.where(rng.random((64, k - 1)) < 0.5, -1.0, 1.0).astype(np.float32) * rng.choice([0.0, 2.0], (64, k - 1))
    state = np.where(state == 0, rng.choice([0.0, -0.0], state.shape), state).astype(np.float32)
    w = rng.choice([0.0, -0.0, 1.0], (64, k)).astype(np.float32)
    x = rng.choice([0.0, -0.0, -3.0], 64).astype(np.float32)
    ref_state = state.copy()
    got, want = K.conv_update(state, x, w), R.conv_update(ref_state, x, w)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.array_equal(state.view(np.uint32), ref_state.view(np.uint32))


def test_conv_state_shifts_oldest_first():
    state = np.array([[1.0, 2.0, 3.0]], np.float32)
    y = K.conv_update(state, np.array([4.0], np.float32), np.array([[1000.0, 100.0, 10.0, 1.0]], np.float32))
    assert y.tolist() == [1234.0]
    assert state.tolist() == [[2.0, 3.0, 4.0]]


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 2048), (2, 5, 128), (4, 1)])
@pytest.mark.parametrize("plus_one", [False, True])
def test_rmsnorm_matches_reference(shape, plus_one):
    rng = np.random.default_rng(len(shape) + shape[-1])
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    w = rng.standard_normal(shape[-1]).astype(np.float32)
    y = K.rmsnorm(x, w, 1e-6, plus_one)
    assert y.shape == shape and y.dtype == np.float32
    np.testing.assert_allclose(y, R.rmsnorm(x, w, 1e-6, plus_one), rtol=2e-6, atol=1e-6)


def test_rmsnorm_zero_weight_is_neutral_only_with_plus_one():
    x = np.array([[3.0, 4.0]], np.float32)
    w = np.zeros(2, np.float32)
    rms = np.sqrt(12.5 + 1e-6)
    np.testing.assert_allclose(K.rmsnorm(x, w, 1e-6, True), x / rms, rtol=1e-6)
    assert np.array_equal(K.rmsnorm(x, w, 1e-6, False), np.zeros_like(x))


@pytest.mark.parametrize("shape", [(1,), (16, 128), (3, 4, 9)])
def test_gated_rmsnorm_matches_reference(shape):
    rng = np.random.default_rng(shape[-1])
    x = rng.standard_normal(shape).astype(np.float32)
    z = (rng.standard_normal(shape) * 4).astype(np.float32)
    w = rng.standard_normal(shape[-1]).astype(np.float32)
    np.testing.assert_allclose(K.gated_rmsnorm(x, z, w, 1e-6), R.gated_rmsnorm(x, z, w, 1e-6),
                               rtol=4e-6, atol=1e-6)


def test_l2norm_adds_eps_to_the_sum_of_squares():
    x = np.array([[3.0, 4.0]], np.float32)
    np.testing.assert_allclose(R.l2norm(x, eps=11.0), x / 6.0, rtol=1e-6)

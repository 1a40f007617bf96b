"""The fused sparse-MLP decode step (kernels.SparseMlpStep: qgpu_mlp_in / qgpu_mlp_out) against the
separate kernels the forward pass otherwise calls, bit for bit, and against the NumPy references."""
import numpy as np
import pytest

from qgpu_min.model import kernels as K
from qgpu_min.model import kernels_ref as R
from qgpu_min.model.bf16 import f32_to_bf16, round_bf16

from ccore_fixtures import threads  # noqa: F401  (pytest fixture)


def _csr(rng, out, n_in, density):
    w = np.where(rng.random((out, n_in)) < density, rng.standard_normal((out, n_in)), 0).astype(np.float32)
    return K.SparseBF16.from_dense(f32_to_bf16(w))


def _mlp(rng, d=96, inter=200, empty_down=False):
    gate, up = _csr(rng, inter, d, 0.05), _csr(rng, inter, d, 0.03)
    down = _csr(rng, d, inter, 0.0 if empty_down else 0.02)
    return gate, up, down, K.SparseMlp.from_weights(gate, up, down)


def _separate(h, norm_w, eps, gate, up, down, add_zero, bf16):
    """The forward pass's own sequence of calls (full intermediate width)."""
    r = round_bf16 if bf16 else (lambda x: x)
    if add_zero:
        h = r(h + np.float32(0))
    u = r(K.rmsnorm(h, norm_w, eps, plus_one=True))
    g, p = (r(y) for y in K.matvec_bf16_multi([gate, up], u))
    act = r(r(K.silu(g)) * p)
    return r(h + r(K.matvec_bf16(down, act)))


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("add_zero", [False, True])
@pytest.mark.parametrize("empty_down", [False, True])
def test_mlp_step_equals_separate_kernels(threads, bf16, add_zero, empty_down):
    rng = np.random.default_rng(int(bf16) + 2 * int(add_zero) + 4 * int(empty_down))
    gate, up, down, mlp = _mlp(rng, empty_down=empty_down)
    assert mlp.units.shape[0] == (0 if empty_down else np.unique(down.indices).shape[0])
    norm_w = (rng.standard_normal(96) * 0.1).astype(np.float32)
    h = rng.standard_normal(96).astype(np.float32)
    h[5] = -0.0                                  # h + 0 makes it +0
    if bf16:
        h = round_bf16(h)
    step = K.SparseMlpStep(mlp, norm_w, 1e-6, bf16)
    h_mid, g, p = step.first(h, add_zero)
    out = step.second(h_mid, K.silu(g), p)
    want = _separate(h, norm_w, 1e-6, gate, up, down, add_zero, bf16)
    assert np.array_equal(out.view(np.uint32), want.view(np.uint32))
    rh, ru, rg, rp = R.mlp_in(h, norm_w, 1e-6, mlp, add_zero, bf16)
    assert np.array_equal(h_mid.view(np.uint32), rh.view(np.uint32))
    np.testing.assert_allclose(g, rg, rtol=2e-2 if bf16 else 1e-5, atol=1e-5)
    ref = R.mlp_out(rh, K.silu(rg), rp, mlp, bf16)
    np.testing.assert_allclose(out, ref, rtol=2e-2 if bf16 else 1e-4, atol=1e-4)


def test_round_bf16_in_c_matches_numpy():
    from qgpu_min._core import ffi, lib
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 1e3
    x[:6] = [np.nan, -np.nan, np.inf, -np.inf, 3.4028235e38, 1.00390625]  # NaN, inf, overflow, a tie
    got = x.copy()
    lib.qgpu_round_bf16(ffi.from_buffer("float[]", got), got.size)
    assert np.array_equal(got.view(np.uint32), round_bf16(x).view(np.uint32))


def test_active_units_keep_each_rows_entries():
    rng = np.random.default_rng(5)
    gate, up, down, mlp = _mlp(rng)
    assert np.array_equal(mlp.gate.to_dense(), gate.to_dense()[mlp.units])
    assert np.array_equal(mlp.up.to_dense(), up.to_dense()[mlp.units])
    assert np.array_equal(mlp.down.to_dense(), down.to_dense()[:, mlp.units])
    assert not np.delete(down.to_dense(), mlp.units, axis=1).any()


def _gdn_weights(rng, d=64, nh=4, dv=8, k=4):
    vd = nh * dv
    c = 2 * vd + vd
    return {"qkv": _csr(rng, c, d, 0.05), "z": _csr(rng, vd, d, 0.1), "b": _csr(rng, nh, d, 0.2),
            "a": _csr(rng, nh, d, 0.0), "out": _csr(rng, d, vd, 0.1),
            "conv": rng.standard_normal((c, k)).astype(np.float32),
            "in_norm": (rng.standard_normal(d) * 0.1).astype(np.float32),
            "gdn_norm": rng.standard_normal(dv).astype(np.float32)}


@pytest.mark.parametrize("bf16", [False, True])
def test_gdn_step_equals_separate_kernels(bf16):
    rng = np.random.default_rng(11 + bf16)
    w = _gdn_weights(rng)
    r = round_bf16 if bf16 else (lambda x: x)
    step = K.GdnStep(w, 1e-6, bf16)
    h = r(rng.standard_normal(64).astype(np.float32))
    state = rng.standard_normal((w["qkv"].shape[0], 3)).astype(np.float32)
    ref_state, c_state = state.copy(), state.copy()
    mixed, z, b, a, conv = step.first(h, c_state)
    # the forward pass's separate calls
    u = r(K.rmsnorm(h, w["in_norm"], 1e-6, plus_one=True))
    want = [r(y) for y in K.matvec_bf16_multi([w["qkv"], w["z"], w["b"], w["a"]], u)]
    want_conv = r(K.conv_update(ref_state, want[0], w["conv"]))
    for got, exp in zip((mixed, z, b, a, conv), want + [want_conv]):
        assert np.array_equal(got.view(np.uint32), exp.view(np.uint32))
    assert np.array_equal(c_state, ref_state)
    ru = R.gdn_in(h, w["in_norm"], 1e-6, w["qkv"], w["z"], w["b"], w["a"], state.copy(), w["conv"], bf16)
    np.testing.assert_allclose(conv, ru[5], rtol=2e-2 if bf16 else 1e-5, atol=1e-5)
    o = rng.standard_normal((4, 8)).astype(np.float32)
    z3 = z.reshape(4, 8)
    if bf16:
        n = r(K.rmsnorm(r(o), np.ones(8, np.float32), 1e-6, plus_one=False))
        n = r(r(w["gdn_norm"] * n) * K.silu(z3))
    else:
        n = K.gated_rmsnorm(o, z3, w["gdn_norm"], 1e-6)
    want_h = r(h + r(K.matvec_bf16(w["out"], n.reshape(-1))))
    got_h = step.second(o.copy(), z, K.silu(z) if bf16 else None, h)
    assert np.array_equal(got_h.view(np.uint32), want_h.view(np.uint32))
    np.testing.assert_allclose(got_h, R.gdn_out(o, z3, w["gdn_norm"], 1e-6, w["out"], h, bf16),
                               rtol=2e-2 if bf16 else 1e-4, atol=1e-4)

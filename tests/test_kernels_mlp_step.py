"""The fused decode steps of CSR layers (kernels.SparseMlpStep: qgpu_mlp_step; kernels.GdnStep:
qgpu_gdn_step) against the separate kernels the forward pass otherwise calls, bit for bit, and against the
NumPy references (within rounding)."""
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
    out = step(h, add_zero)
    want = _separate(h, norm_w, 1e-6, gate, up, down, add_zero, bf16)
    assert np.array_equal(out.view(np.uint32), want.view(np.uint32))
    rh, ru, rg, rp = R.mlp_in(h, norm_w, 1e-6, mlp, add_zero, bf16)
    ref = R.mlp_out(rh, R.silu(rg), rp, mlp, bf16)
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


def _gdn_weights(rng, d=64, nk=2, nh=4, dk=8, dv=8, k=4):
    c = 2 * nk * dk + nh * dv
    return {"qkv": _csr(rng, c, d, 0.3), "z": _csr(rng, nh * dv, d, 0.1), "b": _csr(rng, nh, d, 0.2),
            "a": _csr(rng, nh, d, 0.2), "out": _csr(rng, d, nh * dv, 0.1),
            "conv": rng.standard_normal((c, k)).astype(np.float32),
            "in_norm": (rng.standard_normal(d) * 0.1).astype(np.float32),
            "gdn_norm": rng.standard_normal(dv).astype(np.float32),
            "A_log": rng.standard_normal(nh).astype(np.float32),
            "dt_bias": rng.standard_normal(nh).astype(np.float32)}


def _gdn_separate(w, h, conv_state, S, bf16, nk=2, dk=8):
    """Model._mixer's unfused calls for one token (Model._deltanet and _delta_rule, T = 1)."""
    r = round_bf16 if bf16 else (lambda x: x)
    nv, dv = w["b"].shape[0], w["gdn_norm"].shape[0]
    u = r(K.rmsnorm(h, w["in_norm"], 1e-6, plus_one=True))
    mixed, z, b, a = (r(y) for y in K.matvec_bf16_multi([w["qkv"], w["z"], w["b"], w["a"]], u))
    c = r(K.silu(r(K.conv_update(conv_state, mixed, w["conv"]))))
    q = K.l2norm(c[:nk * dk].reshape(nk, dk), 1e-6, divisor=np.float32(np.sqrt(dk)))
    k = K.l2norm(c[nk * dk:2 * nk * dk].reshape(nk, dk), 1e-6)
    q, k = (np.ascontiguousarray(np.repeat(x, nv // nk, axis=0)) for x in (q, k))
    v = np.ascontiguousarray(c[2 * nk * dk:].reshape(nv, dv))
    o = K.deltanet_step(S, q, k, v, K.deltanet_gate(a, w["A_log"], w["dt_bias"]), r(K.sigmoid(b)))
    o, z3 = r(o), z.reshape(nv, dv)
    if bf16:
        n = r(K.rmsnorm(o, np.ones(dv, np.float32), 1e-6, plus_one=False))
        n = r(r(w["gdn_norm"] * n) * K.silu(z3))
    else:
        n = K.gated_rmsnorm(o, z3, w["gdn_norm"], 1e-6)
    return r(h + r(K.matvec_bf16(w["out"], n.reshape(-1))))


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("zero_decay", [False, True])
def test_gdn_step_equals_separate_kernels(bf16, zero_decay):
    rng = np.random.default_rng(11 + bf16 + 2 * zero_decay)
    w = _gdn_weights(rng)
    if zero_decay:  # a = 0 and A_log = -inf: decay exactly 1, so the sparse-key rows path runs
        w["a"] = _csr(rng, 4, 64, 0.0)
        w["A_log"] = np.full(4, -np.inf, np.float32)
    r = round_bf16 if bf16 else (lambda x: x)
    step = K.GdnStep(w, 1e-6, bf16, 2, 8)
    conv = rng.standard_normal((w["qkv"].shape[0], 3)).astype(np.float32)
    S = rng.standard_normal((4, 8, 8)).astype(np.float32)
    ref_conv, ref_S = conv.copy(), S.copy()
    clean = np.zeros(4, np.int32)
    for t in range(3):  # the states carry over between tokens
        h = r(rng.standard_normal(64).astype(np.float32))
        got = step(h, conv, S, clean)
        want = _gdn_separate(w, h, ref_conv, ref_S, bf16)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
        assert np.array_equal(conv.view(np.uint32), ref_conv.view(np.uint32))
        assert np.array_equal(S.view(np.uint32), ref_S.view(np.uint32))
        assert np.array_equal(clean, R.state_clean(S))


def test_gdn_step_refuses_mismatched_heads_and_read_only_states():
    w = _gdn_weights(np.random.default_rng(3))
    with pytest.raises(K.KernelInputError, match="do not fit"):
        K.GdnStep(w, 1e-6, False, 3, 8)
    step = K.GdnStep(w, 1e-6, False, 2, 8)
    conv, S = np.zeros((w["qkv"].shape[0], 3), np.float32), np.zeros((4, 8, 8), np.float32)
    S.flags.writeable = False
    with pytest.raises(K.KernelInputError, match="S is updated in place"):
        step(np.zeros(64, np.float32), conv, S, np.zeros(4, np.int32))
    with pytest.raises(K.KernelInputError, match="clean must be"):
        step(np.zeros(64, np.float32), conv, np.zeros((4, 8, 8), np.float32), np.zeros(4, np.int64))


@pytest.mark.parametrize("bf16", [False, True])
def test_decode_layers_equal_the_steps_one_by_one(bf16):
    """DecodeLayers (one C call) against GdnStep/SparseMlpStep called layer by layer as Model._layer does:
    a silent layer whose state is still +0 skips its mixer (add_zero in the MLP), any other runs it."""
    rng = np.random.default_rng(21 + bf16)
    r = round_bf16 if bf16 else (lambda x: x)
    layers = []
    for _ in range(3):
        w = _gdn_weights(rng, d=96)
        gate, up, down, mlp = _mlp(rng)
        layers.append((K.GdnStep(w, 1e-6, bf16, 2, 8), K.SparseMlpStep(mlp, rng.standard_normal(96).astype(np.float32)
                                                                       * np.float32(0.1), 1e-6, bf16)))
    silent = [False, True, True]
    plan = K.DecodeLayers([g for g, _ in layers], [m for _, m in layers], silent)
    states = [(np.zeros((layers[0][0].c, 3), np.float32), np.zeros((4, 8, 8), np.float32), np.ones(4, np.int32))
              for _ in layers]
    ref = [tuple(a.copy() for a in s) for s in states]
    zero, ref_zero = np.array([1, 1, 0], np.int32), [True, True, False]   # layer 2: silent but not +0 any more
    binding = plan.bind(*[list(x) for x in zip(*states)])
    for t in range(3):
        h = r(rng.standard_normal(96).astype(np.float32))
        got = plan(h, binding, zero)
        for i, (gdn, mlp) in enumerate(layers):
            skip = silent[i] and ref_zero[i]
            if not skip:
                ref_zero[i] = False
                h = gdn(h, *ref[i])
            h = mlp(h, add_zero=skip)
        assert np.array_equal(got.view(np.uint32), h.view(np.uint32))
        assert zero.tolist() == [int(z) for z in ref_zero] == [0, 1, 0]
        for s, q in zip(states, ref):
            assert all(np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(s, q))
    assert not states[1][1].any()                 # the skipped layer's state stayed +0


def test_decode_layers_refuse_bad_states_and_flags():
    rng = np.random.default_rng(5)
    gdn = K.GdnStep(_gdn_weights(rng, d=96), 1e-6, False, 2, 8)
    mlp = K.SparseMlpStep(_mlp(rng)[3], np.zeros(96, np.float32), 1e-6, False)
    plan = K.DecodeLayers([gdn], [mlp], [False])
    conv, S, clean = np.zeros((gdn.c, 3), np.float32), np.zeros((4, 8, 8), np.float32), np.ones(4, np.int32)
    with pytest.raises(K.KernelInputError, match="S"):
        plan.bind([conv], [np.zeros((4, 8, 7), np.float32)], [clean])
    with pytest.raises(K.KernelInputError, match="clean must be"):
        plan.bind([conv], [S], [clean.astype(np.int64)])
    with pytest.raises(K.KernelInputError, match="1 layers, states for 2"):
        plan.bind([conv, conv], [S, S], [clean, clean])
    binding = plan.bind([conv], [S], [clean])
    with pytest.raises(K.KernelInputError, match="zero must be"):
        plan(np.zeros(96, np.float32), binding, np.zeros(1, np.int64))
    with pytest.raises(K.KernelInputError, match="mixers"):
        K.DecodeLayers([gdn], [], [False])

"""The forward pass's fast paths change no bit.

The model calls fused products (`matvec_bf16_multi`/`matmul_bf16_multi`: one dispatch per group of
projections of one input), runs each DeltaNet recurrence over all of a call's tokens in one C call
(`conv_prefill`, `deltanet_prefill`), and decodes each DeltaNet mixer and each MLP in one C call (the fused
steps, `kernels.GdnStep` / `kernels.MlpStep`). Here their logits and states are compared bit for bit, in fp32
and bf16 mode, with the per-token path: one product per weight and one `conv_update`/`deltanet_step` per
token, every layer through the forward pass's own calls.
"""
import numpy as np
import pytest

from qgpu_min.model import kernels, load_model
from qgpu_min.model.synthetic import write_synthetic_checkpoint

IDS = [472, 84, 82, 264, 198, 343, 283, 78, 11, 261, 391, 383, 0, 220, 16, 17, 5, 99, 311, 42]
MODES = ("fp32", "bf16")
DELTANET_ONLY = ["linear_attention"] * 3


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):  # L F L L: both mixers, GQA in both
    return write_synthetic_checkpoint(tmp_path_factory.mktemp("tiny"), seed=2)


@pytest.fixture(scope="module")
def deltanet_only(tmp_path_factory):
    return write_synthetic_checkpoint(tmp_path_factory.mktemp("gdn"), layer_types=DELTANET_ONLY, seed=4)


def per_token_kernels(monkeypatch) -> None:
    """Make the fused and prefill kernels what they stand for: one product per weight, one step per token."""
    single = {"matvec_bf16_multi": lambda ws, x, *flags: [kernels.matvec_bf16(w, x, *flags) for w in ws],
              "matmul_bf16_multi": lambda ws, x, *flags: [kernels.matmul_bf16(w, x, *flags) for w in ws]}
    conv_update, deltanet_step = kernels.conv_update, kernels.deltanet_step
    single["conv_prefill"] = lambda state, x, w: np.stack([conv_update(state, xt, w) for xt in x])
    single["deltanet_prefill"] = lambda S, q, k, v, g, beta, clean=None: np.stack(
        [deltanet_step(S, *t) for t in zip(q, k, v, g, beta)])
    single["deltanet_step_sparse"] = lambda S, q, k, v, g, beta, clean: deltanet_step(S, q, k, v, g, beta)
    for name, fn in single.items():
        monkeypatch.setattr(kernels, name, fn)


def without_fused_steps(model, monkeypatch) -> None:
    """Decode every layer through the forward pass's own kernel calls (no GdnStep / MlpStep)."""
    monkeypatch.setattr(model, "_mlp_steps", {})
    monkeypatch.setattr(model, "_gdn_steps", {})
    monkeypatch.setattr(model, "_decode_layers", None)


def run(model, how: str) -> tuple[np.ndarray, object]:
    """Logits [T, V] for IDS: all at once, in two prefill pieces, or one decode call per token."""
    state = model.new_state()
    if how == "prefill":
        logits = model.prefill(state, IDS, all_logits=True)
    elif how == "pieces":
        logits = np.vstack([model.prefill(state, IDS[:7], all_logits=True),
                            model.prefill(state, IDS[7:], all_logits=True)])
    else:
        logits = np.stack([model.decode(state, t) for t in IDS])
    return logits, state


def assert_same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype == np.float32
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def assert_same_state(s, t) -> None:
    assert s.pos == t.pos
    for layer in s.recurrent:
        assert_same_bits(s.recurrent[layer], t.recurrent[layer])
        assert_same_bits(s.conv[layer], t.conv[layer])
    for layer in s.keys:
        assert_same_bits(s.keys[layer][:, :s.pos], t.keys[layer][:, :t.pos])
        assert_same_bits(s.values[layer][:, :s.pos], t.values[layer][:, :t.pos])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how", ["prefill", "pieces", "decode"])
def test_fast_paths_equal_the_per_token_path(tiny, mode, how, monkeypatch):
    model = load_model(tiny, mode=mode)
    fast, fast_state = run(model, how)
    assert model._gdn_steps and model._mlp_steps  # decode takes the fused steps
    per_token_kernels(monkeypatch)
    without_fused_steps(model, monkeypatch)
    slow, slow_state = run(model, how)
    assert_same_bits(fast, slow)
    assert_same_state(fast_state, slow_state)
    assert fast_state.keys  # the attention layer was exercised too


@pytest.fixture
def avx512_products():
    """The avx512 SIMD level where the CPU has it: prompt products as decode's (no AMX parts)."""
    if kernels.set_isa("avx512") != "avx512":
        kernels.set_isa(None)
        pytest.skip("no AVX-512 here")
    yield
    kernels.set_isa(None)


@pytest.mark.parametrize("mode", MODES)
def test_deltanet_prefill_equals_per_token_decode(deltanet_only, mode, avx512_products):
    # Without attention (whose softmax sums run over a different length in prefill) nothing depends on how
    # many tokens a call holds, so the whole prompt at once must equal one decode call per token (at a level
    # where a prompt's products are decode's; at the amx level see the next test).
    model = load_model(deltanet_only, mode=mode)
    batch, batch_state = run(model, "prefill")
    steps, step_state = run(model, "decode")
    assert_same_bits(batch, steps)
    assert_same_state(batch_state, step_state)
    assert np.any(batch_state.recurrent[0] != 0) and np.any(batch_state.conv[2] != 0)


def test_amx_prompt_products_agree_with_decode_to_fp32_summation_order(deltanet_only):
    """At the amx level a prompt's fp32 products run on AMX tiles as three bf16 parts: prefill and decode
    then agree to fp32 summation order, as they do through attention anyway."""
    if kernels.isa() != "amx":
        pytest.skip("no AMX here")
    model = load_model(deltanet_only, mode="fp32")
    batch, batch_state = run(model, "prefill")
    steps, step_state = run(model, "decode")
    scale = np.abs(steps).max()
    assert np.abs(batch - steps).max() <= 1e-5 * scale and not np.array_equal(batch, steps)
    for layer in batch_state.recurrent:
        a, b = batch_state.recurrent[layer], step_state.recurrent[layer]
        assert np.abs(a - b).max() <= 1e-5 * np.abs(b).max()


@pytest.mark.parametrize("tokens", [1, 6])
def test_one_dispatch_per_projection_group_and_recurrence(tiny, tokens, monkeypatch):
    """The forward pass's own calls (prefill, and decode without the fused steps)."""
    model = load_model(tiny)
    without_fused_steps(model, monkeypatch)
    calls: dict[str, list] = {}
    for name in ("matvec_bf16_multi", "matmul_bf16_multi", "matvec_bf16", "matmul_bf16", "conv_prefill",
                 "deltanet_prefill", "conv_update", "deltanet_step", "deltanet_step_sparse"):
        real = getattr(kernels, name)
        monkeypatch.setattr(kernels, name, lambda *a, _real=real, _name=name: (
            calls.setdefault(_name, []).append(a), _real(*a))[1])
    model.forward_hidden(model.new_state(), IDS[:tokens])
    fused, single = ("matvec_bf16_multi", "matvec_bf16") if tokens == 1 else ("matmul_bf16_multi", "matmul_bf16")
    types = model.config.layer_types
    n_gdn, n_attn = types.count("linear_attention"), types.count("full_attention")
    # DeltaNet: in_proj_qkv/z/b/a, attention: q/k/v, every layer: MLP gate/up; one dispatch each
    assert sorted(len(a[0]) for a in calls[fused]) == sorted([4] * n_gdn + [3] * n_attn + [2] * (n_gdn + n_attn))
    assert len(calls[single]) == 2 * (n_gdn + n_attn)  # out_proj / o_proj and down_proj: one weight each
    # the delta rule: one call per layer, the sparse-key step for a single token (decode)
    delta = "deltanet_step_sparse" if tokens == 1 else "deltanet_prefill"
    assert len(calls["conv_prefill"]) == len(calls[delta]) == n_gdn
    assert tokens == 1 or all(a[1].shape[0] == tokens for a in calls["deltanet_prefill"])
    assert "conv_update" not in calls and "deltanet_step" not in calls


@pytest.mark.parametrize("mode", MODES)
def test_decode_runs_deltanet_mixers_and_mlps_as_one_c_call_each(tiny, mode, monkeypatch):
    """With the fused steps a decode token calls the kernels module only for the attention layer (q/k/v in
    one dispatch, o_proj), and each step once per layer."""
    model = load_model(tiny, mode=mode)
    types = model.config.layer_types
    assert sorted(model._gdn_steps) == [i for i, t in enumerate(types) if t == "linear_attention"]
    assert sorted(model._mlp_steps) == list(range(len(types)))
    calls: dict[str, int] = {}
    for name in ("matvec_bf16_multi", "matvec_bf16", "deltanet_step_sparse", "conv_prefill"):
        real = getattr(kernels, name)
        monkeypatch.setattr(kernels, name, lambda *a, _real=real, _name=name: (
            calls.__setitem__(_name, calls.get(_name, 0) + 1), _real(*a))[1])
    steps = {}
    for table in (model._gdn_steps, model._mlp_steps):
        for i, step in table.items():
            monkeypatch.setitem(table, i, lambda *a, _s=step, _k=(id(table), i), **kw: (
                steps.__setitem__(_k, steps.get(_k, 0) + 1), _s(*a, **kw))[1])
    state = model.new_state()
    model.decode(state, IDS[0])
    n_attn = types.count("full_attention")
    assert calls == {"matvec_bf16_multi": n_attn, "matvec_bf16": n_attn + 1}  # + the LM head
    assert sorted(steps.values()) == [1] * (types.count("linear_attention") + len(types))


@pytest.mark.parametrize("mode", MODES)
def test_fused_steps_of_a_quantized_model_equal_its_unfused_decode(tiny, mode, monkeypatch):
    """Q8 projections in the fused steps: the same logits and states as the forward pass's own calls."""
    model = load_model(tiny, mode=mode, quant="int8")
    assert model._gdn_steps and model._mlp_steps
    fast, fast_state = run(model, "decode")
    without_fused_steps(model, monkeypatch)
    slow, slow_state = run(model, "decode")
    assert_same_bits(fast, slow)
    assert_same_state(fast_state, slow_state)


def test_fused_steps_take_projections_of_one_kind():
    rng = np.random.default_rng(0)
    dense = rng.integers(0, 2**16, (8, 4), dtype=np.uint16) & np.uint16(0xBFFF)
    csr = kernels.SparseBF16.from_dense(dense)
    with pytest.raises(kernels.KernelInputError, match="all CSR or all dense"):
        kernels.MlpStep(dense, csr, np.ascontiguousarray(dense.T), np.zeros(4, np.float32), 1e-6, False)
    with pytest.raises(kernels.KernelInputError, match="do not fit one MLP"):
        kernels.MlpStep(dense, dense, dense, np.zeros(4, np.float32), 1e-6, False)
    w = {"qkv": dense, "z": csr, "b": dense, "a": dense, "out": dense}
    with pytest.raises(kernels.KernelInputError, match="all CSR or all dense"):
        kernels.GdnStep(w, 1e-6, False, 1, 2)

"""The forward pass's fast paths change no bit.

The model calls fused products (`matvec_bf16_multi`/`matmul_bf16_multi`: one dispatch per group of
projections of one input) and runs each DeltaNet recurrence over all of a call's tokens in one C call
(`conv_prefill`, `deltanet_prefill`). Here their logits and states are compared bit for bit, in fp32 and
bf16 mode, with the per-token path: one product per weight and one `conv_update`/`deltanet_step` per token.
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
    per_token_kernels(monkeypatch)
    slow, slow_state = run(model, how)
    assert_same_bits(fast, slow)
    assert_same_state(fast_state, slow_state)
    assert fast_state.keys  # the attention layer was exercised too


@pytest.mark.parametrize("mode", MODES)
def test_deltanet_prefill_equals_per_token_decode(deltanet_only, mode):
    # Without attention (whose softmax sums run over a different length in prefill) nothing depends on how
    # many tokens a call holds, so the whole prompt at once must equal one decode call per token.
    model = load_model(deltanet_only, mode=mode)
    batch, batch_state = run(model, "prefill")
    steps, step_state = run(model, "decode")
    assert_same_bits(batch, steps)
    assert_same_state(batch_state, step_state)
    assert np.any(batch_state.recurrent[0] != 0) and np.any(batch_state.conv[2] != 0)


@pytest.mark.parametrize("tokens", [1, 6])
def test_one_dispatch_per_projection_group_and_recurrence(tiny, tokens, monkeypatch):
    model = load_model(tiny)
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

"""Forward-pass invariants on tiny synthetic checkpoints, and an independent float64 re-derivation of the
whole model written straight from shared/reference/qwen35-2b.md §3 (own file parser, plain loops)."""
import json
import shutil

import numpy as np
import pytest

from qgpu_min.model import load_model, model_from_tensors
from qgpu_min.model.bf16 import round_bf16
from qgpu_min.model.errors import CheckpointError, ModelInputError
from qgpu_min.model import forward, kernels
from qgpu_min.model.kernels import SparseBF16
from qgpu_min.model.safetensors_io import MappedFiles, read_checkpoint_headers, write_checkpoint_weights
from qgpu_min.model.synthetic import write_synthetic_checkpoint

P = "model.language_model."
IDS = [472, 84, 82, 264, 198, 343, 283, 78, 11, 261, 391, 383, 0, 220, 16, 17]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_synthetic_checkpoint(tmp_path_factory.mktemp("tiny"), seed=1)


@pytest.fixture(scope="module")
def model(tiny):
    return load_model(tiny)


# ---- the independent reference ------------------------------------------------------------------------------

def read_raw_tensors(d):
    """Every tensor as float64, parsed from the raw bytes (not through the runtime's reader)."""
    index = json.loads((d / "model.safetensors.index.json").read_text())
    out = {}
    for fname in set(index["weight_map"].values()):
        raw = (d / fname).read_bytes()
        n = int.from_bytes(raw[:8], "little")
        for name, e in json.loads(raw[8:8 + n]).items():
            if name == "__metadata__":
                continue
            b, end = e["data_offsets"]
            data = raw[8 + n + b:8 + n + end]
            if e["dtype"] == "BF16":  # bf16 = the top half of a float32
                a = (np.frombuffer(data, "<u2").astype(np.uint32) << 16).view(np.float32)
            else:
                a = np.frombuffer(data, "<f4")
            out[name] = a.astype(np.float64).reshape(e["shape"])
    return out


def reference_logits(d, ids):
    c = json.loads((d / "config.json").read_text())["text_config"]
    W = read_raw_tensors(d)
    eps = c["rms_norm_eps"]

    def norm_1p(x, w):  # zero-centred RMSNorm, §3.1
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * (1 + w)

    def silu(x):
        return x / (1 + np.exp(-x))

    def sigmoid(x):
        return 1 / (1 + np.exp(-x))

    T = len(ids)
    h = W[P + "embed_tokens.weight"][ids]
    for L, kind in enumerate(c["layer_types"]):
        p = f"{P}layers.{L}."
        u = norm_1p(h, W[p + "input_layernorm.weight"])
        if kind == "linear_attention":  # §3.2
            nk, nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
            dk, dv, K = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
            m = u @ W[p + "linear_attn.in_proj_qkv.weight"].T
            z = (u @ W[p + "linear_attn.in_proj_z.weight"].T).reshape(T, nv, dv)
            b = u @ W[p + "linear_attn.in_proj_b.weight"].T
            a = u @ W[p + "linear_attn.in_proj_a.weight"].T
            taps = W[p + "linear_attn.conv1d.weight"][:, 0, :]
            window = np.vstack([np.zeros((K - 1, m.shape[1])), m])  # zeros before the first token
            conv = np.array([silu(sum(taps[:, j] * window[t + j] for j in range(K))) for t in range(T)])
            q = conv[:, :nk * dk].reshape(T, nk, dk)
            k = conv[:, nk * dk:2 * nk * dk].reshape(T, nk, dk)
            v = conv[:, 2 * nk * dk:].reshape(T, nv, dv)
            A_log, dt_bias = W[p + "linear_attn.A_log"], W[p + "linear_attn.dt_bias"]
            S = np.zeros((nv, dk, dv))
            o = np.zeros((T, nv, dv))
            for t in range(T):
                for hv in range(nv):
                    hk = hv // (nv // nk)  # consecutive value heads share a key head
                    qh = q[t, hk] / np.sqrt(np.sum(q[t, hk] ** 2) + 1e-6) / np.sqrt(dk)
                    kh = k[t, hk] / np.sqrt(np.sum(k[t, hk] ** 2) + 1e-6)
                    beta = sigmoid(b[t, hv])
                    g = -np.exp(A_log[hv]) * np.log1p(np.exp(a[t, hv] + dt_bias[hv]))
                    S[hv] *= np.exp(g)
                    delta = (v[t, hv] - S[hv].T @ kh) * beta
                    S[hv] += np.outer(kh, delta)
                    oh = S[hv].T @ qh
                    o[t, hv] = (oh / np.sqrt(np.mean(oh ** 2) + eps) * W[p + "linear_attn.norm.weight"]
                                * silu(z[t, hv]))
            mixed = o.reshape(T, nv * dv) @ W[p + "linear_attn.out_proj.weight"].T
        else:  # §3.3
            nq, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
            qg = (u @ W[p + "self_attn.q_proj.weight"].T).reshape(T, nq, 2 * hd)
            q, gate = qg[..., :hd], qg[..., hd:].reshape(T, nq * hd)
            k = (u @ W[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, hd)
            v = (u @ W[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, hd)
            q, k = norm_1p(q, W[p + "self_attn.q_norm.weight"]), norm_1p(k, W[p + "self_attn.k_norm.weight"])
            rope = c["rope_parameters"]
            rot = int(hd * rope["partial_rotary_factor"])
            inv = 1 / rope["rope_theta"] ** (np.arange(0, rot, 2) / rot)
            for x in (q, k):
                for t in range(T):
                    cos, sin = np.tile(np.cos(t * inv), 2), np.tile(np.sin(t * inv), 2)
                    xr = x[t, :, :rot].copy()
                    x[t, :, :rot] = xr * cos + np.concatenate([-xr[:, rot // 2:], xr[:, :rot // 2]], 1) * sin
            o = np.zeros((T, nq, hd))
            for t in range(T):
                for hq in range(nq):
                    kv = hq // (nq // nkv)
                    s = k[:t + 1, kv] @ q[t, hq] / np.sqrt(hd)
                    w = np.exp(s - s.max())
                    o[t, hq] = (w / w.sum()) @ v[:t + 1, kv]
            mixed = (o.reshape(T, nq * hd) * sigmoid(gate)) @ W[p + "self_attn.o_proj.weight"].T
        h = h + mixed
        u = norm_1p(h, W[p + "post_attention_layernorm.weight"])  # §3.4
        act = silu(u @ W[p + "mlp.gate_proj.weight"].T) * (u @ W[p + "mlp.up_proj.weight"].T)
        h = h + act @ W[p + "mlp.down_proj.weight"].T
    head = W.get("lm_head.weight", W[P + "embed_tokens.weight"])  # tied unless the file has its own
    return norm_1p(h, W[P + "norm.weight"]) @ head.T


def test_fp32_matches_the_independent_reference(tiny, model):
    ref = reference_logits(tiny, IDS)
    ours = model.prefill(model.new_state(), IDS, all_logits=True)
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    assert np.abs(ours - ref).max() <= 1e-4 * np.abs(ref).max()
    assert np.array_equal(ours.argmax(-1), ref.argmax(-1))


# ---- invariants -----------------------------------------------------------------------------------------------

def test_prefill_equals_sequential_decode(model):
    batch = model.prefill(model.new_state(), IDS, all_logits=True)
    state = model.new_state()
    steps = np.stack([model.decode(state, t) for t in IDS])
    assert np.abs(batch - steps).max() <= 1e-5 * np.abs(batch).max()
    assert state.pos == len(IDS)


def test_prefill_in_pieces_continues_the_sequence(model):
    whole = model.prefill(model.new_state(), IDS, all_logits=True)
    state = model.new_state()
    first = model.prefill(state, IDS[:5], all_logits=True)
    rest = model.prefill(state, IDS[5:], all_logits=True)
    assert np.abs(np.vstack([first, rest]) - whole).max() <= 1e-5 * np.abs(whole).max()


def test_state_is_readable_and_the_same_after_prefill_or_decode(model):
    cfg = model.config
    a, b = model.new_state(), model.new_state()
    model.prefill(a, IDS)
    for t in IDS:
        model.decode(b, t)
    assert sorted(a.recurrent) == sorted(a.conv) == cfg.layers_of("linear_attention") == [0, 2, 3]
    for i in a.recurrent:
        assert a.recurrent[i].shape == (4, 16, 16) and a.recurrent[i].dtype == np.float32
        assert a.conv[i].shape == (cfg.conv_dim, 3) and a.conv[i].dtype == np.float32
        assert np.allclose(a.recurrent[i], b.recurrent[i], atol=1e-5)
        assert np.allclose(a.conv[i], b.conv[i], atol=1e-6)
        assert np.abs(a.recurrent[i]).max() > 0
    assert sorted(a.keys) == [1]


def test_token_subset_logits_equal_the_slice(model):
    subset = [7, 300, 2, 471, 7]
    full = model.prefill(model.new_state(), IDS, all_logits=True)
    part = model.prefill(model.new_state(), IDS, all_logits=True, token_subset=subset)
    assert part.shape == (len(IDS), len(subset))
    assert np.allclose(part, full[:, subset], rtol=1e-6, atol=1e-6)
    s1, s2 = model.new_state(), model.new_state()
    model.prefill(s1, IDS)
    model.prefill(s2, IDS)
    one = model.decode(s1, 42, token_subset=subset)
    assert one.shape == (5,)
    assert np.allclose(one, model.decode(s2, 42)[subset], rtol=1e-6, atol=1e-6)


def test_forward_hidden_is_what_the_lm_head_sees(model):
    hidden = model.forward_hidden(model.new_state(), IDS)
    assert hidden.shape == (len(IDS), 64) and hidden.dtype == np.float32
    logits = model.prefill(model.new_state(), IDS, all_logits=True)
    assert np.allclose(model.logits(hidden), logits, rtol=1e-6, atol=1e-6)
    outs = []
    model.forward_hidden(model.new_state(), IDS, layer_outputs=outs)
    assert len(outs) == 4 and all(o.shape == (len(IDS), 64) for o in outs)
    eps = model.config.rms_norm_eps
    assert np.allclose(hidden, kernels.rmsnorm(outs[-1], model.weights.final_norm, eps, plus_one=True))


def test_bf16_mode_rounds_and_mostly_agrees(tiny, model):
    bf = load_model(tiny, mode="bf16")
    lb = bf.prefill(bf.new_state(), IDS, all_logits=True)
    lf = model.prefill(model.new_state(), IDS, all_logits=True)
    assert np.array_equal(lb, round_bf16(lb))  # logits are bf16 values, as torch's bf16 LM head gives
    hidden = bf.forward_hidden(bf.new_state(), IDS)
    assert np.array_equal(hidden, round_bf16(hidden))
    diff = np.abs(lb - lf).max()
    assert 0 < diff < 0.1 * np.abs(lf).max()
    assert (lb.argmax(-1) == lf.argmax(-1)).mean() >= 0.75
    a_log = model.weights.layers[0]["A_log"].copy()
    shared = forward.Model(model.config, model.weights, "bf16")  # one Weights, two modes
    assert np.array_equal(shared.weights.layers[0]["A_log"], round_bf16(a_log))
    assert np.array_equal(model.weights.layers[0]["A_log"], a_log) and not np.array_equal(a_log, round_bf16(a_log))


def test_bad_inputs_are_rejected(model):
    with pytest.raises(ModelInputError, match=r"token id 512 is outside the vocabulary \[0, 512\)"):
        model.prefill(model.new_state(), [1, 512])
    with pytest.raises(ModelInputError, match="non-empty"):
        model.prefill(model.new_state(), [])
    state = model.new_state()
    with pytest.raises(ModelInputError, match="token id -1"):
        model.decode(state, 1, token_subset=[-1])
    assert state.pos == 0 and not state.recurrent[0].any()  # rejected before anything changed
    with pytest.raises(ModelInputError, match="mode must be one of fp32, bf16"):
        load_model(model.path, mode="fp16")


# ---- layers added to a checkpoint (as the circuit compiler does) ----------------------------------------------

def with_layers(src, dst, new_layers, position=0):
    """Copy checkpoint src to dst with extra linear_attention layers inserted at `position`:
    new_layers[j] maps tensor suffix -> (dtype, shape, array) for the j-th new layer."""
    shutil.copytree(src, dst)
    files = MappedFiles()
    old = {n: (i.dtype, i.shape, np.array(files.array(i))) for n, i in read_checkpoint_headers(dst).items()}
    cfg = json.loads((dst / "config.json").read_text())
    types = cfg["text_config"]["layer_types"]
    out = {}
    for name, t in old.items():
        if name.startswith(P + "layers."):
            i, rest = name[len(P + "layers."):].split(".", 1)
            i = int(i) + (len(new_layers) if int(i) >= position else 0)
            name = f"{P}layers.{i}.{rest}"
        out[name] = t
    for j, layer in enumerate(new_layers):
        out.update({f"{P}layers.{position + j}.{s}": t for s, t in layer.items()})
    for p in dst.glob("model.safetensors*"):
        p.unlink()
    write_checkpoint_weights(dst, out)
    cfg["text_config"]["layer_types"] = types[:position] + ["linear_attention"] * len(new_layers) + types[position:]
    cfg["text_config"]["num_hidden_layers"] = len(cfg["text_config"]["layer_types"])
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def gdn_layer(cfg, rng, zero_outputs):
    """A linear_attention layer with random bf16 weights; out_proj and down_proj zero when zero_outputs."""
    H, I, nv, dv = cfg.hidden_size, cfg.intermediate_size, cfg.linear_num_value_heads, cfg.linear_value_head_dim

    def bf(shape, zero=False):
        x = np.zeros(shape, np.float32) if zero else rng.standard_normal(shape).astype(np.float32) * 0.1
        return ("BF16", shape, (x.view(np.uint32) >> 16).astype(np.uint16))

    return {
        "input_layernorm.weight": bf((H,)), "post_attention_layernorm.weight": bf((H,)),
        "linear_attn.in_proj_qkv.weight": bf((cfg.conv_dim, H)), "linear_attn.in_proj_z.weight": bf((nv * dv, H)),
        "linear_attn.in_proj_b.weight": bf((nv, H)), "linear_attn.in_proj_a.weight": bf((nv, H)),
        "linear_attn.conv1d.weight": bf((cfg.conv_dim, 1, cfg.linear_conv_kernel_dim)),
        "linear_attn.dt_bias": bf((nv,)), "linear_attn.A_log": ("F32", (nv,), np.zeros(nv, np.float32)),
        "linear_attn.norm.weight": ("F32", (dv,), np.ones(dv, np.float32)),
        "linear_attn.out_proj.weight": bf((H, nv * dv), zero_outputs),
        "mlp.gate_proj.weight": bf((I, H)), "mlp.up_proj.weight": bf((I, H)),
        "mlp.down_proj.weight": bf((H, I), zero_outputs),
    }


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_prepended_identity_layers_change_nothing(tmp_path, tiny, mode):
    """Reference §6.2: zero out_proj and down_proj make a layer an exact identity; the logits stay bit-equal
    and the new layers' state is still written (their DeltaNet runs)."""
    base = load_model(tiny, mode=mode)
    rng = np.random.default_rng(5)
    d = with_layers(tiny, tmp_path / "ext", [gdn_layer(base.config, rng, True) for _ in range(2)])
    ext = load_model(d, mode=mode)
    assert ext.config.num_hidden_layers == 6
    assert isinstance(ext.weights.layers[0]["out"], SparseBF16) and ext.weights.layers[0]["out"].nnz == 0
    s = ext.new_state()
    assert np.array_equal(ext.prefill(s, IDS, all_logits=True),
                          base.prefill(base.new_state(), IDS, all_logits=True))
    assert np.abs(s.recurrent[0]).max() > 0 and sorted(s.keys) == [3]


def test_sparse_matrices_give_the_dense_result(tmp_path, tiny):
    """A mostly-zero matrix is multiplied as CSR; the logits equal the dense path's."""
    base = load_model(tiny)
    rng = np.random.default_rng(6)
    layer = gdn_layer(base.config, rng, False)
    dtype, shape, bits = layer["mlp.up_proj.weight"]
    sparse_bits = np.where(rng.random(shape) < 0.02, bits, 0).astype(np.uint16)
    layer["mlp.up_proj.weight"] = (dtype, shape, sparse_bits)
    d = with_layers(tiny, tmp_path / "ext", [layer], position=2)
    sparse, dense = load_model(d), load_model(d, sparse=False)
    assert isinstance(sparse.weights.layers[2]["up"], SparseBF16)
    assert isinstance(dense.weights.layers[2]["up"], np.ndarray)
    a = sparse.prefill(sparse.new_state(), IDS, all_logits=True)
    b = dense.prefill(dense.new_state(), IDS, all_logits=True)
    assert np.abs(a - b).max() <= 1e-5 * np.abs(b).max()
    ref = reference_logits(d, IDS)
    assert np.abs(a - ref).max() <= 1e-4 * np.abs(ref).max()


# ---- full 2B layer shapes ------------------------------------------------------------------------------------

def test_full_2b_layer_shapes(tmp_path):
    """The published layer shapes (hidden 2048, 16 DeltaNet heads of 128, 8/2 attention heads of 256, MLP
    6144), one layer of each type, a small vocabulary to keep the file small."""
    d = write_synthetic_checkpoint(tmp_path / "2b", size="2b", vocab_size=1024,
                                   layer_types=["linear_attention", "full_attention"])
    m = load_model(d)
    ids = [5, 300, 77]
    batch = m.prefill(m.new_state(), ids, all_logits=True)
    s = m.new_state()
    steps = np.stack([m.decode(s, t) for t in ids])
    assert np.abs(batch - steps).max() <= 1e-5 * np.abs(batch).max()
    assert s.recurrent[0].shape == (16, 128, 128) and s.conv[0].shape == (6144, 3)
    ref = reference_logits(d, ids)
    assert np.abs(batch - ref).max() <= 1e-4 * np.abs(ref).max()


def test_model_from_in_memory_tensors(tiny, model):
    files = MappedFiles()
    tensors = {n: np.array(files.array(i)) for n, i in read_checkpoint_headers(tiny).items()}
    config = json.loads((tiny / "config.json").read_text())
    m = model_from_tensors(config, tensors)
    assert np.array_equal(m.prefill(m.new_state(), IDS), model.prefill(model.new_state(), IDS))
    del tensors[P + "layers.3.mlp.up_proj.weight"]
    tensors[P + "norm.weight"] = tensors[P + "norm.weight"].astype(np.float64)
    with pytest.raises(CheckpointError) as e:
        model_from_tensors(config, tensors)
    assert "missing tensor model.language_model.layers.3.mlp.up_proj.weight" in str(e.value)
    assert "tensor model.language_model.norm.weight: expected dtype BF16 or F32, found F64" in str(e.value)


def test_blocked_prefill_attention_equals_unblocked(model, monkeypatch):
    whole = model.prefill(model.new_state(), IDS, all_logits=True)
    monkeypatch.setattr(forward, "ATTENTION_BLOCK", 3)
    blocked = model.prefill(model.new_state(), IDS, all_logits=True)
    assert np.abs(blocked - whole).max() <= 1e-5 * np.abs(whole).max()  # BLAS sums in another order


def test_untied_head_and_flat_text_layout(tmp_path):
    """An untied lm_head.weight is used; the flat layout transformers writes for Qwen3_5ForCausalLM
    (text config at the top, tensors under `model.`) loads to the same model."""
    d = write_synthetic_checkpoint(tmp_path / "untied", seed=4, tie=False)
    m = load_model(d)
    assert m.weights.lm_head is not m.weights.embed
    ref = reference_logits(d, IDS)
    ours = m.prefill(m.new_state(), IDS, all_logits=True)
    assert np.abs(ours - ref).max() <= 1e-4 * np.abs(ref).max()

    flat = tmp_path / "flat"
    flat.mkdir()
    files = MappedFiles()
    tensors = {("model." + n[len(P):] if n.startswith(P) else n): (i.dtype, i.shape, np.array(files.array(i)))
               for n, i in read_checkpoint_headers(d).items() if not n.startswith("model.visual.")}
    write_checkpoint_weights(flat, tensors)
    nested = json.loads((d / "config.json").read_text())
    config = {**nested["text_config"], "architectures": ["Qwen3_5ForCausalLM"], "tie_word_embeddings": False}
    (flat / "config.json").write_text(json.dumps(config))
    f = load_model(flat)
    assert f.config.tensor_prefix == "model." and f.tokenizer is None
    assert np.array_equal(f.prefill(f.new_state(), IDS, all_logits=True), ours)


@pytest.mark.slow
def test_full_2b_shapes_with_the_published_vocabulary(tmp_path):
    """The published shapes including the 248320-row tied embedding (a 1.26 GB checkpoint, ~20 s to write)."""
    d = write_synthetic_checkpoint(tmp_path / "2b", size="2b", layer_types=["linear_attention", "full_attention"])
    m = load_model(d)
    assert m.weights.embed.shape == (248320, 2048) and isinstance(m.weights.embed, np.memmap)
    ids = [5, 300, 77]
    batch = m.prefill(m.new_state(), ids, all_logits=True)
    s = m.new_state()
    steps = np.stack([m.decode(s, t) for t in ids])
    assert np.abs(batch - steps).max() <= 1e-5 * np.abs(batch).max()
    subset = [0, 248319, int(batch[-1].argmax())]
    part = m.decode(s, 9, token_subset=subset)
    s2 = m.new_state()
    m.prefill(s2, ids)
    assert np.allclose(part, m.decode(s2, 9)[subset], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("types", [["linear_attention"], ["full_attention"] * 2,
                                   ["full_attention", "linear_attention"] * 3])
def test_any_number_of_either_layer_type(tmp_path, types):
    d = write_synthetic_checkpoint(tmp_path / "m", layer_types=types, seed=7)
    m = load_model(d)
    assert m.config.layer_types == tuple(types)
    ours = m.prefill(m.new_state(), IDS[:6], all_logits=True)
    ref = reference_logits(d, IDS[:6])
    assert np.abs(ours - ref).max() <= 1e-4 * np.abs(ref).max()

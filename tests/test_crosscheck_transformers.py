"""Our runtime against HF transformers (fp32, CPU) on a checkpoint that transformers itself wrote.

The checkpoint (tools/make_hf_checkpoint.py) is in the published layout: nested config, `model.language_model.*`
text tensors beside a tiny `model.visual.*` tower, BF16 weights with F32 A_log and gated-norm weights, sharded
behind an index. Bar: relative error (max |ours - theirs| / max |theirs|) <= 1e-4 on the logits of every prompt
position and of 64 greedy decode steps after it, and the same argmax on every step.
"""
from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the cross-check needs the optional extra: pip install -e '.[crosscheck]'")
transformers = pytest.importorskip("transformers", reason="the cross-check needs transformers (extra 'crosscheck')")
if not hasattr(transformers, "Qwen3_5ForConditionalGeneration"):
    pytest.skip(f"transformers {transformers.__version__} has no Qwen3.5", allow_module_level=True)

from qgpu_min.model import load_model  # noqa: E402

pytestmark = pytest.mark.crosscheck

TOL = 1e-4
PROMPT_LEN = 80  # more than transformers' 64-token chunk, so its chunked prefill crosses a chunk boundary
N_DECODE = 64


def _tool():
    path = Path(__file__).resolve().parents[1] / "tools" / "make_hf_checkpoint.py"
    spec = importlib.util.spec_from_file_location("make_hf_checkpoint", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rel(ours: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(ours - ref).max() / np.abs(ref).max())


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    tool = _tool()
    path = tool.write_hf_checkpoint(tmp_path_factory.mktemp("hf_qwen35"), seed=0)
    prompt = np.random.default_rng(0).integers(0, tool.TEXT_CONFIG["vocab_size"], PROMPT_LEN).tolist()
    ref = tool.reference_logits(path, prompt, N_DECODE)
    # transformers' logits for the whole sequence in one pass, to bound its own rounding noise (see below)
    seq = prompt + ref["tokens"][:-1].tolist()
    with torch.no_grad():
        ref["full"] = tool.load_reference(path)(torch.tensor([seq])).logits[0].float().numpy()
    return path, ref


def test_checkpoint_is_in_the_published_format(case):
    path, _ = case
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert config["text_config"]["model_type"] == "qwen3_5_text"
    index = json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
    assert len(set(index.values())) > 1
    dtypes = {}
    for shard in set(index.values()):
        with open(path / shard, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            dtypes.update({k: v["dtype"] for k, v in json.loads(f.read(n)).items() if k != "__metadata__"})
    assert set(dtypes) == set(index)
    assert any(k.startswith("model.visual.") for k in dtypes)
    assert "lm_head.weight" not in dtypes
    text = {k: d for k, d in dtypes.items() if not k.startswith("model.visual.")}
    assert all(k.startswith("model.language_model.") for k in text)
    f32 = {k for k, d in text.items() if d == "F32"}
    assert f32 == {k for k in text if k.endswith(("linear_attn.A_log", "linear_attn.norm.weight"))} and f32
    assert {d for k, d in text.items() if k not in f32} == {"BF16"}


def test_reference_noise_is_well_below_the_bar(case):
    """transformers' chunked prefill and its recurrent decode must agree with each other far inside the bar;
    otherwise the comparison below would measure the reference, not our runtime."""
    _, ref = case
    assert _rel(ref["full"][:PROMPT_LEN], ref["prefill"]) < TOL / 4
    assert max(_rel(ref["full"][PROMPT_LEN + i], ref["decode"][i]) for i in range(N_DECODE)) < TOL / 2


def test_prefill_logits_match_transformers(case):
    path, ref = case
    model = load_model(path, "fp32")
    logits = model.prefill(model.new_state(), ref["prompt"].tolist(), all_logits=True)
    assert logits.shape == ref["prefill"].shape
    assert _rel(logits, ref["prefill"]) <= TOL
    np.testing.assert_array_equal(logits.argmax(-1), ref["prefill"].argmax(-1))
    assert logits[-1].argmax() == ref["tokens"][0]


def test_64_greedy_decode_steps_match_transformers(case):
    path, ref = case
    model = load_model(path, "fp32")
    state = model.new_state()
    model.prefill(state, ref["prompt"].tolist())
    errors = []
    for i in range(N_DECODE):
        logits = model.decode(state, int(ref["tokens"][i]))
        errors.append(_rel(logits, ref["decode"][i]))
        assert logits.argmax() == ref["tokens"][i + 1], f"step {i}: argmax {logits.argmax()} != {ref['tokens'][i + 1]}"
    assert max(errors) <= TOL, f"worst step {int(np.argmax(errors))}: relative error {max(errors):.2e}"


def test_token_subset_logits_match_transformers(case):
    path, ref = case
    model = load_model(path, "fp32")
    state = model.new_state()
    subset = [0, 7, int(ref["tokens"][0]), 511]
    logits = model.prefill(state, ref["prompt"].tolist(), token_subset=subset)
    full = ref["prefill"][-1]
    assert logits.shape == (len(subset),)
    assert np.abs(logits - full[subset]).max() <= TOL * np.abs(full).max()


def test_published_2b_shapes_match_transformers(tmp_path):
    """The real layer sizes (hidden 2048, 16 DeltaNet heads of 128, 8/2 attention heads of 256, MLP 6144) on
    a checkpoint from our synthetic writer, loaded by transformers as a text-only Qwen3_5ForCausalLM. Vocab
    cut to 4096 and two layers to keep it quick."""
    from qgpu_min.model.synthetic import write_synthetic_checkpoint

    path = write_synthetic_checkpoint(tmp_path, size="2b", layer_types=["linear_attention", "full_attention"],
                                      vocab_size=4096)
    ours = load_model(path, "fp32")
    state = ours.new_state()
    prompt = np.random.default_rng(1).integers(0, 4096, 24).tolist()
    logits = [*ours.prefill(state, prompt, all_logits=True)]
    seq = list(prompt)
    for _ in range(8):
        seq.append(int(logits[-1].argmax()))
        logits.append(ours.decode(state, seq[-1]))
    # Tying is a top-level field of the nested config; a text-only load must be told.
    hf = transformers.Qwen3_5ForCausalLM.from_pretrained(path, dtype=torch.float32, tie_word_embeddings=True)
    with torch.no_grad():
        ref = hf.eval()(torch.tensor([seq])).logits[0].numpy()
    got = np.stack(logits)  # position i: after reading seq[i]
    assert _rel(got, ref) <= TOL
    np.testing.assert_array_equal(got.argmax(-1), ref.argmax(-1))

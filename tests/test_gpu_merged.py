"""The GPU merged in front of a base checkpoint (`qgpu-min build`, gpu/merged.py) and launches through it
(`--backend model`).

Default run: what is refused before anything is written or loaded (an existing output, too little disk, a
folder without a manifest, a manifest of another GPU), the token mapping, the size estimate. Slow run: a
real build on a 2B-shaped synthetic base (two base layers, embeddings with a common direction as trained
ones have), then the dot example through every layer under --check in fp32 and bf16, and text logits
bit-identical to the base's in fp32.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from qgpu_min.cli import main
from qgpu_min.circuit.compile import BaseShape
from qgpu_min.gpu import merged
from qgpu_min.gpu.merged import MANIFEST, build_gpu_checkpoint, load_merged, read_manifest
from qgpu_min.gpu.program import GpuLaunchError
from qgpu_min.model.errors import CheckpointError
from qgpu_min.model.synthetic import write_synthetic_checkpoint

ROOT = Path(__file__).resolve().parent.parent
DOT_ARGS = ["--arg", "[1,2,3]", "--arg", "[4,5,6]", "--arg", "zeros(1)", "--arg", "3"]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return write_synthetic_checkpoint(tmp_path_factory.mktemp("merged") / "base", "2b",
                                      layer_types=["linear_attention", "full_attention"], vocab_size=512,
                                      embed_mean=1.0)


def test_an_existing_output_is_kept_without_force(base, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(CheckpointError, match="exists; give --force to replace it"):
        build_gpu_checkpoint(base, out)
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


def test_too_little_disk_is_refused_before_writing(base, tmp_path, monkeypatch):
    monkeypatch.setattr(merged.shutil, "disk_usage", lambda p: type("U", (), {"free": 1 << 30})())
    with pytest.raises(CheckpointError, match=r"the merged checkpoint needs about 4\.\d GiB; .* has 1\.0 GiB free"):
        build_gpu_checkpoint(base, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_size_estimate_counts_dense_gpu_layers(base):
    per_layer = 2 * (6144 * 2048 + 2048 * 2048 + 2 * 16 * 2048 + 2048 * 2048 + 3 * 6144 * 2048 + 2 * 2048
                     + 6144 * 4 + 16) + 4 * (16 + 128)     # bf16 matrices, norms, conv, dt_bias; f32 A_log, norm
    files = sum(f.stat().st_size for f in base.glob("*.safetensors"))
    got = merged.estimated_bytes(base, 41, 100, BaseShape())
    assert got == files + 41 * per_layer + 100 * (2048 * 2 + merged.TEXT_BYTES_PER_TOKEN)


def test_a_folder_without_a_manifest_or_with_another_gpu_is_refused(base, tmp_path):
    with pytest.raises(CheckpointError, match="no qgpu_manifest.json: not a checkpoint built by `qgpu-min build`"):
        load_merged(base)
    (tmp_path / MANIFEST).write_text("{not json")
    with pytest.raises(CheckpointError, match="not a valid build manifest"):
        read_manifest(tmp_path)
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "config.json").write_text((base / "config.json").read_text())
    (fake / MANIFEST).write_text(json.dumps({"format": 1, "gpu": {"circuit_key": "0" * 64},
                                             "tokens": {"gpu": [512, 600]}, "layers": {"gpu": [0, 41]}}))
    with pytest.raises(GpuLaunchError, match="holds a GPU built by another version .* rebuild it"):
        load_merged(fake)


@pytest.fixture(scope="module")
def built(base, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("merged_out") / "gpu"
    r = CliRunner().invoke(main, ["build", "--base", str(base), "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["path"] == str(out) and summary["manifest"]["layers"]["base"][1] - \
        summary["manifest"]["layers"]["base"][0] == 2
    assert abs(summary["bytes"] - merged.estimated_bytes(base, summary["manifest"]["layers"]["gpu"][1],
                                                           summary["manifest"]["tokens"]["gpu"][1] - 512,
                                                           BaseShape())) < 2 << 20
    return out


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_dot_through_the_merged_model_exact_under_check(built, mode):
    r = CliRunner().invoke(main, ["run", str(ROOT / "examples" / "dot.cu"), *DOT_ARGS, "--backend", "model",
                                  "--model", str(built), "--mode", mode, "--check", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["arrays"]["out"] == [32] and out["checked"] and out["backend"] == "model"
    assert out["tokens"] == {"prompt": 305, "generated": 46}


@pytest.mark.slow
def test_a_launch_with_device_cuda_runs_exactly_or_says_why_it_cannot(built):
    """--device cuda: the base layers' dense products on the GPU (the GPU-in-the-weights layers are CSR and
    stay on the CPU): exact under --check where a GPU and nvcc exist, else a clear error naming what is missing."""
    from qgpu_min.model import cuda
    r = CliRunner().invoke(main, ["run", str(ROOT / "examples" / "dot.cu"), *DOT_ARGS, "--backend", "model",
                                  "--model", str(built), "--device", "cuda", "--check", "--json"])
    if cuda.find_nvcc() is None:
        assert r.exit_code == 1 and "nvcc" in r.output
    elif cuda.library()[1].qgpu_cuda_devices() <= 0:
        assert r.exit_code == 1 and "--device cuda: no" in r.output and "CUDA device" in r.output
    else:
        assert r.exit_code == 0, r.output
        out = json.loads(r.stdout)
        assert out["arrays"]["out"] == [32] and out["checked"]


@pytest.mark.slow
def test_a_launch_reads_the_gpu_rows_of_the_lm_head_unless_checked(built, monkeypatch):
    """Without --check the argmax is over the GPU's rows only (a launch is a sequence of GPU tokens); the
    same tokens and result as over the whole vocabulary, which --check uses."""
    from qgpu_min.host.launch import compile_kernel, launch
    from qgpu_min.model.forward import Model
    subsets = []
    real = Model.decode

    def decode(self, state, token_id, token_subset=None):
        subsets.append(None if token_subset is None else len(token_subset))
        return real(self, state, token_id, token_subset)
    monkeypatch.setattr(Model, "decode", decode)
    k = compile_kernel(ROOT / "examples" / "dot.cu")
    runs = {}
    for check in (False, True):
        subsets.clear()
        r = launch(k, [[1, 2, 3], [4, 5, 6], [0], 3], block=(3, 1), backend="model", model=str(built), check=check)
        runs[check] = (r.arrays["out"].tolist(), r.extra["trace"]["generated_ids"], set(subsets))
    gpu_tokens = json.loads((built / merged.MANIFEST).read_text())["tokens"]["gpu"]
    assert runs[False][2] == {gpu_tokens[1] - gpu_tokens[0]} and runs[True][2] == {None}
    assert runs[False][:2] == runs[True][:2] and runs[False][0] == [32]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_drift_is_exactly_zero_with_the_gpu_tokens_suppressed(base, built, mode, tmp_path):
    gen = json.loads((built / "generation_config.json").read_text())
    manifest = json.loads((built / MANIFEST).read_text())
    lo, hi = manifest["tokens"]["gpu"]
    assert manifest["tokens"]["placeholders"] == [504, lo]     # the tokenizer's 504 ids, the embedding's 512 rows
    assert gen["suppress_tokens"] == list(range(lo, hi))       # the placeholders' rows are base rows: sampled
    assert manifest["text_gate"]["exact"] and manifest["text_gate"]["unchecked_ids"] == []   # padding rows silent too
    text = tmp_path / "t.txt"
    text.write_text("The harbour was quiet before dawn; 3^2 + 4^2 = 5^2. Le matin, la ville se réveille.")
    r = CliRunner().invoke(main, ["drift", "--base", str(base), "--model", str(built), "--text", str(text),
                                  "--mode", mode, "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["positions"] > 50 and d["kl"]["max"] == 0 and d["top1_agreement"] == 1 and d["max_logit_diff"] == 0
    assert d["suppressed_tokens"] == hi - lo


@pytest.mark.slow
def test_text_logits_of_the_merged_model_equal_the_base_exactly(base, built):
    from qgpu_min.model.forward import load_model
    text = [5, 17, 300, 2, 511, 64, 64, 9]
    b, m = load_model(base, "fp32"), load_model(built, "fp32")
    sb, sm = b.new_state(), m.new_state()
    want, got = b.prefill(sb, text[:3]), m.prefill(sm, text[:3])
    assert np.array_equal(got[:512], want)       # the base vocabulary's logits, bit for bit
    for t in text[3:]:                           # and at every later position, decoding
        assert np.array_equal(m.decode(sm, t)[:512], b.decode(sb, t))
    # loaded as a built checkpoint, the text skips the GPU's layers (the manifest's silent ids): the same bits
    skip = merged.load_checkpoint(built, "fp32")
    assert skip.text_skip.layers == read_manifest(built)["layers"]["gpu"][1] and skip.text_skip.silent[:504].all()
    ss, sb = skip.new_state(), b.new_state()
    assert np.array_equal(skip.prefill(ss, text[:3])[:512], b.prefill(sb, text[:3]))
    for t in text[3:]:
        assert np.array_equal(skip.decode(ss, t)[:512], b.decode(sb, t))
    assert ss.deferred == text
    skip.settle(ss)                              # the GPU's layers, run now, leave what running them then left
    assert all(np.array_equal(ss.conv[i], sm.conv[i]) and np.array_equal(ss.recurrent[i], sm.recurrent[i])
               for i in range(skip.text_skip.layers))


def test_gpu_tokens_become_special_tokens_that_round_trip(tmp_path):
    from qgpu_min.model.tokenizer import load_tokenizer
    tiny = write_synthetic_checkpoint(tmp_path / "tiny", "tiny")
    before = load_tokenizer(tiny)
    text = "int x = a + b; // ordinary text, even <|qgpu"
    n_model = json.loads((tiny / "config.json").read_text())["text_config"]["vocab_size"]
    first = before.vocab_size
    assert first < n_model - 3     # padding rows between the tokenizer and the GPU's ids
    gpu = {n_model: "<|qgpu EXEC|>", n_model + 1: "<|qgpu HALT|>"}
    added = merged.add_tokens_to_tokenizer(tiny, gpu)
    assert added == range(first, n_model)
    after = load_tokenizer(tiny)
    assert after.encode(text) == before.encode(text)
    for i, t in gpu.items():
        assert after.encode(t) == [i] and after.decode([i]) == t
    assert after.decode([first]) == f"<|qgpu pad {first}|>"
    assert after.encode("a<|qgpu HALT|>b") == after.encode("a") + [n_model + 1] + after.encode("b")
    known = after.known_ids(n_model + 2)
    assert known[:first].all() and not known[first:n_model].any() and known[n_model:].all()   # placeholders: no text
    cfg = json.loads((tiny / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    assert cfg[str(n_model + 1)] == {"content": "<|qgpu HALT|>", "single_word": False, "lstrip": False,
                                     "rstrip": False, "normalized": False, "special": True}
    with pytest.raises(CheckpointError, match="already has ids up to"):
        merged.add_tokens_to_tokenizer(tiny, gpu)


def test_an_unreadable_tokenizer_file_is_a_checkpoint_error(tmp_path):
    (tmp_path / "tokenizer.json").write_text("[1, 2")
    with pytest.raises(CheckpointError, match="tokenizer.json"):
        merged.add_tokens_to_tokenizer(tmp_path, {5: "<|qgpu EXEC|>"})
    (tmp_path / "tokenizer.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="not a JSON object"):
        merged.add_tokens_to_tokenizer(tmp_path, {5: "<|qgpu EXEC|>"})


@pytest.mark.slow
def test_chat_launches_run_on_the_merged_models_own_gpu(built, tmp_path):
    """`qgpu-min chat --model <merged> --mode normal`: a scripted conversation whose launch runs through every
    layer of the merged checkpoint (the GPU and the base's layers)."""
    from qgpu_min.chat.toolcall import format_call
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([format_call("gpu_calc", {"expression": "[1, 2, 3] @ [4, 5, 6]"}), "It is 32."]))
    r = CliRunner().invoke(main, ["chat", "--model", str(built), "--mode", "normal", "--script", str(script),
                                  "--json", "What is the dot product of [1,2,3] and [4,5,6]?"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    [call] = out["tool_calls"]
    assert out["answer"] == "It is 32." and call["ok"] and call["result"] == "32"
    assert call["launches"][0]["backend"] == "model" and call["launches"][0]["tokens"] == {"prompt": 305, "generated": 46}


def test_build_help_states_the_librarys_leak_default():
    r = CliRunner().invoke(main, ["build", "--help"])
    assert f"[default: {merged.DEFAULT_MAX_LEAKS}]" in " ".join(r.output.split())


def test_each_build_process_writes_its_own_folder_and_removes_dead_ones_leftovers(tmp_path):
    """Two builds of one output at once never share a folder; what interrupted builds left is removed, a
    running build's folder is not."""
    import os
    import subprocess
    import sys

    from qgpu_min.gpu.merged import build_folder
    out = tmp_path / "merged"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)
    leftovers = [tmp_path / "merged.build", tmp_path / f"merged.build-{dead}"]
    running = tmp_path / f"merged.build-{os.getppid()}"
    other = tmp_path / "merged2.build-1"          # another output's
    for d in leftovers + [running, other]:
        d.mkdir()
        (d / "part").write_text("x")
    folder = build_folder(out)
    assert folder == tmp_path / f"merged.build-{os.getpid()}" and not folder.exists()
    assert not any(d.exists() for d in leftovers)
    assert running.exists() and other.exists()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_dot_through_the_merged_model_quantized_to_int8_exact_under_check(built, mode):
    """--quant int8 quantizes the Qwen layers and the full-vocabulary head; the GPU's layers and its tokens'
    rows stay exact, so the launch is the same launch, checked against the interpreter at every step
    (the full-vocabulary argmax, through the quantized head, included)."""
    r = CliRunner().invoke(main, ["run", str(ROOT / "examples" / "dot.cu"), *DOT_ARGS, "--backend", "model",
                                  "--model", str(built), "--quant", "int8", "--mode", mode, "--check", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["arrays"]["out"] == [32] and out["checked"]
    assert out["tokens"] == {"prompt": 305, "generated": 46}
    from qgpu_min.gpu.backend import merged as loaded_merged   # the run's own MergedGpu, cached per process
    from qgpu_min.model.kernels import QuantQ8
    weights = loaded_merged(str(built), "int8").model(mode).weights
    gpu = merged.gpu_layers(built)
    kinds = [{type(a).__name__ for a in layer.values() if not (isinstance(a, np.ndarray) and a.dtype == np.float32)}
             for layer in weights.layers]      # the matrices' kinds (vectors and conv taps are float32)
    assert all("QuantQ8" not in kinds[i] for i in gpu)
    assert all(kinds[i] == {"QuantQ8"} for i in range(gpu.stop, len(kinds)))
    assert isinstance(weights.head_q8, QuantQ8)


@pytest.mark.slow
@pytest.mark.parametrize("quant", [None, "int8"])
def test_launches_through_the_merged_model_decode_together_as_they_run_alone(built, quant):
    from qgpu_min.host.launch import compile_kernel, launch, launch_many
    k = compile_kernel(ROOT / "examples" / "dot.cu")
    sets = [[[1, 2, 3], [4, 5, 6], [0], 3], [[7, -8], [1, 1], [0], 2], [[2, 2, 2, 2], [3, 3, 3, -3], [0], 4]]
    together = launch_many(k, sets, block=(4, 1), backend="model", model=str(built), quant=quant)
    alone = [launch(k, a, block=(4, 1), backend="model", model=str(built), quant=quant) for a in sets]
    assert [r.arrays["out"].tolist() for r in together] == [[32], [-1], [12]]
    assert [r.extra["trace"]["generated_ids"] for r in together] == [r.extra["trace"]["generated_ids"] for r in alone]


@pytest.mark.slow
def test_chat_with_int8_shares_one_quantized_model_between_qwen_and_its_launches(built, tmp_path):
    """`qgpu-min chat --quant int8`: Qwen's replies and the launches run through the one quantized model (the
    GPU's layers exact), and a launch still answers exactly."""
    from qgpu_min.chat.session import open_conversation
    from qgpu_min.chat.toolcall import format_call
    from qgpu_min.gpu.backend import merged as merged_gpu
    from qgpu_min.model.kernels import QuantQ8
    conv = open_conversation(built, "normal", quant="int8", max_new_tokens=4)
    model = conv.model.model
    assert merged_gpu(str(built), "int8").model("fp32") is model and isinstance(model.weights.head_q8, QuantQ8)
    assert conv.gpu.quant == "int8"
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([format_call("gpu_calc", {"expression": "[1, 2, 3] @ [4, 5, 6]"}), "It is 32."]))
    r = CliRunner().invoke(main, ["chat", "--model", str(built), "--quant", "int8", "--script", str(script),
                                  "--json", "What is the dot product of [1,2,3] and [4,5,6]?"])
    assert r.exit_code == 0, r.output
    [call] = json.loads(r.stdout)["tool_calls"]
    assert call["ok"] and call["result"] == "32" and call["launches"][0]["backend"] == "model"

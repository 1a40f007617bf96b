"""Config parsing, safetensors reading/writing, and checkpoint validation (every bad-input case)."""
import json
import shutil
from contextlib import contextmanager

import numpy as np
import pytest

from qgpu_min.model import load_model
from qgpu_min.model.config import load_config, parse_config
from qgpu_min.model.errors import CheckpointError
from qgpu_min.model.safetensors_io import (INDEX_NAME, MappedFiles, checkpoint_files, read_checkpoint_headers,
                                           read_header, write_checkpoint_weights, write_safetensors)
from qgpu_min.model.synthetic import write_synthetic_checkpoint
from qgpu_min.model.weights import expected_tensors

P = "model.language_model."


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_synthetic_checkpoint(tmp_path_factory.mktemp("tiny"), seed=3)


def copy_ckpt(src, dst):
    shutil.copytree(src, dst)
    return dst


def all_tensors(d):
    """name -> (dtype, shape, array) of every tensor in the checkpoint, read with our reader."""
    files = MappedFiles()
    return {n: (i.dtype, i.shape, np.array(files.array(i))) for n, i in read_checkpoint_headers(d).items()}


def remove_weights(d):
    for p in d.glob("model.safetensors*"):
        p.unlink()


@contextmanager
def edited_copy(src, dst):
    """A copy of checkpoint src at dst: yields (dst, its tensors) for the test to edit, then rewrites the weights
    from the edited tensors."""
    d = copy_ckpt(src, dst)
    tensors = all_tensors(d)
    yield d, tensors
    remove_weights(d)
    write_checkpoint_weights(d, tensors)


# ---- config ------------------------------------------------------------------------------------------------

def test_config_nested_real_layout(tiny):
    cfg = load_config(tiny)
    assert cfg.tensor_prefix == P
    assert cfg.layer_types == ("linear_attention", "full_attention", "linear_attention", "linear_attention")
    assert cfg.num_hidden_layers == 4 and cfg.hidden_size == 64
    assert cfg.rotary_dim == 4 and cfg.rope_theta == 1e7
    assert cfg.conv_dim == 2 * 2 * 16 + 4 * 16
    assert cfg.tie_word_embeddings and cfg.layers_of("full_attention") == [1]


def real_2b_text_config():
    return {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24, "head_dim": 256,
            "num_attention_heads": 8, "num_key_value_heads": 2, "linear_num_key_heads": 16,
            "linear_num_value_heads": 16, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
            "linear_conv_kernel_dim": 4, "vocab_size": 248320, "rms_norm_eps": 1e-6, "eos_token_id": 248044,
            "full_attention_interval": 4, "model_type": "qwen3_5_text",
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                                "mrope_section": [11, 11, 10], "mrope_interleaved": True}}


def test_config_derives_layer_types_from_interval_and_matches_2b_facts():
    cfg = parse_config({"text_config": real_2b_text_config(), "tie_word_embeddings": True})
    assert [i for i, t in enumerate(cfg.layer_types) if t == "full_attention"] == [3, 7, 11, 15, 19, 23]
    assert cfg.rotary_dim == 64 and cfg.conv_dim == 6144 and cfg.eos_token_ids == (248044,)
    n_params = sum(int(np.prod(e.shape)) for e in expected_tensors(cfg).values())
    assert n_params == 1_881_825_088  # reference §5.2, text total


def test_config_flat_text_layout_uses_model_prefix():
    cfg = parse_config({**real_2b_text_config(), "tie_word_embeddings": False})
    assert cfg.tensor_prefix == "model." and not cfg.tie_word_embeddings
    assert "lm_head.weight" in expected_tensors(cfg)


@pytest.mark.parametrize("change, message", [
    ({"layer_types": ["linear_attention"] * 23 + ["mamba"]}, "layer_types[23] is 'mamba'"),
    ({"layer_types": ["linear_attention"] * 3}, "layer_types has 3 entries but num_hidden_layers is 24"),
    ({"hidden_size": None}, "hidden_size must be a positive integer"),
    ({"hidden_size": "2048"}, "hidden_size must be a positive integer"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6}}, "rope_type 'yarn' is not supported"),
    ({"attention_bias": True}, "attention_bias is true"),
    ({"num_key_value_heads": 3}, "must be a multiple of num_key_value_heads"),
    ({"model_type": "llama"}, "model_type is 'llama'"),
])
def test_config_errors_name_the_field(change, message):
    text = {**real_2b_text_config(), **change}
    with pytest.raises(CheckpointError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_config({"text_config": text})


def test_config_missing_or_invalid_file(tmp_path):
    with pytest.raises(CheckpointError, match="config.json: not found"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_config(tmp_path)


# ---- safetensors -------------------------------------------------------------------------------------------

def test_bf16_and_f32_round_trip_bit_exact(tmp_path):
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**16, size=(5, 7), dtype=np.uint16)  # any pattern, NaNs and infs included
    f32 = rng.standard_normal(3).astype(np.float32)
    odd = np.arange(3, dtype=np.uint16)  # 6 bytes: the next tensor starts unaligned to 8
    write_safetensors(tmp_path / "x.safetensors", {"a": ("BF16", (5, 7), bits), "odd": ("BF16", (3,), odd),
                                                   "b": ("F32", (3,), f32)})
    infos = read_header(tmp_path / "x.safetensors")
    files = MappedFiles()
    assert infos["a"].dtype == "BF16" and infos["a"].shape == (5, 7)
    assert np.array_equal(files.array(infos["a"]), bits)
    assert np.array_equal(files.array(infos["odd"]), odd)
    assert np.array_equal(files.array(infos["b"]), f32)
    assert not files.array(infos["a"]).flags.writeable  # a read-only map, not a copy


def test_written_files_read_by_the_safetensors_library(tmp_path):
    f32 = np.arange(12, dtype=np.float32).reshape(3, 4)
    write_safetensors(tmp_path / "x.safetensors", {"w": ("F32", (3, 4), f32)})
    from safetensors.numpy import load_file
    assert np.array_equal(load_file(str(tmp_path / "x.safetensors"))["w"], f32)


def test_bf16_values_agree_with_torch(tiny):
    torch = pytest.importorskip("torch")
    from safetensors import safe_open
    name = P + "layers.0.mlp.up_proj.weight"
    info = read_checkpoint_headers(tiny)[name]
    ours = MappedFiles().array(info)
    with safe_open(str(info.file), "pt") as f:
        theirs = f.get_tensor(name)
    assert theirs.dtype == torch.bfloat16
    assert np.array_equal(ours, theirs.view(torch.int16).numpy().view(np.uint16))


def test_real_dtypes_and_skipped_parts(tiny):
    infos = read_checkpoint_headers(tiny)
    assert infos[P + "layers.0.linear_attn.A_log"].dtype == "F32"
    assert infos[P + "layers.0.linear_attn.norm.weight"].dtype == "F32"
    assert infos[P + "layers.0.linear_attn.dt_bias"].dtype == "BF16"
    assert any(n.startswith("model.visual.") for n in infos) and any(n.startswith("mtp.") for n in infos)
    assert checkpoint_files(tiny)[0].name == "model.safetensors-00001-of-00001.safetensors"
    model = load_model(tiny)  # the vision and MTP tensors are present and ignored
    assert len(model.weights.layers) == 4


def test_sharded_checkpoint_gives_the_same_model(tmp_path, tiny):
    sharded = write_synthetic_checkpoint(tmp_path / "sharded", seed=3, shards=3)
    assert len(checkpoint_files(sharded)) == 3
    index = json.loads((sharded / INDEX_NAME).read_text())
    assert len(set(index["weight_map"].values())) == 3
    ids = [5, 17, 99, 3]
    a, b = load_model(tiny), load_model(sharded)
    assert np.array_equal(a.prefill(a.new_state(), ids), b.prefill(b.new_state(), ids))


def test_single_unindexed_file_is_found(tmp_path, tiny):
    d = copy_ckpt(tiny, tmp_path / "c")
    tensors = all_tensors(d)
    remove_weights(d)
    write_safetensors(d / "model.safetensors", tensors)
    m = load_model(d)
    assert m.prefill(m.new_state(), [1, 2]).shape == (512,)


# ---- validation: every problem is reported before anything is used -----------------------------------------

def test_missing_tensor_is_named(tmp_path, tiny):
    with edited_copy(tiny, tmp_path / "c") as (d, t):
        del t[P + "layers.2.linear_attn.in_proj_z.weight"]
    with pytest.raises(CheckpointError, match=r"missing tensor model\.language_model\.layers\.2\.linear_attn"
                                              r"\.in_proj_z\.weight \(expected shape \[64, 64\]\)"):
        load_model(d)


def test_wrong_shape_is_named_with_expected_and_found(tmp_path, tiny):
    with edited_copy(tiny, tmp_path / "c") as (d, t):
        name = P + "layers.1.self_attn.k_proj.weight"
        t[name] = ("BF16", (16, 64), t[name][2][:16])
    with pytest.raises(CheckpointError, match=r"layers\.1\.self_attn\.k_proj\.weight: expected shape \[32, 64\], "
                                              r"found \[16, 64\]"):
        load_model(d)


@pytest.mark.parametrize("name, dtype, message", [
    ("layers.0.mlp.gate_proj.weight", "F32", "expected dtype BF16, found F32"),
    ("layers.0.linear_attn.A_log", "F16", "expected dtype BF16 or F32, found F16"),
])
def test_wrong_dtype_is_named(tmp_path, tiny, name, dtype, message):
    with edited_copy(tiny, tmp_path / "c") as (d, t):
        _, shape, _ = t[P + name]
        t[P + name] = (dtype, shape, np.zeros(shape, {"F32": np.float32, "F16": np.float16}[dtype]))
    with pytest.raises(CheckpointError, match=message):
        load_model(d)


def test_vector_stored_as_bf16_is_accepted(tmp_path, tiny):
    """Qwen3.6 (and a transformers bf16 save) store A_log and the DeltaNet norm as BF16: same values, fine."""
    with edited_copy(tiny, tmp_path / "c") as (d, t):
        name = P + "layers.0.linear_attn.A_log"
        a = t[name][2]
        bits = (a.view(np.uint32) >> 16).astype(np.uint16)
        t[name] = ("BF16", a.shape, bits)
    m = load_model(d)
    assert np.array_equal(m.weights.layers[0]["A_log"], (bits.astype(np.uint32) << 16).view(np.float32))


def test_unexpected_layer_tensor_is_an_error(tmp_path, tiny):
    with edited_copy(tiny, tmp_path / "c") as (d, t):
        t[P + "layers.4.input_layernorm.weight"] = t[P + "layers.3.input_layernorm.weight"]
    with pytest.raises(CheckpointError, match=r"unexpected tensor model\.language_model\.layers\.4\."
                                              r"input_layernorm\.weight \(the config has 4 layers"):
        load_model(d)


def test_layer_type_change_reports_every_mismatch(tmp_path, tiny):
    d = copy_ckpt(tiny, tmp_path / "c")
    cfg = json.loads((d / "config.json").read_text())
    cfg["text_config"]["layer_types"][0] = "full_attention"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError) as e:
        load_model(d)
    assert "missing tensor model.language_model.layers.0.self_attn.q_proj.weight" in str(e.value)
    assert "unexpected tensor model.language_model.layers.0.linear_attn.A_log" in str(e.value)


def test_unknown_layer_type_in_config(tmp_path, tiny):
    d = copy_ckpt(tiny, tmp_path / "c")
    cfg = json.loads((d / "config.json").read_text())
    cfg["text_config"]["layer_types"][2] = "sliding_attention"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"layer_types\[2\] is 'sliding_attention'"):
        load_model(d)


def test_truncated_file_is_detected_before_use(tmp_path, tiny):
    d = copy_ckpt(tiny, tmp_path / "c")
    f = checkpoint_files(d)[0]
    size = f.stat().st_size
    with open(f, "r+b") as fh:
        fh.truncate(size - 100)
    with pytest.raises(CheckpointError, match=r"ends at byte \d+ but the file has only \d+ bytes \(truncated"):
        load_model(d)
    with open(f, "r+b") as fh:
        fh.truncate(5)
    with pytest.raises(CheckpointError, match="too short for a safetensors header"):
        load_model(d)


def test_corrupt_header_and_bad_offsets(tmp_path):
    f = tmp_path / "x.safetensors"
    f.write_bytes((10).to_bytes(8, "little") + b"not json!!")
    with pytest.raises(CheckpointError, match="header is not valid JSON"):
        read_header(f)
    header = json.dumps({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 6]}}).encode()
    f.write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    with pytest.raises(CheckpointError, match=r"tensor w: 6 data bytes for BF16 \[2, 2\], which needs 8"):
        read_header(f)
    header = json.dumps({"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 1]}}).encode()
    f.write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    with pytest.raises(CheckpointError, match="unknown dtype 'Q4'"):
        read_header(f)


def test_index_naming_a_missing_shard(tmp_path, tiny):
    d = copy_ckpt(tiny, tmp_path / "c")
    index = json.loads((d / INDEX_NAME).read_text())
    index["weight_map"][P + "norm.weight"] = "model-missing.safetensors"
    (d / INDEX_NAME).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="model-missing.safetensors: weights file not found"):
        load_model(d)


def test_index_mapping_a_tensor_to_the_wrong_shard(tmp_path):
    d = write_synthetic_checkpoint(tmp_path / "s", shards=2)
    index = json.loads((d / INDEX_NAME).read_text())
    name = P + "norm.weight"
    other = [s for s in set(index["weight_map"].values()) if s != index["weight_map"][name]][0]
    index["weight_map"][name] = other
    (d / INDEX_NAME).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=f"maps tensor {name} to {other}, but that file does not hold it"):
        load_model(d)


def test_no_weights_at_all(tmp_path, tiny):
    d = tmp_path / "c"
    d.mkdir()
    shutil.copy(tiny / "config.json", d)
    with pytest.raises(CheckpointError, match="no model.safetensors.index.json and no model.safetensors"):
        load_model(d)


def test_synthetic_checkpoints_are_reproducible_by_seed(tmp_path, tiny):
    again = write_synthetic_checkpoint(tmp_path / "again", seed=3)
    for f in sorted(p.name for p in tiny.iterdir()):
        assert (again / f).read_bytes() == (tiny / f).read_bytes(), f
    other = write_synthetic_checkpoint(tmp_path / "other", seed=4)
    assert (other / "tokenizer.json").read_bytes() == (tiny / "tokenizer.json").read_bytes()
    assert checkpoint_files(other)[0].read_bytes() != checkpoint_files(tiny)[0].read_bytes()


def _with_lm_head(src, dst, head):
    """A copy of checkpoint `src` that also stores lm_head.weight (what `head` makes of the embedding)."""
    from qgpu_min.model.safetensors_io import write_checkpoint_weights
    infos = read_checkpoint_headers(src)
    maps = MappedFiles()
    tensors = {n: (i.dtype, i.shape, np.ascontiguousarray(maps.array(i))) for n, i in infos.items()}
    embed = tensors["model.language_model.embed_tokens.weight"]
    tensors["lm_head.weight"] = (embed[0], embed[1], head(embed[2].copy()))
    dst.mkdir()
    write_checkpoint_weights(dst, tensors)
    for f in ("config.json", "tokenizer.json", "generation_config.json"):
        shutil.copy(src / f, dst / f)
    return dst


def test_a_tied_checkpoint_that_also_stores_its_lm_head(tmp_path):
    """transformers writes lm_head.weight even for tied weights when saving an explicit state dict: equal to
    the embedding it is dropped (same logits); different, the error names both tensors."""
    src = write_synthetic_checkpoint(tmp_path / "tied", "tiny")
    same = _with_lm_head(src, tmp_path / "same", lambda e: e)
    ids = [1, 5, 9, 2]
    want = load_model(src).prefill(load_model(src).new_state(), ids)
    m = load_model(same)
    assert np.array_equal(m.prefill(m.new_state(), ids), want)

    def changed(e):
        e[3, 7] ^= 1
        return e
    other = _with_lm_head(src, tmp_path / "other", changed)
    with pytest.raises(CheckpointError, match=r"ties the LM head .* lm_head.weight \(BF16 \[.*\]\) differs from "
                                              r"model.language_model.embed_tokens.weight"):
        load_model(other)


def _resident_kib(mm: np.memmap) -> int:
    """Resident KiB of the mapping that holds `mm` (/proc/self/smaps)."""
    start = mm.__array_interface__["data"][0]
    kib, inside = 0, False
    for line in open("/proc/self/smaps"):
        head = line.split()
        if "-" in head[0] and len(head) >= 5:
            lo, hi = (int(x, 16) for x in head[0].split("-"))
            inside = lo <= start < hi
        elif inside and head[0] == "Rss:":
            kib += int(head[1])
    return kib


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/smaps"), reason="needs /proc/self/smaps")
def test_released_pages_leave_memory_and_read_back_the_same(tmp_path):
    """A merged checkpoint's GPU layers are dense in the file and sparse in memory: once a sparse copy is made,
    the dense view's pages are released (MappedFiles.release) and reading the view again gives the same bits."""
    from qgpu_min.model.safetensors_io import read_header, write_safetensors
    data = np.arange(4 << 20, dtype=np.uint16).reshape(2048, 2048)
    write_safetensors(tmp_path / "w.safetensors", {"w": ("BF16", data.shape, data)})
    info = read_header(tmp_path / "w.safetensors")["w"]
    files = MappedFiles()
    view = files.array(info)
    assert int(view.sum(dtype=np.int64)) == int(data.sum(dtype=np.int64))        # every page touched
    mm = next(iter(files._maps.values()))
    before = _resident_kib(mm)
    files.release(view)
    assert _resident_kib(mm) < before - 4000                                     # ~8 MiB of pages gone
    assert np.array_equal(view, data)                                            # and read back from the file

"""Fuzzing what a checkpoint folder holds: safetensors headers and files, the index, config.json,
generation_config.json and tokenizer.json. Each example either loads, and then what was loaded is checked
against an independent statement of the format's rules (or the file's own bytes), or is refused with a
CheckpointError naming the file; anything else (another exception, a wrong acceptance) fails."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

from fuzzing import JSON, assert_names, budgets, fuzz_settings, mutate_bytes
from qgpu_min.model.config import MAX_LAYERS, MAX_SIZE, TextConfig, check_state_fits, load_config, parse_config
from qgpu_min.model.errors import CheckpointError
from qgpu_min.model.generation_config import read_generation_config
from qgpu_min.model.safetensors_io import (INDEX_NAME, MAX_DIMS, NUMPY_DTYPES, MappedFiles, read_checkpoint_headers,
                                           read_header, write_checkpoint_weights)
from qgpu_min.model.synthetic import write_synthetic_checkpoint
from qgpu_min.model.tokenizer import load_tokenizer

DTYPES = sorted(NUMPY_DTYPES)


def _write(path: Path, header_text: str, data: bytes) -> Path:
    blob = header_text.encode("utf-8")
    path.write_bytes(len(blob).to_bytes(8, "little") + blob + data)
    return path


def _valid_layout(header: object, data_len: int) -> bool:
    """The format's rules, stated independently of the reader: well-formed entries whose non-empty byte
    ranges cover the data region exactly once, byte by byte."""
    if not isinstance(header, dict):
        return False
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict) or any(not isinstance(v, str) for v in meta.values()):
        return False
    cover = np.zeros(data_len, np.int64)
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(e, dict) or not {"dtype", "shape", "data_offsets"} <= set(e):
            return False
        dtype, shape, offsets = e["dtype"], e["shape"], e["data_offsets"]
        if not isinstance(dtype, str) or dtype not in NUMPY_DTYPES or not isinstance(shape, list):
            return False
        if not all(type(d) is int and d >= 0 for d in shape):
            return False
        if math.prod(d for d in shape if d) * NUMPY_DTYPES[dtype].itemsize >= 2 ** 63:
            return False     # this reader's rules beyond the format's: a shape 64-bit sizes can describe,
        if len(shape) > MAX_DIMS:   # of at most MAX_DIMS dimensions
            return False
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets):
            return False
        begin, end = offsets
        if not 0 <= begin <= end <= data_len or end - begin != math.prod(shape) * NUMPY_DTYPES[dtype].itemsize:
            return False
        cover[begin:end] += 1
    return bool(np.all(cover == 1))


@st.composite
def _headers(draw):
    """A header and data: a valid tiling of random tensors, then perhaps one damage to it."""
    n = draw(st.integers(0, 4))
    tensors = []
    for i in range(n):
        dtype = draw(st.sampled_from(DTYPES))
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        tensors.append((f"t{i}", dtype, shape))
    order = draw(st.permutations(range(n)))
    header: dict = {}
    at = 0
    for k in order:
        name, dtype, shape = tensors[k]
        size = math.prod(shape) * NUMPY_DTYPES[dtype].itemsize
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + size]}
        at += size
    if draw(st.booleans()):
        header["__metadata__"] = draw(st.dictionaries(st.text(max_size=4), st.text(max_size=4) | JSON, max_size=2))
    data_len = at
    damage = draw(st.sampled_from(["none", "offset", "shape", "dtype", "field", "data", "entry", "huge", "dims"]))
    names = [t[0] for t in tensors]
    if damage != "none" and names:
        e = header[draw(st.sampled_from(names))]
        if damage == "offset":
            e["data_offsets"][draw(st.integers(0, 1))] += draw(st.integers(-9, 9))
        elif damage == "shape":
            e["shape"] = draw(st.lists(st.integers(-2, 2**64) | JSON, max_size=3))
        elif damage == "dtype":
            e["dtype"] = draw(st.sampled_from(DTYPES) | JSON)
        elif damage == "field":
            e[draw(st.sampled_from(["dtype", "shape", "data_offsets"]))] = draw(JSON)
        elif damage == "entry":
            header[draw(st.sampled_from(names))] = draw(JSON)
        elif damage == "huge":      # element counts that wrap int64 (the case) or exceed any file
            e["shape"] = draw(st.permutations([draw(st.sampled_from([2**60, 2**62, 2**63, 2**64 - 1, 2**40])),
                                                draw(st.integers(0, 8))]))
        elif damage == "dims":
            e["shape"] = e["shape"] + [1] * draw(st.integers(28, 40))
    if damage == "data":
        data_len = max(0, data_len + draw(st.integers(-9, 9)))
    return header, bytes(draw(st.binary(min_size=data_len, max_size=data_len)))


@budgets(300, 5000)
def test_safetensors_headers(tmp_path, budget):
    @fuzz_settings(budget)
    @given(_headers(), st.sampled_from(["", " ", "    "]))
    def check(header_data, padding):
        header, data = header_data
        f = _write(tmp_path / "x.safetensors", json.dumps(header) + padding, data)
        valid = _valid_layout(header, len(data))
        try:
            infos = read_header(f)
        except CheckpointError as e:
            assert not valid, f"a valid file was refused: {e}"
            assert_names(e, str(f))
            return
        assert valid, f"accepted a file breaking the format's rules: {header}"
        maps = MappedFiles()
        base = 8 + len(json.dumps(header) + padding)
        for name, info in infos.items():
            a = maps.array(info)
            assert a.shape == tuple(header[name]["shape"]) and a.dtype == NUMPY_DTYPES[header[name]["dtype"]]
            begin, end = header[name]["data_offsets"]
            assert a.tobytes() == data[begin:end] and info.begin == base + begin
        assert set(infos) == set(header) - {"__metadata__"}

    check()


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> Path:
    return write_synthetic_checkpoint(tmp_path_factory.mktemp("fuzz") / "tiny", "tiny", shards=2)


@budgets(150, 3000)
def test_damaged_weight_files(tmp_path, tiny_checkpoint, budget):
    """Byte-level damage anywhere in a real shard: its header is refused or every tensor still lies inside
    the file with the size its dtype and shape need."""
    shard = sorted(tiny_checkpoint.glob("*.safetensors"))[0].read_bytes()

    @fuzz_settings(budget)
    @given(st.data())
    def check(data):
        # damage within the header and first bytes most of the time: that is where a parser can go wrong
        head = min(len(shard), 8 + int.from_bytes(shard[:8], "little") + 64)
        damaged = mutate_bytes(shard[:head], data.draw) + shard[head:] if data.draw(st.booleans()) else \
            mutate_bytes(shard, data.draw)
        f = tmp_path / "d.safetensors"
        f.write_bytes(damaged)
        try:
            infos = read_header(f)
        except CheckpointError as e:
            assert_names(e, str(f))
            return
        for info in infos.values():
            assert 8 <= info.begin <= info.end <= len(damaged)
            assert info.end - info.begin == math.prod(info.shape) * NUMPY_DTYPES[info.dtype].itemsize

    check()


SHARD_NAMES = st.sampled_from(["a.safetensors", "b.safetensors", "../a.safetensors", "/etc/passwd", "sub/a.safetensors",
                               "..", ".", "", "a\x00.safetensors", "a\\b", "missing.safetensors"])


@budgets(150, 3000)
def test_index_files(tmp_path, budget):
    """A random index over two real shards: loads only when every name maps to the shard holding it, and a
    shard name is never a path out of the folder."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    arrays = {"x": ("F32", (2,), np.ones(2, np.float32)), "y": ("F32", (1,), np.zeros(1, np.float32))}
    write_checkpoint_weights(folder, arrays, shards=2)
    real = json.loads((folder / INDEX_NAME).read_text())["weight_map"]
    for n, shard in real.items():   # simple names, so the strategy can aim at them
        (folder / shard).rename(folder / f"{'ab'[n == 'y']}.safetensors")

    @fuzz_settings(budget)
    @given(st.one_of(
        st.dictionaries(st.sampled_from(["x", "y", "z"]), SHARD_NAMES, max_size=3).map(lambda m: {"weight_map": m}),
        JSON, st.dictionaries(st.sampled_from(["weight_map", "metadata"]), JSON)))
    def check(index):
        (folder / INDEX_NAME).write_text(json.dumps(index))
        try:
            found = read_checkpoint_headers(folder)
        except CheckpointError as e:
            assert_names(e, str(folder / INDEX_NAME), INDEX_NAME, str(folder))
            return
        assert isinstance(index, dict) and isinstance(index.get("weight_map"), dict)
        assert all(info.file.parent == folder for info in found.values())
        for name, shard in index["weight_map"].items():
            assert found[name].file.name == shard

    check()


# ---- config.json -------------------------------------------------------------------------------------------

def _base_config(tiny_checkpoint: Path) -> dict:
    return json.loads((tiny_checkpoint / "config.json").read_text())


def _well_formed(cfg: TextConfig) -> None:
    sizes = [cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.num_key_value_heads,
             cfg.head_dim, cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
             cfg.linear_value_head_dim, cfg.linear_conv_kernel_dim, cfg.vocab_size]
    assert all(type(v) is int and 0 < v <= MAX_SIZE for v in sizes)
    assert 0 < cfg.num_hidden_layers <= MAX_LAYERS
    assert all(math.isfinite(v) and v > 0 for v in (cfg.rms_norm_eps, cfg.rope_theta, cfg.partial_rotary_factor))
    assert all(type(t) is int and 0 <= t < cfg.vocab_size for t in cfg.eos_token_ids)
    assert isinstance(cfg.attn_output_gate, bool) and isinstance(cfg.tie_word_embeddings, bool)
    assert cfg.rotary_dim % 2 == 0 and cfg.rotary_dim <= cfg.head_dim


@budgets(300, 5000)
def test_config_values(tmp_path, tiny_checkpoint, budget):
    """Random JSON in place of any field (nested ones too), fields removed, absurd sizes: a TextConfig whose
    every field is well-formed, or a CheckpointError naming the file and the field."""
    base = _base_config(tiny_checkpoint)
    text = base.get("text_config", base)
    keys = sorted(text) + ["rope_parameters.rope_theta", "rope_parameters.partial_rotary_factor"]
    f = tmp_path / "config.json"

    @fuzz_settings(budget)
    @given(st.lists(st.tuples(st.sampled_from(keys), st.one_of(
        JSON, st.just("<delete>"), st.integers(2**24, 2**66), st.sampled_from([0, -1, 1, 2, 3, 1e-300, 1e300])
    )), min_size=1, max_size=3))
    def check(edits):
        raw = json.loads(json.dumps(base))
        target = raw.get("text_config", raw)
        for key, value in edits:
            holder, name = (target, key) if "." not in key else (target.get(key.split(".")[0]), key.split(".")[1])
            if not isinstance(holder, dict):
                continue
            if value == "<delete>":
                holder.pop(name, None)
            else:
                holder[name] = value
        f.write_text(json.dumps(raw))
        try:
            cfg = load_config(tmp_path)
        except CheckpointError as e:
            assert_names(e, str(f))
            return
        _well_formed(cfg)

    check()


@budgets(100, 2000)
def test_config_files(tmp_path, tiny_checkpoint, budget):
    """Byte damage to the file itself (broken JSON, bad UTF-8, deep nesting)."""
    good = (tiny_checkpoint / "config.json").read_bytes()
    f = tmp_path / "config.json"

    @fuzz_settings(budget)
    @given(st.data())
    def check(data):
        f.write_bytes(data.draw(st.sampled_from([b"[" * 100_000, b'{"a":' * 50_000, b"\xff\xfe{}"]))
                      if data.draw(st.integers(0, 9)) == 0 else mutate_bytes(good, data.draw))
        try:
            _well_formed(load_config(tmp_path))
        except CheckpointError as e:
            assert_names(e, str(f))

    check()


def test_config_state_larger_than_the_machine_is_refused_before_allocating():
    """A small file can describe an enormous recurrent state; it is refused with the size it asks for."""
    raw = {"hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1,
           "num_key_value_heads": 1, "head_dim": 8, "linear_num_key_heads": 1, "linear_num_value_heads": 4096,
           "linear_key_head_dim": 4096, "linear_value_head_dim": 4096, "linear_conv_kernel_dim": 4,
           "vocab_size": 16, "layer_types": ["linear_attention"], "rope_theta": 1e7}
    need = 4 * (4096 ** 3 + (2 * 4096 + 4096 * 4096) * 3)     # S [heads, dk, dv] and the conv window, fp32
    with pytest.raises(CheckpointError, match=rf"state of one sequence needs {need} bytes \(256\.2 GiB\)"):
        parse_config(raw)                  # more than this machine (and CI's) memory
    small = parse_config({**raw, "linear_num_value_heads": 1})
    check_state_fits(small, memory=2**30)
    with pytest.raises(CheckpointError, match=r"than this machine's memory \(0\.0 GiB\)"):
        check_state_fits(small, memory=2**20)
    with pytest.raises(CheckpointError, match="vocab_size is 1099511627776, more than this runtime's limit of "
                                              "16777216"):
        parse_config({**raw, "vocab_size": 2**40})


# ---- generation_config.json and tokenizer.json -------------------------------------------------------------

@budgets(200, 4000)
def test_generation_config(tmp_path, tiny_checkpoint, budget):
    base = json.loads((tiny_checkpoint / "generation_config.json").read_text())
    f = tmp_path / "generation_config.json"

    @fuzz_settings(budget)
    @given(st.one_of(JSON, st.dictionaries(st.sampled_from(["eos_token_id", "temperature", "top_p", "top_k",
                                                            "suppress_tokens"]), JSON | st.lists(st.integers(-2, 9)))
                     .map(lambda d: {**base, **d})))
    def check(gen):
        f.write_text(json.dumps(gen))
        try:
            got = read_generation_config(tmp_path)
        except CheckpointError as e:
            assert_names(e, str(f))
            return
        assert isinstance(gen, dict)
        assert all(type(t) is int and t >= 0 for t in got.eos_token_ids + got.suppress_tokens)
        s = got.sampling
        assert set(s) <= {"temperature", "top_p", "top_k"} and all(s[k] == gen[k] for k in s)
        assert 0 < s.get("temperature", 1) < math.inf and 0 < s.get("top_p", 1) <= 1
        assert type(s.get("top_k", 0)) is int and s.get("top_k", 0) >= 0

    check()


@budgets(40, 600)
def test_damaged_tokenizer_files(tmp_path, tiny_checkpoint, budget):
    """Byte damage to tokenizer.json: a working tokenizer or a CheckpointError naming the file."""
    good = (tiny_checkpoint / "tokenizer.json").read_bytes()
    f = tmp_path / "tokenizer.json"

    @fuzz_settings(budget)
    @given(st.data())
    def check(data):
        f.write_bytes(mutate_bytes(good, data.draw))
        try:
            tok = load_tokenizer(tmp_path)
        except CheckpointError as e:
            assert_names(e, str(f))
            return
        assert tok is not None
        tok.decode(tok.encode("hello, world 42"))

    check()

"""Fuzzing a merged checkpoint's build manifest (qgpu_manifest.json), the file `--backend model` and `drift`
trust to say which layers and token ids are the GPU's. Each example is read as those commands read it: it is
accepted only when it says exactly what the checkpoint is (this version's circuit key, the GPU's token ids at
the end of the vocabulary, its layers in front), or refused with an error naming the file or folder."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from fuzzing import JSON, assert_names, budgets, fuzz_settings, mutate_bytes
from qgpu_min.errors import QgpuError
from qgpu_min.gpu.merged import MANIFEST, manifest_leaky_ids, manifest_ranges, read_manifest
from qgpu_min.gpu.program import GpuLaunchError
from qgpu_min.model.errors import CheckpointError

KEY, GPU_TOKENS, VOCAB, GPU_LAYERS = "ab" * 32, 29785, 30809, 41
GOOD = {"format": 1, "gpu": {"circuit_key": KEY, "spec": {"warps": 8}},
        "layers": {"gpu": [0, GPU_LAYERS], "base": [GPU_LAYERS, GPU_LAYERS + 2]},
        "tokens": {"gpu": [VOCAB - GPU_TOKENS, VOCAB], "base_vocab": VOCAB - GPU_TOKENS},
        "text_gate": {"exact": False, "leaky_token_ids": [17, 46]}}
# (path into the manifest, the value it must hold for the manifest to be accepted)
FIELDS = [(("gpu", "circuit_key"), KEY), (("tokens", "gpu"), [VOCAB - GPU_TOKENS, VOCAB]),
          (("layers", "gpu"), [0, GPU_LAYERS]), (("text_gate", "leaky_token_ids"), [17, 46]),
          (("format",), 1), (("gpu",), None), (("tokens",), None), (("layers",), None), (("text_gate",), None)]


def _read(folder: Path) -> tuple[tuple[int, int], list[int]]:
    """What `--backend model` and `drift` take from the manifest, read as they read it."""
    m = read_manifest(folder)
    return manifest_ranges(m, folder, KEY, GPU_TOKENS, VOCAB, GPU_LAYERS), manifest_leaky_ids(m, folder)


def _near_misses(value: object) -> list:
    """Values a damaged or hand-edited manifest could hold in place of `value`: the same numbers as floats,
    booleans or strings, one element off, a key in another case."""
    if isinstance(value, list) and value and all(type(v) is int for v in value):
        out = []
        for i, v in enumerate(value):
            for other in (float(v), str(v), v + 1, v - 1, bool(v) if v in (0, 1) else -v):
                out.append(value[:i] + [other] + value[i + 1:])
        return out + [value + [0], value[:-1], {str(i): v for i, v in enumerate(value)}]
    if isinstance(value, str):
        return [value.upper(), value[:-1], value + "0", ""]
    if isinstance(value, int):
        return [float(value), str(value), True, value + 1]
    return []


NEAR = st.sampled_from([(f, v) for f in FIELDS for v in _near_misses(f[1])])


def _same(a: object, b: object) -> bool:
    """Equal as JSON values with the same types (True is not 1, 1.0 is not 1)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@budgets(300, 5000)
def test_manifest_fields(tmp_path, budget):
    """One field (or a whole section) replaced by any JSON value: accepted only if it still says the same."""
    (tmp_path / MANIFEST).write_text(json.dumps(GOOD))
    assert _read(tmp_path) == ((VOCAB - GPU_TOKENS, GPU_LAYERS), [17, 46])

    @fuzz_settings(budget)
    @given(st.tuples(st.sampled_from(FIELDS), JSON | st.lists(st.integers(-2, VOCAB + 2), max_size=3)) | NEAR)
    def check(field_value):
        field, value = field_value
        (path, want), m = field, json.loads(json.dumps(GOOD))
        node = m
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        (tmp_path / MANIFEST).write_text(json.dumps(m))
        try:
            got = _read(tmp_path)
        except (CheckpointError, GpuLaunchError) as e:
            assert_names(e, str(tmp_path))
            return
        whole = json.loads(json.dumps(GOOD))
        for k in path[:-1]:
            whole = whole[k]
        original = whole[path[-1]]
        # accepted: the field said the same, or only a part nothing reads changed (the spec, the base range)
        assert _same(value, original) or (path[-1] == "leaky_token_ids" and got[1] == value) or \
            (path == ("text_gate",) and got[1] == (value.get("leaky_token_ids", []) if isinstance(value, dict) else []))
        assert got[0] == (VOCAB - GPU_TOKENS, GPU_LAYERS)

    check()


@budgets(150, 3000)
def test_damaged_manifest_files(tmp_path, budget):
    """Byte damage to the file: read as the original says, or a refusal naming it."""
    good = json.dumps(GOOD, indent=2).encode()
    f = tmp_path / MANIFEST

    @fuzz_settings(budget)
    @given(st.data())
    def check(data):
        f.write_bytes(mutate_bytes(good, data.draw))
        try:
            got = _read(tmp_path)
        except QgpuError as e:
            assert_names(e, str(tmp_path))
            return
        # what decides the launch is intact; the leaky ids (informative) may have lost or changed a digit
        assert got[0] == (VOCAB - GPU_TOKENS, GPU_LAYERS)
        assert all(type(i) is int for i in got[1])

    check()


def test_a_folder_without_a_manifest_is_named():
    with pytest.raises(CheckpointError, match="no qgpu_manifest.json"):
        read_manifest(Path("/nonexistent-folder"))

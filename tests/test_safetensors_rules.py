"""What the safetensors format requires of a header, checked by our reader (qgpu_min.model.safetensors_io):
sizes in Python integers (no wrap-around), data offsets tiling the data region with no gap or overlap, unique
names, a string-map __metadata__, and an index whose shard names stay inside the checkpoint folder. Each
refusal is a CheckpointError naming the file and the problem."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from qgpu_min.model.errors import CheckpointError
from qgpu_min.model.safetensors_io import INDEX_NAME, checkpoint_files, read_header


def _file(tmp_path: Path, header: dict | str, data: bytes) -> Path:
    raw = header if isinstance(header, str) else json.dumps(header)
    blob = raw.encode()
    f = tmp_path / "x.safetensors"
    f.write_bytes(len(blob).to_bytes(8, "little") + blob + data)
    return f


def _t(dtype: str, shape: list, begin: int, end: int) -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def test_a_well_formed_file_reads(tmp_path):
    f = _file(tmp_path, {"__metadata__": {"format": "pt"}, "a": _t("F32", [2], 0, 8), "e": _t("F32", [0], 8, 8),
                         "b": _t("BF16", [2, 2], 8, 16)}, bytes(16))
    infos = read_header(f)
    assert {n: (i.shape, i.end - i.begin) for n, i in infos.items()} == {"a": ((2,), 8), "e": ((0,), 0),
                                                                         "b": ((2, 2), 8)}


@pytest.mark.parametrize("header, data, message", [
    # the cases: a shape whose element count wraps int64 to 0, and 2^40 x 2^40
    ({"a": _t("F32", [4611686018427387904, 4], 0, 0)}, b"", r"0 data bytes for F32 .*which needs 73786976294838206464"),
    ({"a": _t("F32", [2 ** 40, 2 ** 40], 0, 0)}, b"", r"which needs 4835703278458516698824704"),
    # overlapping tensors, a gap before, between and after them
    ({"a": _t("F32", [2], 0, 8), "b": _t("F32", [2], 4, 12)}, bytes(12), r"tensor b \(data_offsets 4\.\.12\) overlaps"),
    ({"a": _t("F32", [2], 4, 12)}, bytes(12), r"4 data bytes before tensor a belong to no tensor \(a gap at 0\)"),
    ({"a": _t("F32", [1], 0, 4), "b": _t("F32", [1], 8, 12)}, bytes(12), r"before tensor b .*gap at 4"),
    ({"a": _t("F32", [1], 0, 4)}, bytes(12), r"8 data bytes after the last tensor belong to no tensor"),
    # JSON the format does not allow
    ('{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {"dtype": "F32", "shape": [1], '
     '"data_offsets": [0, 4]}}', bytes(4), r"header is not valid JSON \(name 'a' appears twice\)"),
    ({"__metadata__": {"n": 3}, "a": _t("F32", [1], 0, 4)}, bytes(4), r"__metadata__ must map names to strings"),
    ({"__metadata__": ["x"], "a": _t("F32", [1], 0, 4)}, bytes(4), r"__metadata__ must map names to strings"),
    ({"a": _t("F32", [True], 0, 4)}, bytes(4), r"tensor a: bad shape \[True\]"),
    ({"a": _t("F32", [1], False, 4)}, bytes(4), r"bad data_offsets"),
    ({"a": _t("F32", [1.0], 0, 4)}, bytes(4), r"bad shape"),
    ({"a": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}}, bytes(4), r"unknown dtype \['F32'\]"),
])
def test_headers_the_format_forbids_are_refused(tmp_path, header, data, message):
    f = _file(tmp_path, header, data)
    with pytest.raises(CheckpointError, match=message) as e:
        read_header(f)
    assert str(f) in str(e.value)


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/etc/passwd", "sub/x.safetensors", "..", "",
                                   "a\\b.safetensors"])
def test_index_shard_names_stay_in_the_folder(tmp_path, shard):
    (tmp_path / INDEX_NAME).write_text(json.dumps({"weight_map": {"w": shard}}))
    with pytest.raises(CheckpointError, match=r"is mapped to .* which is not a file name in the checkpoint folder"):
        checkpoint_files(tmp_path)

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
    # an empty tensor whose shape no 64-bit size can describe; more dimensions than NumPy takes
    ({"a": _t("F32", [2 ** 62, 0], 0, 0)}, b"", r"tensor a: shape \[4611686018427387904, 0\] is beyond 64-bit sizes"),
    ({"a": _t("F32", [1] * 33, 0, 4)}, bytes(4), r"tensor a: 33 dimensions, more than 32"),
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


def _mutate(rng, header: dict) -> dict | str:
    """One random change a damaged or crafted file could carry."""
    h = json.loads(json.dumps(header))
    name = rng.choice([k for k in h if k != "__metadata__"])
    junk = rng.choice([-1, 0, 1, 3, 2 ** 31, 2 ** 63, 2 ** 64 + 5, 10 ** 30, True, None, "7", 1.5, [], {}, [1, 2]])
    kind = rng.randrange(9)
    if kind == 0:
        h[name]["dtype"] = rng.choice(["F32", "BF16", "I64", "Q4", "", 7, None, ["F32"]])
    elif kind == 1:
        h[name]["shape"] = [junk] if rng.random() < 0.5 else h[name]["shape"] + [junk]
    elif kind == 2:
        h[name]["data_offsets"][rng.randrange(2)] = junk
    elif kind == 3:
        del h[name][rng.choice(["dtype", "shape", "data_offsets"])]
    elif kind == 4:
        h[name] = junk
    elif kind == 5:
        h["__metadata__"] = rng.choice([{"a": 1}, ["x"], "s", None, {"a": "b"}])
    elif kind == 6:
        h[name]["data_offsets"] = [junk, junk]
    elif kind == 7:
        raw = json.dumps(h)
        cut = rng.randrange(len(raw))
        return raw[:cut] + rng.choice(["", "}", "\x00", "\\ud800", "{{"]) + raw[cut:]
    else:
        h[name]["shape"] = [rng.randrange(0, 5) for _ in range(rng.randrange(0, 4))]
    return h


def test_random_header_damage_ends_in_a_clear_error_or_a_consistent_read(tmp_path):
    """600 random mutations of a valid header (dtypes, shapes, offsets, entries, metadata, raw JSON text):
    read_header either refuses with a CheckpointError naming the file, or returns tensors whose byte ranges
    match their dtype and shape, lie in the file and tile its data exactly. Never any other exception."""
    import random

    from qgpu_min.model.safetensors_io import NUMPY_DTYPES

    rng = random.Random(12)
    header = {"__metadata__": {"format": "pt"}, "a": _t("F32", [2, 3], 0, 24), "b": _t("BF16", [4], 24, 32),
              "c": _t("I64", [1], 32, 40)}
    outcomes = {"refused": 0, "read": 0}
    for _ in range(600):
        f = _file(tmp_path, _mutate(rng, header), bytes(40 + rng.choice([0, 0, 0, 4, -8])))
        try:
            infos = read_header(f)
        except CheckpointError as e:
            assert str(f) in str(e)
            outcomes["refused"] += 1
            continue
        size, spans = f.stat().st_size, []
        for info in infos.values():
            n = NUMPY_DTYPES[info.dtype].itemsize
            for d in info.shape:
                n *= d
            assert info.end - info.begin == n and info.end <= size
            spans.append((info.begin, info.end))
        assert sum(e - b for b, e in spans) == size - min(b for b, _ in spans)
        outcomes["read"] += 1
    assert outcomes["refused"] > 300 and outcomes["read"] > 20, outcomes

"""Safetensors reading (memory-mapped, own header parser) and writing (raw bytes).

NumPy has no bfloat16, so BF16 tensors are carried as their raw uint16 bit patterns. Reading never copies
tensor data: each tensor is a view into a read-only memory map of its file.

File format: 8-byte little-endian header length N, N bytes of JSON
`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}`, then the data, with
offsets relative to the end of the header.
"""
from __future__ import annotations

import json
import math
import mmap
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..files import atomic_output, parse_json, read_json, write_text_atomic
from .errors import CheckpointError

# safetensors dtype name -> how NumPy holds it (BF16 as raw bits)
NUMPY_DTYPES: dict[str, np.dtype] = {
    "BF16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "I16": np.dtype("<i2"),
    "I32": np.dtype("<i4"),
    "I64": np.dtype("<i8"),
    "BOOL": np.dtype("?"),
}
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
MAX_HEADER = 100 * 1024 * 1024  # the safetensors library's own limit
MAX_DIMS = 32  # NumPy 1's limit (NumPy 2 allows 64); real checkpoints use at most 4


def _nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    """Bytes of a tensor, in Python integers (no int64 wrap-around for absurd shapes)."""
    return math.prod(int(d) for d in shape) * NUMPY_DTYPES[dtype].itemsize


def _natural(x: object) -> bool:
    """A JSON integer >= 0 (not a bool, which Python counts as an int)."""
    return type(x) is int and x >= 0


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """json object_pairs_hook: a name given twice is an error, not the last one silently kept."""
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"name {k!r} appears twice")
        out[k] = v
    return out


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives: file, dtype, shape and absolute byte range."""
    name: str
    file: Path
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def read_header(path: str | Path) -> dict[str, TensorInfo]:
    """Parse and check one file's header: every tensor's byte range must lie inside the file and match its
    dtype and shape. Raises CheckpointError naming the file and tensor."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(f"{path}: {size} bytes, too short for a safetensors header")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER or 8 + n > size:
                raise CheckpointError(f"{path}: header length {n} does not fit the {size}-byte file "
                                      "(truncated or not a safetensors file)")
            raw = f.read(n)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: weights file not found") from None
    except (OSError, ValueError) as e:    # a folder, no permission, a NUL in a name from the index
        raise CheckpointError(f"{path}: weights file cannot be read ({e})") from None
    try:
        header = parse_json(raw, object_pairs_hook=_unique_keys)
    except ValueError as e:
        raise CheckpointError(f"{path}: header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: header is not a JSON object")
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise CheckpointError(f"{path}: __metadata__ must map names to strings, got {meta!r:.80}")
    base = 8 + n
    out: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
            if not isinstance(shape, list) or not isinstance(offsets, list):  # tuple() would take a string or {}
                raise TypeError
            shape, (begin, end) = tuple(shape), offsets
        except (TypeError, KeyError, ValueError):
            raise CheckpointError(f"{path}: tensor {name}: malformed header entry {entry!r:.200}") from None
        if not isinstance(dtype, str) or dtype not in NUMPY_DTYPES:
            raise CheckpointError(f"{path}: tensor {name}: unknown dtype {dtype!r}")
        if not all(_natural(d) for d in shape):
            raise CheckpointError(f"{path}: tensor {name}: bad shape {list(shape)}")
        if len(shape) > MAX_DIMS:
            raise CheckpointError(f"{path}: tensor {name}: {len(shape)} dimensions, more than {MAX_DIMS}")
        if not (_natural(begin) and _natural(end) and begin <= end):
            raise CheckpointError(f"{path}: tensor {name}: bad data_offsets {[begin, end]}")
        nbytes = _nbytes(dtype, shape)
        if end - begin != nbytes:
            raise CheckpointError(f"{path}: tensor {name}: {end - begin} data bytes for {dtype} "
                                  f"{list(shape)}, which needs {nbytes}")
        if math.prod(d for d in shape if d) * NUMPY_DTYPES[dtype].itemsize >= 2 ** 63:
            # an empty tensor too ([2^62, 0]) must have a shape that 64-bit sizes (NumPy's) can describe
            raise CheckpointError(f"{path}: tensor {name}: shape {list(shape)} is beyond 64-bit sizes")
        if base + end > size:
            raise CheckpointError(f"{path}: tensor {name} ends at byte {base + end} but the file has only "
                                  f"{size} bytes (truncated file?)")
        out[name] = TensorInfo(name, path, dtype, shape, base + begin, base + end)
    _check_tiling(path, out, base, size)
    return out


def _check_tiling(path: Path, tensors: dict[str, TensorInfo], base: int, size: int) -> None:
    """The format's rule: the tensors' byte ranges tile the data region (file bytes base..size) exactly, with
    no gap and no overlap; an empty tensor may sit anywhere on that tiling. Offsets in messages are data
    offsets, as the header writes them."""
    at = base
    for t in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if t.begin < at and t.begin != t.end:
            raise CheckpointError(f"{path}: tensor {t.name} (data_offsets {t.begin - base}..{t.end - base}) overlaps "
                                  f"the tensor before it, which ends at {at - base}")
        if t.begin > at:
            raise CheckpointError(f"{path}: {t.begin - at} data bytes before tensor {t.name} belong to no tensor "
                                  f"(a gap at {at - base})")
        at = max(at, t.end)
    if at != size:
        raise CheckpointError(f"{path}: {size - at} data bytes after the last tensor belong to no tensor")


def read_index(model_dir: str | Path) -> dict[str, str] | None:
    """The index file's tensor name -> shard file name, or None for a single-file checkpoint. Every shard
    name is a plain file name of the checkpoint folder."""
    index = Path(model_dir) / INDEX_NAME
    if not index.exists():
        return None
    try:
        weight_map = read_json(index)["weight_map"]
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise TypeError("weight_map must be an object mapping tensor names to file names")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{index}: not a valid safetensors index ({type(e).__name__}: {e})") from None
    for name, shard in weight_map.items():     # a shard is a file of this folder, never a path out of it
        if (shard in ("", ".", "..") or "/" in shard or "\\" in shard or "\0" in shard
                or Path(shard).name != shard):
            raise CheckpointError(f"{index}: tensor {name} is mapped to {shard!r}, which is not a file name in "
                                  f"the checkpoint folder")
    return weight_map


def _files(model_dir: Path, weight_map: dict[str, str] | None) -> list[Path]:
    if weight_map is not None:
        return [model_dir / n for n in sorted(set(weight_map.values()))]
    if (model_dir / SINGLE_NAME).exists():
        return [model_dir / SINGLE_NAME]
    raise CheckpointError(f"{model_dir}: no {INDEX_NAME} and no {SINGLE_NAME}")


def checkpoint_files(model_dir: str | Path) -> list[Path]:
    """The weight files of a checkpoint: the shards named by the index file, else model.safetensors."""
    model_dir = Path(model_dir)
    return _files(model_dir, read_index(model_dir))


def read_checkpoint_headers(model_dir: str | Path, keep: Callable[[str], bool] = lambda n: True
                            ) -> dict[str, TensorInfo]:
    """All tensors (those `keep` accepts) of a possibly sharded checkpoint, headers checked, nothing mapped.
    With an index, every tensor it lists must be in the shard it names."""
    model_dir = Path(model_dir)
    weight_map = read_index(model_dir)
    out: dict[str, TensorInfo] = {}
    for path in _files(model_dir, weight_map):
        for name, info in read_header(path).items():
            if not keep(name):
                continue
            if name in out:
                raise CheckpointError(f"tensor {name} appears in both {out[name].file.name} and {path.name}")
            out[name] = info
    for name, shard in (weight_map or {}).items():
        if keep(name) and (name not in out or out[name].file.name != shard):
            raise CheckpointError(f"{INDEX_NAME} maps tensor {name} to {shard}, but that file does not hold it")
    return out


class MappedFiles:
    """Read-only memory maps, one per file, shared by all tensors of that file."""

    def __init__(self) -> None:
        self._maps: dict[Path, np.memmap] = {}

    def array(self, info: TensorInfo) -> np.ndarray:
        """A read-only view of the tensor (BF16 as uint16 bits), no copy."""
        mm = self._maps.get(info.file)
        if mm is None:
            mm = self._maps[info.file] = np.memmap(info.file, dtype=np.uint8, mode="r")
        return mm[info.begin:info.end].view(NUMPY_DTYPES[info.dtype]).reshape(info.shape)

    def release(self, a: np.ndarray) -> None:
        """Drop the pages of a view from array() out of this process's memory once a copy (a sparse form, say)
        replaces it: they are clean file pages, so reading the view again only reads the file again. A merged
        checkpoint's GPU layers are dense in the file and sparse in memory: this keeps their pages from staying
        resident."""
        start = a.__array_interface__["data"][0]
        for mm in self._maps.values():
            base = mm.__array_interface__["data"][0]
            if base <= start and start + a.nbytes <= base + mm.nbytes and hasattr(mm._mmap, "madvise"):
                page = mmap.PAGESIZE
                lo, hi = (start - base) // page * page, -(-(start - base + a.nbytes) // page) * page
                mm._mmap.madvise(mmap.MADV_DONTNEED, lo, min(hi, mm.nbytes) - lo)
                return


# ---- writing ---------------------------------------------------------------------------------------------

# A tensor to write: (dtype, shape, data) where data is an array of the stored type (uint16 bits for BF16) or
# a zero-argument callable yielding such arrays in order (to write big tensors without holding them whole).
TensorData = tuple[str, tuple[int, ...], "np.ndarray | Callable[[], Iterable[np.ndarray]]"]


def _chunks(data) -> Iterator[np.ndarray]:
    yield from ([data] if isinstance(data, np.ndarray) else data())


def write_safetensors(path: str | Path, tensors: dict[str, TensorData],
                      metadata: dict[str, str] | None = None) -> int:
    """Write one safetensors file (whole or not at all: files.atomic_output); returns the data byte count.
    Tensors are stored in the given order; the header is padded with spaces to a multiple of 8 bytes so
    every tensor starts 8-byte aligned when the sizes allow it."""
    path = Path(path)
    header: dict = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name, (dtype, shape, _) in tensors.items():
        nbytes = _nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % 8)
    with atomic_output(path) as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name, (dtype, shape, data) in tensors.items():
            want = NUMPY_DTYPES[dtype]
            written = 0
            for chunk in _chunks(data):
                if chunk.dtype != want:
                    raise ValueError(f"tensor {name}: data dtype {chunk.dtype} does not store {dtype}")
                f.write(np.ascontiguousarray(chunk).tobytes())
                written += chunk.nbytes
            expected = header[name]["data_offsets"][1] - header[name]["data_offsets"][0]
            if written != expected:
                raise ValueError(f"tensor {name}: wrote {written} bytes, shape {list(shape)} needs {expected}")
    return offset


def write_checkpoint_weights(model_dir: str | Path, tensors: dict[str, TensorData], shards: int = 1) -> None:
    """Write tensors as `shards` files named like the published checkpoint
    (`model.safetensors-0000i-of-0000N.safetensors`) plus `model.safetensors.index.json`. Tensors are split
    into shards in order, balancing bytes."""
    model_dir = Path(model_dir)
    sizes = {n: _nbytes(d, s) for n, (d, s, _) in tensors.items()}
    total = sum(sizes.values())
    groups: list[dict[str, TensorData]] = [{} for _ in range(shards)]
    acc = 0
    for name, t in tensors.items():
        groups[min(shards - 1, acc * shards // max(total, 1))][name] = t
        acc += sizes[name]
    weight_map = {}
    for i, group in enumerate(groups):
        fname = f"{SINGLE_NAME}-{i + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(model_dir / fname, group)
        weight_map.update({n: fname for n in group})
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    write_text_atomic(model_dir / INDEX_NAME, json.dumps(index, indent=2))

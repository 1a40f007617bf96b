"""Saved programs: a compiled kernel written to a file, launched later where no CUDA compiler exists.

    qgpu-min compile K.cu -o K.qgpu        save_program(kernel, "K.qgpu")
    qgpu-min run K.qgpu --arg ...          load_program("K.qgpu")  (qgpu_min.load_program)

A .qgpu file is one JSON object in UTF-8, written in one canonical form (sorted keys, no spaces):

    {"format": "qgpu-program", "kernel": {...}, "sha256": "<hex>", "version": 1}

`kernel` holds the kernel's name and PTX entry, its parameters (name, kind, signedness, element bytes), the
compiler that made it, its PTX and the CUDA text it came from (for parameter types and the source lines of
errors). `sha256` is over the canonical JSON of `kernel`. The file keeps the compiler's output, not the
lowered program: loading lowers the PTX again (no compiler needed, milliseconds), so a saved program always
runs as the machine of the package that launches it defines it, and the file does not go stale when the
lowering improves. `version` changes when the fields do; a file of another version is refused.

Loading refuses, naming the problem, anything that is not exactly what save_program writes: not UTF-8 JSON,
another format or version, a wrong hash, a field of the wrong type, a PTX whose kernel or parameters differ
from the file's. Nothing is half-written (files.atomic_output).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..errors import QgpuError
from ..files import atomic_output, parse_json
from .launch import CompiledKernel, kernel_from_ptx

FORMAT = "qgpu-program"
VERSION = 1
SUFFIX = ".qgpu"
MAX_BYTES = 64 << 20          # far above any program the machine holds; a larger file is not ours
_FIELDS = {"name": str, "entry": str, "params": list, "compiler": str, "ptx": str, "source": (str, type(None)),
           "source_name": (str, type(None))}


class SavedProgramError(QgpuError):
    """A saved program cannot be read or written; the message names the file and the problem."""


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _kernel_fields(k: CompiledKernel) -> dict:
    return {"name": k.name, "entry": k.entry, "compiler": k.compiler, "ptx": k.ptx, "source": k.source,
            "source_name": k.source_name,
            "params": [[p.name, p.kind, p.signed, p.elem_bytes] for p in k.params]}


def program_bytes(k: CompiledKernel) -> bytes:
    """The bytes save_program writes for k."""
    fields = _kernel_fields(k)
    return _canonical({"format": FORMAT, "version": VERSION, "kernel": fields,
                       "sha256": hashlib.sha256(_canonical(fields)).hexdigest()})


def save_program(k: CompiledKernel, path: str | Path) -> Path:
    """Write k to path (files.atomic_output: a reader sees the old file or the whole new one). Returns it."""
    path = Path(path)
    try:
        with atomic_output(path) as f:
            f.write(program_bytes(k))
    except OSError as e:
        raise SavedProgramError(f"{path}: cannot write the saved program ({e.strerror or e})") from None
    return path


def load_program(path: str | Path) -> CompiledKernel:
    """The kernel saved in path, lowered for the machine (see the module docstring for what is refused)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise SavedProgramError(f"{path}: {size:,} bytes, more than a saved program holds ({MAX_BYTES:,})")
        data = path.read_bytes()
    except OSError as e:
        raise SavedProgramError(f"{path}: cannot read it ({e.strerror or e})") from None
    return program_from_bytes(data, str(path))


def program_from_bytes(data: bytes, where: str = "saved program") -> CompiledKernel:
    def bad(why: str) -> SavedProgramError:
        return SavedProgramError(f"{where}: {why}")
    try:
        obj = parse_json(data)
    except ValueError as e:
        raise bad(f"not a saved program (not UTF-8 JSON: {e})") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise bad(f"not a saved program (no \"format\": \"{FORMAT}\"); make one with `qgpu-min compile K.cu -o "
                  f"K{SUFFIX}`")
    if obj.get("version") != VERSION:
        raise bad(f"a saved program of format version {obj.get('version')!r}; this qgpu-min reads version "
                  f"{VERSION}: compile the kernel again")
    fields = obj.get("kernel")
    if set(obj) != {"format", "version", "kernel", "sha256"} or not isinstance(fields, dict) \
            or set(fields) != set(_FIELDS):
        raise bad("damaged: its fields are not a saved program's")
    for name, kind in _FIELDS.items():
        if not isinstance(fields[name], kind):
            raise bad(f"damaged: field {name!r} is not of its type")
    if obj.get("sha256") != hashlib.sha256(_canonical(fields)).hexdigest():
        raise bad("damaged: its contents do not match its sha256")
    if data != _canonical(obj):
        raise bad("damaged: not written as save_program writes it")
    params = fields["params"]
    if not all(isinstance(p, list) and len(p) == 4 and isinstance(p[0], str) and p[1] in ("ptr", "scalar", "unknown")
               and isinstance(p[2], bool) and isinstance(p[3], int) and not isinstance(p[3], bool) for p in params):
        raise bad("damaged: a parameter is not (name, kind, signed, element bytes)")
    try:
        k = kernel_from_ptx(fields["ptx"], fields["compiler"], fields["entry"], fields["source"],
                            fields["source_name"])
    except QgpuError as e:
        raise bad(f"its PTX does not lower on this machine: {e}") from None
    if k.name != fields["name"] or _kernel_fields(k)["params"] != params:
        raise bad("damaged: its PTX's kernel or parameters are not the ones it names")
    return k

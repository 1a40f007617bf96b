"""PTX already made from the same CUDA by the same compiler, kept on disk, so a warm `qgpu-min run K.cu`
starts no compiler process (a zig clang run and its `--version` probe cost ~0.13 s of a ~1 s launch).

The key holds everything the PTX depends on: the source text and the name it is compiled under (diagnostics
name it), the flags, our prelude and header stubs, and which compiler discovery would pick, by each
candidate's command and the size and time of its executable (no process runs for that). A source with a
quoted `#include` depends on files the key cannot see and is never kept. Only successful compiles are
kept (the newest 512); an entry that does not read back whole is compiled again. QGPU_PTX_CACHE=0 turns the
cache off.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
from pathlib import Path

from ..files import older_than_newest, unlink_quietly, user_cache_root, write_text_atomic

ENV_VAR = "QGPU_PTX_CACHE"
VERSION = 1
KEPT_ENTRIES = 512      # the newest compiles kept (a few KB each); older ones are removed
_QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s*"', re.MULTILINE)


def cache_dir() -> Path:
    return user_cache_root() / "ptx"


def _executable(argv: tuple[str, ...]) -> Path:
    """The file that runs for a compiler command: the ziglang wheel's zig for `python -m ziglang clang`."""
    if len(argv) >= 3 and argv[1:3] == ("-m", "ziglang"):
        spec = importlib.util.find_spec("ziglang")
        locations = list(spec.submodule_search_locations or []) if spec else []
        return Path(locations[0]) / "zig" if locations else Path(argv[0])
    return Path(argv[0])


def fingerprint(argvs: list[tuple[str, ...]]) -> str | None:
    """Who would compile: each candidate command with its executable's size and modification time (None if
    there is none, or one cannot be read: then nothing is cached)."""
    if not argvs:
        return None
    parts = []
    for argv in argvs:
        try:
            st = _executable(argv).stat()
        except OSError:
            return None
        parts.append(f"{' '.join(argv)}|{st.st_size}|{st.st_mtime_ns}")
    return "\n".join(parts)


def key(source_text: str, source_name: str, flags: list[str], who: str, include_dir: Path) -> str | None:
    """The cache key, or None where the PTX may depend on files it does not cover."""
    if _QUOTED_INCLUDE.search(source_text):
        return None
    h = hashlib.sha256(f"qgpu-ptx {VERSION}\n{who}\n{source_name}\n{' '.join(flags)}\n".encode())
    for header in sorted(include_dir.rglob("*")):
        if header.is_file():
            h.update(header.relative_to(include_dir).as_posix().encode() + b"\0" + header.read_bytes() + b"\0")
    h.update(source_text.encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def enabled() -> bool:
    return os.environ.get(ENV_VAR, "1") != "0"


def load(k: str) -> dict | None:
    """The kept result {"text", "compiler", "address_size", "diagnostics"}, or None."""
    try:
        entry = json.loads((cache_dir() / f"{k}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    fields = ("text", "compiler", "address_size", "diagnostics")
    if not isinstance(entry, dict) or entry.get("version") != VERSION or not all(f in entry for f in fields):
        return None
    return {f: entry[f] for f in fields}


def store(k: str, result: dict, keep: int = KEPT_ENTRIES) -> None:
    """Keep a result, and the newest `keep` results in all; a cache that cannot be written is no error (the
    next run compiles again)."""
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        write_text_atomic(cache_dir() / f"{k}.json", json.dumps({"version": VERSION, **result}))
    except OSError:
        return
    for old in older_than_newest(cache_dir().glob("*.json"), keep):
        unlink_quietly(old)

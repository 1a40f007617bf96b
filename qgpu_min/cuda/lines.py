"""PTX lines to CUDA source lines, from the `.loc`/`.file` line tables the compilers write (clang
`-gline-tables-only`, nvcc `-lineinfo`), so that every error and warning can show the user's line.

A `.loc` in a header of ours or of the toolkit (threadIdx.x, the shuffles... are inline functions there)
stands for the user's line it was inlined at: nvcc writes that as `inlined_at F L C`, clang as a comment,
`// .../qgpu_prelude.h:96:1 @[ k.cu:2:13 ]`.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

from .compiler import INCLUDE_DIR

_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', re.M)
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)")
_INLINED_AT = re.compile(r"inlined_at\s+(\d+)\s+(\d+)")          # nvcc: `.loc 2 397 9, ..., inlined_at 1 3 5`
_INLINED_NOTE = re.compile(r"@\[\s*([^:\]]+):(\d+)")               # clang's comment: `// h.h:96:1 @[ k.cu:2:13 ]`
_PTX_LINE = re.compile(r"PTX line (\d+)")


def _is_library(path: str) -> bool:
    """Our prelude and the toolkit's headers (a shuffle is an inline function in sm_30_intrinsics.hpp)."""
    return Path(path).parent == INCLUDE_DIR or "/include/" in path.replace("\\", "/")


def source_line(ptx: str, ptx_line: int) -> tuple[str, int] | None:
    """(file, line) of the CUDA source that PTX line ``ptx_line`` (from 1) came from, if the PTX says."""
    table = _line_table(ptx)
    return table[ptx_line - 1] if 0 < ptx_line <= len(table) else None


@functools.lru_cache(maxsize=16)
def _line_table(ptx: str) -> tuple[tuple[str, int] | None, ...]:
    """Per PTX line, the source line of the last `.loc` above it that names one."""
    files = dict(_FILE.findall(ptx))
    current, out = None, []
    for text in ptx.splitlines():
        m = _LOC.match(text)
        if m:
            path, line = files.get(m.group(1), f"file {m.group(1)}"), int(m.group(2))
            if _is_library(path):   # inlined from a header: the user's line is where it was inlined, if said
                at, note = _INLINED_AT.search(text), _INLINED_NOTE.search(text)
                path, line = ((files.get(at.group(1), path), int(at.group(2))) if at else
                              (note.group(1), int(note.group(2))) if note else (path, 0))
            if line > 0:            # line 0: code the compiler could not attribute
                current = (path, line)
        out.append(current)
    return tuple(out)


def quote(path: str, line: int, source: str | None, source_name: str | None) -> str:
    """'k.cu:3: `c[i] = a[i] + b[i];`', the text read from ``source`` (the text compiled, named
    ``source_name``) or else from the file, when either has it."""
    text = None
    if source is not None and source_name is not None and Path(path).name == Path(source_name).name:
        text = source.splitlines()
    elif Path(path).is_file():
        try:
            text = Path(path).read_text(errors="replace").splitlines()
        except OSError:
            pass
    code = text[line - 1].strip() if text is not None and 0 < line <= len(text) else ""
    code = code if len(code) <= 100 else code[:97] + "..."
    return f"{Path(path).name}:{line}" + (f": `{code}`" if code else "")


def annotate(message: str, ptx: str, source: str | None = None, source_name: str | None = None) -> str:
    """``message`` with the CUDA source line appended after its first 'PTX line N', when the PTX maps it."""
    m = _PTX_LINE.search(message)
    found = source_line(ptx, int(m.group(1))) if m else None
    if found is None:
        return message
    return f"{message} (source {quote(*found, source, source_name)})"


def block_note(ptx: str, ptx_lines: tuple[int, ...]) -> str:
    """A listing's note for a block made from ``ptx_lines``: 'k.cu:2,3 (PTX lines 24,25)', or the PTX lines
    alone when the PTX has no line table."""
    found: dict[str, list[int]] = {}
    for n in ptx_lines:
        at = source_line(ptx, n)
        if at is not None and at[1] not in found.setdefault(Path(at[0]).name, []):
            found[Path(at[0]).name].append(at[1])
    ptx_part = "PTX lines " + ",".join(map(str, ptx_lines))
    if not found:
        return ptx_part
    src = "; ".join(f"{name}:{','.join(map(str, sorted(ls)))}" for name, ls in found.items())
    return f"{src} ({ptx_part})"

"""Reading JSON and writing files safely, and where the user cache lives: the one home for each.

`read_json`/`parse_json` report every way a JSON file can be bad as an OSError or a ValueError (json's own
RecursionError on deep nesting included), so a caller turns exactly those into its error naming the file.

`atomic_output`: files written whole or not at all, the one way this project writes a checkpoint file, a
cache entry or a record. The data goes to a uniquely named temporary file beside the target, is flushed to disk, and is
renamed over the target; a reader (another process included) sees the old file or the new one, never a
part, and two writers at once each rename a whole file (the last one wins). On any error the temporary
file is removed and the target is left as it was."""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO


def parse_json(raw: str | bytes, object_pairs_hook=None) -> Any:
    """json.loads; bytes must be UTF-8. Every failure is a ValueError (UnicodeDecodeError and JSONDecodeError
    are ValueErrors already; nesting deeper than Python's recursion limit is made one)."""
    try:
        return json.loads(raw, object_pairs_hook=object_pairs_hook)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None


def read_json(path: str | Path) -> Any:
    """The parsed JSON of a UTF-8 file; raises OSError (FileNotFoundError when absent) or ValueError."""
    return parse_json(Path(path).read_bytes())


@contextmanager
def atomic_output(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file to write `path` through; it replaces `path` when the block ends without an error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; a cache or checkpoint folder may be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """`path.write_text(text)` (UTF-8), whole or not at all."""
    with atomic_output(path) as f:
        f.write(text.encode("utf-8"))


def older_than_newest(paths, keep: int) -> list[Path]:
    """All but the `keep` newest of `paths` (by modification time, then name), oldest first; a path that is
    gone by now counts as oldest."""
    def age(p: Path) -> tuple[int, str]:
        try:
            return Path(p).stat().st_mtime_ns, Path(p).name
        except OSError:
            return 0, Path(p).name
    ordered = sorted((Path(p) for p in paths), key=age)
    return ordered[:max(0, len(ordered) - keep)]


def unlink_quietly(path: Path) -> None:
    """Remove a cache file; one another process removed first, or that cannot be removed, is left alone."""
    try:
        path.unlink()
    except OSError:
        pass


def user_cache_root() -> Path:
    """<$XDG_CACHE_HOME or ~/.cache>/qgpu-min: the GPU cache, built checkpoints and the CUDA path's library
    live below it."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"  # the XDG spec ignores relative paths
    return base / "qgpu-min"

"""qgpu_min.files: JSON reading whose every failure is an OSError or ValueError, and whole-or-nothing writes,
also under two writing processes and a reader at once."""
from __future__ import annotations

import multiprocessing
import sys

import pytest

from qgpu_min.files import atomic_output, parse_json, read_json, write_text_atomic


def test_json_failures_are_value_errors(tmp_path):
    f = tmp_path / "x.json"
    for raw in (b"[" * 100_000, b'{"a": 1', b"\xff{}", b"", b"{} {}"):
        f.write_bytes(raw)
        with pytest.raises(ValueError):
            read_json(f)
    assert parse_json('{"a": [1, 2]}') == {"a": [1, 2]}
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_json("[" * 100_000)
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "absent.json")


def test_an_error_while_writing_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_output(target) as f:
            f.write(b"new, half")
            raise RuntimeError("interrupted")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]
    write_text_atomic(target, "new")
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def _writer(path: str, byte: int, rounds: int) -> None:
    for _ in range(rounds):
        with atomic_output(path) as f:
            for _ in range(64):
                f.write(bytes([byte]) * 4096)   # 256 KiB in pieces: a torn file would mix bytes or be short


@pytest.mark.skipif(sys.platform == "win32", reason="rename over an open file is POSIX behaviour")
def test_two_writing_processes_and_a_reader_never_see_a_partial_file(tmp_path):
    target = tmp_path / "shared.bin"
    _writer(str(target), 0, 1)
    ctx = multiprocessing.get_context("spawn")
    writers = [ctx.Process(target=_writer, args=(str(target), b, 30)) for b in (1, 2)]
    for w in writers:
        w.start()
    seen = set()
    while any(w.is_alive() for w in writers):
        data = target.read_bytes()
        assert len(data) == 64 * 4096 and len(set(data)) == 1, "a reader saw a partial or mixed file"
        seen.add(data[0])
    for w in writers:
        w.join()
        assert w.exitcode == 0
    assert target.read_bytes()[0] in (1, 2) and len(set(target.read_bytes())) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.bin"]   # no temporary left behind
    assert seen   # the reader did look while they wrote

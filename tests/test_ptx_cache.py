"""The PTX cache (cuda/ptx_cache.py): a second compile of the same CUDA by the same compiler starts no process
and gives the same PTX; a change of the source, of the compiler's executable or a quoted #include is never
served from it; a damaged entry is compiled again; QGPU_PTX_CACHE=0 turns it off."""
from __future__ import annotations

import os
import subprocess

import pytest

from compilers import needs
from qgpu_min.cuda import compiler as cc, ptx_cache
from qgpu_min.cuda.compiler import compile_to_ptx

SOURCE = "__global__ void f(int *a) { a[threadIdx.x] = 7 * threadIdx.x; }\n"


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(ptx_cache.ENV_VAR, raising=False)
    return tmp_path / "qgpu-min" / "ptx"


def _count_runs(monkeypatch) -> list:
    calls = []
    real = subprocess.run

    def counting(*args, **kw):
        calls.append(args[0])
        return real(*args, **kw)
    monkeypatch.setattr(cc.subprocess, "run", counting)
    cc._probe.cache_clear()         # the probe's in-process memo would hide a --version run
    return calls


def _code(ptx: str) -> list[str]:
    """PTX without its `.file` lines (a compile names its temporary folder there)."""
    return [line for line in ptx.splitlines() if not line.lstrip().startswith(".file")]


@needs("zig")
def test_second_compile_runs_no_process_and_gives_the_same_ptx(cache_home, monkeypatch):
    first = compile_to_ptx(SOURCE, "zig")
    assert len(list(cache_home.iterdir())) == 1
    calls = _count_runs(monkeypatch)
    again = compile_to_ptx(SOURCE, "zig")
    assert calls == [] and again == first
    other = compile_to_ptx(SOURCE.replace("7 *", "9 *"), "zig")     # another source: compiled
    assert calls and other.text != first.text and len(list(cache_home.iterdir())) == 2


@needs("zig")
def test_a_file_source_is_keyed_by_its_name_and_text(cache_home, tmp_path):
    path = tmp_path / "k.cu"
    path.write_text(SOURCE)
    first = compile_to_ptx(path, "zig")
    path.write_text(SOURCE.replace("7 *", "5 *"))
    assert compile_to_ptx(path, "zig").text != first.text          # the file changed: compiled again
    assert len(list(cache_home.iterdir())) == 2


@needs("zig")
def test_quoted_includes_and_the_switch_keep_nothing(cache_home, tmp_path, monkeypatch):
    (tmp_path / "h.cuh").write_text("#define SEVEN 7\n")
    path = tmp_path / "k.cu"
    path.write_text('#include "h.cuh"\n' + SOURCE.replace("7 *", "SEVEN *"))
    compile_to_ptx(path, "zig")
    assert not cache_home.exists() or not list(cache_home.iterdir())
    monkeypatch.setenv(ptx_cache.ENV_VAR, "0")
    compile_to_ptx(SOURCE, "zig")
    assert not cache_home.exists() or not list(cache_home.iterdir())


@needs("zig")
def test_a_damaged_entry_is_compiled_again(cache_home, monkeypatch):
    first = compile_to_ptx(SOURCE, "zig")
    (entry,) = cache_home.iterdir()
    calls = _count_runs(monkeypatch)
    for damage in (b"", b"{not json", b'{"version": 1, "text": "x"}'):
        entry.write_bytes(damage)
        calls.clear()
        again = compile_to_ptx(SOURCE, "zig")
        assert calls and _code(again.text) == _code(first.text)        # compiled, and kept again
        assert ptx_cache.load(entry.stem)["text"] == again.text


def test_the_fingerprint_follows_the_executable(tmp_path):
    exe = tmp_path / "clang"
    exe.write_text("#!/bin/sh\n")
    before = ptx_cache.fingerprint([(str(exe),)])
    assert before is not None and before == ptx_cache.fingerprint([(str(exe),)])
    st = exe.stat()
    os.utime(exe, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert ptx_cache.fingerprint([(str(exe),)]) != before
    assert ptx_cache.fingerprint([]) is None and ptx_cache.fingerprint([(str(tmp_path / "absent"),)]) is None


def test_a_key_covers_the_headers(tmp_path):
    inc = tmp_path / "include"
    inc.mkdir()
    (inc / "a.h").write_text("1")
    k = ptx_cache.key(SOURCE, "kernel.cu", ["-O2"], "who", inc)
    assert k == ptx_cache.key(SOURCE, "kernel.cu", ["-O2"], "who", inc)
    (inc / "a.h").write_text("2")
    assert ptx_cache.key(SOURCE, "kernel.cu", ["-O2"], "who", inc) != k
    assert ptx_cache.key(SOURCE, "other.cu", ["-O2"], "who", inc) != ptx_cache.key(SOURCE, "kernel.cu", ["-O2"], "who", inc)
    assert ptx_cache.key('#include "x.h"\n' + SOURCE, "kernel.cu", [], "who", inc) is None


def test_only_the_newest_entries_stay(cache_home):
    for j in range(7):
        ptx_cache.store(f"{j:064x}", {"text": "x", "compiler": "c", "address_size": 32, "diagnostics": ""}, keep=4)
        os.utime(cache_home / f"{j:064x}.json", ns=(j * 10**9, j * 10**9))
    assert sorted(p.stem for p in cache_home.iterdir()) == [f"{j:064x}" for j in range(3, 7)]

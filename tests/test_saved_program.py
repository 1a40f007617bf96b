"""Saved programs (qgpu_min/host/saved.py): `qgpu-min compile K.cu -o K.qgpu`, `qgpu-min run K.qgpu`,
qgpu_min.load_program. A saved program loads and launches with no CUDA compiler present, as the kernel it was
saved from; anything that is not exactly what save_program writes is refused with an error naming the file
(fuzzed: byte edits of a real file, and well-formed files with wrong fields)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, strategies as st

import qgpu_min
from fuzzing import assert_names, budgets, fuzz_settings, mutate_bytes
from qgpu_min.cli import main
from qgpu_min.cuda import compiler as cuda_compiler
from qgpu_min.host import saved
from qgpu_min.host.launch import compile_kernel, launch
from qgpu_min.host.saved import SavedProgramError, load_program, program_bytes, program_from_bytes, save_program

ROOT = Path(__file__).resolve().parent.parent
DOT_ARGS = [[1, 2, 3], [4, 5, 6], [0], 3]
SIGNED = """
__global__ void mix(const short* a, unsigned char* b, int k) {
    int t = threadIdx.x;
    b[t] = (unsigned char)(a[t] * k + t);
}"""


@pytest.fixture(scope="module")
def dot():
    return compile_kernel(ROOT / "examples" / "dot.cu")


@pytest.fixture
def no_compiler(monkeypatch):
    """Every way to a CUDA compiler fails, as on a machine without one."""
    def refuse(*a, **k):
        raise cuda_compiler.CompilerNotFoundError("no CUDA compiler here (test)")
    monkeypatch.setattr(cuda_compiler, "find_compiler", refuse)
    monkeypatch.setattr(cuda_compiler, "compile_to_ptx", refuse)


def test_a_saved_program_launches_without_a_compiler_as_the_kernel_it_came_from(dot, tmp_path, no_compiler):
    path = save_program(dot, tmp_path / "dot.qgpu")
    k = qgpu_min.load_program(path)
    assert (k.name, k.entry, k.params, k.ptx, k.source) == (dot.name, dot.entry, dot.params, dot.ptx, dot.source)
    assert k.program == dot.program and k.memory == dot.memory
    assert launch(k, DOT_ARGS, block=(3, 1)).arrays["out"].tolist() == [32]
    assert launch(k, DOT_ARGS, block=(3, 1), backend="circuit").arrays["out"].tolist() == [32]


def test_parameter_types_survive_the_file(tmp_path, monkeypatch):
    """Element sizes and signedness come from the CUDA text kept in the file: a short* and an unsigned char*
    load as they compiled, and the launch writes the same bytes."""
    k = compile_kernel(SIGNED)
    path = save_program(k, tmp_path / "mix.qgpu")
    monkeypatch.setattr(cuda_compiler, "find_compiler", lambda *a, **kw: pytest.fail("a compiler was looked for"))
    loaded = load_program(path)
    assert [(p.name, p.kind, p.signed, p.elem_bytes) for p in loaded.params] == \
        [("a", "ptr", True, 2), ("b", "ptr", False, 1), ("k", "scalar", True, 4)]
    args = [np.array([-3, 100, 7], np.int16), np.zeros(3, np.uint8), 5]
    got = launch(loaded, args, block=(3, 1)).arrays["b"].tolist()
    assert got == launch(k, args, block=(3, 1)).arrays["b"].tolist() == [(-15) % 256, (500 + 1) % 256, 37]


def test_saving_is_deterministic_and_the_file_is_canonical(dot, tmp_path):
    a, b = save_program(dot, tmp_path / "a.qgpu"), save_program(dot, tmp_path / "b.qgpu")
    assert a.read_bytes() == b.read_bytes() == program_bytes(dot)
    obj = json.loads(a.read_bytes())
    assert obj["format"] == saved.FORMAT and obj["version"] == saved.VERSION
    assert obj["sha256"] == hashlib.sha256(json.dumps(obj["kernel"], sort_keys=True, separators=(",", ":"),
                                                      ensure_ascii=False).encode()).hexdigest()
    assert not list(tmp_path.glob(".*.tmp"))         # the temporary file of the atomic write is gone


def _resigned(obj: dict) -> bytes:
    """obj with its hash made right again: what a hand-edited file that fixed its hash would hold."""
    obj = dict(obj)
    obj["sha256"] = hashlib.sha256(saved._canonical(obj["kernel"])).hexdigest()
    return saved._canonical(obj)


def test_files_that_are_not_a_saved_program_are_refused_by_name(dot, tmp_path):
    good = json.loads(program_bytes(dot))
    cases = {
        "not UTF-8 JSON": b"\xff\xfe not json",
        "no \"format\"": b'{"x": 1}',
        "format version 2": saved._canonical({**good, "version": 2}),
        "do not match its sha256": saved._canonical({**good, "kernel": {**good["kernel"], "name": "other"}}),
        "not of its type": _resigned({**good, "kernel": {**good["kernel"], "ptx": 7}}),
        "its fields are not": _resigned({**good, "kernel": {**good["kernel"], "extra": 1}}),
        "not written as save_program": program_bytes(dot).replace(b'{"format"', b'{ "format"', 1),
        "a parameter is not": _resigned({**good, "kernel": {**good["kernel"], "params": [["a", "ptr", 1, 4]]}}),
        "not the ones it names": _resigned({**good, "kernel": {**good["kernel"], "params": good["kernel"]["params"][:2]}}),
        "does not lower": _resigned({**good, "kernel": {**good["kernel"], "ptx": ".version 6.3\n.target sm_75\n"}}),
    }
    for why, data in cases.items():
        p = tmp_path / "bad.qgpu"
        p.write_bytes(data)
        with pytest.raises(SavedProgramError) as e:
            load_program(p)
        assert why in str(e.value) and str(p) in str(e.value), (why, str(e.value))
    with pytest.raises(SavedProgramError, match="cannot read"):
        load_program(tmp_path / "missing.qgpu")
    (tmp_path / "a_file").write_text("")
    with pytest.raises(SavedProgramError, match="cannot write"):
        save_program(dot, tmp_path / "a_file" / "dot.qgpu")       # its folder cannot be made


def test_a_file_larger_than_any_program_is_refused_before_it_is_read(dot, tmp_path, monkeypatch):
    p = save_program(dot, tmp_path / "dot.qgpu")
    monkeypatch.setattr(saved, "MAX_BYTES", 100)
    with pytest.raises(SavedProgramError, match="more than a saved program holds"):
        load_program(p)


@budgets(quick=150, long=3000)
def test_fuzzed_saved_programs_load_as_saved_or_are_refused_by_name(dot, budget):
    data = program_bytes(dot)

    @fuzz_settings(budget)
    @given(st.data())
    def run(d):
        mutated = mutate_bytes(data, d.draw)
        try:
            k = program_from_bytes(mutated, "fuzzed.qgpu")
        except Exception as e:       # noqa: BLE001 - the point: only our error, naming the file
            assert_names(e, "fuzzed.qgpu")
            return
        # every byte of the canonical file matters: only an edit that left it as it was loads
        assert mutated == data and k.program == dot.program
    run()


def test_the_cli_saves_runs_and_lists_a_saved_program(tmp_path, monkeypatch):
    runner = CliRunner()
    out = tmp_path / "dot.qgpu"
    r = runner.invoke(main, ["compile", str(ROOT / "examples" / "dot.cu"), "-o", str(out)])
    assert r.exit_code == 0 and "saved kernel dot (5 blocks)" in r.output, r.output
    monkeypatch.setattr(cuda_compiler, "find_compiler", lambda *a, **k: pytest.fail("a compiler was looked for"))
    args = ["--arg", "[1,2,3]", "--arg", "[4,5,6]", "--arg", "zeros(1)", "--arg", "3", "--backend", "interp"]
    r = runner.invoke(main, ["run", str(out), *args])
    assert r.exit_code == 0 and "out = [32]" in r.output, r.output
    r = runner.invoke(main, ["compile", str(out)])
    assert r.exit_code == 0 and "kernel dot" in r.output
    r = runner.invoke(main, ["run", str(out), "--kernel", "other", *args])
    assert r.exit_code == 1 and "holds kernel 'dot', not 'other'" in r.output
    r = runner.invoke(main, ["compile", str(ROOT / "examples" / "dot.cu"), "-o", str(tmp_path / "dot.bin")])
    assert r.exit_code == 1 and "ends in .qgpu" in r.output
    (tmp_path / "broken.qgpu").write_bytes(out.read_bytes()[:-5])
    r = runner.invoke(main, ["run", str(tmp_path / "broken.qgpu"), *args])
    assert r.exit_code == 1 and "broken.qgpu" in r.output and "Traceback" not in r.output

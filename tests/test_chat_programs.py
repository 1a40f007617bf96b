"""The chat calculator's kernels ship as saved programs (qgpu_min/chat/programs/*.qgpu, written by
tools/save_calc_programs.py): every kernel of every calculator file has one, saved from the .cu file as it
is now, and with no CUDA compiler present the calculator loads them and computes every operation (results
from launches, as always: tests/test_chat_calc.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from qgpu_min.chat import launcher
from qgpu_min.chat.calc import evaluate
from qgpu_min.cuda import compiler as cuda_compiler
from qgpu_min.cuda.ptx import parse_ptx
from qgpu_min.host.saved import load_program

ROOT = Path(__file__).resolve().parent.parent
# one expression per operation of ops.py, with its value
CASES = {"[1, 2, 3] + 4": "[5, 6, 7]", "[5, 1] - [1, 2]": "[4, -1]", "[2, 3] * [4, 5]": "[8, 15]",
         "-7 // 2": "-4", "-7 % 2": "1", "[1, 2, 3] @ [4, 5, 6]": "32", "[[1, 2], [3, 4]] @ [1, 1]": "[3, 7]",
         "-[1, -2]": "[-1, 2]", "sum([1, 2, 3])": "6", "max([3, 9, 2])": "9", "min(4, -1, 7)": "-1",
         "sort([3, 1, 2])": "[1, 2, 3]", "cumsum([1, 2, 3])": "[1, 3, 6]", "histogram([0, 1, 1, 5], 3)": "[1, 2, 0]",
         "gcd(12, 18)": "6", "popcount(-1)": "32", "dot([1, 2], [3, 4])": "11"}


def test_every_calculator_kernel_ships_as_a_current_saved_program():
    shipped = {p.name for p in launcher.PROGRAM_DIR.glob("*.qgpu")}
    want = set()
    for cu in sorted(launcher.KERNEL_DIR.glob("*.cu")):
        text = cu.read_text()
        for name in shipped:
            if name.startswith(cu.stem + "."):
                k = load_program(launcher.PROGRAM_DIR / name)
                assert k.source == text, f"{name} was saved from other CUDA text: run tools/save_calc_programs.py"
                # the module the program holds is the file's: one program for each of its kernels
                want |= {launcher.program_name(cu.name, fn.demangled.split("(")[0] if fn.demangled else fn.name)
                         for fn in parse_ptx(k.ptx).kernels}
        assert text.count("__global__") == sum(n.startswith(cu.stem + ".") for n in shipped), cu.name
    assert shipped == want


def test_the_tool_finds_them_current():
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "save_calc_programs.py"), "--check"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "all current" in out.stdout, out.stdout + out.stderr


def test_the_calculator_runs_every_operation_without_a_compiler(monkeypatch):
    def refuse(*a, **k):
        raise cuda_compiler.CompilerNotFoundError("no CUDA compiler here (test)")
    monkeypatch.setattr(cuda_compiler, "find_compiler", refuse)
    monkeypatch.setattr(cuda_compiler, "compile_to_ptx", refuse)
    from qgpu_min.host import launch as host_launch
    monkeypatch.setattr(host_launch, "compile_to_ptx", refuse)
    launcher.compiled.cache_clear()
    launcher.for_backend.cache_clear()
    try:
        for expr, want in CASES.items():      # a compile would raise: every kernel came from its program
            assert evaluate(expr, backend="interp").text == want, expr
    finally:
        launcher.compiled.cache_clear()
        launcher.for_backend.cache_clear()


def test_a_stale_program_is_not_used(tmp_path, monkeypatch):
    """A .cu file changed since its program was saved: the kernel is compiled from the file as it is."""
    monkeypatch.setattr(launcher, "KERNEL_DIR", tmp_path)
    src = (ROOT / "qgpu_min" / "chat" / "kernels" / "bits.cu").read_text()
    (tmp_path / "bits.cu").write_text(src + "\n// changed\n")
    launcher.compiled.cache_clear()
    try:
        k = launcher.compiled("bits.cu", "calc_popcount")
        assert k.source.endswith("// changed\n")
    finally:
        launcher.compiled.cache_clear()

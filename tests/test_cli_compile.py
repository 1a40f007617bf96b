"""`qgpu-min compile` through click's CliRunner."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from qgpu_min.cli import main
from qgpu_min.machine.isa import ROM_BLOCKS

ROOT = Path(__file__).resolve().parent.parent
DOT = str(ROOT / "examples" / "dot.cu")
OPS = str(ROOT / "tests" / "kernels" / "vec_ops.cu")


def qgpu(*argv: str):
    return CliRunner().invoke(main, list(argv))


def test_program_listing() -> None:
    r = qgpu("compile", DOT)
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "kernel dot" in out
    assert "memory map" in out
    m = re.search(r"; (\d+) blocks \(ROM holds (\d+)\), (\d+) registers used", out)
    assert m and int(m.group(2)) == ROM_BLOCKS and 1 <= int(m.group(3)) <= 15
    blocks = re.findall(r"^B(\d+):", out, re.MULTILINE)
    assert [int(b) for b in blocks] == list(range(int(m.group(1))))
    assert re.search(r"^\s+\* (LD|ATOM\.ADD) ", out, re.MULTILINE)  # the memory slot is marked
    assert re.search(r"^\s+EXIT", out, re.MULTILINE)


def test_ptx_listing() -> None:
    r = qgpu("compile", DOT, "--ptx")
    assert r.exit_code == 0, r.output
    assert re.search(r"^\.version \d", r.stdout, re.MULTILINE)
    assert ".entry" in r.stdout and "atom" in r.stdout


def test_ptx_of_a_kernel_the_lowering_rejects(tmp_path: Path) -> None:
    """--ptx shows the compiler's output even when the machine cannot run it (here: floating point)."""
    src = tmp_path / "f.cu"
    src.write_text("__global__ void k(float* a) { a[threadIdx.x] *= 1.5f; }\n")
    r = qgpu("compile", str(src), "--ptx")
    assert r.exit_code == 0, r.output
    assert "mul.f32" in r.stdout or "mul.rn.f32" in r.stdout
    assert qgpu("compile", str(src)).exit_code == 1


def test_ptx_file_round_trip(tmp_path: Path) -> None:
    """The PTX that `compile --ptx` prints runs as a .ptx source."""
    ptx = tmp_path / "dot.ptx"
    ptx.write_text(qgpu("compile", DOT, "--ptx").stdout)
    r = qgpu("run", str(ptx), "--arg", "[1,2,3]", "--arg", "[4,5,6]", "--arg", "zeros(1)", "--arg", "3", "--backend",
             "interp")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[-1].endswith("= [32]")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_kernel_choice_nvcc() -> None:
    r = qgpu("compile", OPS, "--kernel", "vec_logic", "--compiler", "nvcc")
    assert r.exit_code == 0, r.output
    assert "kernel vec_logic" in r.stdout and "nvcc" in r.stdout


def test_mangled_kernel_name() -> None:
    r = qgpu("compile", OPS, "--kernel", "_Z7vec_mulPKiS0_Pii")
    assert r.exit_code == 0, r.output
    assert "kernel vec_mul" in r.stdout


def test_unknown_kernel() -> None:
    r = qgpu("compile", OPS, "--kernel", "nope")
    assert r.exit_code == 1 and "error:" in r.stderr and "nope" in r.stderr
    assert "Traceback" not in r.output


def test_unknown_compiler() -> None:
    r = qgpu("compile", DOT, "--compiler", "no-such-compiler-xyz")
    assert r.exit_code == 1 and "error:" in r.stderr and "no-such-compiler-xyz" in r.stderr


def test_invalid_cuda(tmp_path: Path) -> None:
    src = tmp_path / "bad.cu"
    src.write_text("__global__ void k(int* a) { a[0] = 1 }\n")
    r = qgpu("compile", str(src))
    assert r.exit_code == 1 and r.stderr.startswith("error:")
    assert "bad.cu" in r.stderr and "expected" in r.stderr  # the compiler's own diagnostic (clang or nvcc)

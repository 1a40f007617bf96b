"""The install a constrained environment gets (`-m slow`: builds a wheel and a fresh venv, a minute or two):
`pip wheel .` makes a platform wheel with the C core built in; in a fresh venv it installs with CC and CXX
pointing nowhere (no compiler runs), brings no CUDA compiler (ziglang is the `cuda` extra), and there the
README's dot kernel as a saved program gives out = [32] on the GPU in the weights, chat's calculator runs its
launches from its shipped saved programs, and compiling CUDA says what to install."""
from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _run(argv: list, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=900, **kw)


def test_the_wheel_installs_and_runs_without_any_compiler(tmp_path):
    built = _run([sys.executable, "-m", "pip", "wheel", ".", "-q", "-w", tmp_path / "wheel", "--no-deps",
                  "--no-build-isolation"], cwd=ROOT)
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next((tmp_path / "wheel").glob("qgpu_min-*.whl"))
    venv.create(tmp_path / "env", with_pip=True)
    py = tmp_path / "env" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "QGPU_CUDA_COMPILER"}
    env.update(CC="/nonexistent/cc", CXX="/nonexistent/c++", PYTHONPATH="", PATH=f"{tmp_path / 'env' / 'bin'}:/usr/bin:/bin")
    got = _run([py, "-m", "pip", "install", "-q", wheel], env=env)
    if got.returncode != 0 and "No matching distribution" in got.stderr:
        pytest.skip(f"the package registry cannot be reached for the wheel's dependencies: {got.stderr[-300:]}")
    assert got.returncode == 0, got.stderr[-3000:]
    assert _run([py, "-c", "import importlib.util as u; assert u.find_spec('ziglang') is None"], env=env).returncode == 0
    saved = tmp_path / "dot.qgpu"
    assert _run([sys.executable, "-m", "qgpu_min", "compile", ROOT / "examples" / "dot.cu", "-o", saved]).returncode == 0
    args = ["--arg", "[1,2,3]", "--arg", "[4,5,6]", "--arg", "zeros(1)", "--arg", "3"]
    out = _run([py, "-m", "qgpu_min", "run", saved, *args], env=env, cwd=tmp_path)
    assert out.returncode == 0 and "out = [32]" in out.stdout, out.stdout + out.stderr
    # chat's calculator (what normal-mode chat launches) from its shipped saved programs, no compiler
    calc = _run([py, "-c", "from qgpu_min.chat import calc; r = calc.evaluate('[1, 2, 3] @ [4, 5, 6] + sort([3, 1, 2])'); "
                 "print(r.value, len(r.launches))"], env=env, cwd=tmp_path)
    assert calc.returncode == 0 and calc.stdout.split() == ["[33,", "34,", "35]", "3"], calc.stdout + calc.stderr
    where = _run([py, "-c", "import qgpu_min._core as c; print(c.__file__)"], env=env, cwd=tmp_path)
    assert str(tmp_path / "env") in where.stdout            # the wheel's C core, not the checkout's
    cu = _run([py, "-m", "qgpu_min", "run", ROOT / "examples" / "dot.cu", *args], env=env, cwd=tmp_path)
    if "no CUDA compiler found" in cu.stderr:                # (a clang on /usr/bin would compile it)
        assert cu.returncode == 1 and "pip install 'qgpu-min[cuda]'" in cu.stderr

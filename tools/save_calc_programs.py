"""Write the chat calculator's kernels as saved programs (package data), so normal-mode chat needs no CUDA
compiler: every kernel of qgpu_min/chat/kernels/*.cu compiled with the launcher's compiler (zig clang) into
qgpu_min/chat/programs/<file>.<kernel>.qgpu. Run it after changing a kernel; tests/test_chat_programs.py
fails while a shipped program is not the one its .cu file gives.

    python tools/save_calc_programs.py [--check]

--check writes nothing and exits 1 when a program is missing, stale (saved from other CUDA text) or extra.
"""
from __future__ import annotations

import argparse
import sys

from qgpu_min.chat import launcher
from qgpu_min.cuda.compiler import compile_to_ptx
from qgpu_min.cuda.ptx import parse_ptx
from qgpu_min.host.launch import compile_kernel
from qgpu_min.host.saved import load_program, save_program


def wanted() -> dict[str, tuple[str, str]]:
    """program file name -> (.cu file, kernel), for every kernel of every calculator file."""
    out = {}
    for cu in sorted(launcher.KERNEL_DIR.glob("*.cu")):
        module = parse_ptx(compile_to_ptx(cu, launcher.COMPILER).text)
        for fn in module.kernels:
            k = compile_kernel(cu, kernel=fn.name, compiler=launcher.COMPILER)
            out[launcher.program_name(cu.name, k.name)] = (cu.name, k.name)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="report, write nothing")
    a = ap.parse_args()
    want = wanted()
    have = {p.name for p in launcher.PROGRAM_DIR.glob("*.qgpu")}
    problems = [f"extra: {n}" for n in sorted(have - set(want))]
    for name, (cu, kernel) in want.items():
        path = launcher.PROGRAM_DIR / name
        if a.check:
            if name not in have:
                problems.append(f"missing: {name}")
            elif load_program(path).source != (launcher.KERNEL_DIR / cu).read_text():
                problems.append(f"stale: {name} (saved from other CUDA text than {cu})")
            continue
        launcher.PROGRAM_DIR.mkdir(exist_ok=True)
        save_program(compile_kernel(launcher.KERNEL_DIR / cu, kernel=kernel, compiler=launcher.COMPILER), path)
        print(f"wrote {path}")
    if not a.check:
        for name in sorted(have - set(want)):
            (launcher.PROGRAM_DIR / name).unlink()
            print(f"removed {name}")
        return 0
    print("\n".join(problems) if problems else f"{len(want)} programs, all current")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

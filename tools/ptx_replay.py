"""Run the kernel suite's tests on a machine without zig (the `device` tool's machine, say), with the PTX
that zig made here: the programs are then exactly the ones the tests compile here.

    python3 tools/ptx_replay.py make PTX.json          # here: compile every suite kernel with zig, once
    QGPU_PTX_REPLAY=PTX.json PYTHONPATH=tools python3 -m pytest -p ptx_replay -m slow tests/test_gpu_suite.py ...

As a pytest plugin (`-p ptx_replay`) it hands the launch path the recorded PTX wherever a test asks for
the 'zig' compiler, and reports zig as available; other compilers run as usual. A kernel missing from the
file is an error, not a silent recompile.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _key(source) -> str:
    return str(Path(source).resolve().relative_to(ROOT))


def make(out: Path) -> int:
    sys.path.insert(0, str(ROOT / "tests"))
    from kernel_suite import CASES
    from qgpu_min.cuda.compiler import compile_to_ptx
    table = {}
    for case in CASES:
        if _key(case.path) not in table:
            r = compile_to_ptx(Path(case.path), "zig")
            table[_key(case.path)] = {"text": r.text, "compiler": r.compiler, "address_size": r.address_size}
    out.write_text(json.dumps(table))
    print(f"{len(table)} kernels -> {out}")
    return 0


def pytest_collection_finish(session) -> None:
    import compilers
    import qgpu_min.host.launch as launch
    from qgpu_min.cuda.compiler import PtxResult
    table = json.loads(Path(os.environ["QGPU_PTX_REPLAY"]).read_text())
    compile_here, missing_here = launch.compile_to_ptx, compilers.missing

    def replay(source, compiler=None):
        if compiler != "zig":
            return compile_here(source, compiler)
        entry = table[_key(source)]
        return PtxResult(entry["text"], entry["compiler"], entry["address_size"])
    launch.compile_to_ptx = replay
    compilers.missing = lambda name: None if name == "zig" else missing_here(name)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "make":
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2)
    sys.exit(make(Path(sys.argv[2])))

"""Errors and warnings name the CUDA source line (qgpu_min/cuda/lines.py): compilers write `.loc` line
tables (clang -gline-tables-only, nvcc -lineinfo), code inlined from a header is put at the user's line it
was inlined at, and `qgpu-min compile` notes each block's source lines."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from compilers import skip_if_missing
from qgpu_min.cli import main
from qgpu_min.cuda.lines import annotate, block_note, source_line
from qgpu_min.cuda.lower_ir import LoweringError
from qgpu_min.host.launch import compile_kernel, launch
from qgpu_min.machine.interp import MemoryFault, StepLimitError

COMPILERS = ["zig", "nvcc"]

PRINTF = """#include <cstdio>
__global__ void hello(int *out) {
    out[0] = 1;
    printf("hi %d\\n", out[0]);
}
"""
SHUFFLE = """__global__ void wsum(int *v) {
    int x = v[threadIdx.x];
    x += __shfl_down_sync(0xffffffff, x, 16);
    v[threadIdx.x] = x;
}
"""
SPIN = """__global__ void spin(volatile int *flag) {
    int t = threadIdx.x;
    while (flag[0] == 0)
        t += 1;
    flag[1] = t;
}
"""
FAR = """__global__ void far(int *a, int i) {
    a[i] = 7;
}
"""


@pytest.mark.parametrize("compiler", COMPILERS)
def test_unsupported_instruction_names_the_line(compiler: str) -> None:
    skip_if_missing(compiler)
    with pytest.raises(LoweringError, match=r"at PTX line \d+: printf is not supported on this machine "
                                            r"\(source kernel.cu:4: `printf\(\"hi %d\\n\", out\[0\]\);`\)"):
        compile_kernel(PRINTF, compiler=compiler)


@pytest.mark.parametrize("compiler", COMPILERS)
def test_warning_names_the_users_line_not_the_headers(compiler: str) -> None:
    """The shuffle is an inline function of a header (ours for clang, sm_30_intrinsics.hpp for nvcc)."""
    skip_if_missing(compiler)
    (w,) = compile_kernel(SHUFFLE, compiler=compiler).warnings
    assert w.endswith("(source kernel.cu:3: `x += __shfl_down_sync(0xffffffff, x, 16);`)"), w


@pytest.mark.parametrize("compiler", COMPILERS)
def test_step_limit_and_memory_fault_name_the_line(compiler: str, tmp_path) -> None:
    skip_if_missing(compiler)
    with pytest.raises(StepLimitError, match=r"\(source kernel.cu:3: `while \(flag\[0\] == 0\)`\)"):
        launch(compile_kernel(SPIN, compiler=compiler), [[0, 0]], block=1, step_limit=500)
    src = tmp_path / "far.cu"             # from a file: the line is quoted from it
    src.write_text(FAR)
    with pytest.raises(MemoryFault, match=r"memory access out of range.*\(source far.cu:2: `a\[i\] = 7;`\)"):
        launch(compile_kernel(src, compiler=compiler), [[0], 5000], block=1)


def test_compile_listing_notes_source_lines(tmp_path) -> None:
    src = tmp_path / "vadd.cu"
    src.write_text("__global__ void vadd(const int *a, const int *b, int *c, int n) {\n"
                   "    int i = threadIdx.x;\n    if (i < n)\n        c[i] = a[i] + b[i];\n}\n")
    res = CliRunner().invoke(main, ["compile", str(src)])
    assert res.exit_code == 0, res.output
    notes = [line.split(";", 1)[1] for line in res.output.splitlines() if line.startswith("B") and ";" in line]
    assert notes and all("vadd.cu:" in n and "(PTX lines " in n for n in notes), res.output
    assert any("vadd.cu:4" in n for n in notes)


def test_line_table_rules() -> None:
    ptx = "\n".join([
        ".visible .entry k()",                                          # 1
        "\t.loc\t1 2 5",                                                # 2
        "\tmov.u32 %r1, %tid.x;",                                       # 3
        "\t.loc\t2 96 1   // qgpu_prelude.h:96:1 @[ k.cu:7:13 ]",        # 4  clang's inlined-at comment
        "\tmov.u32 %r2, %tid.x;",                                       # 5
        "\t.loc\t3 397 9, function_name $L__info_string0, inlined_at 1 9 5",   # 6  nvcc's inlined_at
        "\tshfl.sync.down.b32 %r3, %r2, 1, 31, -1;",                    # 7
        "\t.loc\t1 0 11",                                               # 8  line 0: keeps the one before
        "\tadd.s32 %r4, %r3, 1;",                                       # 9
        '\t.file\t1 "/home/u/k.cu"',
        '\t.file\t2 "/x/qgpu_min/cuda/include/qgpu_prelude.h"',
        '\t.file\t3 "/usr/local/cuda/include/sm_30_intrinsics.hpp"',
    ])
    assert source_line(ptx, 1) is None
    assert source_line(ptx, 3) == ("/home/u/k.cu", 2)
    assert source_line(ptx, 5) == ("k.cu", 7)
    assert source_line(ptx, 7) == ("/home/u/k.cu", 9)
    assert source_line(ptx, 9) == ("/home/u/k.cu", 9)
    assert source_line(ptx, 999) is None
    assert annotate("bad thing at PTX line 3", ptx, "a\nint i = 0;\n", "k.cu") == \
        "bad thing at PTX line 3 (source k.cu:2: `int i = 0;`)"
    assert annotate("no line here", ptx) == "no line here"
    assert block_note(ptx, (3, 5)) == "k.cu:2,7 (PTX lines 3,5)"
    assert block_note("no table", (1,)) == "PTX lines 1"

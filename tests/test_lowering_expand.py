"""Ops a block format lacks, rewritten by the lowering (cuda/lower_expand.py): MULHU from four 16-bit
products. Oracle: Python's big integers for the high word, and the suite's NumPy references for the
kernels that divide by constants or take __mulhi/__umulhi, all run on the interpreter from programs
lowered for a format without MULHU (programs of such a format are ordinary machine programs)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from compilers import needs
from kernel_suite import CASES
from test_kernel_suite import _compiled, _default_shapes, run_case
from qgpu_min.cuda.lower import lower
from qgpu_min.cuda.lower_expand import EXPANSIONS
from qgpu_min.cuda.ptx import parse_ptx, select_kernel
from qgpu_min.host.launch import compile_kernel, launch
from qgpu_min.machine.isa import ALU_OPS, MACHINE_FORMAT, BlockFormat

# every ALU op but MULHU, in every slot
NO_MULHU = BlockFormat(pre_ops=(frozenset(ALU_OPS) - {"MULHU"},) * MACHINE_FORMAT.n_pre,
                       post_ops=(frozenset(ALU_OPS) - {"MULHU"},) * MACHINE_FORMAT.n_post)
COMPILERS = [pytest.param(c, marks=needs(c)) for c in ("zig", "nvcc")]
BY_ID = {case.id: case for case in CASES}

HIGH = r"""
__global__ void high(const unsigned* a, const unsigned* b, unsigned* hu, int* hs, unsigned* q, int* r, unsigned k) {
    int t = threadIdx.x;
    unsigned x = a[t], y = b[t];
    hu[t] = __umulhi(x, y);
    hs[t] = __mulhi((int)x, (int)y);
    q[t] = x / 10u + __umulhi(x, k);           // a constant, and a parameter bound at launch
    r[t] = (int)x % -7;
}"""


def _ops(program) -> set[str]:
    return {i.op for b in program.blocks for i in b.pre + b.post}


@pytest.mark.parametrize("compiler", COMPILERS)
def test_mulhu_expansion_exact_on_random_and_edge_words(tmp_path, compiler: str) -> None:
    src = tmp_path / "high.cu"
    src.write_text(HIGH)
    kernel = compile_kernel(src, compiler=compiler)
    module = parse_ptx(kernel.ptx)
    narrow = replace(kernel, program=lower(module, select_kernel(module, None), NO_MULHU).program, fmt=NO_MULHU)
    assert "MULHU" in _ops(kernel.program) and "MULHU" not in _ops(narrow.program)
    rng = np.random.default_rng(7)
    edges = [0, 1, 2, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFF0000, 0xFFFFFFFE, 0xFFFFFFFF]
    for launch_no in range(4):
        a = rng.integers(0, 1 << 32, 32, dtype=np.uint64)
        b = rng.integers(0, 1 << 32, 32, dtype=np.uint64)
        if launch_no == 0:
            a[:len(edges)], b[:len(edges)] = edges, edges[::-1]
        k = int(rng.integers(0, 1 << 32))
        args = [a.astype(np.uint32), b.astype(np.uint32), np.zeros(32, np.uint32), np.zeros(32, np.int32),
                np.zeros(32, np.uint32), np.zeros(32, np.int32), k]
        got = launch(narrow, [x.copy() if isinstance(x, np.ndarray) else x for x in args], block=32).arrays
        s = [x - (1 << 32) if x >> 31 else x for x in map(int, a)]
        sb = [x - (1 << 32) if x >> 31 else x for x in map(int, b)]
        assert got["hu"].tolist() == [(int(x) * int(y)) >> 32 for x, y in zip(a, b)]
        assert got["hs"].tolist() == [(x * y) >> 32 for x, y in zip(s, sb)]
        assert got["q"].tolist() == [(int(x) // 10 + ((int(x) * k) >> 32)) & 0xFFFFFFFF for x in a]
        assert got["r"].tolist() == [int(np.fmod(x, -7)) for x in s]


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("name", ["mulhi", "divmod_const", "divmod_signed", "is_prime", "branch_chain"])
def test_suite_kernels_without_mulhu_exact(name: str, compiler: str) -> None:
    case = BY_ID[name]
    kernel = _compiled(case, compiler)
    module = parse_ptx(kernel.ptx)
    narrow = replace(kernel, program=lower(module, select_kernel(module, case.kernel), NO_MULHU).program)
    assert "MULHU" not in _ops(narrow.program)
    for shape in _default_shapes(case):
        run_case(case, compiler, shape, narrow)


def test_expansions_are_for_ops_the_machine_has() -> None:
    assert set(EXPANSIONS) <= set(ALU_OPS)

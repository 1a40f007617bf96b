"""Ops a block format lacks, rewritten by the lowering (cuda/lower_expand.py): MULHU from four 16-bit
products, sub-word loads from a word load and shifts. Oracle: Python's big integers for the high word,
NumPy for byte and halfword loads, and the suite's NumPy references for the kernels that divide by
constants, take __mulhi/__umulhi or read bytes, all run on the interpreter from programs lowered for a
format without those ops (programs of such a format are ordinary machine programs)."""
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
from qgpu_min.machine.interp import MemoryFault
from qgpu_min.machine.isa import ALU_OPS, MACHINE_FORMAT, MEM_OPS, BlockFormat

# every ALU op but MULHU, in every slot
NO_MULHU = BlockFormat(pre_ops=(frozenset(ALU_OPS) - {"MULHU"},) * MACHINE_FORMAT.n_pre,
                       post_ops=(frozenset(ALU_OPS) - {"MULHU"},) * MACHINE_FORMAT.n_post)
SUBWORD_LOADS = frozenset({"LDB", "LDBU", "LDH", "LDHU"})
NO_SUBWORD = BlockFormat(mem_ops=frozenset(MEM_OPS) - SUBWORD_LOADS)
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


LOADS = r"""
__global__ void loads(const signed char* s, const unsigned char* u, const short* h, const unsigned short* uh,
                      int* out, int k) {
    int t = threadIdx.x;
    out[t] = s[t * 3 + k] + (u[t + k] << 8) + (h[t + k] << 16) + ((int)uh[t * 2 + k] << 3);
}"""


def _narrow(kernel, fmt: BlockFormat, entry: str | None = None):
    module = parse_ptx(kernel.ptx)
    return replace(kernel, program=lower(module, select_kernel(module, entry), fmt).program, fmt=fmt)


@pytest.mark.parametrize("compiler", COMPILERS)
def test_subword_load_expansion_exact(tmp_path, compiler: str) -> None:
    src = tmp_path / "loads.cu"
    src.write_text(LOADS)
    kernel = compile_kernel(src, compiler=compiler)
    narrow = _narrow(kernel, NO_SUBWORD)
    mem = {b.mem.op for b in narrow.program.blocks if b.mem is not None}
    assert mem and not mem & SUBWORD_LOADS
    rng = np.random.default_rng(3)
    for k in (0, 1, 2, 3):                  # every byte offset, and odd halfword indices
        s, u = rng.integers(-128, 128, 120).astype(np.int8), rng.integers(0, 256, 120).astype(np.uint8)
        h, uh = rng.integers(-32768, 32768, 40).astype(np.int16), rng.integers(0, 65536, 80).astype(np.uint16)
        args = [s, u, h, uh, np.zeros(32, np.int32), k]
        got = launch(narrow, [a.copy() if isinstance(a, np.ndarray) else a for a in args], block=32).arrays["out"]
        t = np.arange(32)
        want = (s[t * 3 + k].astype(np.int64) + (u[t + k].astype(np.int64) << 8) + (h[t + k].astype(np.int64) << 16)
                + (uh[t * 2 + k].astype(np.int64) << 3))
        assert got.tolist() == [int(np.int32(np.uint32(x & 0xFFFFFFFF))) for x in want]


def test_misaligned_halfword_still_faults(tmp_path) -> None:
    src = tmp_path / "odd.cu"
    src.write_text("__global__ void odd(const char* p, int* out) { out[0] = *(const short*)(p + 1); }\n")
    narrow = _narrow(compile_kernel(src), NO_SUBWORD)
    with pytest.raises(MemoryFault, match="misaligned"):
        launch(narrow, [[0] * 8, [0]], block=1)


@pytest.mark.parametrize("compiler", COMPILERS)
def test_suite_byte_readers_without_subword_loads_exact(compiler: str) -> None:
    for name in ("bytes-widen", "bytes-signed_bytes"):
        case = BY_ID[name]
        narrow = _narrow(_compiled(case, compiler), NO_SUBWORD, case.kernel)
        for shape in _default_shapes(case):
            run_case(case, compiler, shape, narrow)


def test_expansions_are_for_ops_the_machine_has() -> None:
    assert set(EXPANSIONS) <= set(ALU_OPS) | set(MEM_OPS)

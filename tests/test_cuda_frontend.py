"""Tests of the CUDA front end: compiler discovery and invocation, the prelude, and the PTX parser.

Representative kernels are compiled with every available compiler (zig's clang from the ziglang
wheel always; Debian's clang and nvcc when present) and the parsed PTX is checked for concrete
structure. Hand-written PTX (tests/ptx_samples/) covers forms a compiler run does not show.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from qgpu_min.cuda import compiler as cc
from qgpu_min.cuda.compiler import CompilerNotFoundError, CudaCompileError, compile_to_ptx, find_compiler
from qgpu_min.cuda.ptx import (
    FloatImm, Imm, Instr, KernelSelectError, Label, Mem, Pair, PtxParseError, Reg, SReg, Sym, Vec,
    demangle, parse_ptx, select_kernel, type_width,
)
from qgpu_min.errors import QgpuError
from qgpu_min.host.launch import compile_kernel, launch

SAMPLES = Path(__file__).parent / "ptx_samples"

KERNELS = r"""
#include <cuda_runtime.h>

__global__ void vadd(const int *a, const int *b, int *c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

__global__ void reduce(const int *in, int *out) {
  __shared__ int buf[64];
  unsigned t = threadIdx.x;
  buf[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) buf[t] += buf[t + s];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = buf[0];
}

__global__ void atomics(int *a, unsigned *u, int v) {
  atomicAdd(&a[0], v);
  atomicSub(&a[1], v);
  atomicMin(&a[2], v);
  atomicMax(&u[0], (unsigned)v);
  atomicExch(&a[3], v);
  atomicCAS(&a[4], 0, v);
  atomicAnd(&u[1], (unsigned)v);
  atomicOr(&u[2], (unsigned)v);
  atomicXor(&a[5], v);
}

__global__ void shuffles(int *a) {
  int v = a[threadIdx.x];
  v += __shfl_down_sync(0xffffffff, v, 1);
  v += __shfl_xor_sync(0xffffffff, v, 2);
  v += __shfl_up_sync(0xffffffff, v, 1);
  v += __shfl_sync(0xffffffff, v, 0);
  a[threadIdx.x] = v;
}

__device__ __noinline__ int scale(int x, int k) { return x * k + 1; }
__global__ void calls(int *a, int k) { a[threadIdx.x] = scale(a[threadIdx.x], k); }

__global__ void local_array(int *a, int n) {
  int tmp[8];
  for (int i = 0; i < 8; ++i) tmp[i] = a[i] * n;
  a[threadIdx.x] = tmp[(threadIdx.x + n) & 7];
}

__global__ void divloop(int *a, int d, unsigned ud) {
  int s = 0;
  for (int i = 0; i < d; ++i) s += a[i] / d + a[i] % (i + 1);
  a[threadIdx.x] = s + (unsigned)a[1] / ud;
}

__global__ void compares(int *a, unsigned *u, int x, unsigned y) {
  int t = threadIdx.x;
  if (a[t] < x) a[t] = 1;
  if (u[t] < y) u[t] = 2;
}

__global__ void matmul2d(const int *A, const int *B, int *C, int n) {
  int r = blockIdx.y * blockDim.y + threadIdx.y;
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < n && c < n) {
    int s = 0;
    for (int k = 0; k < n; ++k) s += A[r * n + k] * B[k * n + c];
    C[r * n + c] = s;
  }
}

__global__ void warpsize(int *a) { a[threadIdx.x] = warpSize; }

int main() {
  int *d;
  cudaMalloc(&d, 64 * sizeof(int));
  vadd<<<2, 32>>>(d, d, d, 64);
  dim3 grid(2, 2), block(4, 4);
  matmul2d<<<grid, block>>>(d, d, d, 8);
  cudaDeviceSynchronize();
  cudaFree(d);
  return 0;
}
"""


def _available() -> list:
    """Each compiler to test: zig's clang always (skip if the wheel is missing), others if present."""
    params = [pytest.param("zig", marks=pytest.mark.skipif(
        importlib.util.find_spec("ziglang") is None, reason="ziglang wheel not installed (pip install ziglang)"))]
    params.append(pytest.param("clang", marks=pytest.mark.skipif(
        shutil.which("clang") is None, reason="no clang on PATH (apt-get install clang)")))
    params.append(pytest.param("clang-19", marks=pytest.mark.skipif(
        shutil.which("clang-19") is None, reason="no clang-19 on PATH (apt-get install clang-19)")))
    params.append(pytest.param("nvcc", marks=pytest.mark.skipif(
        shutil.which("nvcc") is None, reason="no nvcc on PATH")))
    return params


# Stored PTX of KERNELS (see _regenerate_samples), so nvcc's and clang 14's output is parsed and checked
# even where those compilers are not installed: sample file -> (compiler that made it, the setting whose
# behaviour it shows).
STORED = {"kernels_nvcc.ptx": ("nvcc", "nvcc"), "kernels_clang14.ptx": ("clang-14", "clang")}


def _kernels_digest() -> str:
    return hashlib.sha256(KERNELS.encode()).hexdigest()[:16]


@pytest.fixture(scope="module", params=_available() + [f"stored:{name}" for name in STORED])
def compiled(request, tmp_path_factory):
    """(compiler setting, PtxResult, PtxModule) for KERNELS, compiled once per compiler (or stored)."""
    if request.param.startswith("stored:"):
        name = request.param.split(":", 1)[1]
        result = compile_to_ptx(SAMPLES / name)
        digest_line, compiler_line = result.text.split("\n", 2)[:2]
        assert digest_line == f"// KERNELS {_kernels_digest()}", f"{name} is stale: run python3 {__file__}"
        return STORED[name][1], replace(result, compiler=compiler_line[3:]), parse_ptx(result.text)
    src = tmp_path_factory.mktemp("cu") / "kernels.cu"
    src.write_text(KERNELS)
    result = compile_to_ptx(src, request.param)
    return request.param, result, parse_ptx(result.text)


def _regenerate_samples() -> None:
    """Rewrite the stored PTX of KERNELS with nvcc and clang 14 (run this file as a script)."""
    for name, (setting, _) in STORED.items():
        result = compile_to_ptx(KERNELS, setting)
        (SAMPLES / name).write_text(f"// KERNELS {_kernels_digest()}\n// {result.compiler}\n{result.text}")
        print(f"wrote {SAMPLES / name} ({result.compiler})")


def _instrs(fn):
    return [i for i in fn.body if isinstance(i, Instr)]


def _opcodes(fn) -> set[str]:
    return {i.opcode for i in _instrs(fn)}


def _operands(fn):
    for ins in _instrs(fn):
        for op in ins.operands:
            yield from (op.items if isinstance(op, Vec) else (op,))


def _ptr_bytes(address_size: int) -> int:
    return address_size // 8


# ---------------------------------------------------------------------------------------------
# Compiled kernels, per compiler
# ---------------------------------------------------------------------------------------------


def test_compiler_identity_and_address_size(compiled):
    setting, result, module = compiled
    expected = {"zig": ("zig clang ", 32), "clang": ("clang ", 32), "clang-19": ("clang 19.", 32),
                "nvcc": ("nvcc ", 64)}[setting]
    assert result.compiler.startswith(expected[0])
    assert result.address_size == module.address_size == expected[1]
    assert module.target.startswith("sm_75")
    assert float(module.version) >= 6.3


def test_all_kernels_found_by_plain_name(compiled):
    _, _, module = compiled
    names = ["vadd", "reduce", "atomics", "shuffles", "calls", "local_array", "divloop", "compares",
             "matmul2d", "warpsize"]
    assert sorted(k.demangled for k in module.kernels) == sorted(names)
    for name in names:
        fn = select_kernel(module, name)
        assert fn.is_kernel and fn.demangled == name and fn.name.startswith("_Z")
    assert select_kernel(module, "_Z4vaddPKiS0_Pii").demangled == "vadd"


def test_vadd_params_and_special_registers(compiled):
    _, result, module = compiled
    fn = select_kernel(module, "vadd")
    assert [p.name for p in fn.params] == [f"_Z4vaddPKiS0_Pii_param_{i}" for i in range(4)]
    assert [p.bytes for p in fn.params] == [_ptr_bytes(result.address_size)] * 3 + [4]
    assert all(type_width(p.type) == 8 * p.bytes for p in fn.params)
    assert {"ld", "st", "add", "setp"} <= _opcodes(fn)
    sregs = {op.name for op in _operands(fn) if isinstance(op, SReg)}
    assert {"%tid.x", "%ctaid.x", "%ntid.x"} <= sregs
    params_loaded = {op.base.name for op in _operands(fn) if isinstance(op, Mem) and isinstance(op.base, Sym)}
    assert params_loaded == {p.name for p in fn.params}


def test_reduce_shared_array_and_barrier(compiled):
    _, _, module = compiled
    fn = select_kernel(module, "reduce")
    shared = [d for d in fn.decls + module.globals if d.space == "shared"]
    assert len(shared) == 1 and shared[0].elem_bytes * shared[0].count == 64 * 4
    assert shared[0].align >= 4
    bars = [i for i in _instrs(fn) if i.opcode == "bar"]
    assert len(bars) >= 2 and all(i.mods[0] == "sync" for i in bars)
    assert any("shared" in i.mods for i in _instrs(fn) if i.opcode in ("ld", "st"))


def test_atomics(compiled):
    _, _, module = compiled
    fn = select_kernel(module, "atomics")
    ops = set()
    for ins in _instrs(fn):
        if ins.opcode in ("atom", "red"):
            ops |= set(ins.mods) & {"add", "min", "max", "exch", "cas", "and", "or", "xor"}
    assert ops == {"add", "min", "max", "exch", "cas", "and", "or", "xor"}


def test_shuffles(compiled):
    setting, _, module = compiled
    fn = select_kernel(module, "shuffles")
    shfl = [i for i in _instrs(fn) if i.opcode == "shfl"]
    assert sorted(i.mods[1] for i in shfl) == ["bfly", "down", "idx", "up"]
    assert all(i.mods[0] == "sync" and type_width(i.mods[-1]) == 32 for i in shfl)
    if setting != "nvcc":
        # our prelude: width 4, c = ((32 - 4) << 8) | clamp, clamp 31 (0 for up)
        c = {i.mods[1]: i.operands[3] for i in shfl}
        assert c == {"down": Imm(0x1C1F), "bfly": Imm(0x1C1F), "idx": Imm(0x1C1F), "up": Imm(0x1C00)}
    else:
        assert all(isinstance(i.operands[0], Pair) for i in shfl)  # nvcc writes %r|%p


def test_device_function_call(compiled):
    _, _, module = compiled
    fn = select_kernel(module, "calls")
    calls = [i for i in _instrs(fn) if i.opcode == "call"]
    assert len(calls) == 1
    ret, callee, args = calls[0].operands
    callee_fn = module.functions[callee.name]
    assert callee_fn.demangled == "scale" and not callee_fn.is_kernel
    assert isinstance(ret, Vec) and len(ret.items) == 1 and len(callee_fn.returns) == 1
    assert len(args.items) == len(callee_fn.params) >= 1
    assert {"call", "st", "ld"} <= _opcodes(fn) and "ret" in _opcodes(callee_fn)
    param_decls = [d.name for d in fn.decls if d.space == "param"]
    assert {a.name for a in args.items} <= set(param_decls)


def test_local_array(compiled):
    _, _, module = compiled
    fn = select_kernel(module, "local_array")
    local = [d for d in fn.decls if d.space == "local"]
    assert len(local) == 1 and local[0].elem_bytes * local[0].count >= 32
    assert any("local" in i.mods for i in _instrs(fn) if i.opcode in ("ld", "st"))


def test_division_in_loop(compiled):
    _, _, module = compiled
    fn = select_kernel(module, "divloop")
    divs = {(i.opcode, i.mods[-1]) for i in _instrs(fn) if i.opcode in ("div", "rem")}
    assert ("div", "s32") in divs and ("div", "u32") in divs and ("rem", "s32") in divs
    assert any(isinstance(i, Label) for i in fn.body)
    assert any(i.opcode == "bra" and i.pred is not None for i in _instrs(fn))


def test_signed_and_unsigned_compares(compiled):
    _, _, module = compiled
    fn = select_kernel(module, "compares")
    setps = {i.mods[-1][0] for i in _instrs(fn) if i.opcode == "setp" and i.mods[0] in ("lt", "ge", "gt", "le")}
    assert setps == {"s", "u"}


def test_2d_block(compiled):
    _, _, module = compiled
    fn = select_kernel(module, "matmul2d")
    sregs = {op.name for op in _operands(fn) if isinstance(op, SReg)}
    assert {"%tid.x", "%tid.y", "%ntid.x", "%ntid.y", "%ctaid.x", "%ctaid.y"} <= sregs
    assert "mad" in _opcodes(fn) or "mul" in _opcodes(fn)


def test_warpsize(compiled):
    setting, _, module = compiled
    fn = select_kernel(module, "warpsize")
    operands = list(_operands(fn))
    if setting == "nvcc":
        assert SReg("WARP_SZ") in operands  # nvcc leaves warpSize to the hardware
    else:
        assert Imm(4) in operands  # our prelude: warpSize is the constant 4


def test_every_instruction_names_its_source_line(compiled):
    _, result, module = compiled
    lines = result.text.split("\n")
    for fn in module.functions.values():
        for ins in _instrs(fn):
            first_word = ins.text.split()[0]
            assert first_word in lines[ins.line - 1], (ins.line, ins.text)
            assert ins.text.endswith(";")


HOST_PROGRAM = r"""
#include <iostream>
#include <vector>
#include <cstdio>
#include <cstdlib>
#include <climits>
#include <cstdint>
#include <cuda_runtime.h>
using namespace std;

__global__ void clampadd(int32_t *a, int n) {
  int i = threadIdx.x;
  if (i < n) a[i] = max(a[i], INT_MIN + 3);
}

__global__ void pick(int *a, int op) {
  int x = a[threadIdx.x];
  switch (op) {
    case 0: x += 1; break;
    case 1: x *= 3; break;
    case 2: x ^= 5; break;
    case 3: x -= 7; break;
    case 4: x <<= 1; break;
    default: x = 0;
  }
  a[threadIdx.x] = x;
}

int main() {
  vector<int> h = {1, 2, 3, 4};
  int *d;
  cudaMalloc(&d, h.size() * sizeof(int));
  cudaMemcpy(d, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice);
  clampadd<<<1, 4>>>(d, 4);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) { fprintf(stderr, "%s\\n", cudaGetErrorString(e)); exit(1); }
  cudaMemcpy(h.data(), d, 16, cudaMemcpyDeviceToHost);
  for (int x : h) cout << x << " ";
  cout << endl;
  cudaFree(d);
  return 0;
}
"""


@pytest.mark.parametrize("setting", [p for p in _available() if p.values[0] != "nvcc"])
def test_host_program_with_std_headers_compiles(setting):
    """A whole program (main with iostream, vector, cudaMalloc, <<<>>>) compiles device-only."""
    result = compile_to_ptx(HOST_PROGRAM, setting)
    module = parse_ptx(result.text)
    assert sorted(k.demangled for k in module.kernels) == ["clampadd", "pick"]
    assert Imm(-(2**31) + 3) in list(_operands(select_kernel(module, "clampadd")))
    pick = select_kernel(module, "pick")
    assert "brx" not in _opcodes(pick) and not pick.branch_targets  # -fno-jump-tables


PRELUDE_EXTRAS = r"""
#include <cstdio>
__global__ void extras(int *a, const int *b, unsigned *u) {
  int v = __ldg(&b[threadIdx.x]);
  unsigned bal = __ballot_sync(0xffffffff, v > 0);
  if (__any_sync(0xffffffff, v < 0)) v = -v;
  if (__all_sync(__activemask(), v > 5)) v += 1;
  __threadfence();
  __syncwarp();
  printf("v = %d\\n", v);
  int2 p = make_int2(v, 2 * v);
  a[threadIdx.x] = v + bal + p.y + __mulhi(v, 7) + abs(v) + max(v, 3) + min(u[0], 9u);
  u[threadIdx.x] = __umulhi(u[1], u[2]) + __popc(u[3]) + __clz(v) + __brev(u[4]) + __ffs(v) + atomicInc(u, 7u);
}
"""


@pytest.mark.parametrize("setting", [p for p in _available() if p.values[0] != "nvcc"])
def test_prelude_extras(setting):
    """Everything the prelude declares compiles on each clang and reaches PTX as the expected ops."""
    module = parse_ptx(compile_to_ptx(PRELUDE_EXTRAS, setting).text)
    fn = select_kernel(module, "extras")
    ops = {(i.opcode, i.mods[0] if i.mods else "") for i in _instrs(fn)}
    for op in [("vote", "sync"), ("activemask", "b32"), ("membar", "gl"), ("bar", "warp"), ("popc", "b32"),
               ("clz", "b32"), ("brev", "b32"), ("mul", "hi"), ("abs", "s32"), ("max", "s32"), ("min", "u32")]:
        assert op in ops, op
    assert any(i.opcode == "atom" and "inc" in i.mods for i in _instrs(fn))
    calls = [i for i in _instrs(fn) if i.opcode == "call"]
    assert [c.operands[1] for c in calls] == [Sym("vprintf")]  # device printf, left to the lowering


# ---------------------------------------------------------------------------------------------
# Compiler discovery and errors
# ---------------------------------------------------------------------------------------------


needs_zig = pytest.mark.skipif(importlib.util.find_spec("ziglang") is None, reason="ziglang wheel not installed")


@needs_zig
def test_invalid_cuda_shows_compiler_message():
    with pytest.raises(CudaCompileError) as info:
        compile_to_ptx("__global__ void f(int *a) { a[0] = undefined_name; }\n", "zig")
    err = info.value
    assert "kernel.cu:1:" in err.diagnostics and "undeclared identifier 'undefined_name'" in err.diagnostics
    assert err.diagnostics in str(err)


@needs_zig
def test_environment_variable_selects_compiler(monkeypatch):
    monkeypatch.setenv(cc.ENV_VAR, "zig")
    assert find_compiler().version.startswith("zig clang ")
    assert find_compiler("zig").argv[-2:] == ("ziglang", "clang")


def test_unknown_compiler_says_how_to_get_one():
    with pytest.raises(CompilerNotFoundError, match="pip install ziglang"):
        find_compiler("no-such-cuda-compiler-xyz")


def test_no_compiler_found(monkeypatch):
    monkeypatch.delenv(cc.ENV_VAR, raising=False)
    monkeypatch.setattr(cc, "_candidates", lambda: [])
    with pytest.raises(CompilerNotFoundError, match="apt-get install clang"):
        compile_to_ptx("__global__ void f(int *a) { a[0] = 1; }\n")


def test_discovery_order_prefers_clang_on_path_over_zig(monkeypatch):
    monkeypatch.delenv(cc.ENV_VAR, raising=False)
    order = [argv for argv, _ in cc._candidates()]
    zig = cc._zig_argv()
    if zig and shutil.which("clang++"):
        assert order.index((shutil.which("clang++"),)) < order.index(zig)
    if zig and shutil.which("nvcc"):
        assert order.index(zig) < order.index((shutil.which("nvcc"),))


def test_ptx_file_is_returned_unchanged(tmp_path):
    text = (SAMPLES / "handwritten.ptx").read_text()
    path = tmp_path / "k.ptx"
    path.write_text(text)
    result = compile_to_ptx(path)
    assert result.text == text and result.compiler == "ptx input" and result.address_size == 32
    assert compile_to_ptx(text).text == text  # PTX given as text


@needs_zig
def test_path_input_keeps_file_name_and_relative_includes(tmp_path):
    (tmp_path / "helper.cuh").write_text("__device__ inline int twice(int x) { return 2 * x; }\n")
    (tmp_path / "k.cu").write_text('#include "helper.cuh"\n__global__ void k(int *a) { a[0] = twice(a[1]); }\n')
    module = parse_ptx(compile_to_ptx(str(tmp_path / "k.cu"), "zig").text)
    assert select_kernel(module, None).demangled == "k"
    (tmp_path / "bad.cu").write_text("__global__ void k(int *a) { a[0] = nope; }\n")
    with pytest.raises(CudaCompileError) as info:
        compile_to_ptx(tmp_path / "bad.cu", "zig")
    assert f"{tmp_path / 'bad.cu'}:1:" in info.value.diagnostics


def test_missing_file_is_named(tmp_path):
    with pytest.raises(CudaCompileError, match="no such file"):
        compile_to_ptx(tmp_path / "absent.cu")


# ---------------------------------------------------------------------------------------------
# Parser on hand-written PTX
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def handwritten():
    return parse_ptx((SAMPLES / "handwritten.ptx").read_text())


def _instr_at(fn, text_prefix: str) -> Instr:
    return next(i for i in _instrs(fn) if i.text.startswith(text_prefix))


def test_module_header_and_globals(handwritten):
    m = handwritten
    assert (m.version, m.target, m.address_size) == ("7.0", "sm_75, debug", 32)
    table, dyn, one = m.globals
    assert (table.space, table.elem_bytes, table.count, table.init) == ("global", 4, 4, [1, -2, 16, 0])
    assert (dyn.space, dyn.count, dyn.init) == ("shared", 0, None)
    assert (one.space, one.count, one.init) == ("const", 1, [1])


def test_functions_params_and_regs(handwritten):
    k = select_kernel(handwritten, None)
    assert k.name == "k" and k.demangled == "k"
    assert [(p.name, p.type, p.bytes) for p in k.params] == [("k_param_0", "u32", 4), ("k_param_1", "b8", 12),
                                                                  ("k_param_2", "u32", 4)]
    assert [(r.prefix, r.type, r.count) for r in k.regs] == [("%p", "pred", 3), ("%r", "b32", 20), ("%SP", "b32", None),
                                                            ("%fd", "f64", 2), ("p", "pred", None)]
    assert [(d.space, d.name) for d in k.decls] == [("local", "__local_depot0"), ("param", "param0"), ("param", "retval0")]
    twice = handwritten.functions["twice"]
    assert not twice.is_kernel and [p.name for p in twice.returns] == ["func_retval0"]
    assert handwritten.functions["noop"].params == []


def test_operand_forms(handwritten):
    k = handwritten.functions["k"]
    assert _instr_at(k, "@!%p1").pred == ("%p1", True) and _instr_at(k, "@!%p1").operands == (Sym("$L__BB0_2"),)
    assert _instr_at(k, "@%p2 st").pred == ("%p2", False)
    assert _instr_at(k, "setp").operands[2] == Imm(255)
    assert _instr_at(k, "mov.u32 %r3").operands[1] == SReg("WARP_SZ")
    v2 = _instr_at(k, "ld.global.v2")
    assert v2.mods == ("global", "v2", "u32")
    assert v2.operands == (Vec((Reg("%r4"), Reg("%r5"))), Mem(Reg("%r1"), -8))
    assert _instr_at(k, "ld.global.v4").operands == (Vec((Reg("%r6"), Sym("_"), Reg("%r7"), Sym("_"))), Mem(Sym("table"), 4))
    assert _instr_at(k, "mov.b32 %r8").operands[1] == FloatImm(0x3F800000, 32)
    assert _instr_at(k, "mov.f64 %fd1").operands[1] == FloatImm(0x3FF8000000000000, 64)
    assert _instr_at(k, "setp.lt.s32 %p1|").operands[0] == Pair(Reg("%p1"), Reg("%p2"))
    assert _instr_at(k, "add.s32 %r9").operands[2] == Imm(-15)  # octal 017
    assert _instr_at(k, "shfl").operands[0] == Pair(Reg("%r10"), Reg("%p2"))
    # inline asm may declare registers without '%'
    assert _instr_at(k, "setp.ne.b32 p").operands == (Reg("p"), Reg("%r2"), Imm(0))
    assert _instr_at(k, "@p add").pred == ("p", False)


def test_calls(handwritten):
    k = handwritten.functions["k"]
    calls = [i for i in _instrs(k) if i.opcode == "call"]
    assert calls[0].operands == (Vec((Sym("retval0"),)), Sym("twice"), Vec((Sym("param0"),)))
    assert calls[0].mods == ("uni",) and calls[0].text == "call.uni (retval0), twice, ( param0 );"
    assert calls[1].operands == (None, Sym("noop"), Vec(()))


def test_jump_table(handwritten):
    k = handwritten.functions["k"]
    assert k.branch_targets == {"$L_brx_0": ("$L__BB0_2", "$L__BB0_2")}
    assert _instr_at(k, "brx.idx").operands == (Reg("%r2"), Sym("$L_brx_0"))


def test_labels_lines_and_skipped_directives(handwritten):
    k = handwritten.functions["k"]
    lines = (SAMPLES / "handwritten.ptx").read_text().split("\n")
    labels = [i for i in k.body if isinstance(i, Label)]
    assert [(l.name, lines[l.line - 1].strip()) for l in labels] == [("$L__BB0_2", "$L__BB0_2:")]
    ld = _instr_at(k, "ld.param.u32 %r1")
    assert lines[ld.line - 1].strip() == ld.text == "ld.param.u32 %r1, [k_param_0];"
    assert all(i.opcode not in ("loc", "pragma") for i in _instrs(k))


@pytest.mark.parametrize("text, line, what", [
    (".version 7.0\n.target sm_75\n.entry k()\n{\n\tadd.s32 %r1, %r2, ;\n}\n", 5, "unexpected ';'"),
    (".version 7.0\n.entry k()\n{\n\tmov.u32 %r1, 12abc;\n}\n", 4, "malformed integer"),
    (".version 7.0\n.entry k()\n{\n\t.reg .b32 %r<2>;\n\tld.global.u32 %r1, [%r2;\n}\n", 5, "expected ']'"),
    (".version 7.0\n.entry k()\n{\n\tmov.u32 %r1, #3;\n}\n", 4, "unexpected character"),
    (".version 7.0\n.entry k()\n{\n\tret;\n", 2, "function k has no closing brace"),
    (".version 7.0\n.global .u32 g[2] = {1, 2, 3};\n", 2, "3 initial values for 2 elements"),
    (".version 7.0\n.entry k()\n{\n\t.bogus 1;\n}\n", 4, "unknown directive"),
    (".version 7.0\n.entry k(.param .b32 )\n{\n}\n", 2, "expected a parameter name"),
    (".version 7.0\n.entry k()\n{\n\t.reg .b32 ;\n}\n", 4, "expected a register name"),
    (".version 7.0\n.entry k()\n{\n\tmov.u32 %r1 %r2;\n}\n", 4, "expected ','"),
    (".version 7.0\n.entry k()\n{\n\t@%p1;\n}\n", 4, "expected an instruction"),
    (".version 7.0\n.address_size 48\n", 2, "address size 48"),
    (".version 7.0\n.entry k()\n{\n\tcall (r), %r1, (a), proto;\n}\n", 4, "indirect calls"),
])
def test_malformed_ptx_names_the_line(text, line, what):
    with pytest.raises(PtxParseError) as info:
        parse_ptx(text)
    assert f"line {line}" in str(info.value) and what in str(info.value)


def test_not_ptx():
    with pytest.raises(PtxParseError, match="no .version"):
        parse_ptx("")


# ---------------------------------------------------------------------------------------------
# Names and types
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mangled, plain", [
    ("_Z4vaddPKiS0_Pii", "vadd"),
    ("_Z2tkIiEvPT_", "tk"),
    ("_ZN2ns5innerEPsPcPh", "ns::inner"),
    ("_ZN2ns3fooIiEEvPi", "ns::foo"),
    ("_ZL6staticv", "static"),
    ("plain_c_name", "plain_c_name"),
    ("_Z", "_Z"),
    ("_Z99short", "_Z99short"),
    ("_Z5scaleILi3EEvPii", "scale"),
    ("_ZN2ns3fooILi12EEEvPi", "ns::foo"),
    ("_ZN3FooIiE3barEv", "Foo::bar"),
])
def test_demangle(mangled, plain):
    assert demangle(mangled) == plain


@pytest.mark.parametrize("mangled, full", [
    ("_Z5scaleILi3EEvPii", "scale<3>"),
    ("_Z5scaleILin7EEvPii", "scale<-7>"),
    ("_Z9block_sumILi16EEvPKiPi", "block_sum<16>"),
    ("_Z2tkIiEvPT_", "tk<int>"),
    ("_ZN2ns3fooILi12EEEvPi", "ns::foo<12>"),
    ("_ZN3FooIiE3barEv", "Foo<int>::bar"),
    ("_Z1fILj4ELb1ELs3ELy5EEvv", "f<4u, true, (short)3, 5ull>"),
    ("_Z1fIPKijEvv", "f<int const*, unsigned int>"),
    ("_Z1fI3BoxI4PairIiiEEEvv", "f<Box<Pair<int, int> > >"),
    ("_Z4vaddPKiS0_Pii", "vadd"),
    # arguments beyond literals and simple types (a substitution): the base name, as without template_args
    ("_Z1fI4PairIiS0_EEvv", "f"),
    ("_Z", "_Z"),
])
def test_demangle_with_template_args(mangled, full):
    assert demangle(mangled, template_args=True) == full


def _module_with(*names: str):
    body = "".join(f".visible .entry {n}()\n{{\n\tret;\n}}\n" for n in names)
    return parse_ptx(".version 7.0\n.target sm_75\n.address_size 32\n" + body)


def test_select_kernel_errors_list_the_kernels():
    m = _module_with("_Z3addPi", "_Z3subPi")
    with pytest.raises(KernelSelectError, match=r"no kernel named 'mul'.*add \(_Z3addPi\), sub \(_Z3subPi\)"):
        select_kernel(m, "mul")
    with pytest.raises(KernelSelectError, match="2 kernels; choose one with --kernel"):
        select_kernel(m, None)
    assert select_kernel(m, "sub").name == "_Z3subPi"


def test_select_kernel_by_template_arguments():
    m = _module_with("_Z5scaleILi3EEvPii", "_Z5scaleILin7EEvPii", "_Z9block_sumILi16EEvPKiPi",
                     "_ZN2ns3fooILi2EEEvPi")
    assert select_kernel(m, "scale<3>").name == "_Z5scaleILi3EEvPii"
    assert select_kernel(m, "scale< -7 >").name == "_Z5scaleILin7EEvPii"
    assert select_kernel(m, "block_sum").name == "_Z9block_sumILi16EEvPKiPi"   # one instantiation
    assert select_kernel(m, "block_sum<16>").name == "_Z9block_sumILi16EEvPKiPi"
    assert select_kernel(m, "foo<2>").name == select_kernel(m, "ns::foo<2>").name == "_ZN2ns3fooILi2EEEvPi"
    with pytest.raises(KernelSelectError, match=r"'scale' is ambiguous.*scale<3> \(_Z5scaleILi3EEvPii\), "
                                                r"scale<-7> \(_Z5scaleILin7EEvPii\); pass the name with its tem"):
        select_kernel(m, "scale")
    with pytest.raises(KernelSelectError, match=r"no kernel named 'scale<4>'.*block_sum<16> \(_Z9block"):
        select_kernel(m, "scale<4>")


def test_select_kernel_overloads_are_ambiguous():
    m = _module_with("_Z1fPi", "_Z1fPj")
    with pytest.raises(KernelSelectError, match="ambiguous"):
        select_kernel(m, "f")
    assert select_kernel(m, "_Z1fPj").name == "_Z1fPj"
    with pytest.raises(KernelSelectError, match="no kernels"):
        select_kernel(parse_ptx(".version 7.0\n"), None)


@pytest.mark.parametrize("mod, width", [
    ("s32", 32), ("u64", 64), ("b16", 16), (".u8", 8), ("pred", 1), ("f32", 32), ("f64", 64),
    ("b128", 128), ("global", None), ("wide", None), ("lo", None),
])
def test_type_width(mod, width):
    assert type_width(mod) == width


if __name__ == "__main__":
    _regenerate_samples()


# ---------------------------------------------------------------------------------------------
# Prelude additions that nvcc's headers have (user trial, issue #2): compiled AND run on the
# interpreter with zig clang and nvcc, checked against NumPy
# ---------------------------------------------------------------------------------------------


def _zig_and_nvcc() -> list:
    return [p for p in _available() if p.values[0] in ("zig", "nvcc")]


def _run(src: str, kernel: str, setting: str, args: list, grid=(1, 1), block=(4, 1)) -> dict:
    k = compile_kernel(src, kernel, setting)
    return launch(k, args, grid=grid, block=block).arrays


LIMITS_SRC = r"""
__global__ void limits(int *o, long long *w) {
  o[0] = INT_MIN; o[1] = INT_MAX; o[2] = (int)UINT_MAX; o[3] = SHRT_MIN; o[4] = SCHAR_MAX; o[5] = CHAR_BIT;
  w[0] = LLONG_MAX; w[1] = LLONG_MIN; w[2] = (long long)(ULLONG_MAX >> 1);
}
"""


@pytest.mark.parametrize("setting", _zig_and_nvcc())
def test_limits_without_include(setting):
    out = _run(LIMITS_SRC, "limits", setting, [[0] * 6, [0] * 3], block=(1, 1))
    assert out["o"].tolist() == [-2**31, 2**31 - 1, -1, -2**15, 127, 8]
    assert out["w"].tolist() == [2**63 - 1, -2**63, 2**63 - 1]


ATOMIC64_SRC = r"""
__global__ void atomic64(const int *x, unsigned long long *u, long long *s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  long long v = (long long)x[i] * 1000003;
  atomicAdd(&u[0], (unsigned long long)(v * v));
  atomicMin(&u[1], (unsigned long long)v);
  atomicMax(&u[2], (unsigned long long)v);
  atomicAnd(&u[3], (unsigned long long)v);
  atomicOr(&u[4], (unsigned long long)v);
  atomicXor(&u[5], (unsigned long long)v);
  atomicAdd(&u[6], atomicExch(&u[7], (unsigned long long)v << 20));   // u[6] + u[7] ends as a known sum
  unsigned long long seen = u[8], want;
  do {  // the usual CAS loop: add (i + 1) << 33, retrying while another thread got there first
    want = seen;
    seen = atomicCAS(&u[8], want, want + ((unsigned long long)(i + 1) << 33));
  } while (seen != want);
  atomicMin(&s[0], v);
  atomicMax(&s[1], v);
}
"""


@pytest.mark.parametrize("setting", _zig_and_nvcc())
def test_atomic64(setting):
    rng = np.random.default_rng(7)
    n = 40
    x = rng.integers(-50000, 50000, n)
    v = x.astype(np.int64) * 1000003
    vu = v.astype(np.uint64)
    u0 = [3, 2**32 - 1, 0, 2**32 - 1, 0, 0, 0, 5, 0]
    out = _run(ATOMIC64_SRC, "atomic64", setting, [x, u0, [0, 0], n], grid=(2, 1), block=(32, 1))
    u, s = out["u"], out["s"]
    assert u[0] == np.uint64(3) + np.sum(vu * vu, dtype=np.uint64)
    assert u[1] == min(np.uint64(2**32 - 1), vu.min()) and u[2] == vu.max()
    assert u[3] == np.bitwise_and.reduce(vu) & np.uint64(2**32 - 1)
    assert u[4] == np.bitwise_or.reduce(vu) and u[5] == np.bitwise_xor.reduce(vu)
    # every value put into u[7] (5 and each v << 20) is taken out once by a later exchange, but the last
    assert u[6] + u[7] == np.uint64(5) + np.sum(vu << np.uint64(20), dtype=np.uint64)
    assert u[7] in set((vu << np.uint64(20)).tolist())
    assert int(u[8]) == sum((i + 1) << 33 for i in range(n))
    assert s.tolist() == [min(0, v.min()), max(0, v.max())]


SYNC_VOTES_SRC = r"""
__global__ void sync_votes(const int *x, int *out) {
  __shared__ int sh[32];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  sh[t] = x[i] * 3;
  int cnt = __syncthreads_count(x[i] > 0);
  int all = __syncthreads_and(x[i] != 0);
  int any = __syncthreads_or(x[i] < -5);
  // a neighbour's shared write must be visible after the barrier, as after __syncthreads()
  out[i] = cnt * 10000 + all * 1000 + any * 100 + sh[(t + 1) % blockDim.x];
}
"""


@pytest.mark.parametrize("setting", _zig_and_nvcc())
def test_syncthreads_count_and_or(setting):
    rng = np.random.default_rng(3)
    block, grid = 12, 3
    x = rng.integers(-6, 6, grid * block)
    x[block:2 * block] = np.abs(x[block:2 * block]) + 1   # one block where every value is positive
    out = _run(SYNC_VOTES_SRC, "sync_votes", setting, [x, np.zeros_like(x)], grid=(grid, 1), block=(block, 1))
    xb = x.reshape(grid, block)
    expect = ((xb > 0).sum(1, keepdims=True) * 10000 + (xb != 0).all(1, keepdims=True) * 1000
              + (xb < -5).any(1, keepdims=True) * 100 + np.roll(xb, -1, axis=1) * 3)
    assert out["out"].tolist() == expect.ravel().tolist()


BITS_SRC = r"""
__global__ void bits(const unsigned *a, const unsigned *b, const unsigned *s, unsigned *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned *o = out + 5 * i;
  o[0] = __byte_perm(a[i], b[i], 0x3715);
  o[1] = __funnelshift_l(a[i], b[i], s[i]);
  o[2] = __funnelshift_r(a[i], b[i], s[i]);
  o[3] = __funnelshift_lc(a[i], b[i], s[i]);
  o[4] = __funnelshift_rc(a[i], b[i], s[i]);
}
__global__ void byte_perm_var(const unsigned *a, const unsigned *b, const unsigned *s, unsigned *out) {
  int i = threadIdx.x;
  out[i] = __byte_perm(a[i], b[i], s[i]);
}
"""


def _byte_perm(x: int, y: int, s: int) -> int:
    pair = (y << 32) | x
    return sum(((pair >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i) for i in range(4))


def _bits_inputs(n: int):
    rng = np.random.default_rng(11)
    a, b = rng.integers(0, 2**32, n), rng.integers(0, 2**32, n)
    s = np.concatenate([np.arange(0, 70, 3)[:n - 4], [31, 32, 33, 0xFFFF]]).astype(np.int64)
    return a, b, s


@pytest.mark.parametrize("setting", _zig_and_nvcc())
def test_byte_perm_and_funnel_shifts(setting):
    n = 24
    a, b, s = _bits_inputs(n)
    out = _run(BITS_SRC, "bits", setting, [a, b, s, np.zeros(5 * n, np.int64), n], block=(n, 1))
    expect = []
    for x, y, k in zip(a.tolist(), b.tolist(), s.tolist()):
        pair, c = (y << 32) | x, min(k, 32)
        expect += [_byte_perm(x, y, 0x3715), ((pair << (k & 31)) >> 32) & 0xFFFFFFFF,
                   (pair >> (k & 31)) & 0xFFFFFFFF, ((pair << c) >> 32) & 0xFFFFFFFF, (pair >> c) & 0xFFFFFFFF]
    assert out["out"].tolist() == expect


NVCC_PRMT = ("nvcc compiles __byte_perm with a selector known only at run time to `prmt.b32` with a register "
             "selector, which the lowering supports only as a constant (lowering owner)")


@pytest.mark.parametrize("setting", [
    pytest.param(p.values[0], marks=[*p.marks, *([pytest.mark.xfail(reason=NVCC_PRMT, raises=QgpuError, strict=True)]
                                                 if p.values[0] == "nvcc" else [])])
    for p in _zig_and_nvcc()])
def test_byte_perm_with_a_runtime_selector(setting):
    a, b, s = _bits_inputs(24)
    out = _run(BITS_SRC, "byte_perm_var", setting, [a, b, s, np.zeros(24, np.int64)], block=(24, 1))
    assert out["out"].tolist() == [_byte_perm(x, y, k) for x, y, k in zip(a.tolist(), b.tolist(), s.tolist())]


TEMPLATE_SRC = r"""
#include "device_launch_parameters.h"
template <int N> __global__ void scale(int *a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = a[i] * N + N;
}
template __global__ void scale<3>(int *, int);
template __global__ void scale<-7>(int *, int);
"""


@pytest.mark.parametrize("setting", _zig_and_nvcc())
@pytest.mark.parametrize("kernel, factor", [("scale<3>", 3), ("scale<-7>", -7)])
def test_template_kernel_selected_by_demangled_name(setting, kernel, factor):
    a = np.arange(-5, 7)
    out = _run(TEMPLATE_SRC, kernel, setting, [a, len(a)], block=(16, 1))
    assert out["a"].tolist() == (a * factor + factor).tolist()


FUNNEL_CONST_SRC = r"""
__global__ void funnel_const(const unsigned *a, const unsigned *b, unsigned *out) {
  int i = threadIdx.x;
  out[2 * i] = __funnelshift_l(a[i], b[i], 5);
  out[2 * i + 1] = __funnelshift_r(a[i], b[i], 37);
}
"""


@pytest.mark.parametrize("setting", _zig_and_nvcc())
def test_funnel_shifts_by_constants(setting):
    rng = np.random.default_rng(5)
    a, b = rng.integers(0, 2**32, 8), rng.integers(0, 2**32, 8)
    out = _run(FUNNEL_CONST_SRC, "funnel_const", setting, [a, b, np.zeros(16, np.int64)], block=(8, 1))
    pair = [(int(y) << 32) | int(x) for x, y in zip(a, b)]
    expect = [w for p in pair for w in (((p << 5) >> 32) & 0xFFFFFFFF, (p >> 5) & 0xFFFFFFFF)]
    assert out["out"].tolist() == expect

"""Token-aware lowering (isa.BlockFormat.writeback_cost, the GPU in the weights' format): constants are
recomputed where they are read instead of being kept in registers (lower_remat, lower._pack), so fewer
registers are written back. Every suite kernel lowered this way stays exact on the interpreter, on the
suite's seeded random inputs, and the README dot launch costs a pinned number of generated tokens."""
from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
import pytest

from kernel_suite import CASES, Case
from test_kernel_suite import _compiled, _default_shapes, run_case
from qgpu_min.cuda.lower import lower
from qgpu_min.cuda.ptx import parse_ptx, select_kernel
from qgpu_min.gpu.check import expected_tokens
from qgpu_min.gpu.layout import GpuSpec
from qgpu_min.gpu.program import block_format, prompt
from qgpu_min.host.launch import CompiledKernel, build_image, compile_kernel, for_format, launch
from qgpu_min.machine.isa import (MACHINE_FORMAT, BlockFormat, CapacityError, check_block_format, decode,
                                  encode)

SPEC = GpuSpec()
GPU = block_format(SPEC)
# the machine's own slots, but paying for write-backs: every suite kernel fits it
WIDE = replace(MACHINE_FORMAT, writeback_cost=True)
DOT_ARGS = [[1, 2, 3], [4, 5, 6], [0], 3]
DOT_GENERATED = 46          # was 85 before the token-aware lowering
DOT_PROMPT = 305            # was 363; init tokens: one per warp of the block; +6 clear (128 ROM blocks)


@functools.cache
def _lowered(case: Case, fmt: BlockFormat) -> CompiledKernel:
    kernel = _compiled(case, "zig")
    module = parse_ptx(kernel.ptx)
    return replace(kernel, program=lower(module, select_kernel(module, case.kernel), fmt).program, fmt=fmt)


def _tokens(kernel: CompiledKernel, args: list, threads: int) -> tuple[int, int]:
    """(prompt, generated) tokens of a launch on the GPU in the weights, from the --check oracle."""
    image = build_image(kernel, args, (threads, 1))
    return (len(prompt(image.program, image.memory, threads, SPEC)),
            len(expected_tokens(image.program, image.memory, threads, SPEC)))


@pytest.mark.parametrize("fmt", [WIDE, GPU], ids=["wide", "gpu"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_writeback_cost_lowering_exact(case: Case, fmt: BlockFormat) -> None:
    try:
        kernel = _lowered(case, fmt)
    except CapacityError as e:          # an op or size the GPU's format lacks: refused, as before
        assert fmt is GPU, e
        pytest.skip(str(e))
    check_block_format(kernel.program, fmt)
    assert decode(encode(kernel.program)).blocks == [replace(b, note="", lines=()) for b in kernel.program.blocks]
    for shape in _default_shapes(case):
        run_case(case, "zig", shape, kernel)


def test_machine_format_unchanged_by_the_flag_default() -> None:
    """Without writeback_cost nothing of the new lowering runs (the interpreter's programs stay as they were)."""
    case = next(c for c in CASES if c.id == "vec_add")
    assert (encode(_lowered(case, MACHINE_FORMAT).program) == encode(_compiled(case, "zig").program)).all()


def test_dot_token_count_pinned() -> None:
    k = for_format(compile_kernel("examples/dot.cu"), GPU)
    p, g = _tokens(k, DOT_ARGS, 3)
    assert g <= 47 and g == DOT_GENERATED, (p, g)
    assert p == DOT_PROMPT


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_dot_token_count_on_the_circuit_backend(mode: str) -> None:
    """The same numbers from the model itself (launch() lowers for the circuit's format), every token
    checked against the interpreter."""
    r = launch(compile_kernel("examples/dot.cu"), DOT_ARGS, block=3, backend="circuit", mode=mode, check=True)
    assert r.arrays["out"].tolist() == [32]
    assert r.tokens == {"prompt": DOT_PROMPT, "generated": DOT_GENERATED}


# ---- each transformation on its own, against the machine-format lowering on random inputs ------------

REMAT = r"""
__global__ void k(const int* a, int* out, int n, int c) {
    int t = threadIdx.x, s = 0;
    for (int i = t; i < n; i += blockDim.x) s += a[i] * c + n;
    if (t < n) out[t] = s + c;
}"""
IV_IMM = r"""
__global__ void k(const int* a, const int* b, int* out, int n) {
    for (int i = threadIdx.x; i < n; i += 3) out[i] = a[i] - b[i];
}"""
IV_REG = r"""
__global__ void k(const int* a, const int* b, int* out, int n) {
    int sum = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) sum += a[i] * b[i];
    atomicAdd(out, sum);
}"""


def _spy(monkeypatch, name: str) -> list[int]:
    """Record what the lowering's step ``name`` returns (how often it changed the code)."""
    import qgpu_min.cuda.lower as lower_module
    calls: list[int] = []
    real = getattr(lower_module, name)

    def wrapped(*args, **kwargs):
        calls.append(real(*args, **kwargs))
        return calls[-1]
    monkeypatch.setattr(lower_module, name, wrapped)
    return calls


def _same_on_random_inputs(source: str, make, seeds: int = 12) -> None:
    """The GPU-format lowering of ``source`` computes what the machine-format one does, on the
    interpreter, for random arguments (``make(rng) -> (args, threads)``)."""
    machine = compile_kernel(source)
    gpu = for_format(machine, GPU)
    check_block_format(gpu.program, GPU)
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        args, threads = make(rng)
        want = launch(machine, [list(a) if isinstance(a, list) else a for a in args], block=threads)
        got = launch(gpu, [list(a) if isinstance(a, list) else a for a in args], block=threads)
        for name, arr in want.arrays.items():
            assert got.arrays[name].tolist() == arr.tolist(), (seed, name)


def _ints(rng, n: int) -> list[int]:
    return rng.integers(-(1 << 31), 1 << 31, size=n).tolist()


def test_remat_of_parameters_and_specials(monkeypatch) -> None:
    copies = _spy(monkeypatch, "rematerialise")

    def make(rng):
        n = int(rng.integers(0, 9))
        return [_ints(rng, 8), [0] * 4, n, int(rng.integers(-(1 << 31), 1 << 31))], int(rng.integers(1, 5))
    _same_on_random_inputs(REMAT, make)
    assert copies and copies[-1] > 0
    program = for_format(compile_kernel(REMAT), GPU).program
    # parameters are bound into the slots that read them: no block only copies parameters to registers
    assert not any(b.instrs() and all(i.op == "ADD" and i.ra == 15 and i.bimm for i in b.instrs())
                   for b in program.blocks)


@pytest.mark.parametrize("source", [IV_IMM, IV_REG], ids=["imm-step", "reg-step"])
def test_derived_counter_recomputed(monkeypatch, source: str) -> None:
    folded = _spy(monkeypatch, "fold_derived_ivs")
    is_dot = source is IV_REG

    def make(rng):
        n = int(rng.integers(0, 13))
        last = [[0]] if is_dot else [[0] * 12]
        return [_ints(rng, 12), _ints(rng, 12)] + last + [n], int(rng.integers(1, 5))
    _same_on_random_inputs(source, make)
    assert folded and folded[-1] >= 1


def test_known_constants_and_zero_registers(monkeypatch) -> None:
    """dot: `sum = 0` is written by clang before the loop and again on the path that skips it; the
    second goes before allocation, the first because sum's register starts at 0."""
    dropped = _spy(monkeypatch, "drop_known_constants")
    moved = _spy(monkeypatch, "recolour_zero_inits")

    def make(rng):
        return [_ints(rng, 12), _ints(rng, 12), [int(rng.integers(-99, 99))], int(rng.integers(0, 13))], \
            int(rng.integers(1, 5))
    _same_on_random_inputs(IV_REG, make)
    assert moved and moved[-1] >= 1
    assert sum(dropped) >= 2


SAXPY_LIKE = r"""
extern "C" __global__ void k(int n, int a, const int* x, int* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}"""


def test_jump_to_exit_becomes_exit(monkeypatch) -> None:
    replaced = _spy(monkeypatch, "exit_directly")

    def make(rng):
        return [int(rng.integers(0, 6)), int(rng.integers(-(1 << 31), 1 << 31)), _ints(rng, 4), _ints(rng, 4)], \
            int(rng.integers(1, 5))
    _same_on_random_inputs(SAXPY_LIKE, make)
    assert replaced and replaced[-1] >= 1
    program = for_format(compile_kernel(SAXPY_LIKE), GPU).program
    store = next(b for b in program.blocks if b.mem is not None and b.mem.op == "ST")
    assert store.term.kind == "EXIT"


@pytest.mark.parametrize("name, args, threads, before", [
    ("dot", DOT_ARGS, 3, 85), ("saxpy", [4, 3, [1, 2, 3, 4], [10, 20, 30, 40]], 4, 65)])
def test_readme_launches_cost_fewer_tokens(name: str, args: list, threads: int, before: int) -> None:
    machine = compile_kernel(f"examples/{name}.cu")
    gpu = for_format(machine, GPU)
    assert _tokens(gpu, args, threads)[1] < before
    got = launch(gpu, args, block=threads).arrays
    for k, v in launch(machine, args, block=threads).arrays.items():
        assert got[k].tolist() == v.tolist(), k


import test_user_kernels as user  # noqa: E402  (after the helpers above: it is only needed here)


@pytest.mark.parametrize("case", [c for c in user.CASES if "zig" not in c.xfail], ids=lambda c: c.id)
def test_user_kernels_writeback_cost_exact(case) -> None:
    """The user-trial kernels (whole programs, locks, 64-bit atomics, ...) lowered with writeback_cost on the
    machine's slots compute what NumPy expects, on the interpreter, on their seeded random inputs."""
    base = user._compiled(case.file, case.kernel, "zig")
    module = parse_ptx(base.ptx)
    kernel = replace(base, program=lower(module, select_kernel(module, base.entry or None), WIDE).program, fmt=WIDE)
    for shape in case.shapes:
        args = user._args(case, shape)
        r = launch(kernel, [a.copy() if isinstance(a, np.ndarray) else a for a in args], grid=shape[0],
                   block=shape[1], step_limit=case.step_limit)
        user._check(case, args, shape, list(r.arrays.values()))


def test_packing_keeps_a_chain_of_local_values_from_crossing_chunks() -> None:
    """lower._pack with the room rule: a chain of block-local values (the division's search: ks = k + s,
    t = n >> ks, c = t < d, k = c ? k : ks, five times) is cut where only the small k crosses, never after
    the wide t; the packing chosen costs fewer tokens than the one without the rule."""
    from qgpu_min.cuda.lower import _best_pack, _chunk_cost, _pack
    from qgpu_min.cuda.lower_ir import V
    from qgpu_min.machine.isa import ZERO, Instr
    n, d, k, ks, t, c = 1, 2, 3, 4, 5, 6
    ops = []
    for s in (16, 8, 4, 2, 1):
        ops += [Instr("ADD", ks, k, imm=s, bimm=True), Instr("SHR", t, n, ks), Instr("SLTU", c, t, d),
                Instr("SEL", k, c, k, rc=ks)]
    slots = [(i, V(i.op)) for i in ops]
    local = set(range(len(ops) - 1))                  # every value but the last k stays in the block
    with_rule = _pack(slots, GPU, ZERO, {}, local, True)
    without = _pack(slots, GPU, ZERO, {}, local, False)
    for pre, mem, post in with_rule[:-1]:
        assert [x for x in pre + post if x][-1][0].op != "SHR", "the wide t crosses into the next chunk"
    assert _chunk_cost(with_rule, {k}) < _chunk_cost(without, {k})
    assert _chunk_cost(_best_pack(slots, GPU, ZERO, {}, local, {k}), {k}) == _chunk_cost(with_rule, {k})

"""Lowering to a narrower block format (isa.BlockFormat): the default format changes nothing, a restricted
one (3 typed pre slots, 2 post slots, at most 4 live-in reads) gives programs that obey it, are longer, and
still compute every checked suite kernel exactly on the interpreter."""
from __future__ import annotations

import functools
from dataclasses import replace

import pytest

from compilers import needs
from kernel_suite import CASES, Case
from test_kernel_suite import _compiled, _default_shapes, run_case
from qgpu_min.cuda.lower import lower
from qgpu_min.cuda.ptx import parse_ptx, select_kernel
from qgpu_min.host.launch import CompiledKernel
from qgpu_min.machine.isa import (LOAD_OPS, MACHINE_FORMAT, MEM_OPS, N_POST, N_PRE, Block, BlockFormat,
                                  CapacityError, Instr, MachineError, Program, Term, check_block_format,
                                  cross_lane_source, decode, encode)

ARITH = frozenset({"ADD", "SUB", "SEQ", "SNE", "SLT", "SLE", "SLTU", "SLEU"})
LOGIC = frozenset({"AND", "OR", "XOR", "SHL", "SHR", "SRA"})
NARROW = BlockFormat(n_pre=3, n_post=2, pre_ops=(ARITH, LOGIC, None), post_ops=(ARITH | LOGIC, None), max_reads=4)
# the machine's own limits spelt out: exercises the typed-slot and read-count paths without narrowing
PERMISSIVE = BlockFormat(N_PRE, N_POST, (None,) * N_PRE, (None,) * N_POST, max_reads=64,
                         mem_ops=frozenset(MEM_OPS))

# loads/stores, a barrier, shuffles, atomics, loops, the division loop, bit expansions, 64-bit pairs
KERNELS = ("vec_add", "reduce_sum", "warp_reduce_down", "histogram_shared", "gcd-gcd_kernel", "divmod_signed",
           "bit_intrinsics", "shuffle_idx", "atomic_cas", "matvec-matvec", "wide_arith", "early_return")
COMPILERS = [pytest.param(c, marks=needs(c)) for c in ("zig", "nvcc")]
BY_ID = {case.id: case for case in CASES}


@functools.cache
def _lowered(case: Case, compiler: str, fmt: BlockFormat) -> CompiledKernel:
    """The suite kernel re-lowered from its PTX to ``fmt`` (same parameters and memory layout)."""
    kernel = _compiled(case, compiler)
    module = parse_ptx(kernel.ptx)
    return replace(kernel, program=lower(module, select_kernel(module, case.kernel), fmt).program)


@pytest.mark.parametrize("compiler", COMPILERS)
def test_default_format_output_unchanged(compiler: str) -> None:
    for name in KERNELS:
        case = BY_ID[name]
        default = _compiled(case, compiler).program
        for fmt in (MACHINE_FORMAT, PERMISSIVE):
            program = _lowered(case, compiler, fmt).program
            assert (encode(program) == encode(default)).all(), f"{name} [{compiler}] with {fmt}"
            assert program.param_slots == default.param_slots, name


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("name", KERNELS)
def test_narrow_format_exact(name: str, compiler: str) -> None:
    case = BY_ID[name]
    kernel = _lowered(case, compiler, NARROW)
    check_block_format(kernel.program, NARROW)
    assert len(kernel.program.blocks) > len(_compiled(case, compiler).program.blocks)
    assert decode(encode(kernel.program)).blocks == [replace(b, note="", lines=()) for b in kernel.program.blocks]
    for shape in _default_shapes(case):
        run_case(case, compiler, shape, kernel)


@pytest.mark.parametrize("compiler", COMPILERS)
def test_three_reads_and_branch_register(compiler: str) -> None:
    """max_reads=3: a block reading 3 registers has no room for the BR register, which then gets a block of
    its own; loops and branches still run exactly."""
    fmt = BlockFormat(max_reads=3)
    for name in ("shuffle_idx", "gcd-gcd_kernel", "early_return"):    # shuffle_idx: a BR-only block
        case = BY_ID[name]
        kernel = _lowered(case, compiler, fmt)
        check_block_format(kernel.program, fmt)
        run_case(case, compiler, _default_shapes(case)[0], kernel)


def test_disallowed_ops_are_named() -> None:
    case = BY_ID["vec_add"]
    with pytest.raises(CapacityError, match=r"PTX line \d+: ST is not allowed by the block format"):
        _lowered(case, "zig", BlockFormat(mem_ops=frozenset(LOAD_OPS)))
    no_mul = BlockFormat(n_pre=1, n_post=0, pre_ops=(ARITH | LOGIC | {"S2R"},))
    with pytest.raises(CapacityError, match=r"MUL fits no ALU slot"):
        _lowered(BY_ID["vec_ops-vec_mul"], "zig", no_mul)


def _program(*blocks: Block) -> Program:
    return Program(list(blocks))


def test_check_block_format_names_block_and_rule() -> None:
    add, xor = Instr("ADD", 1, 2, 3), Instr("XOR", 4, 5, 6)
    ok = Block(pre=[add], term=Term("EXIT"))
    fmt = replace(NARROW, mem_ops=frozenset({"ST"}))
    check_block_format(_program(ok, Block(pre=[add, xor])), fmt)      # 4 live-in reads: at the limit
    broken = [
        (Block(pre=[add] * 4), r"B1: 4 pre / 0 post ALU instructions, the format has 3 / 2 slots"),
        (Block(pre=[Instr("NOP"), add]), r"B1: pre slot 1 holds ADD"),
        (Block(post=[Instr("MUL", 1, 2, 3)]), r"B1: post slot 0 holds MUL"),
        (Block(mem=Instr("LD", 1, 2)), r"B1: memory op LD is not one of the format's memory ops"),
        (Block(pre=[add, xor], term=Term("BR", 7, 0, 0)),                # the BR register counts
         r"B1: reads 5 registers before writing them \(r2,r3,r5,r6,r7\), the format allows 4 \(over by 1\)"),
    ]
    for block, message in broken:
        with pytest.raises(CapacityError, match=message):
            check_block_format(_program(ok, block), fmt)
    atomic = replace(BlockFormat(max_reads=4, atomic_reads=3), mem_ops=None)
    atom = Block(pre=[Instr("ADD", 1, 2, 3)], mem=Instr("ATOM.ADD", 4, 5, 6))
    check_block_format(_program(ok, Block(pre=[Instr("ADD", 1, 2, 3), xor])), atomic)   # 4 reads, no atomic
    with pytest.raises(CapacityError, match=r"reads 4 registers .* a block with an atomic allows 3 \(over by 1\)"):
        check_block_format(_program(ok, atom), atomic)
    stable = BlockFormat(lane_serial=True)
    shfl = Instr("SHFL.DOWN", 1, 2, 3, 4, imm=1, bimm=True)
    check_block_format(_program(ok, Block(pre=[add], mem=shfl)), stable)         # writes r1, reads r2: fine
    for block in (Block(pre=[Instr("ADD", 2, 5, 6)], mem=shfl), Block(mem=shfl, post=[Instr("XOR", 2, 1, 1)])):
        check_block_format(_program(ok, block), BlockFormat())                   # the machine does not mind
        with pytest.raises(CapacityError, match=r"B1: .* writes r2, which a shuffle or vote reads from the other lanes"):
            check_block_format(_program(ok, block), stable)
    vote = Instr("VOTE.ANY", 1, 15, 2)
    check_block_format(_program(ok, Block(mem=vote, post=[Instr("ADD", 3, 2, 2)])), stable)
    for block, message in ((Block(mem=vote, post=[Instr("ADD", 3, 1, 2)]), "reads the result of the vote"),
                           (Block(mem=vote, term=Term("BR", 1, 0, 0)), "the branch reads r1, the result of the block's vote"),
                           (Block(mem=Instr("VOTE.ALL", 2, 15, 2)), "writes r2, which a shuffle or vote")):
        with pytest.raises(CapacityError, match=f"B1: .*{message}"):
            check_block_format(_program(ok, block), stable)


@pytest.mark.parametrize("compiler", COMPILERS)
def test_shuffle_sources_stay_unwritten(compiler: str) -> None:
    """lane_serial (the GPU's format): no block writes the register its shuffle or vote reads from other
    lanes (not before it, not after it, not as the result, though `v = __shfl_xor(v, m)` asks for that), no
    block reads its vote's result (`if (__any_sync(...))` branches in a block of its own), and the shuffle
    and vote kernels still run exactly."""
    fmt = BlockFormat(n_pre=3, n_post=2, max_reads=4, lane_serial=True)
    for name in ("warp_reduce_xor", "warp_scan", "shfl_width", "shuffle_idx", "warp_2d", "ballot", "warp_vote_manual"):
        case = BY_ID[name]
        kernel = _lowered(case, compiler, fmt)
        check_block_format(kernel.program, fmt)
        cross = [b.mem for b in kernel.program.blocks if b.mem is not None and b.mem.op[:4] in ("SHFL", "VOTE")]
        assert cross and all(s.rd != cross_lane_source(s) for s in cross)
        for shape in _default_shapes(case):
            run_case(case, compiler, shape, kernel)


@pytest.mark.parametrize("compiler", COMPILERS)
def test_atomic_blocks_keep_a_read_port_free(compiler: str) -> None:
    """atomic_reads=3 (the GPU's format): every block holding an atomic reads at most 3 registers, and the
    atomics kernels still run exactly."""
    fmt = BlockFormat(n_pre=3, n_post=2, max_reads=4, atomic_reads=3)
    for name in ("histogram_shared", "atomic_minmax", "dot_atomic-dot"):
        case = BY_ID[name]
        kernel = _lowered(case, compiler, fmt)
        check_block_format(kernel.program, fmt)
        assert any(b.mem is not None and b.mem.op.startswith("ATOM.") for b in kernel.program.blocks)
        run_case(case, compiler, _default_shapes(case)[0], kernel)


def test_block_format_validation() -> None:
    assert BlockFormat(n_pre=1, n_post=0, pre_ops=({"ADD"},)).pre_ops == (frozenset({"ADD"}),)
    assert hash(NARROW) == hash(replace(NARROW))
    for bad in (dict(n_pre=N_PRE + 1), dict(n_post=-1), dict(max_reads=2), dict(n_pre=2, pre_ops=(None,)),
                dict(n_pre=1, pre_ops=({"LD"},)), dict(mem_ops={"ADD"}),
                dict(max_reads=4, atomic_reads=5), dict(atomic_reads=2)):
        with pytest.raises(MachineError):
            BlockFormat(**bad)

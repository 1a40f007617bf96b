"""Encoded blocks executed by the lane datapath (IR simulator) against the interpreter's semantics.

Independent oracle: the expected registers come from running each random block's instructions in order
on a plain Python register list with qgpu_min.machine.interp.ALU (register-named operands, as the
interpreter executes them); the circuit side sees only the encoded, source-named fields."""
from __future__ import annotations

import numpy as np
import pytest

from qgpu_min.circuit.sim import group_value, simulate, word_inputs, word_value
from qgpu_min.gpu.datapath import CoreFormat
from qgpu_min.gpu.encode import EncodeError, encode_block
from qgpu_min.machine.interp import ALU
from qgpu_min.machine.isa import ZERO, Block, Instr, Term
from test_gpu_datapath import _build as build_lane   # the same lane circuit the datapath tests use

FMT = CoreFormat()


def _random_block(rng, fmt: CoreFormat) -> Block:
    regs = [int(r) for r in rng.choice(15, 4, replace=False)]        # a small register pool forces reuse
    pool = regs + [ZERO]

    def alu(k: int) -> Instr:
        op = str(rng.choice(fmt.opcodes(k)))
        if op == "S2R":
            return Instr(op, rd=int(rng.choice(regs)), imm=int(rng.integers(0, fmt.specials)))
        bimm = bool(rng.integers(0, 2))
        return Instr(op, rd=int(rng.choice(regs)), ra=int(rng.choice(pool)), rb=ZERO if bimm else int(rng.choice(pool)),
                     rc=int(rng.choice(pool)) if op == "SEL" else ZERO, imm=int(rng.integers(-40, 40)), bimm=bimm)

    pre = [alu(k) for k in range(int(rng.integers(0, fmt.pre + 1)))]
    kind = rng.integers(0, 3)
    mem = None if kind == 0 else Instr("LD", rd=int(rng.choice(regs)), ra=int(rng.choice(pool)), imm=8) if kind == 1 \
        else Instr("ST", ra=int(rng.choice(pool)), rb=int(rng.choice(pool)), imm=-4)
    post = [alu(fmt.pre + j) for j in range(int(rng.integers(0, fmt.post + 1)))]
    return Block(pre, mem, post, Term("BR", int(rng.choice(pool)), 1, 2), live_out=0x7FFF)


def _reference(block: Block, regs: list[int], specials: list[int], loaded: int) -> tuple[list[int], int, int, int]:
    """Registers after the block, the memory address, the store data, and the branch register."""
    r = list(regs) + [0]

    def run(ins: Instr) -> None:
        if ins.rd == ZERO:
            return
        if ins.op == "S2R":
            r[ins.rd] = specials[ins.imm]
        else:
            r[ins.rd] = ALU[ins.op](r[ins.ra], ins.imm & 0xFFFFFFFF if ins.bimm else r[ins.rb], r[ins.rc])
    for ins in block.pre:
        run(ins)
    addr = data = 0
    if block.mem is not None:
        addr = (r[block.mem.ra] + block.mem.imm) & 0xFFFFFFFF
        data = r[block.mem.rb]
        if block.mem.op == "LD" and block.mem.rd != ZERO:
            r[block.mem.rd] = loaded
    for ins in block.post:
        run(ins)
    return r[:15], addr, data, r[block.term.ra]


def test_random_blocks_match_the_interpreter_semantics() -> None:
    fmt, rng, n = FMT, np.random.default_rng(7), 300
    c, f, regs, sps, ld, out = build_lane(fmt)
    blocks, codes = [], []
    while len(blocks) < n:
        b = _random_block(rng, fmt)
        try:
            codes.append(encode_block(b, fmt))
        except EncodeError:
            continue        # more distinct reads than ports: the lowering splits such blocks
        blocks.append(b)
    start = [[int(x) for x in rng.integers(0, 1 << 32, 15, dtype=np.int64)] for _ in range(n)]
    specials = [[int(x) for x in rng.integers(0, 64, fmt.specials)] for _ in range(n)]
    loaded = [int(x) for x in rng.integers(0, 1 << 32, n, dtype=np.int64)]

    inputs = {}
    for i, w in enumerate(regs):
        inputs.update(word_inputs(w, np.array([s[cd.reads[i]] for s, cd in zip(start, codes)])))
    for i, w in enumerate(sps):
        inputs.update(word_inputs(w, np.array([s[i] for s in specials])))
    inputs.update(word_inputs(ld, np.array(loaded)))
    for k, s in enumerate(f.slots):
        inputs[s.op] = np.array([cd.slots[k].op for cd in codes])
        for o in "abc":
            inputs[getattr(s, o)] = np.array([cd.index(fmt, k, o) for cd in codes])
        inputs.update(word_inputs(s.imm, np.array([cd.slots[k].imm for cd in codes])))
        inputs[s.special] = np.array([cd.slots[k].special for cd in codes])
    inputs[f.mem_a] = np.array([cd.index(fmt, "mem", "a") for cd in codes])
    inputs[f.mem_data] = np.array([cd.index(fmt, "mem", "b") for cd in codes])
    inputs[f.cond] = np.array([cd.index(fmt, "cond", "c") for cd in codes])
    inputs[f.mem_c] = np.array([cd.index(fmt, "mem", "c") for cd in codes])
    inputs.update(word_inputs(f.mem_imm, np.array([cd.mem_imm for cd in codes])))
    values, _ = simulate(c, inputs)

    src_words = {f"s{k}": word_value(values, w, n) for k, w in enumerate(out.results)}
    src_words["ld"] = np.array(loaded)
    addr, data = word_value(values, out.address, n), word_value(values, out.store_data, n)
    cond = group_value(values, out.cond, n)
    for i, (b, cd) in enumerate(zip(blocks, codes)):
        want_regs, want_addr, want_data, want_cond = _reference(b, start[i], specials[i], loaded[i])
        for r, src in cd.writeback:
            assert src_words[src][i] == want_regs[r], f"case {i}: r{r} from {src}\n{b.pre} {b.mem} {b.post}"
        written = {r for r, _ in cd.writeback}
        assert all(want_regs[r] == start[i][r] for r in range(15) if r not in written), f"case {i}"
        if b.mem is not None:
            assert addr[i] == want_addr and (b.mem.op != "ST" or data[i] == want_data), f"case {i}"
        assert cond[i] == (want_cond != 0), f"case {i}"


def test_writeback_lists_only_live_out_registers() -> None:
    b = Block([Instr("ADD", 1, 2, imm=1, bimm=True), Instr("ADD", 3, 1, imm=2, bimm=True)],
              mem=Instr("LD", 4, 3), live_out=(1 << 3) | (1 << 4))
    assert encode_block(b, FMT).writeback == [(3, "s1"), (4, "ld")]


def test_atomic_record_is_the_first_writeback() -> None:
    b = Block(mem=Instr("ATOM.ADD", 4, 2, 3), live_out=(1 << 4) | (1 << 1))
    code = encode_block(b, FMT)
    assert code.mem_op == "ATOM" and code.variant == "ADD"
    assert code.writeback == [(15, "atom"), (4, "ld")]


def test_encode_errors_name_the_block() -> None:
    b = Block([Instr("ADD", 1, 2, 3), Instr("ADD", 4, 5, 6), Instr("ADD", 7, 8, 9)])
    with pytest.raises(EncodeError, match="B3: reads more than 4"):
        encode_block(b, FMT, "B3")
    with pytest.raises(EncodeError, match="VOTE.ANY of the constant 1 is not executed"):
        encode_block(Block(mem=Instr("VOTE.ANY", 1, 15, 15, imm=1, bimm=True)), FMT, "B0")
    # a shuffle's source and a vote's predicate are read from the other lanes: the block leaves them unchanged
    # (the lowering's rule, machine.isa.lane_serial_violation, with its message)
    cross = r"B0: .* writes r2, which a shuffle or vote reads from the other lanes"
    with pytest.raises(EncodeError, match=cross):
        encode_block(Block([Instr("ADD", 2, 1, 1)], Instr("SHFL.IDX", 1, 2, 3, 4)), FMT, "B0")
    with pytest.raises(EncodeError, match=cross):
        encode_block(Block([], Instr("SHFL.IDX", 1, 2, 3, 4), [Instr("ADD", 2, 1, 1)]), FMT, "B0")
    with pytest.raises(EncodeError, match=cross):
        encode_block(Block([], Instr("VOTE.ALL", 2, 15, 2)), FMT, "B0")
    # a vote's word is known late in the pass: only the write-back takes it
    with pytest.raises(EncodeError, match="B0: .* reads the result of the vote before it in the block"):
        encode_block(Block([], Instr("VOTE.ANY", 1, 15, 2), [Instr("ADD", 3, 1, 1)]), FMT, "B0")
    with pytest.raises(EncodeError, match="4 pre"):
        encode_block(Block([Instr("ADD", 1, 1, 1)] * 4), FMT, "B0")

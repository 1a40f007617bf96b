"""Hand-written machine programs for the reference interpreter and the ROM encoding."""
import numpy as np
import pytest

from qgpu_min.machine.isa import (MEM_WORDS, ROM_BLOCKS, ZERO, Block, CapacityError, Instr, MachineError, Program,
                                  Term, decode, encode, format_program)
from qgpu_min.machine.interp import MemoryFault, StepLimitError, run


def I(op, rd=ZERO, ra=ZERO, rb=ZERO, rc=ZERO, imm=0, bimm=None):
    return Instr(op, rd, ra, rb, rc, imm, bool(imm) if bimm is None else bimm)


def li(rd, v):
    return I("ADD", rd, ZERO, imm=v, bimm=True)


def tid(rd):
    return I("S2R", rd, imm=0)


def mem(words=None):
    m = [0] * MEM_WORDS
    for i, w in enumerate(words or []):
        m[i] = w & 0xFFFFFFFF
    return m


def blk(pre=(), m=None, post=(), term=Term("EXIT")):
    return Block(list(pre), m, list(post), term)


def st_tid_word(rv, base=0):
    """pre: r14 = tid*4 + base ; mem: ST [r14], rv"""
    return [tid(14), I("SHL", 14, 14, imm=2, bimm=True), I("ADD", 14, 14, imm=base, bimm=True)], \
        I("ST", ra=14, rb=rv)


def test_alu_ops_wrap_and_compare():
    ops = [("ADD", 0xFFFFFFFF, 2, 1), ("SUB", 0, 1, 0xFFFFFFFF), ("MUL", 0x10000, 0x10000, 0),
           ("MULHU", 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFE), ("SHL", 1, 33, 2), ("SHR", 0x80000000, 31, 1),
           ("SRA", 0x80000000, 31, 0xFFFFFFFF), ("SLT", 0xFFFFFFFF, 0, 1), ("SLTU", 0xFFFFFFFF, 0, 0),
           ("SLE", 5, 5, 1), ("SLEU", 6, 5, 0), ("MIN", 0xFFFFFFFF, 3, 0xFFFFFFFF), ("MINU", 0xFFFFFFFF, 3, 3),
           ("MAX", 0xFFFFFFFF, 3, 3), ("MAXU", 0xFFFFFFFF, 3, 0xFFFFFFFF), ("SEQ", 4, 4, 1), ("SNE", 4, 4, 0),
           ("XOR", 0xF0, 0xFF, 0x0F), ("AND", 0xF0, 0x3C, 0x30), ("OR", 0xF0, 0x0F, 0xFF)]
    blocks = []
    for k, (op, a, b, _) in enumerate(ops):
        pre, st = st_tid_word(3, base=4 * k * 4)
        blocks.append(blk([li(1, a), li(2, b), I(op, 3, 1, 2)] + pre, st, term=Term("JMP", taken=k + 1)))
    blocks.append(blk())
    res = run(Program(blocks), mem(), block=(1, 1))
    for k, (op, a, b, want) in enumerate(ops):
        assert res.memory[4 * k] == want, op


def test_sel_and_s2r_specials():
    # r1 = tid.y*10 + tid.x ; r2 = (r1 odd) ? 100 : ctaid.x ; store at (tid.x + tid.y*ntid.x)
    pre = [I("S2R", 1, imm=1), I("MUL", 1, 1, imm=10, bimm=True), I("S2R", 2, imm=0), I("ADD", 1, 1, 2),
           I("AND", 3, 1, imm=1, bimm=True), I("S2R", 4, imm=4), I("SEL", 2, 3, imm=100, rc=4, bimm=True)]
    post_addr = [I("S2R", 5, imm=1), I("S2R", 6, imm=2), I("MUL", 5, 5, 6), I("S2R", 6, imm=0)]
    p = Program([blk(pre, None, post_addr, Term("JMP", taken=1)),
                 blk([I("ADD", 5, 5, 6), I("S2R", 6, imm=4), I("MUL", 6, 6, imm=6, bimm=True),
                      I("ADD", 5, 5, 6), I("SHL", 5, 5, imm=2, bimm=True)], I("ST", ra=5, rb=2))])
    res = run(p, mem(), grid=(2, 1), block=(3, 2))
    for c in range(2):
        for y in range(2):
            for x in range(3):
                v = y * 10 + x
                assert res.memory[c * 6 + y * 3 + x] == (100 if v % 2 else c)


def test_divergent_if_else_reconverges_and_counts_steps():
    # B0: r1 = tid & 1 ; BR r1 -> B1 (odd) / B2 (even) ; B1: r2 = 7 ; JMP B3 ; B2: r2 = 9 ; JMP B3 ; B3 store
    pre, st = st_tid_word(2)
    p = Program([blk([tid(1), I("AND", 1, 1, imm=1, bimm=True)], term=Term("BR", 1, 1, 2)),
                 blk([li(2, 7)], term=Term("JMP", taken=3)),
                 blk([li(2, 9)], term=Term("JMP", taken=3)),
                 blk(pre, st)])
    res = run(p, mem(), block=(4, 1), trace=True)
    assert res.memory[:4] == [9, 7, 9, 7]
    assert [t[2] for t in res.trace] == [0, 1, 2, 3]    # both arms once, then one converged block


def test_loop_with_per_lane_trip_count():
    # r1 = tid ; r2 = 0 ; loop: if r1 == 0 exit loop ; r2 += r1 ; r1 -= 1 ; store r2 at tid
    pre, st = st_tid_word(2)
    p = Program([blk([tid(1), li(2, 0)], term=Term("JMP", taken=1)),
                 blk([I("SNE", 3, 1, ZERO)], term=Term("BR", 3, 2, 3)),
                 blk([I("ADD", 2, 2, 1), I("SUB", 1, 1, imm=1, bimm=True)], term=Term("JMP", taken=1)),
                 blk(pre, st)])
    res = run(p, mem(), block=(6, 1), trace=True)
    assert res.memory[:6] == [0, 1, 3, 6, 10, 15]
    warp0_store = [t for t in res.trace if t[1] == 0 and t[2] == 3]
    assert len(warp0_store) == 1            # the 4 lanes reconverged at the store


def test_barrier_across_warps_orders_writes():
    # each thread writes tid+1 to word tid, BAR, then reads word (tid+1) % 8 and writes it to word 8+tid
    p = Program([
        blk([tid(1), I("SHL", 2, 1, imm=2, bimm=True), I("ADD", 3, 1, imm=1, bimm=True)],
            I("ST", ra=2, rb=3), term=Term("BAR")),
        blk([I("AND", 4, 3, imm=7, bimm=True), I("SHL", 4, 4, imm=2, bimm=True)], I("LD", 5, 4),
            term=Term("JMP", taken=2)),
        blk([], I("ST", ra=2, rb=5, imm=32)),
    ])
    res = run(p, mem(), block=(8, 1))
    assert res.memory[8:16] == [(t + 1) % 8 + 1 for t in range(8)]


def test_backward_branch_passes_to_the_next_warp():
    # thread 0 spins on word 0 (B1 branches back to itself) until thread 4, in warp 1, stores 1 there
    p = Program([blk([tid(1), I("SEQ", 2, 1, ZERO)], term=Term("BR", 2, 1, 3)),
                 blk([], I("LD", 3, ZERO), [I("SEQ", 4, 3, ZERO)], Term("BR", 4, 1, 2)),
                 blk([li(5, 9)], I("ST", ra=ZERO, rb=5, imm=4)),
                 blk([I("SEQ", 2, 1, imm=4, bimm=True)], term=Term("BR", 2, 4, 5)),
                 blk([li(5, 1)], I("ST", ra=ZERO, rb=5)),
                 blk()])
    res = run(p, mem(), block=(8, 1), step_limit=100, trace=True)
    assert res.memory[:2] == [1, 9]
    # warp 0: B0, B1 (back edge: turn ends); warp 1: B0, B3, B4, B5; warp 0: B1 (sees the flag), B2, B3, B5
    assert res.trace == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 3), (0, 1, 4), (0, 1, 5),
                         (0, 0, 1), (0, 0, 2), (0, 0, 3), (0, 0, 5)]


def test_back_edges_rotate_round_robin_and_forward_code_runs_to_the_end():
    # every thread loops twice (B1 -> B1), then exits; 3 warps alternate turns at each back edge
    p = Program([blk([li(1, 2)], term=Term("JMP", taken=1)),
                 blk([I("SUB", 1, 1, imm=1, bimm=True)], term=Term("BR", 1, 1, 2)),
                 blk()])
    res = run(p, mem(), block=(12, 1), trace=True)
    assert [(w, b) for _, w, b in res.trace] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1),
                                                 (0, 1), (0, 2), (1, 1), (1, 2), (2, 1), (2, 2)]
    # a BAR still holds a warp until all arrive; a warp without back edges keeps its turn to the barrier
    q = Program([blk(term=Term("JMP", taken=1)), blk(term=Term("BAR")), blk()])
    res = run(q, mem(), block=(8, 1), trace=True)
    assert [(w, b) for _, w, b in res.trace] == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (1, 2)]


def test_barrier_with_exited_warp_releases():
    # threads >= 4 exit at once; warp 0 passes a BAR alone
    p = Program([blk([tid(1), I("SLTU", 2, 1, imm=4, bimm=True)], term=Term("BR", 2, 1, 3)),
                 blk(term=Term("BAR")),
                 blk([li(3, 5)], I("ST", ra=ZERO, rb=3), term=Term("EXIT")),
                 blk()])
    res = run(p, mem(), block=(8, 1))
    assert res.memory[0] == 5


def test_atomics_apply_in_lane_order_and_return_old():
    # every lane: old = ATOM.ADD [0], tid+1 ; store old at 4+tid ; then CAS/EXCH/MIN/MAX/INC/DEC on words
    p = Program([
        blk([tid(1), I("ADD", 2, 1, imm=1, bimm=True), I("SHL", 3, 1, imm=2, bimm=True)],
            I("ATOM.ADD", 4, ZERO, 2), term=Term("JMP", taken=1)),
        blk([], I("ST", ra=3, rb=4, imm=16), term=Term("JMP", taken=2)),
        blk([], I("ATOM.CAS", 5, ZERO, 1, 2, imm=4), term=Term("JMP", taken=3)),   # word1: if == tid then tid+1
        blk([], I("ST", ra=3, rb=5, imm=32), term=Term("JMP", taken=4)),
        blk([li(6, -3)], I("ATOM.MIN", 7, ZERO, 6, imm=8), term=Term("JMP", taken=5)),
        blk([], I("ATOM.MAXU", ZERO, ZERO, 6, imm=12), term=Term("JMP", taken=6)),
        blk([li(6, 2)], I("ATOM.INC", ZERO, ZERO, 6, imm=48)),
    ])
    res = run(p, mem(), block=(4, 1))
    assert res.memory[0] == 10
    assert res.memory[4:8] == [0, 1, 3, 6]
    assert res.memory[1] == 4 and res.memory[8:12] == [0, 1, 2, 3]
    assert res.memory[2] == 0xFFFFFFFD and res.memory[3] == 0xFFFFFFFD
    assert res.memory[12] == 1     # INC wraps at 2: 0 -> 1 -> 2 -> 0 -> 1
    assert run(p, mem(), block=(3, 1)).memory[12] == 0
    assert run(p, mem(), block=(2, 1)).memory[12] == 2


def _shfl_prog(op, b, c, bimm=True):
    # r1 = tid*10 ; r2 = SHFL r1 ; store r2 at tid
    pre, st = st_tid_word(2)
    return Program([blk([tid(1), I("MUL", 1, 1, imm=10, bimm=True), li(3, c)],
                        I(op, 2, 1, rb=(ZERO if bimm else b), rc=3, imm=(b if bimm else 0), bimm=bimm),
                        pre[:2], Term("JMP", taken=1)),
                    blk([], st)])


def c_of(width, clamp):
    return ((32 - width) << 8) | clamp


@pytest.mark.parametrize("op,b,width,want", [
    ("SHFL.IDX", 2, 4, [20, 20, 20, 20]), ("SHFL.IDX", 5, 4, [10, 10, 10, 10]),
    ("SHFL.IDX", 1, 2, [10, 10, 30, 30]), ("SHFL.IDX", 3, 32, [30, 30, 30, 30]),
    ("SHFL.UP", 1, 4, [0, 0, 10, 20]), ("SHFL.UP", 1, 2, [0, 0, 20, 20]), ("SHFL.UP", 2, 32, [0, 10, 0, 10]),
    ("SHFL.DOWN", 1, 4, [10, 20, 30, 30]), ("SHFL.DOWN", 2, 4, [20, 30, 20, 30]),
    ("SHFL.DOWN", 1, 2, [10, 10, 30, 30]), ("SHFL.DOWN", 1, 32, [10, 20, 30, 30]),
    ("SHFL.BFLY", 1, 4, [10, 0, 30, 20]), ("SHFL.BFLY", 2, 4, [20, 30, 0, 10]), ("SHFL.BFLY", 2, 2, [0, 10, 0, 10]),
])
def test_shuffle_modes_width_and_clamp(op, b, width, want):
    clamp = 0 if op == "SHFL.UP" else 31
    res = run(_shfl_prog(op, b, c_of(width, clamp)), mem(), block=(4, 1))
    assert res.memory[:4] == want


def test_shuffle_register_lane_and_partial_warp():
    # source lane from a register: lane l reads lane (3 - l); partial warp of 3: lane 0 reads lane 3 (never ran: 0)
    pre, st = st_tid_word(2)
    p = Program([blk([tid(1), I("ADD", 1, 1, imm=1, bimm=True), tid(4), I("SUB", 4, ZERO, 4),
                      I("ADD", 4, 4, imm=3, bimm=True), li(3, c_of(4, 31))],
                     I("SHFL.IDX", 2, 1, rb=4, rc=3), [], Term("JMP", taken=1)),
                 blk(pre, st)])
    assert run(p, mem(), block=(4, 1)).memory[:4] == [4, 3, 2, 1]
    assert run(p, mem(), block=(3, 1)).memory[:4] == [0, 3, 2, 0]


def test_subword_loads_and_stores():
    p = Program([
        blk([li(1, 0x1FF)], I("STB", ra=ZERO, rb=1, imm=5), term=Term("JMP", taken=1)),
        blk([li(1, 0xABCD8001)], I("STH", ra=ZERO, rb=1, imm=10), term=Term("JMP", taken=2)),
        blk([], I("LDB", 2, ZERO, imm=5), term=Term("JMP", taken=3)),
        blk([], I("ST", ra=ZERO, rb=2, imm=16), term=Term("JMP", taken=4)),
        blk([], I("LDHU", 2, ZERO, imm=10), term=Term("JMP", taken=5)),
        blk([], I("ST", ra=ZERO, rb=2, imm=20), term=Term("JMP", taken=6)),
        blk([], I("LDH", 2, ZERO, imm=10), term=Term("JMP", taken=7)),
        blk([], I("ST", ra=ZERO, rb=2, imm=24), term=Term("JMP", taken=8)),
        blk([], I("LDBU", 2, ZERO, imm=7), term=Term("JMP", taken=9)),
        blk([], I("ST", ra=ZERO, rb=2, imm=28)),
    ])
    res = run(p, mem([0, 0x11223344, 0x55667788]), block=(1, 1))
    assert res.memory[1] == 0x1122FF44
    assert res.memory[2] == 0x80017788
    assert res.memory[4:8] == [0xFFFFFFFF, 0x8001, 0xFFFF8001, 0x11]


def test_out_of_range_and_misaligned_access_name_the_lane():
    p = Program([blk([tid(1), I("SHL", 1, 1, imm=10, bimm=True)], I("LD", 2, 1, imm=4 * MEM_WORDS - 3 * 1024))])
    with pytest.raises(MemoryFault, match=r"lane 3 of warp 0 in CTA 0 .*block B0.*address 0x1000"):
        run(p, mem(), block=(4, 1))
    p2 = Program([blk([], I("LD", 2, ZERO, imm=6))])
    with pytest.raises(MemoryFault, match="misaligned 4-byte access: lane 0"):
        run(p2, mem(), block=(1, 1))


def test_step_limit_names_warp_and_block():
    p = Program([blk(term=Term("JMP", taken=1)), blk(term=Term("JMP", taken=0))])
    with pytest.raises(StepLimitError, match=r"step limit of 50 .*CTA 0 \(0, 0\), warp 0, block B[01]"):
        run(p, mem(), grid=(2, 1), step_limit=50)
    # CTA 1 loops only: the first CTA halts, the error names the second
    q = Program([blk([I("S2R", 1, imm=4)], term=Term("BR", 1, 1, 2)), blk(term=Term("JMP", taken=1)), blk()])
    with pytest.raises(StepLimitError, match=r"CTA 1 \(1, 0\), warp 0, block B1"):
        run(q, mem(), grid=(2, 1), block=(8, 1), step_limit=40)


def test_capacity_errors():
    with pytest.raises(CapacityError, match="over by 1"):
        run(Program([blk()] * (ROM_BLOCKS + 1)), mem())
    with pytest.raises(CapacityError, match=r"33 threads .* \(over by 1\)"):
        run(Program([blk()]), mem(), block=(33, 1))
    with pytest.raises(CapacityError, match="pre / .* post"):
        run(Program([blk([li(1, 1)] * 9)]), mem())
    with pytest.raises(MachineError, match="outside the program"):
        run(Program([blk(term=Term("JMP", taken=3))]), mem())


def test_encode_decode_round_trip():
    p = Program([
        blk([tid(1), I("SEL", 2, 1, 3, 4), li(5, -7)], I("ATOM.CAS", 6, 2, 3, 4, imm=-8, bimm=False),
            [I("SRA", 7, 6, imm=3, bimm=True)], Term("BR", 7, 1, 0)),
        blk([], I("SHFL.BFLY", 1, 2, imm=1, rc=3, bimm=True), [], Term("BAR")),
        blk([], None, [], Term("EXIT")),
    ])
    p.blocks[0].live_in, p.blocks[0].live_out = 0b101, 0x7FFF
    rows = encode(p)
    assert rows.dtype == np.uint64 and rows.shape == (3, 15)
    q = decode(rows)
    for a, b in zip(p.blocks, q.blocks):
        assert (a.pre, a.mem, a.post, a.term, a.live_in, a.live_out) == \
               (b.pre, b.mem, b.post, b.term, b.live_in, b.live_out)
    assert int(rows[0, 0]) & 63 == 22 and (int(rows[0, 2]) >> 32) == 0xFFFFFFF9   # S2R opcode, imm -7
    assert "ATOM.CAS r6, [r2-8], r3, r4" in format_program(p)


def test_docs_mirror_the_isa_docstring():
    from pathlib import Path
    import qgpu_min.machine.isa as isa
    doc = (Path(__file__).resolve().parents[1] / "docs" / "machine.md").read_text()
    assert isa.__doc__.strip() in doc


def test_votes_count_only_active_lanes():
    # lanes with odd tid branch to B1 and vote there on (tid & 2); even lanes vote in B2 on 1
    pre, st = st_tid_word(2)
    p = Program([
        blk([tid(1), I("AND", 3, 1, imm=1, bimm=True), I("AND", 4, 1, imm=2, bimm=True)], term=Term("BR", 3, 1, 2)),
        blk([], I("VOTE.BALLOT", 2, rb=4), term=Term("JMP", taken=3)),
        blk([], I("VOTE.BALLOT", 2, imm=1, bimm=True), term=Term("JMP", taken=3)),
        blk(pre, st, term=Term("JMP", taken=4)),
        blk([I("SHL", 14, 14, imm=0, bimm=True)], I("VOTE.ALL", 5, rb=3), term=Term("JMP", taken=5)),
        blk([], I("VOTE.ANY", 6, rb=4), [I("SHL", 5, 5, imm=1, bimm=True), I("OR", 5, 5, 6)],
            term=Term("JMP", taken=6)),
        blk([], I("ST", ra=14, rb=5, imm=64)),
    ])
    res = run(p, mem(), block=(7, 1))
    assert res.memory[:7] == [0b0101, 0b1000, 0b0101, 0b1000, 0b101, 0, 0b101]
    assert res.memory[16:23] == [1] * 4 + [1] * 3     # ALL false (even lanes), ANY true -> 0b01


def test_listing_names_parameter_slots():
    p = Program([blk([li(1, 0), li(2, 0)], I("ST", ra=1, rb=2))], param_slots=[(0, 0, 0, 0), (0, 1, -1, 0)])
    text = format_program(p, ["out"])
    assert "ADD r1, rz, 0   ; = out" in text and "ADD r2, rz, 0   ; = extern __shared__ base" in text

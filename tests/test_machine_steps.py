"""interp.steps(): the launch run() makes, one record per warp step, with the state after each step."""
import dataclasses

import pytest

from qgpu_min.machine.isa import CapacityError, Program, Term, ZERO
from qgpu_min.machine.interp import StepLimitError, run, steps
from test_machine_interp import I, blk, li, mem, st_tid_word, tid


def divergent_if_else():
    # B0: r1 = tid & 1 ; BR r1 -> B1 (odd) / B2 (even) ; B1: r2 = 7 ; B2: r2 = 9 ; B3: store r2 at tid
    pre, st = st_tid_word(2)
    return Program([blk([tid(1), I("AND", 1, 1, imm=1, bimm=True)], term=Term("BR", 1, 1, 2)),
                    blk([li(2, 7)], term=Term("JMP", taken=3)),
                    blk([li(2, 9)], term=Term("JMP", taken=3)),
                    blk(pre, st)])


def per_lane_loop():
    # r1 = tid ; r2 = 0 ; B1: while r1 != 0 { B2: r2 += r1 ; r1 -= 1 } ; B3: store r2 at tid
    pre, st = st_tid_word(2)
    return Program([blk([tid(1), li(2, 0)], term=Term("JMP", taken=1)),
                    blk([I("SNE", 3, 1, ZERO)], term=Term("BR", 3, 2, 3)),
                    blk([I("ADD", 2, 2, 1), I("SUB", 1, 1, imm=1, bimm=True)], term=Term("JMP", taken=1)),
                    blk(pre, st)])


def barrier_exchange():
    # each thread stores tid+1 at word tid, BAR, then copies word (tid+1) % 8 to word 8+tid
    return Program([
        blk([tid(1), I("SHL", 2, 1, imm=2, bimm=True), I("ADD", 3, 1, imm=1, bimm=True)],
            I("ST", ra=2, rb=3), term=Term("BAR")),
        blk([I("AND", 4, 3, imm=7, bimm=True), I("SHL", 4, 4, imm=2, bimm=True)], I("LD", 5, 4),
            term=Term("JMP", taken=2)),
        blk([], I("ST", ra=2, rb=5, imm=32)),
    ])


def spin_on_flag():
    # thread 0 spins on word 0 until thread 4 (warp 1) sets it: back edges hand the turn over
    return Program([blk([tid(1), I("SEQ", 2, 1, ZERO)], term=Term("BR", 2, 1, 3)),
                    blk([], I("LD", 3, ZERO), [I("SEQ", 4, 3, ZERO)], Term("BR", 4, 1, 2)),
                    blk([li(5, 9)], I("ST", ra=ZERO, rb=5, imm=4)),
                    blk([I("SEQ", 2, 1, imm=4, bimm=True)], term=Term("BR", 2, 4, 5)),
                    blk([li(5, 1)], I("ST", ra=ZERO, rb=5)),
                    blk()])


def atomic_counter_per_cta():
    # every thread of every CTA: ATOM.ADD word ctaid.x, tid+1 ; store the old value at 16 + 8*ctaid.x + tid
    return Program([
        blk([tid(1), I("ADD", 2, 1, imm=1, bimm=True), I("S2R", 6, imm=4), I("SHL", 7, 6, imm=2, bimm=True)],
            I("ATOM.ADD", 4, 7, 2), [I("SHL", 6, 6, imm=3, bimm=True), I("ADD", 6, 6, 1),
                                     I("SHL", 6, 6, imm=2, bimm=True)], Term("JMP", taken=1)),
        blk([], I("ST", ra=6, rb=4, imm=64)),
    ])


LAUNCHES = {
    "divergent_if_else": (divergent_if_else, (1, 1), (4, 1)),
    "per_lane_loop": (per_lane_loop, (1, 1), (6, 1)),
    "barrier_exchange": (barrier_exchange, (1, 1), (8, 1)),
    "spin_on_flag": (spin_on_flag, (1, 1), (8, 1)),
    "atomic_counter_2d_grid": (atomic_counter_per_cta, (3, 2), (7, 1)),
}


@pytest.mark.parametrize("name", LAUNCHES)
def test_steps_replay_run_exactly(name):
    make, grid, block = LAUNCHES[name]
    want = run(make(), mem(), grid, block, step_limit=500, trace=True)
    recs = list(steps(make(), mem(), grid, block, step_limit=500))
    assert [r.trace_entry for r in recs] == want.trace
    assert [r.step for r in recs] == list(range(1, want.steps + 1))
    assert list(recs[-1].memory) == want.memory
    # ctaid follows the CTA index, x fastest
    assert all(r.ctaid == (r.cta % grid[0], r.cta // grid[0]) for r in recs)


def test_registers_mid_launch_are_what_the_program_computed_so_far():
    # warp 0 = tids 0..3; after the k-th loop-body step the lanes with tid >= k ran it k times
    body = [r for r in steps(per_lane_loop(), mem(), block=(4, 1)) if r.block == 2]
    assert [r.active for r in body] == [0b1110, 0b1100, 0b1000]
    for k, r in enumerate(body, start=1):
        for lane in range(4):
            if lane >= k:
                assert r.regs[lane][2] == sum(range(lane - k + 1, lane + 1))   # r2 = tid + (tid-1) + ...
                assert r.regs[lane][1] == lane - k                              # r1 counted down k times
                assert r.pc[lane] == 1                                          # back to the loop test
            else:
                assert r.pc[lane] == 3                                          # waiting at the store
    assert not any(body[-1].exited)


def test_pcs_exited_flags_and_memory_after_each_step():
    recs = list(steps(divergent_if_else(), mem(), block=(3, 1)))
    first = recs[0]
    assert (first.block, first.active) == (0, 0b0111)               # lane 3: no thread, exited from the start
    assert first.pc[:3] == (2, 1, 2) and first.exited == (False, False, False, True)
    assert recs[-1].exited == (True,) * 4
    assert list(recs[-1].memory[:3]) == [9, 7, 9]

    # barrier: after warp 0's first step (its stores, then BAR) memory holds its words and no one else's
    b = list(steps(barrier_exchange(), mem(), block=(8, 1)))
    assert (b[0].warp, b[0].block) == (0, 0)
    assert list(b[0].memory[:8]) == [1, 2, 3, 4, 0, 0, 0, 0]
    assert list(b[-1].memory[:16]) == [1, 2, 3, 4, 5, 6, 7, 8, 2, 3, 4, 5, 6, 7, 8, 1]   # records are snapshots


def test_records_are_frozen_copies():
    it = steps(per_lane_loop(), mem(), block=(4, 1))
    r = next(it)
    regs, pc = r.regs, r.pc
    list(it)
    assert r.regs is regs and r.regs[1][1] == 1 and r.pc == pc      # later steps changed nothing in it
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.block = 5


def test_checks_run_at_the_call_and_faults_at_their_step():
    with pytest.raises(CapacityError, match="33 threads"):
        steps(Program([blk()]), mem(), block=(33, 1))               # before any next()
    spin = Program([blk(term=Term("JMP", taken=1)), blk(term=Term("JMP", taken=0))])
    seen = []
    with pytest.raises(StepLimitError, match="step limit of 20"):
        for r in steps(spin, mem(), step_limit=20):
            seen.append(r.block)
    assert seen == [0, 1] * 10

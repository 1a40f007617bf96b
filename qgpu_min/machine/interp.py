"""Reference interpreter of the machine program (the oracle for the circuit). Rules: isa.py docstring.

Two ways to drive it, one implementation of the semantics and the scheduling:
  run(program, memory, grid, block, step_limit, trace) -> RunResult     the whole launch, fast
  steps(program, memory, grid, block, step_limit) -> Iterator[StepRecord]
      the same launch one warp step at a time: each record is the warp's state right after the step
      (for stepping through a kernel and for checking another backend step by step)
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Callable

from .isa import (LANES, MASK32, MAX_CTAS, MAX_THREADS_PER_CTA, MEM_WORDS, SPECIALS, ZERO, DEFAULT_STEP_LIMIT,
                  CapacityError, Instr, MachineError, Program, check_program, signed32)


class MemoryFault(MachineError):
    """An access outside memory or misaligned; ``block`` is the block of the access (None if unknown)."""

    def __init__(self, message: str, block: int | None = None) -> None:
        super().__init__(message)
        self.block = block


class StepLimitError(MachineError):
    """The launch did not halt within the step limit; ``block`` is the block the stopped warp was at."""

    def __init__(self, message: str, block: int) -> None:
        super().__init__(message)
        self.block = block


ALU: dict[str, Callable[[int, int, int], int]] = {
    "NOP": lambda a, b, c: 0,
    "ADD": lambda a, b, c: (a + b) & MASK32,
    "SUB": lambda a, b, c: (a - b) & MASK32,
    "MUL": lambda a, b, c: (a * b) & MASK32,
    "MULHU": lambda a, b, c: (a * b) >> 32,
    "AND": lambda a, b, c: a & b,
    "OR": lambda a, b, c: a | b,
    "XOR": lambda a, b, c: a ^ b,
    "SHL": lambda a, b, c: (a << (b & 31)) & MASK32,
    "SHR": lambda a, b, c: a >> (b & 31),
    "SRA": lambda a, b, c: (signed32(a) >> (b & 31)) & MASK32,
    "SEQ": lambda a, b, c: int(a == b),
    "SNE": lambda a, b, c: int(a != b),
    "SLT": lambda a, b, c: int(signed32(a) < signed32(b)),
    "SLE": lambda a, b, c: int(signed32(a) <= signed32(b)),
    "SLTU": lambda a, b, c: int(a < b),
    "SLEU": lambda a, b, c: int(a <= b),
    "MIN": lambda a, b, c: a if signed32(a) <= signed32(b) else b,
    "MAX": lambda a, b, c: a if signed32(a) >= signed32(b) else b,
    "MINU": lambda a, b, c: min(a, b),
    "MAXU": lambda a, b, c: max(a, b),
    "SEL": lambda a, b, c: b if a else c,
}

# ATOM.<kind>: (old, b, c) -> new word
ATOM: dict[str, Callable[[int, int, int], int]] = {
    "ADD": lambda o, b, c: (o + b) & MASK32,
    "MIN": lambda o, b, c: o if signed32(o) <= signed32(b) else b,
    "MAX": lambda o, b, c: o if signed32(o) >= signed32(b) else b,
    "MINU": lambda o, b, c: min(o, b),
    "MAXU": lambda o, b, c: max(o, b),
    "EXCH": lambda o, b, c: b,
    "AND": lambda o, b, c: o & b,
    "OR": lambda o, b, c: o | b,
    "XOR": lambda o, b, c: o ^ b,
    "CAS": lambda o, b, c: c if o == b else o,
    "INC": lambda o, b, c: 0 if o >= b else o + 1,
    "DEC": lambda o, b, c: b if o == 0 or o > b else o - 1,
}

LOAD_SIZE = {"LD": 4, "LDB": 1, "LDBU": 1, "LDH": 2, "LDHU": 2}
STORE_SIZE = {"ST": 4, "STB": 1, "STH": 2}


def shfl_source(mode: str, lane: int, b: int, c: int) -> int:
    """The lane whose register SHFL.<mode> (IDX, UP, DOWN, BFLY) reads for lane `lane`, given its B and C
    operands: PTX shfl.sync's rule with the segment narrowed to the LANES-lane warp; a source outside the
    segment (or the warp) is the lane itself."""
    b &= 31
    segmask = ((c >> 8) & 31) | (~(LANES - 1) & 31)
    max_lane = (lane & segmask) | (c & 31 & ~segmask)
    if mode == "UP":
        j, ok = lane - b, lane - b >= max_lane
    elif mode == "DOWN":
        j, ok = lane + b, lane + b <= max_lane
    elif mode == "BFLY":
        j = lane ^ b
        ok = j <= max_lane
    else:
        j = (lane & segmask) | (b & ~segmask & 31)
        ok = j <= max_lane
    return j if ok and 0 <= j < LANES else lane


@dataclass
class RunResult:
    memory: list[int]                       # final memory words, unsigned
    steps: int                              # warp steps (block executions)
    trace: list[tuple[int, int, int]] = field(default_factory=list)   # (cta, warp, block)


@dataclass(frozen=True)
class StepRecord:
    """One warp step and the state it left. Copies, so a record stays as it was while the launch goes on."""
    step: int                                   # warp steps so far in the launch, this one included (from 1)
    cta: int                                    # CTA index, x fastest (as in RunResult.trace)
    ctaid: tuple[int, int]                      # (ctaid.x, ctaid.y)
    warp: int
    block: int                                  # the block executed: the lowest PC among the warp's live lanes
    active: int                                 # lane mask: bit l = lane l executed the block
    regs: tuple[tuple[int, ...], ...]           # [lane][register r0..r15] after the step, unsigned
    pc: tuple[int, ...]                         # per lane, after the step (an exited lane keeps its last PC)
    exited: tuple[bool, ...]                    # per lane, after the step
    memory: tuple[int, ...]                     # all MEM_WORDS words after the step, unsigned

    @property
    def trace_entry(self) -> tuple[int, int, int]:
        """(cta, warp, block): this step's entry in RunResult.trace."""
        return self.cta, self.warp, self.block


@dataclass
class _Warp:
    index: int
    regs: list[list[int]]
    pc: list[int]
    exited: list[bool]
    special: list[list[int]]
    at_bar: bool = False

    @property
    def done(self) -> bool:
        return all(self.exited)


class _Machine:
    def __init__(self, program: Program, memory: list[int], step_limit: int, trace: bool):
        self.blocks = program.blocks
        self.mem = memory
        self.step_limit = step_limit
        self.steps = 0
        self.trace: list[tuple[int, int, int]] | None = [] if trace else None
        self.cta = 0
        self.cta_xy = (0, 0)

    # ---- memory -------------------------------------------------------------------------
    def _addr(self, w: _Warp, lane: int, ins: Instr, size: int) -> int:
        addr = (w.regs[lane][ins.ra] + ins.imm) & MASK32
        where = (f"lane {lane} of warp {w.index} in CTA {self.cta} {self.cta_xy}, block B{w.pc[lane]}, "
                 f"`{ins}`: address {addr:#x}")
        if addr + size > MEM_WORDS * 4:
            raise MemoryFault(f"memory access out of range: {where} (memory is {MEM_WORDS * 4} bytes)", w.pc[lane])
        if addr % size:
            raise MemoryFault(f"misaligned {size}-byte access: {where}", w.pc[lane])
        return addr

    def _read(self, addr: int, size: int) -> int:
        word = self.mem[addr >> 2]
        return (word >> (8 * (addr & 3))) & ((1 << 8 * size) - 1)

    def _write(self, addr: int, size: int, value: int) -> None:
        if size == 4:
            self.mem[addr >> 2] = value & MASK32
            return
        shift = 8 * (addr & 3)
        m = ((1 << 8 * size) - 1) << shift
        word = self.mem[addr >> 2]
        self.mem[addr >> 2] = (word & ~m & MASK32) | ((value << shift) & m)

    # ---- one block ----------------------------------------------------------------------
    def _alu(self, w: _Warp, ins: Instr, active: list[int]) -> None:
        if ins.op == "NOP" or ins.rd == ZERO:
            return
        if ins.op == "S2R":
            for l in active:
                w.regs[l][ins.rd] = w.special[l][ins.imm]
            return
        f = ALU[ins.op]
        bimm = ins.imm & MASK32
        for l in active:
            r = w.regs[l]
            r[ins.rd] = f(r[ins.ra], bimm if ins.bimm else r[ins.rb], r[ins.rc])

    def _mem(self, w: _Warp, ins: Instr, active: list[int]) -> None:
        op = ins.op
        if op in LOAD_SIZE:
            size = LOAD_SIZE[op]
            for l in active:
                v = self._read(self._addr(w, l, ins, size), size)
                if op in ("LDB", "LDH") and v >> (8 * size - 1):
                    v = (v - (1 << 8 * size)) & MASK32
                if ins.rd != ZERO:
                    w.regs[l][ins.rd] = v
        elif op in STORE_SIZE:
            size = STORE_SIZE[op]
            for l in active:
                self._write(self._addr(w, l, ins, size), size, w.regs[l][ins.rb])
        elif op.startswith("ATOM."):
            f = ATOM[op[5:]]
            for l in active:        # lane order
                a = self._addr(w, l, ins, 4)
                old = self.mem[a >> 2]
                self.mem[a >> 2] = f(old, w.regs[l][ins.rb], w.regs[l][ins.rc])
                if ins.rd != ZERO:
                    w.regs[l][ins.rd] = old
        elif op.startswith("VOTE."):
            self._vote(w, ins, active)
        else:
            self._shfl(w, ins, active)

    def _vote(self, w: _Warp, ins: Instr, active: list[int]) -> None:
        preds = [bool(ins.imm if ins.bimm else w.regs[l][ins.rb]) for l in active]
        lane = SPECIALS.index("laneid")
        value = {"VOTE.BALLOT": sum(1 << w.special[l][lane] for l, p in zip(active, preds) if p),
                 "VOTE.ANY": int(any(preds)), "VOTE.ALL": int(all(preds))}[ins.op]
        if ins.rd != ZERO:
            for l in active:
                w.regs[l][ins.rd] = value

    def _shfl(self, w: _Warp, ins: Instr, active: list[int]) -> None:
        mode = ins.op[5:]
        lane = SPECIALS.index("laneid")
        results = [(l, w.regs[shfl_source(mode, w.special[l][lane], ins.imm if ins.bimm else w.regs[l][ins.rb],
                                          w.regs[l][ins.rc])][ins.ra]) for l in active]
        if ins.rd != ZERO:
            for l, v in results:
                w.regs[l][ins.rd] = v

    def _step(self, w: _Warp) -> tuple[int, list[int], bool]:
        """Execute one block for warp w; return its PC, the active lanes and whether a lane branched backward
        (a BAR sets w.at_bar)."""
        live = [l for l in range(LANES) if not w.exited[l]]
        pc = min(w.pc[l] for l in live)
        if self.steps >= self.step_limit:
            raise StepLimitError(f"the launch did not halt within the step limit of {self.step_limit} "
                                 f"block executions: stopped at CTA {self.cta} {self.cta_xy}, warp {w.index}, "
                                 f"block B{pc} (lanes {live} live)", pc)
        self.steps += 1
        if self.trace is not None:
            self.trace.append((self.cta, w.index, pc))
        active = [l for l in live if w.pc[l] == pc]
        blk = self.blocks[pc]
        for ins in blk.pre:
            self._alu(w, ins, active)
        if blk.mem is not None:
            self._mem(w, blk.mem, active)
        for ins in blk.post:
            self._alu(w, ins, active)
        t = blk.term
        back = False
        for l in active:
            if t.kind == "JMP":
                w.pc[l] = t.taken
            elif t.kind == "BR":
                w.pc[l] = t.taken if w.regs[l][t.ra] else t.not_taken
            elif t.kind == "BAR":
                w.pc[l] = pc + 1
            else:
                w.exited[l] = True
            back = back or (t.kind in ("JMP", "BR") and w.pc[l] <= pc)
        if t.kind == "BAR":
            w.at_bar = True
        return pc, active, back

    # ---- scheduling ---------------------------------------------------------------------
    def launch_steps(self, grid: tuple[int, int], block: tuple[int, int]) -> Iterator[tuple[_Warp, int, list[int]]]:
        """Run the CTAs in order, yielding (warp, block executed, active lanes) after every warp step."""
        cta = 0
        for cy in range(grid[1]):
            for cx in range(grid[0]):
                yield from self.cta_steps(cta, (cx, cy), grid, block)
                cta += 1

    def cta_steps(self, cta: int, ctaid: tuple[int, int], grid: tuple[int, int],
                  block: tuple[int, int]) -> Iterator[tuple[_Warp, int, list[int]]]:
        """Run one CTA to the end (scheduling: isa.py docstring), yielding as launch_steps does."""
        self.cta, self.cta_xy = cta, ctaid
        bx, by = block
        n = bx * by
        warps = []
        for wi in range((n + LANES - 1) // LANES):
            special = []
            exited = []
            for l in range(LANES):
                t = wi * LANES + l
                special.append([t % bx, t // bx, bx, by, ctaid[0], ctaid[1], grid[0], grid[1], l, wi, t])
                exited.append(t >= n)
            warps.append(_Warp(wi, [[0] * 16 for _ in range(LANES)], [0] * LANES, exited, special))
        cur = 0
        while True:
            w = warps[cur]
            while not w.done and not w.at_bar:
                pc, active, back = self._step(w)
                yield w, pc, active
                if back:        # a loop back edge ends the warp's turn, so a warp waiting on another can't starve it
                    break
            waiting = [x for x in warps if not x.done]
            if not waiting:
                return
            if all(x.at_bar for x in waiting):
                for x in waiting:
                    x.at_bar = False
            cur = next(x.index for k in range(1, len(warps) + 1)
                       for x in [warps[(cur + k) % len(warps)]] if not x.done and not x.at_bar)


def check_launch_shape(grid: tuple[int, int], block: tuple[int, int]) -> None:
    for name, (x, y) in (("grid", grid), ("block", block)):
        if x < 1 or y < 1:
            raise MachineError(f"{name} dimensions must be at least 1, got {x},{y}")
    threads = block[0] * block[1]
    if threads > MAX_THREADS_PER_CTA:
        raise CapacityError(f"block of {threads} threads exceeds the machine's {MAX_THREADS_PER_CTA} threads "
                            f"per CTA (over by {threads - MAX_THREADS_PER_CTA})")
    ctas = grid[0] * grid[1]
    if ctas > MAX_CTAS:
        raise CapacityError(f"grid of {ctas} CTAs exceeds the machine's {MAX_CTAS} CTAs per launch "
                            f"(over by {ctas - MAX_CTAS})")


def _machine(program: Program, memory: list[int], grid: tuple[int, int], block: tuple[int, int],
             step_limit: int | None, trace: bool, make: Callable[..., _Machine] = _Machine) -> _Machine:
    """A machine ready to launch, after the checks every launch gets (program, shape, memory size);
    ``make(program, memory, step_limit, trace)`` builds it (a checked machine for --memcheck)."""
    check_program(program)
    check_launch_shape(grid, block)
    if len(memory) != MEM_WORDS:
        raise MachineError(f"memory image has {len(memory)} words, the machine has {MEM_WORDS}")
    return make(program, [int(x) & MASK32 for x in memory], step_limit or DEFAULT_STEP_LIMIT, trace)


def run(program: Program, memory: list[int], grid: tuple[int, int] = (1, 1), block: tuple[int, int] = (LANES, 1),
        step_limit: int | None = None, trace: bool = False) -> RunResult:
    """Run a launch. ``memory``: MEM_WORDS unsigned words (not modified; the result holds the new ones)."""
    m = _machine(program, memory, grid, block, step_limit, trace)
    deque(m.launch_steps(grid, block), maxlen=0)    # drains the scheduler at C speed: no per-step work here
    return RunResult(m.mem, m.steps, m.trace or [])


def steps(program: Program, memory: list[int], grid: tuple[int, int] = (1, 1), block: tuple[int, int] = (LANES, 1),
          step_limit: int | None = None) -> Iterator[StepRecord]:
    """The launch run() makes, one StepRecord per warp step, in run(trace=True).trace order.

    The checks run now (a bad program or shape raises here, not at the first next()); a MemoryFault or
    StepLimitError is raised by the next() of the step that causes it. The last record's memory is the
    final memory.
    """
    m = _machine(program, memory, grid, block, step_limit, trace=False)
    return _records(m, grid, block)


def _records(m: _Machine, grid: tuple[int, int], block: tuple[int, int]) -> Iterator[StepRecord]:
    # a memory snapshot is copied only after blocks that can write memory; other records share the previous one
    writes = [b.mem is not None and (b.mem.op in STORE_SIZE or b.mem.op.startswith("ATOM.")) for b in m.blocks]
    memory = tuple(m.mem)
    for w, pc, active in m.launch_steps(grid, block):
        if writes[pc]:
            memory = tuple(m.mem)
        yield StepRecord(m.steps, m.cta, m.cta_xy, w.index, pc, sum(1 << l for l in active),
                         tuple(map(tuple, w.regs)), tuple(w.pc), tuple(w.exited), memory)

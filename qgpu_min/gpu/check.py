"""The `--check` replay: what the model must generate for a launch, and a per-token checker of a real run.

Why this oracle is independent of the circuit: every expected token and every expected register and
memory word comes from the reference interpreter (qgpu_min.machine.interp), which executes the machine
program by register names on Python integers. From the GPU side it takes only what the host itself
sends or legitimately knows: the launch protocol (docs/machine.md ordering: warp steps, active lanes in
increasing order, each write-back as 12/12/8-bit parts or one small value) and the ROM's write-back list
(encode.encode_block, the same table the prompt carries). Nothing here reads a circuit group, a weight
or the IR simulator; the model's state is only *read* to compare it against the interpreter.

The one adaptation of the interpreter is its memory bound: the GPU has spec.mem_words words (today the
machine's MEM_WORDS; a smaller GPU would fault where the machine does not). _GpuMachine bounds accesses
inside the interpreter's own address computation, and records the first fault of a step instead of
raising it, so the lanes before the faulting one finish the step (the GPU runs them in full, in lane
order, before the faulting lane's EXEC answers FAULT). Lanes are independent within a step for every
block the GPU runs (ALU ops, word LD/ST, atomics and sub-word stores in lane order: no shuffles or
votes), so their values are exact. The same subclass notes the word each lane's atomic or sub-word store
leaves in memory (its record write-back).

Token protocol checked (core.py): per CTA, per warp step, per active lane l ascending: ("exec", block, l, warp,
parity), where parity counts (mod 2) the barrier openings so far (the interpreter's scheduling order and
a BAR block's end of the warp's turn are the interpreter's own; see expected_tokens), then
one write-back per entry e of encode_block(block).writeback, in order: its value v (lane l's register
after the block; for an atomic's record, entry 0, the memory word lane l's atomic left) goes out as
("w1", e, v & 0xff) when v is a sign-extended 8-bit number, else as ("wa", v & 0xfff),
("wb", v >> 12 & 0xfff), ("w3", e, v >> 24); between CTAs ("cta", x, y, w) for the next CTA (x, y), one
per warp w of the block from the last down (each starts at parity 0); finally ("halt",), or ("fault",)
right after the EXEC of the first lane whose access is outside the GPU's memory or misaligned.

State checked (Checker): when the token after a lane step is generated (EXEC, CTA or HALT), that lane's
registers live after the block; when it also begins a new warp step, the data memory. Memory is not
compared inside a warp step: the model has run the stores of the lanes so far, the interpreter's
record holds those of all active lanes.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from ..circuit.ir import MemOp
from ..circuit.run import read_rows, readout, row_word_array, row_words
from ..errors import QgpuError
from ..machine import interp
from ..machine.interp import MemoryFault, StepRecord
from ..machine.isa import DEFAULT_STEP_LIMIT, MASK32, Program, check_program
from .encode import BlockCode, encode_block
from .layout import PAY_BITS, RECORD_REG, SMALL_BITS, SUBWORD_STORES, GpuSpec
from .vocab import Token, token_name

# the three parts of a wide write-back: (token kind, first bit, bits)
WB_PARTS = (("wa", 0, PAY_BITS), ("wb", PAY_BITS, PAY_BITS), ("w3", 2 * PAY_BITS, 32 - 2 * PAY_BITS))


class CheckError(QgpuError):
    """The model's run differs from the interpreter's: a generated token, a register or a memory word."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index       # generated token at which the difference was seen


@dataclass(frozen=True)
class StepInfo:
    """Where an expected token belongs. HALT: block and lane None, record = the last step's."""
    step: int                          # interpreter warp step, from 1
    cta: int
    warp: int
    block: int | None
    lane: int | None
    entry: int | None = None           # write-back tokens: the entry, its register, the full value
    reg: int | None = None             # layout.RECORD_REG: an atomic's record (the value is a memory word)
    value: int | None = None
    live: tuple[int, ...] = ()         # EXEC: the registers live after the block (compared after it)
    record: StepRecord | None = field(default=None, compare=False, repr=False)

    def where(self) -> str:
        if self.block is None:
            return f"after step {self.step} (CTA {self.cta}, warp {self.warp})"
        return f"step {self.step}, CTA {self.cta}, warp {self.warp}, block B{self.block}, lane {self.lane}"

    def target(self) -> str:
        """What a write-back token writes: a register, or the memory word of an atomic."""
        return "the atomic's new memory word" if self.reg == RECORD_REG else f"r{self.reg}"


# ---- the interpreter, bounded by the GPU's memory ------------------------------------------------------

@dataclass(frozen=True)
class _Fault:
    step: int
    lane: int
    message: str


class _GpuMachine(interp._Machine):
    """The interpreter with the GPU's (smaller) memory, and a note of what each lane's atomic wrote.

    An access outside spec.mem_words words or misaligned is recorded as the step's fault and redirected
    to word 0, so that the step completes for the other lanes; the launch is cut after this step, so
    nothing it wrote is used. Every access goes through _addr in lane order, so at a lane's access the
    previous lane's atomic has written its word: that word is its record write-back."""

    def __init__(self, program: Program, memory: list[int], step_limit: int, words: int) -> None:
        super().__init__(program, memory, step_limit, trace=False)
        self.words = words
        self.fault: _Fault | None = None
        self.atom_words: dict[tuple[int, int], int] = {}      # (step, lane) -> the word its atomic left
        self._pending: tuple[int, int, int] | None = None      # (step, lane, address) of the last atomic

    def settle(self) -> None:
        """Note the word the last atomic left (called before the next access and after each step)."""
        if self._pending is not None:
            step, lane, addr = self._pending
            self.atom_words[step, lane] = self.mem[addr >> 2]
            self._pending = None

    def _addr(self, w, lane: int, ins, size: int) -> int:
        self.settle()
        try:
            addr = super()._addr(w, lane, ins, size)      # the machine's own checks first
            if addr + size > self.words * 4:
                raise MemoryFault(f"lane {lane} of warp {w.index}, block B{w.pc[lane]}, `{ins}`: address "
                                  f"{addr:#x} is outside the GPU's {self.words} words")
        except MemoryFault as e:
            if self.fault is None:           # lane order: the first is the lane the GPU stops at
                self.fault = _Fault(self.steps, lane, str(e))
            return 0
        if ins.op.startswith("ATOM.") or ins.op in SUBWORD_STORES:     # a record write-back follows
            self._pending = (self.steps, lane, addr)
        return addr


def _records(program: Program, memory: list[int], grid: tuple[int, int], block: tuple[int, int], spec: GpuSpec,
             step_limit: int | None) -> tuple[_GpuMachine, Iterator[StepRecord]]:
    check_program(program)
    interp.check_launch_shape(grid, block)
    if len(memory) != interp.MEM_WORDS:
        raise interp.MachineError(f"memory image has {len(memory)} words, the machine has {interp.MEM_WORDS}")
    m = _GpuMachine(program, [int(x) & MASK32 for x in memory], step_limit or DEFAULT_STEP_LIMIT, spec.mem_words)
    return m, interp._records(m, grid, block)


# ---- expected tokens ---------------------------------------------------------------------------------

def _exec_token(rec: StepRecord, lane: int, parity: int) -> Token:
    # the one place the EXEC token's shape is known
    return ("exec", rec.block, lane, rec.warp, parity)


def _is_small(v: int) -> bool:
    """v (unsigned 32-bit) is a sign-extended SMALL_BITS number: it fits one w1 token."""
    half = 1 << (SMALL_BITS - 1)
    return v < half or v >= (1 << 32) - half


def writeback_tokens(e: int, v: int) -> list[Token]:
    """The tokens of write-back entry e carrying the 32-bit value v."""
    if _is_small(v):
        return [("w1", e, v & ((1 << SMALL_BITS) - 1))]
    wa, wb, w3 = ((v >> lo) & ((1 << n) - 1) for _, lo, n in WB_PARTS)
    return [("wa", wa), ("wb", wb), ("w3", e, w3)]


def _lane_writebacks(m: _GpuMachine, rec: StepRecord, lane: int, code: BlockCode) -> list[tuple[Token, StepInfo]]:
    out = []
    for e, (r, src) in enumerate(code.writeback):
        v = m.atom_words[rec.step, lane] if src == "atom" else rec.regs[lane][r]
        info = StepInfo(rec.step, rec.cta, rec.warp, rec.block, lane, e, r, v, record=rec)
        out += [(t, info) for t in writeback_tokens(e, v)]
    return out


def _lanes(mask: int) -> list[int]:
    return [l for l in range(mask.bit_length()) if mask >> l & 1]


def _cta_tokens(rec: StepRecord, last: StepRecord, block: tuple[int, int], spec: GpuSpec) -> list[tuple[Token, StepInfo]]:
    """The tokens between two CTAs: one per warp of the block, the last warp first, naming the next CTA."""
    top = (block[0] * block[1] - 1) // spec.lanes
    return [(("cta", *rec.ctaid, w), StepInfo(last.step, rec.cta, w, None, None, record=last))
            for w in range(top, -1, -1)]


def expected_tokens(program: Program, memory: list[int], block: tuple[int, int] | int, spec: GpuSpec,
                    step_limit: int | None = None, grid: tuple[int, int] = (1, 1)) -> list[tuple[Token, StepInfo]]:
    """The tokens the model must generate for this launch (`block`: (x, y) or a thread count), each with the
    step, CTA, warp, block and lane it belongs to. Raises interp.StepLimitError as the interpreter does."""
    block = (block, 1) if isinstance(block, int) else tuple(block)
    codes: dict[int, BlockCode] = {}
    out: list[tuple[Token, StepInfo]] = []
    m, records = _records(program, memory, tuple(grid), block, spec, step_limit)
    last: StepRecord | None = None
    # the barrier parity: a warp steps again after a BAR block only once the barrier has opened for every
    # waiting warp, which flips the parity the EXEC tokens carry; each CTA starts at parity 0
    at_bar: set[int] = set()
    parity = 0
    for rec in records:
        m.settle()
        if last is not None and rec.cta != last.cta:
            out += _cta_tokens(rec, last, block, spec)
            at_bar.clear()
            parity = 0
        if rec.warp in at_bar:
            at_bar.clear()
            parity ^= 1
        blk = program.blocks[rec.block]
        if blk.term.kind == "BAR":
            at_bar.add(rec.warp)
        if rec.block not in codes:
            codes[rec.block] = encode_block(blk, spec.fmt, f"block B{rec.block}")
        live = tuple(r for r in range(spec.regs) if blk.live_out >> r & 1)
        fault = m.fault if m.fault is not None and m.fault.step == rec.step else None
        for lane in _lanes(rec.active):
            out.append((_exec_token(rec, lane, parity), StepInfo(rec.step, rec.cta, rec.warp, rec.block, lane,
                                                          live=live, record=rec)))
            if fault is not None and lane == fault.lane:
                return out + [(("fault",), StepInfo(rec.step, rec.cta, rec.warp, rec.block, lane, record=rec))]
            out += _lane_writebacks(m, rec, lane, codes[rec.block])
        last = rec
    assert last is not None, "a launch runs at least one step"
    return out + [(("halt",), StepInfo(last.step, last.cta, last.warp, None, None, record=last))]


# ---- the checker -------------------------------------------------------------------------------------

def _hex_known(value: int, known_bits: int) -> str:
    """value's 8 hex digits, those above known_bits (not generated) shown as '?' (parts are whole digits)."""
    k = known_bits // 4
    return "0x" + "?" * (8 - k) + f"{value & MASK32:08x}"[8 - k:]


def _found_value(token: Token, want: Token, info: StepInfo) -> str:
    """What the generated token makes of the write-back value, as far as it is known: the entry's earlier
    parts were generated as expected (the checker stops at the first difference)."""
    if token[0] == "w1":
        v = token[2]
        return f"{(v - (1 << SMALL_BITS) if v >> (SMALL_BITS - 1) else v) & MASK32:#010x}"
    for kind, lo, n in WB_PARTS:
        if token[0] == kind and (kind == "wa" or want[0] == kind):
            return _hex_known((info.value & ((1 << lo) - 1)) | (token[-1] << lo), lo + n)
    return f"no write-back ({token_name(token)})"


class Checker:
    """Called as checker(i, token, state) for every generated token i (state: after tokens 0..i-1).

    Raises CheckError at the first generated token that differs from expected_tokens, and at the first
    lane step (warp step) after which a live register (a data memory word) read from the model's state
    differs from the interpreter's. state None: tokens only (a recorded run, or a token at which
    next_state_read says it
    does not read it)."""

    def __init__(self, cg, expected: list[tuple[Token, StepInfo]]) -> None:
        self.cg = cg
        self.spec: GpuSpec = cg.gc.spec
        self.expected = expected
        regs_op = next(op for op in cg.plan.ops if isinstance(op, MemOp) and op.mem.name == "regs")
        self.regs = readout(cg.plan, regs_op)           # where the rows sit in the state: found once, read often
        self.data = readout(cg.plan, cg.data_op)
        # the generated tokens at which the state is read: a lane step ends (EXEC, CTA or HALT follows it)
        self.state_reads = [i for i, (t, _) in enumerate(expected) if t[0] in ("exec", "cta", "halt")]
        self.open: StepInfo | None = None      # the EXEC whose lane step is being generated
        self.checked = 0                       # tokens compared so far

    def next_state_read(self, i: int) -> int:
        """The first generated token j >= i whose call reads the state: a caller may pass None for the
        state before it (and decode the tokens up to it in one go). Past the expected tokens every call
        reads (it raises before it does)."""
        k = bisect.bisect_left(self.state_reads, i)
        return self.state_reads[k] if k < len(self.state_reads) else max(i, len(self.expected))

    @property
    def complete(self) -> bool:
        """Every expected token has been generated and matched."""
        return self.checked == len(self.expected)

    def __call__(self, i: int, token: Token, state=None) -> None:
        info = self._check_token(i, token)
        if token[0] in ("exec", "cta", "halt") and self.open is not None and state is not None:
            self._check_registers(i, state, self.open)
            if token[0] != "exec" or (info.step, info.cta, info.warp) != (self.open.step, self.open.cta,
                                                                          self.open.warp):
                self._check_memory(i, state, self.open.record)
        if token[0] == "exec":
            self.open = info
        elif token[0] in ("cta", "halt", "fault"):
            # a FAULT ends the launch inside the faulting lane's step: nothing after its EXEC is complete;
            # a cta token clears the registers the first of them was checked against
            self.open = None
        self.checked = i + 1

    # ---- tokens ----------------------------------------------------------------------------------
    def _check_token(self, i: int, token: Token) -> StepInfo:
        if i >= len(self.expected):
            raise CheckError(f"generated token {i}: {token_name(token)}, but the launch should have ended with "
                             f"token {len(self.expected) - 1} ({token_name(self.expected[-1][0])})", i)
        want, info = self.expected[i]
        if token == want:
            return info
        msg = f"generated token {i}: expected {token_name(want)}, found {token_name(token)} at {info.where()}"
        if info.entry is not None:
            msg += (f"; write-back entry {info.entry}: {info.target()} expected {info.value:#010x}, found "
                    f"{_found_value(token, want, info)}")
        raise CheckError(msg, i)

    # ---- state -----------------------------------------------------------------------------------
    def _reg_rows(self, info: StepInfo) -> range:
        # register file rows of one lane: (warp * lanes + lane) * regs + r
        first = (info.warp * self.spec.lanes + info.lane) * self.spec.regs
        return range(first, first + self.spec.regs)

    def _check_registers(self, i: int, state, info: StepInfo) -> None:
        if not info.live:
            return
        words = row_words(read_rows(self.regs, state.recurrent, rows=self._reg_rows(info)))
        want = info.record.regs[info.lane]
        for r in info.live:
            found = words[r]
            if found != want[r]:
                raise CheckError(f"generated token {i}: after the lane step of {info.where()}: register r{r} "
                                 f"expected {want[r]:#010x}, found {found:#010x} in the model's state", i)

    def _check_memory(self, i: int, state, rec: StepRecord) -> None:
        words = row_word_array(read_rows(self.data, state.recurrent))
        differ = np.flatnonzero(words != np.asarray(rec.memory[:words.size], np.int64))
        if differ.size:
            a = int(differ[0])
            found = int(words[a])
            raise CheckError(f"generated token {i}: after step {rec.step} (CTA {rec.cta}, warp {rec.warp}, "
                             f"block B{rec.block}): memory word {a} (address {4 * a:#x}) expected "
                             f"{rec.memory[a]:#010x}, found {found:#010x} in the model's state", i)

"""The qgpu-min machine: ISA, block format, capacities, ROM encoding. The one place it is defined.

Machine
-------
A SIMT GPU. A warp has ``LANES`` = 4 lanes. Each lane has 15 general 32-bit registers r0..r14 and
r15 (``ZERO``), which reads 0 and discards writes. All arithmetic is 32-bit two's complement and
wraps. There is no floating point and no separate predicate file: compares write 0/1 into a general
register and a branch tests a register (non-zero = taken).

Memory is ONE unified array of ``MEM_WORDS`` 32-bit words, little-endian, byte-addressed: an address
is a byte address held in a register. It holds the launch's arrays, shared memory, per-thread
``.local`` slots and ``.global``/``.const`` variables (layout: the launch's memory map).

Instructions
------------
An instruction has the fields ``op, rd, ra, rb, rc, bimm, imm``. Operand ``B`` is ``imm`` when
``bimm`` is set, else register ``rb``. ``A`` = register ``ra``, ``C`` = register ``rc``.

ALU (per active lane; ``u`` = unsigned view, ``s`` = signed view)::

  NOP                         nothing
  ADD SUB MUL                 rd = A + B, A - B, low 32 bits of A * B
  MULHU                       rd = high 32 bits of u(A) * u(B)
  AND OR XOR                  bitwise
  SHL SHR SRA                 rd = A << (B & 31), u(A) >> (B & 31), s(A) >> (B & 31)
  SEQ SNE SLT SLE SLTU SLEU   rd = 1 if A ==, !=, s<, s<=, u<, u<= B else 0
  MIN MAX MINU MAXU           signed / unsigned min and max
  SEL                         rd = B if A != 0 else C
  S2R                         rd = special value number imm (table ``SPECIALS``): 0 tid.x, 1 tid.y,
                              2 ntid.x, 3 ntid.y, 4 ctaid.x, 5 ctaid.y, 6 nctaid.x, 7 nctaid.y,
                              8 laneid, 9 warpid, 10 tid.lin = tid.x + tid.y * ntid.x

Memory and warp (at most one per block; address = A + imm, bytes, wrapping)::

  LD LDB LDBU LDH LDHU        rd = word / sign- or zero-extended byte / halfword at the address
  ST STB STH                  store register rb (low 32 / 8 / 16 bits); sub-word = read-modify-write
  ATOM.<op>                   rd = old word; word = f(old, rb[, rc]); lanes apply in lane order.
                              ops ADD MIN MAX MINU MAXU EXCH AND OR XOR CAS INC DEC
                              CAS: word = rc if old == rb else old.  INC: word = 0 if u(old) >= u(rb)
                              else old + 1.  DEC: word = rb if old == 0 or u(old) > u(rb) else old - 1
  SHFL.IDX SHFL.UP SHFL.DOWN SHFL.BFLY
                              rd = register ra of the source lane j, computed as PTX shfl.sync with
                              b = B and c = C, then the segment is narrowed to the 4-lane warp
                              (segmask |= ~(LANES-1) & 31): width min(w, 4). A source out of the
                              segment gives the lane its own value. A source lane that is not active
                              (diverged, exited, or missing in a partial warp) gives whatever its
                              register ra holds (registers start at 0).
  VOTE.BALLOT VOTE.ANY VOTE.ALL
                              over the ACTIVE lanes: BALLOT rd = OR of (B != 0) << laneid (B = imm 1
                              gives the active mask); ANY rd = 1 if some B != 0; ALL rd = 1 if every
                              B != 0.

Word alignment is required (LD/ST/ATOM: 4, LDH/LDHU/STH: 2). An access outside memory or
misaligned is an error naming the lane, CTA, warp, block, instruction and address.

Blocks (the ROM)
----------------
A program is a ROM of at most ``ROM_BLOCKS`` blocks. A block is, in order:
``N_PRE`` ALU slots, ONE memory/shuffle slot, ``N_POST`` ALU slots, and a terminator:

  JMP t            all active lanes go to block t
  BR  ra, t, f     per lane: go to t if ra != 0 else f (lanes may diverge)
  BAR              __syncthreads(): the warp waits at the CTA barrier, then lanes go to the next block
  EXIT             active lanes exit

Empty slots hold NOP. Each block also records ``live_in`` / ``live_out`` register masks (bit i =
register ri, 15 bits): the registers the block reads before writing / that are live after it.

A second execution target may accept only a narrower format (fewer or typed ALU slots, a bound on
the registers a block reads, a subset of the memory ops): ``BlockFormat``, checked by
``check_block_format``; ``MACHINE_FORMAT`` is the format above.

Scheduling and reconvergence
----------------------------
CTAs run one at a time in order (x fastest, then y). A CTA of ``bx * by`` threads has
ceil(threads / 4) warps; thread t = tid.x + tid.y * ntid.x is lane t % 4 of warp t // 4 (laneid and
warpid likewise); lanes past the last thread are exited from the start. Each lane has its own PC
(block index) and an exited flag. A warp step executes the block with the LOWEST PC among its live
lanes; the lanes at that PC are active. Within a CTA the current warp runs until it reaches BAR,
exits, or takes a BACKWARD branch: a step whose JMP/BR sends some active lane to a block at or before
the one just executed (target <= PC: a loop back edge) ends the warp's turn. Then the next warp in
round-robin order (warp index + 1, wrapping, the same warp last) that is neither at BAR nor exited
runs. So a warp spinning on a flag another warp sets lets that warp run; a warp's straight-line
(forward-only) code is never interleaved with another warp's. BAR releases when every non-exited
warp of the CTA has arrived. The lowering lays blocks out so that lowest-PC-first reconverges structured code: every
branch's blocks come before its immediate post-dominator, and a loop's blocks are contiguous, starting
at its header (see docs/machine.md). The shared region is reused by every CTA (uninitialised in CUDA).
Each warp step counts one step; more than the step limit is an error naming the CTA, warp and block.

Encoding
--------
``encode(program)`` gives a uint64 array of shape (blocks, ``ROW_WORDS``): ``SLOTS`` instruction words
(pre slots, the memory slot, post slots), one terminator word, one mask word.

Instruction word: bits 0-5 opcode (``OPCODES`` index), 6-9 rd, 10-13 ra, 14-17 rb, 18-21 rc,
22 bimm, 23-31 zero, 32-63 imm (two's complement). Terminator word: bits 0-1 kind (0 JMP, 1 BR,
2 BAR, 3 EXIT), 2-5 ra, 8-15 taken target, 16-23 not-taken target. Mask word: bits 0-14 live_in,
16-30 live_out. ``decode`` inverts ``encode`` exactly. Kernel parameters are immediates: the launch
writes each argument into the slots listed in ``Program.param_slots`` before encoding the ROM.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import QgpuError

LANES = 4
N_REGS = 16          # r0..r14 general, r15 reads zero
ZERO = 15
N_PRE = 8
N_POST = 4
SLOTS = N_PRE + 1 + N_POST
ROM_BLOCKS = 128
MEM_WORDS = 1024
MAX_WARPS_PER_CTA = 8
MAX_THREADS_PER_CTA = LANES * MAX_WARPS_PER_CTA
MAX_CTAS = 64
DEFAULT_STEP_LIMIT = 200_000
ROW_WORDS = SLOTS + 2
MASK32 = 0xFFFFFFFF
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1     # a signed word's range


def signed32(x: int) -> int:
    """The signed value of the 32-bit word in x's low 32 bits (two's complement): the one conversion from
    words to signed integers that the interpreter, the lowering and the encoders share."""
    x &= MASK32
    return x - (1 << 32) if x >> 31 else x

ALU_OPS = ("NOP", "ADD", "SUB", "MUL", "MULHU", "AND", "OR", "XOR", "SHL", "SHR", "SRA",
           "SEQ", "SNE", "SLT", "SLE", "SLTU", "SLEU", "MIN", "MAX", "MINU", "MAXU", "SEL", "S2R")
LOAD_OPS = ("LD", "LDB", "LDBU", "LDH", "LDHU")
STORE_OPS = ("ST", "STB", "STH")
ATOM_KINDS = ("ADD", "MIN", "MAX", "MINU", "MAXU", "EXCH", "AND", "OR", "XOR", "CAS", "INC", "DEC")
ATOM_OPS = tuple("ATOM." + k for k in ATOM_KINDS)
SHFL_OPS = ("SHFL.IDX", "SHFL.UP", "SHFL.DOWN", "SHFL.BFLY")
VOTE_OPS = ("VOTE.BALLOT", "VOTE.ANY", "VOTE.ALL")
MEM_OPS = LOAD_OPS + STORE_OPS + ATOM_OPS + SHFL_OPS + VOTE_OPS
OPCODES = ALU_OPS + MEM_OPS
OPCODE = {name: i for i, name in enumerate(OPCODES)}

# S2R imm -> special value
SPECIALS = ("tid.x", "tid.y", "ntid.x", "ntid.y", "ctaid.x", "ctaid.y", "nctaid.x", "nctaid.y",
            "laneid", "warpid", "tid.lin")
SPECIAL = {name: i for i, name in enumerate(SPECIALS)}

TERMS = ("JMP", "BR", "BAR", "EXIT")


class MachineError(QgpuError):
    """A machine program or launch that breaks a rule of the machine."""


class CapacityError(MachineError):
    """Something exceeds a machine capacity; the message names the limit and by how much."""


@dataclass(frozen=True)
class Instr:
    op: str
    rd: int = ZERO
    ra: int = ZERO
    rb: int = ZERO
    rc: int = ZERO
    imm: int = 0
    bimm: bool = False

    def __post_init__(self) -> None:
        if self.op not in OPCODE:
            raise MachineError(f"unknown opcode {self.op!r}")
        for name in ("rd", "ra", "rb", "rc"):
            r = getattr(self, name)
            if not 0 <= r < N_REGS:
                raise MachineError(f"{self.op}: register {name}={r} outside r0..r15")
        if not INT32_MIN <= self.imm <= MASK32:
            raise MachineError(f"{self.op}: immediate {self.imm} does not fit 32 bits")

    @property
    def is_mem(self) -> bool:
        return self.op in MEM_OPS

    def __str__(self) -> str:
        return format_instr(self)


@dataclass(frozen=True)
class Term:
    kind: str = "EXIT"
    ra: int = ZERO
    taken: int = 0
    not_taken: int = 0

    def __post_init__(self) -> None:
        if self.kind not in TERMS:
            raise MachineError(f"unknown terminator {self.kind!r}")

    def __str__(self) -> str:
        if self.kind == "JMP":
            return f"JMP B{self.taken}"
        if self.kind == "BR":
            return f"BR r{self.ra}, B{self.taken}, B{self.not_taken}"
        return self.kind


@dataclass
class Block:
    pre: list[Instr] = field(default_factory=list)
    mem: Instr | None = None
    post: list[Instr] = field(default_factory=list)
    term: Term = field(default_factory=Term)
    live_in: int = 0
    live_out: int = 0
    note: str = ""          # source lines this block came from, for listings
    lines: tuple[int, ...] = ()     # the same PTX line numbers, ascending, for error messages
    # debugging information, not part of what the block does (left out of ==, as the ROM does not hold it)
    mem_line: int = field(default=0, compare=False)     # PTX line of the memory slot's instruction (0: none)
    term_line: int = field(default=0, compare=False)    # PTX line of the terminator (a barrier's `bar.sync`)

    def instrs(self) -> list[Instr]:
        return self.pre + ([self.mem] if self.mem is not None else []) + self.post


@dataclass
class Program:
    blocks: list[Block]
    # (block, slot, param index, part): slots (0..SLOTS-1) whose imm the launch sets to a parameter's
    # value (part 0) or to the high word of its 64-bit sign/zero extension (part 1); parameter index
    # -1 is the base address of the dynamic (extern) shared memory
    param_slots: list[tuple[int, int, int, int]] = field(default_factory=list)


def bind(program: Program, values: list[int], dynamic_shared: int) -> Program:
    """The program with every parameter slot's imm set: values[i] for parameter i (its high word for part 1),
    dynamic_shared for parameter -1, as a signed 32-bit immediate."""
    blocks = [replace(b, pre=list(b.pre), post=list(b.post)) for b in program.blocks]
    for bi, slot, pi, part in program.param_slots:
        b = blocks[bi]
        v = dynamic_shared if pi == -1 else values[pi]
        v = v >> 32 if part else v
        imm = signed32(v)
        if slot < N_PRE:
            b.pre[slot] = replace(b.pre[slot], imm=imm)
        else:
            b.post[slot - N_PRE - 1] = replace(b.post[slot - N_PRE - 1], imm=imm)
    return Program(blocks, list(program.param_slots))


def _check_block(i: int, b: Block, n_blocks: int) -> None:
    if len(b.pre) > N_PRE or len(b.post) > N_POST:
        raise CapacityError(f"block B{i}: {len(b.pre)} pre / {len(b.post)} post ALU instructions, "
                            f"limits are {N_PRE} / {N_POST}")
    for ins in b.pre + b.post:
        if ins.is_mem:
            raise MachineError(f"block B{i}: {ins.op} is not an ALU instruction")
    if b.mem is not None and not b.mem.is_mem:
        raise MachineError(f"block B{i}: memory slot holds ALU instruction {b.mem.op}")
    t = b.term
    for tgt in ((t.taken,) if t.kind == "JMP" else (t.taken, t.not_taken) if t.kind == "BR" else ()):
        if not 0 <= tgt < n_blocks:
            raise MachineError(f"block B{i}: branch target B{tgt} outside the program (0..{n_blocks - 1})")
    if t.kind == "BAR" and i + 1 >= n_blocks:
        raise MachineError(f"block B{i}: BAR in the last block has no next block")


def check_program(program: Program) -> None:
    """Raise if the program breaks the block format or a capacity."""
    n = len(program.blocks)
    if n == 0:
        raise MachineError("empty program")
    if n > ROM_BLOCKS:
        raise CapacityError(f"program needs {n} blocks; the ROM holds {ROM_BLOCKS} (over by {n - ROM_BLOCKS})")
    for i, b in enumerate(program.blocks):
        _check_block(i, b, n)


@dataclass(frozen=True)
class BlockFormat:
    """The blocks an execution target accepts: a narrowing of the machine's block format.

    A target with fewer or typed ALU slots, or a bounded number of register reads per block, lowers
    with ``lower(module, kernel, fmt)``; its programs are still ordinary machine programs (an unused
    slot before a used one holds NOP), so the interpreter runs them unchanged. ``MACHINE_FORMAT`` is
    the machine itself."""
    n_pre: int = N_PRE
    n_post: int = N_POST
    # per slot: the ALU opcodes it may hold (None: any); None for the whole tuple: every slot takes any
    pre_ops: tuple[frozenset[str] | None, ...] | None = None
    post_ops: tuple[frozenset[str] | None, ...] | None = None
    # the most distinct registers a block may read before writing them (live_in_reads); None: no limit
    max_reads: int | None = None
    mem_ops: frozenset[str] | None = None       # memory/warp opcodes allowed in the memory slot; None: all
    # the target pays for every register a block writes and leaves live (the GPU in the weights emits a
    # write-back token per such register per lane): the lowering then recomputes per-thread constants
    # (parameters, literals, S2R values) where they are read instead of keeping them in registers
    writeback_cost: bool = False
    # the most a block holding an atomic or a sub-word store (a read-modify-write of a word) may read (the
    # GPU reads its record through a read port); None: max_reads
    atomic_reads: int | None = None
    # the register a SHFL (ra) or VOTE (rb) reads from the other lanes is not written anywhere in its block,
    # and a VOTE's result is not read in its own block: a target that runs a warp's lanes one after another
    # (the GPU in the weights) reads the other lanes' registers while their blocks are under way, and knows
    # a vote's result only once the lanes after this one are known
    lane_serial: bool = False

    def __post_init__(self) -> None:
        if not (0 <= self.n_pre <= N_PRE and 0 <= self.n_post <= N_POST):
            raise MachineError(f"block format: {self.n_pre} pre / {self.n_post} post ALU slots, the machine "
                               f"has {N_PRE} / {N_POST}")
        for name, n in (("pre_ops", self.n_pre), ("post_ops", self.n_post)):
            slots = getattr(self, name)
            if slots is None:
                continue
            if len(slots) != n:
                raise MachineError(f"block format: {name} lists {len(slots)} slots, the format has {n}")
            # accept any collection of names, store frozensets so the format stays hashable
            slots = tuple(None if ops is None else frozenset(ops) for ops in slots)
            for ops in slots:
                if ops is not None and not ops <= set(ALU_OPS):
                    raise MachineError(f"block format: {name} names non-ALU opcodes {sorted(ops - set(ALU_OPS))}")
            object.__setattr__(self, name, slots)
        # a single instruction reads up to 3 registers: below that some instruction fits no block
        if self.max_reads is not None and self.max_reads < 3:
            raise MachineError(f"block format: max_reads={self.max_reads}, at least 3 is needed")
        if self.atomic_reads is not None and not (
                3 <= self.atomic_reads and (self.max_reads is None or self.atomic_reads <= self.max_reads)):
            raise MachineError(f"block format: atomic_reads={self.atomic_reads}, needs 3..max_reads "
                               f"({self.max_reads})")
        if self.mem_ops is not None:
            object.__setattr__(self, "mem_ops", frozenset(self.mem_ops))
            unknown = self.mem_ops - set(MEM_OPS)
            if unknown:
                raise MachineError(f"block format: mem_ops names non-memory opcodes {sorted(unknown)}")

    def pre_allows(self, slot: int, op: str) -> bool:
        """Whether pre slot ``slot`` may hold ALU op ``op`` (NOP, an empty slot, always)."""
        return slot < self.n_pre and _slot_allows(self.pre_ops, slot, op)

    def post_allows(self, slot: int, op: str) -> bool:
        return slot < self.n_post and _slot_allows(self.post_ops, slot, op)

    def allows_mem(self, op: str) -> bool:
        return self.mem_ops is None or op in self.mem_ops

    def read_limit(self, instrs: list[Instr]) -> int | None:
        """The most registers a block holding these instructions may read before writing them."""
        if self.atomic_reads is not None and any(i.op.startswith("ATOM.") or i.op in ("STB", "STH") for i in instrs):
            return self.atomic_reads
        return self.max_reads

    def lane_serial_rule(self, instrs: list[Instr], branch_reg: int = ZERO) -> str | None:
        """Why these instructions (a block's, in order, then a BR on branch_reg) break the lane_serial rule:
        an instruction writes the register a shuffle or vote reads from the other lanes, or an instruction
        (or the BR) reads a vote's result; None when they do not (or the format has no such rule)."""
        return lane_serial_violation(instrs, branch_reg) if self.lane_serial else None

    def fits_some_slot(self, op: str) -> bool:
        """Whether some pre or post slot takes ALU op ``op``: else no block of this format can hold it."""
        return (any(self.pre_allows(k, op) for k in range(self.n_pre))
                or any(self.post_allows(k, op) for k in range(self.n_post)))


MACHINE_FORMAT = BlockFormat()


def _slot_allows(slots: tuple[frozenset[str] | None, ...] | None, k: int, op: str) -> bool:
    return op == "NOP" or slots is None or slots[k] is None or op in slots[k]


def live_in_reads(instrs: list[Instr], branch_reg: int = ZERO) -> set[int]:
    """The registers that instructions run in this order, then a BR on ``branch_reg``, read before
    writing them: what a block with these contents reads from outside itself."""
    reads: set[int] = set()
    written: set[int] = set()
    for ins in instrs:
        reads |= _reads(ins) - written
        written |= _writes(ins)
    if branch_reg != ZERO and branch_reg not in written:
        reads.add(branch_reg)
    return reads


def _slot_rule(fmt: BlockFormat, i: int, b: Block) -> str | None:
    """The first slot rule of ``fmt`` that block ``b`` (index ``i``) breaks, or None."""
    if len(b.pre) > fmt.n_pre or len(b.post) > fmt.n_post:
        return (f"block B{i}: {len(b.pre)} pre / {len(b.post)} post ALU instructions, the format has "
                f"{fmt.n_pre} / {fmt.n_post} slots")
    for where, instrs, allows in (("pre", b.pre, fmt.pre_allows), ("post", b.post, fmt.post_allows)):
        for k, ins in enumerate(instrs):
            if not allows(k, ins.op):
                return f"block B{i}: {where} slot {k} holds {ins.op}, which the format does not allow there"
    if b.mem is not None and not fmt.allows_mem(b.mem.op):
        return f"block B{i}: memory op {b.mem.op} is not one of the format's memory ops"
    return None


def check_block_format(program: Program, fmt: BlockFormat) -> None:
    """Raise CapacityError naming the first block, and the rule, where ``program`` breaks ``fmt``."""
    for i, b in enumerate(program.blocks):
        broken = _slot_rule(fmt, i, b)
        if broken:
            raise CapacityError(broken)
        broken = fmt.lane_serial_rule(b.instrs(), b.term.ra if b.term.kind == "BR" else ZERO)
        if broken:
            raise CapacityError(f"block B{i}: {broken} (the format runs a warp's lanes one after another)")
        limit = fmt.read_limit(b.instrs())
        if limit is not None:
            reads = live_in_reads(b.instrs(), b.term.ra if b.term.kind == "BR" else ZERO)
            if len(reads) > limit:
                regs = ",".join(f"r{r}" for r in sorted(reads))
                what = "a block with an atomic" if limit != fmt.max_reads else "the format"
                raise CapacityError(f"block B{i}: reads {len(reads)} registers before writing them ({regs}), "
                                    f"{what} allows {limit} (over by {len(reads) - limit})")


def encode_instr(ins: Instr | None) -> int:
    if ins is None:
        return 0
    return (OPCODE[ins.op] | ins.rd << 6 | ins.ra << 10 | ins.rb << 14 | ins.rc << 18
            | int(ins.bimm) << 22 | (ins.imm & MASK32) << 32)


def decode_instr(word: int) -> Instr | None:
    word = int(word)
    op = OPCODES[word & 63]
    if op == "NOP" and word == 0:
        return None
    imm = signed32(word >> 32)
    return Instr(op, (word >> 6) & 15, (word >> 10) & 15, (word >> 14) & 15, (word >> 18) & 15,
                 imm, bool(word >> 22 & 1))


def encode(program: Program) -> np.ndarray:
    """The ROM image: uint64 array (blocks, ROW_WORDS), bit layout in the module docstring."""
    check_program(program)
    rows = np.zeros((len(program.blocks), ROW_WORDS), dtype=np.uint64)
    for i, b in enumerate(program.blocks):
        slots = b.pre + [None] * (N_PRE - len(b.pre)) + [b.mem] + b.post + [None] * (N_POST - len(b.post))
        words = [encode_instr(s) for s in slots]
        t = b.term
        words.append(TERMS.index(t.kind) | t.ra << 2 | t.taken << 8 | t.not_taken << 16)
        words.append(b.live_in | b.live_out << 16)
        rows[i] = np.array(words, dtype=np.uint64)
    return rows


def decode(rows: np.ndarray) -> Program:
    """Inverse of ``encode`` (empty slots come back as absent instructions)."""
    blocks = []
    for row in rows:
        ins = [decode_instr(w) for w in row[:SLOTS]]
        pre = [x for x in ins[:N_PRE] if x is not None]
        post = [x for x in ins[N_PRE + 1:SLOTS] if x is not None]
        tw, mw = int(row[SLOTS]), int(row[SLOTS + 1])
        term = Term(TERMS[tw & 3], (tw >> 2) & 15, (tw >> 8) & 255, (tw >> 16) & 255)
        blocks.append(Block(pre, ins[N_PRE], post, term, mw & 0x7FFF, (mw >> 16) & 0x7FFF))
    return Program(blocks)


def _reg(r: int) -> str:
    return "rz" if r == ZERO else f"r{r}"


def format_instr(ins: Instr) -> str:
    b = f"{ins.imm}" if ins.bimm else _reg(ins.rb)
    op = ins.op
    if op == "NOP":
        return "NOP"
    if op == "S2R":
        return f"S2R {_reg(ins.rd)}, %{SPECIALS[ins.imm] if 0 <= ins.imm < len(SPECIALS) else ins.imm}"
    if op == "SEL":
        return f"SEL {_reg(ins.rd)}, {_reg(ins.ra)} ? {b} : {_reg(ins.rc)}"
    addr = f"[{_reg(ins.ra)}{ins.imm:+d}]"
    if op in LOAD_OPS:
        return f"{op} {_reg(ins.rd)}, {addr}"
    if op in STORE_OPS:
        return f"{op} {addr}, {_reg(ins.rb)}"
    if op == "ATOM.CAS":
        return f"{op} {_reg(ins.rd)}, {addr}, {_reg(ins.rb)}, {_reg(ins.rc)}"
    if op in ATOM_OPS:
        return f"{op} {_reg(ins.rd)}, {addr}, {_reg(ins.rb)}"
    if op in SHFL_OPS:
        return f"{op} {_reg(ins.rd)}, {_reg(ins.ra)}, {b}, {_reg(ins.rc)}"
    if op in VOTE_OPS:
        return f"{op} {_reg(ins.rd)}, {b}"
    return f"{op} {_reg(ins.rd)}, {_reg(ins.ra)}, {b}"


def mask_regs(mask: int) -> str:
    return ",".join(f"r{i}" for i in range(15) if mask >> i & 1) or "-"


def format_program(program: Program, param_names: list[str] | None = None) -> str:
    """A readable listing: blocks, instructions, terminators, live-in/out, registers used; slots that
    receive a parameter are marked with its name (``param_names``, else its index)."""
    used = 0
    lines = []
    names = {-1: "extern __shared__ base"}
    names.update(enumerate(param_names or []))
    marks = {(bi, slot): f"   ; = {names.get(pi, f'parameter {pi}')}{' (high word)' if part else ''}"
             for bi, slot, pi, part in program.param_slots}
    for i, b in enumerate(program.blocks):
        head = f"B{i}:  live_in {mask_regs(b.live_in)}  live_out {mask_regs(b.live_out)}"
        lines.append(head + (f"   ; {b.note}" if b.note else ""))
        for k, ins in enumerate(b.pre):
            lines.append(f"    {ins}{marks.get((i, k), '')}")
        if b.mem is not None:
            lines.append(f"  * {b.mem}")
        for k, ins in enumerate(b.post):
            lines.append(f"    {ins}{marks.get((i, N_PRE + 1 + k), '')}")
        lines.append(f"    {b.term}")
        for ins in b.instrs():
            for r in (ins.rd, ins.ra, ins.rb, ins.rc):
                if r != ZERO:
                    used |= 1 << r
    regs_used = bin(used).count("1")
    lines.insert(0, f"; {len(program.blocks)} blocks (ROM holds {ROM_BLOCKS}), {regs_used} registers used")
    return "\n".join(lines)


def lane_serial_violation(instrs: list[Instr], branch_reg: int = ZERO) -> str | None:
    """The lane_serial rule (BlockFormat.lane_serial; the GPU in the weights encodes blocks by it): why
    these instructions (a block's, in order, then a BR on branch_reg) break it, or None. A block must not
    write the register a shuffle or vote reads from the other lanes, nor read a vote's result."""
    sources = {cross_lane_source(i) for i in instrs} - {None}
    votes: set[int] = set()
    for i in instrs:
        if _writes(i) & sources:
            return f"{format_instr(i)} writes r{i.rd}, which a shuffle or vote reads from the other lanes"
        if _reads(i) & votes:
            return f"{format_instr(i)} reads the result of the vote before it in the block"
        if i.op in VOTE_OPS:
            votes |= _writes(i)
    if branch_reg in votes:
        return f"the branch reads r{branch_reg}, the result of the block's vote"
    return None


def cross_lane_source(ins: Instr) -> int | None:
    """The register a shuffle (ra) or vote (rb) reads from the other lanes of its warp, else None."""
    if ins.op in SHFL_OPS:
        return None if ins.ra == ZERO else ins.ra
    if ins.op in VOTE_OPS and not ins.bimm and ins.rb != ZERO:
        return ins.rb
    return None


def _reads(ins: Instr) -> set[int]:
    regs = {ins.ra, ins.rc} if ins.bimm else {ins.ra, ins.rb, ins.rc}
    return regs - {ZERO}


def _writes(ins: Instr) -> set[int]:
    return set() if ins.op in STORE_OPS or ins.op == "NOP" or ins.rd == ZERO else {ins.rd}


def annotate_liveness(program: Program) -> None:
    """Set each block's live_in / live_out register masks from the program's control flow."""
    blocks = program.blocks
    use, defs, succ = [], [], []
    for i, b in enumerate(blocks):
        u, d = set(), set()
        for ins in b.instrs():
            u |= _reads(ins) - d
            d |= _writes(ins)
        t = b.term
        if t.kind == "BR" and t.ra != ZERO and t.ra not in d:
            u.add(t.ra)
        use.append(u)
        defs.append(d)
        succ.append([t.taken] if t.kind == "JMP" else [t.taken, t.not_taken] if t.kind == "BR"
                    else [i + 1] if t.kind == "BAR" else [])
    live_in = [set() for _ in blocks]
    live_out = [set() for _ in blocks]
    changed = True
    while changed:
        changed = False
        for i in reversed(range(len(blocks))):
            out = set().union(*(live_in[s] for s in succ[i])) if succ[i] else set()
            inn = use[i] | (out - defs[i])
            if out != live_out[i] or inn != live_in[i]:
                live_out[i], live_in[i], changed = out, inn, True
    for i, b in enumerate(blocks):
        b.live_in = sum(1 << r for r in live_in[i])
        b.live_out = sum(1 << r for r in live_out[i])

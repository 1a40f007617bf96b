"""A machine block -> the datapath's decoded fields (the circuit's view of a ROM row).

The machine names operands by register; the datapath names them by source (datapath.py). Walking the
block's slots in order, a register operand becomes the latest earlier slot (or the load) that wrote
it, else one of the block's register read ports. The result also lists the write-back: every register
the block writes that is live after it, with the source of its final value.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import QgpuError
from ..machine.isa import (LOAD_OPS, SHFL_OPS, SPECIALS, STORE_OPS, VOTE_OPS, ZERO, Block, Instr, cross_lane_source,
                           lane_serial_violation)
from .datapath import ALU_OF_OPCODE, CoreFormat
from .layout import ATOM_OPS, RECORD_REG, SUBWORD_STORES

GPU_MEM_OPS = ("LD", "ST") + SUBWORD_STORES + tuple(f"ATOM.{op}" for op in ATOM_OPS if op not in SUBWORD_STORES) \
    + SHFL_OPS + VOTE_OPS


class EncodeError(QgpuError):
    """A block does not fit the circuit's block format (the lowering should have prevented it)."""


@dataclass
class SlotCode:
    op: int = 0                  # index into fmt.alu_names(k)
    a: str = "zero"              # source names (datapath.CoreFormat.sources)
    b: str = "zero"
    c: str = "zero"
    imm: int = 0
    special: int = 0
    used: bool = False


@dataclass
class BlockCode:
    slots: list[SlotCode]
    reads: list[int]             # register of each read port (unused ports read r0)
    mem_op: str | None           # LD, ST, ATOM, SHFL, VOTE (layout.MEM_KINDS) or None
    variant: str = ""            # ATOM: the op; SHFL, VOTE: the mode (layout.MEM_VARIANTS)
    mem_a: str = "zero"
    mem_imm: int = 0
    mem_data: str = "zero"
    mem_c: str = "zero"          # CAS: the word stored when old == B; SHFL: C (the segment and clamp)
    cross_reg: int = 0           # SHFL, VOTE: the register read from the other lanes
    cond: str = "zero"
    term: str = "EXIT"
    taken: int = 0
    not_taken: int = 0
    writeback: list[tuple[int, str]] = field(default_factory=list)   # live-out (register, source), register order

    def index(self, fmt: CoreFormat, slot: int | str, operand: str) -> int:
        """The one-hot element of a source field."""
        name = {"a": "mem_a", "b": "mem_data", "c": "mem_c"}[operand] if slot == "mem" else "cond" if slot == "cond" else None
        src = getattr(self, name) if name else getattr(self.slots[slot], operand)
        return fmt.sources(slot, operand).index(src)


class _Sources:
    """Where each register's current value comes from while walking a block."""

    def __init__(self, fmt: CoreFormat, where: str) -> None:
        self.fmt, self.where = fmt, where
        self.writer: dict[int, str] = {}
        self.reads: list[int] = []

    def of(self, r: int) -> str:
        if r == ZERO:
            return "zero"
        if r in self.writer:  # never a vote's: encode_block refuses a block reading one (lane_serial_violation)
            return self.writer[r]
        if r not in self.reads:
            if len(self.reads) == self.fmt.reads:
                raise EncodeError(f"{self.where}: reads more than {self.fmt.reads} registers before writing them")
            self.reads.append(r)
        return f"r{self.reads.index(r)}"


def encode_block(block: Block, fmt: CoreFormat, where: str = "block") -> BlockCode:
    if len(block.pre) > fmt.pre or len(block.post) > fmt.post:
        raise EncodeError(f"{where}: {len(block.pre)} pre / {len(block.post)} post ALU instructions, the circuit "
                          f"executes {fmt.pre} / {fmt.post}")
    broken = lane_serial_violation(block.instrs(), block.term.ra if block.term.kind == "BR" else ZERO)
    if broken:  # the circuit runs a warp's lanes one after another
        raise EncodeError(f"{where}: {broken}")
    src = _Sources(fmt, where)
    slots = [SlotCode() for _ in range(fmt.slots)]
    code = BlockCode(slots, [], None)
    for k, ins in enumerate(block.pre):
        _alu_slot(fmt, k, ins, slots[k], src, where)
    if block.mem is not None:
        _mem_slot(block.mem, code, src, where)
    for j, ins in enumerate(block.post):
        _alu_slot(fmt, fmt.pre + j, ins, slots[fmt.pre + j], src, where)
    t = block.term
    code.term, code.taken, code.not_taken = t.kind, t.taken, t.not_taken
    if t.kind == "BR":
        code.cond = src.of(t.ra)
    # only values a later block reads leave the block (each costs write-back tokens); an atomic's new word
    # goes first, so the memory is updated before any register of this step changes
    code.writeback = sorted((r, s) for r, s in src.writer.items() if block.live_out >> r & 1)
    if code.mem_op == "ATOM":
        code.writeback.insert(0, (RECORD_REG, "atom"))
    code.reads = src.reads + [0] * (fmt.reads - len(src.reads))
    return code


def _alu_slot(fmt: CoreFormat, k: int, ins: Instr, s: SlotCode, src: _Sources, where: str) -> None:
    if ins.op == "NOP" or ins.rd == ZERO:
        return
    if ins.op not in fmt.opcodes(k):
        raise EncodeError(f"{where}: {ins.op} cannot run in circuit slot {k} (it executes {', '.join(fmt.opcodes(k))})")
    s.used = True
    s.op = fmt.alu_names(k).index(ALU_OF_OPCODE[ins.op])
    if ins.op == "S2R":
        if not 0 <= ins.imm < min(fmt.specials, len(SPECIALS)):
            raise EncodeError(f"{where}: special value {ins.imm} is not available to the circuit")
        s.a, s.special = "sp", ins.imm
    else:
        s.a = src.of(ins.ra)
        s.b = "imm" if ins.bimm else src.of(ins.rb)
        s.imm = ins.imm & 0xFFFFFFFF
        if ins.op == "SEL":
            s.c = src.of(ins.rc)
    src.writer[ins.rd] = f"s{k}"


def _mem_slot(ins: Instr, code: BlockCode, src: _Sources, where: str) -> None:
    if ins.op not in GPU_MEM_OPS:
        raise EncodeError(f"{where}: {ins.op} is not executed by the circuit yet (it executes "
                          f"{', '.join(GPU_MEM_OPS)})")
    # a sub-word store is a read-modify-write of its word: the GPU runs it as an atomic without a result
    code.mem_op = "ATOM" if ins.op.startswith("ATOM.") or ins.op in SUBWORD_STORES else ins.op.split(".")[0]
    if code.mem_op in ("ATOM", "SHFL", "VOTE"):
        code.variant = ins.op.split(".")[-1]
    if code.mem_op in ("SHFL", "VOTE"):
        # a shuffle's ra, a vote's rb, are read from the other lanes in the register file, which the block
        # leaves unwritten (lane_serial_violation, checked above). A shuffle's B (lane, delta or mask) and C
        # (segment and clamp) are this lane's.
        cross = cross_lane_source(ins)
        code.cross_reg = ZERO if cross is None else cross
    if code.mem_op == "SHFL":
        code.mem_data, code.mem_imm = ("imm", ins.imm & 0xFFFFFFFF) if ins.bimm else (src.of(ins.rb), 0)
        code.mem_c = src.of(ins.rc)
    elif code.mem_op == "VOTE":
        if ins.bimm or ins.rb == ZERO:    # the lowering folds other constant votes (cuda/lower_mem.py)
            if ins.op != "VOTE.BALLOT" or not ins.imm or not ins.bimm:
                raise EncodeError(f"{where}: {ins.op} of the constant {ins.imm} is not executed by the circuit")
            code.variant = "MASK"
        if ins.rd != ZERO:
            src.writer[ins.rd] = "vote"     # known late (the lanes after this one): not read in the block
        return
    else:
        code.mem_a, code.mem_imm = src.of(ins.ra), ins.imm & 0xFFFFFFFF
        if ins.op in STORE_OPS or code.mem_op == "ATOM":
            code.mem_data = src.of(ins.rb)
        if ins.op == "ATOM.CAS":
            code.mem_c = src.of(ins.rc)
    if (ins.op in LOAD_OPS or code.mem_op in ("ATOM", "SHFL")) and ins.rd != ZERO:
        src.writer[ins.rd] = "ld"       # an atomic returns the old word, a shuffle its source's: the loaded value

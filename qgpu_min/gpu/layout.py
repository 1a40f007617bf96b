"""The GPU's fixed parameters, token kinds and ROM row layouts: the one place both the circuit
(core.py) and the host's encoder (program.py) take them from."""
from __future__ import annotations

from dataclasses import dataclass, field

from .datapath import CoreFormat

# Token kinds. Prompt: init w (the first tokens, one per warp, last warp first: each initialises every
# memory, and warp w's rows of the register file), pay (12 payload bits),
# rom / mem (write the word assembled from the three preceding pay tokens into a ROM row / a memory
# word), clear (zero every ROM row of a block; init zeroes block 0's, the ROM's other rows are never read
# before their block is cleared), launch (the block shape), grid (the grid shape), go (end of the prompt: the model answers with
# the first EXEC).
# Generated: exec (run a block for one lane of one warp; it carries the barrier parity), wa / wb / w3 (a
# register write-back: bits 0-11, 12-23, 24-31; the w3 token writes the register), w1 (a whole write-back
# of a value in [-128, 128)), cta (the next CTA begins: one per warp of the block, last warp first, each
# clearing that warp's registers as init does; it names the CTA), halt, fault (a memory access outside
# memory or misaligned).
KINDS = ("init", "pay", "rom", "clear", "mem", "launch", "grid", "go", "exec", "wa", "wb", "w3", "w1", "cta", "halt",
         "fault")
PAY_BITS = 12
SMALL_BITS = 8        # a w1 token carries a whole write-back whose value is an 8-bit signed number
# payload bits each write-back token kind carries: bits 0-11, 12-23, 24-31 of a word, or a small value
WB_PAYLOADS = {"wa": PAY_BITS, "wb": PAY_BITS, "w3": 32 - 2 * PAY_BITS, "w1": SMALL_BITS}


def bits_for(n: int) -> int:
    """Bits of a field that holds 0..n-1 (at least 1)."""
    return max(1, (n - 1).bit_length())


@dataclass(frozen=True)
class GpuSpec:
    fmt: CoreFormat = field(default_factory=CoreFormat)
    blocks: int = 128         # ROM blocks (at most a head's 128 rows: one head per ROM row and read)
    mem_words: int = 1024     # data memory words (a power of 2: the machine's 1024, thread frames included)
    lanes: int = 4
    warps: int = 8            # per CTA (each init or cta token keys one warp's lanes x regs = 4^3 register rows)
    regs: int = 16            # per lane, r15 reads zero
    ctas: int = 64            # per launch (a grid of at most this many CTAs, each coordinate below it)

    @property
    def threads(self) -> int:
        """Threads of a CTA at most."""
        return self.warps * self.lanes

    @property
    def cta_bits(self) -> int:
        """Bits of one CTA coordinate; a cta token's code carries both in its payload bits."""
        return bits_for(self.ctas)

    @property
    def wb_entries(self) -> int:
        """Write-back entries of a block: one per ALU slot, the load, and an atomic's memory record."""
        return self.fmt.slots + 2

    @property
    def wb_sources(self) -> tuple[str, ...]:
        return tuple(f"s{k}" for k in range(self.fmt.slots)) + ("ld", "atom", "vote")


MEM_KINDS = ("none", "LD", "ST", "ATOM", "SHFL", "VOTE")
# read-modify-writes the GPU executes as an atomic: new word = op(old, B) (lib.alu names; EXCH is B itself;
# STB / STH put B's low byte / halfword into old at the address's byte offset: the sub-word stores;
# INC / DEC / CAS as the machine's, machine/isa.py; CAS's new word is the third operand C)
ATOM_OPS = ("ADD", "MIN", "MAX", "MINU", "MAXU", "AND", "OR", "XOR", "EXCH", "STB", "STH", "INC", "DEC", "CAS")
SUBWORD_STORES = ("STB", "STH")
SHFL_MODES = ("IDX", "UP", "DOWN", "BFLY")
# MASK: a BALLOT of a constant true predicate (__activemask): the step's active lanes
VOTE_MODES = ("BALLOT", "ANY", "ALL", "MASK")
# the memory slot's variant (ROM field ctl.variant): an index into its kind's list
MEM_VARIANTS = {"ATOM": ATOM_OPS, "SHFL": SHFL_MODES, "VOTE": VOTE_MODES}
RECORD_REG = 15   # an atomic's new word travels like a register write-back to r15's row (never read as r15)
TERM_KINDS = ("JMP", "BR", "BAR", "EXIT")


def rom_rows(spec: GpuSpec) -> dict[str, list[tuple[str, int]]]:
    """ROM row name -> its fields (name, bits), packed from bit 0 up; every row is one 32-bit word."""
    f = spec.fmt
    rows: dict[str, list[tuple[str, int]]] = {}
    for k in range(f.slots):
        rows[f"slot{k}"] = [("op", bits_for(len(f.alu_names(k)))), ("a", bits_for(len(f.sources(k, "a")))),
                            ("b", bits_for(len(f.sources(k, "b")))), ("c", bits_for(len(f.sources(k, "c")))),
                            ("sp", bits_for(f.specials))]
        rows[f"imm{k}"] = [("imm", 32)]
    rows["memimm"] = [("imm", 32)]
    rows["ctl"] = [("mem", bits_for(len(MEM_KINDS))), ("mema", bits_for(len(f.sources("mem", "a")))),
                   ("memd", bits_for(len(f.sources("mem", "b")))), ("term", bits_for(len(TERM_KINDS))), ("taken", bits_for(spec.blocks)),
                   ("not_taken", bits_for(spec.blocks)),
                   ("variant", bits_for(max(map(len, MEM_VARIANTS.values()))))]
    # cross: the register a shuffle or a vote reads from the other lanes; cond: the branch's source
    rows["reads"] = [(f"r{i}", bits_for(spec.regs)) for i in range(f.reads)] + \
        [("memc", bits_for(len(f.sources("mem", "c")))), ("cross", bits_for(spec.regs)),
         ("cond", bits_for(len(f.sources("cond", "c"))))]
    rows["wbreg"] = [(f"reg{e}", bits_for(spec.regs)) for e in range(spec.wb_entries)]
    rows["wbsrc"] = [("count", bits_for(spec.wb_entries + 1))] + \
        [(f"src{e}", bits_for(len(spec.wb_sources))) for e in range(spec.wb_entries)]
    for name, fields in rows.items():
        used = sum(b for _, b in fields)
        if used > 32:
            raise AssertionError(f"ROM row {name} needs {used} bits")
    return rows


def field_offsets(fields: list[tuple[str, int]]) -> dict[str, tuple[int, int]]:
    """field name -> (first bit, bits)."""
    out, pos = {}, 0
    for name, bits in fields:
        out[name] = (pos, bits)
        pos += bits
    return out

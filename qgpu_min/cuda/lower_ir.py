"""The lowering's virtual code: machine operations over unlimited virtual registers, plus control pseudo-ops."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import QgpuError
from ..machine.isa import MASK32, MEM_WORDS
from .ptx import Instr, type_width

RZ = "rz"                       # the zero register
M32 = MASK32   # the word mask, under the name the lowering uses
INT_TYPES = {f"{k}{w}" for k in "bsu" for w in (8, 16, 32, 64)} | {"pred"}
CONTROL = ("LABEL", "JMP", "BR", "BAR", "EXIT")


class LoweringError(QgpuError):
    """PTX the lowering cannot turn into a machine program; the message names the instruction and line."""


@dataclass
class V:
    """One virtual operation. Machine ops use d/a/b/c/imm/bimm as isa.Instr; control ops:
    LABEL t | JMP t | BR a ? t : f | BAR | EXIT."""
    op: str
    d: str = RZ
    a: str = RZ
    b: str = RZ
    c: str = RZ
    imm: int = 0
    bimm: bool = False
    param: int | None = None     # kernel parameter whose value the launch writes into imm
    param_part: int = 0          # 0: its low word, 1: its high word (64-bit parameters)
    frame: tuple | None = None   # imm set once the frame size is known: ("neg",) or ("top", offset)
    t: str = ""
    f: str = ""
    line: int = 0

    def uses(self) -> list[str]:
        regs = [self.a, self.c] if self.bimm else [self.a, self.b, self.c]
        return [r for r in regs if r != RZ]

    def defs(self) -> list[str]:
        return [self.d] if self.d != RZ and self.op not in CONTROL else []

    @property
    def is_move(self) -> bool:
        return self.op == "ADD" and self.bimm and self.imm == 0 and self.param is None


@dataclass
class MemoryLayout:
    """Compile-time part of the memory map (byte addresses)."""
    symbols: dict[str, int]           # .global/.const/.shared variable -> address
    local_depot: dict[str, int]       # .local variable -> offset in the per-thread local frame
    local_bytes: int = 0              # .local variables per thread (the start of each frame)
    frame_bytes: int = 0              # per-thread frame: .local variables, then spill slots
    static_bytes: int = 0             # end of the variables; arrays follow, frames sit at the top
    init: dict[int, int] = field(default_factory=dict)   # byte address -> initial byte
    entries: list[tuple[str, str, int, int]] = field(default_factory=list)   # (space, name, address, bytes)
    dynamic_shared: set[str] = field(default_factory=set)     # extern __shared__ arrays (one region)
    local_sizes: dict[str, int] = field(default_factory=dict)  # .local variable -> its bytes

    def place_local(self, name: str, align: int, nbytes: int) -> None:
        """Give a .local variable (the kernel's or an inlined callee's) the next aligned offset of the frame."""
        a = max(align, 4)
        start = -(-self.frame_bytes // a) * a
        self.local_depot[name], self.local_sizes[name] = start, nbytes
        self.frame_bytes = self.local_bytes = -(-(start + nbytes) // 4) * 4

    def frame_base(self, thread: int) -> int:
        """Byte address of thread ``thread``'s frame (tid.lin): frames fill memory downward from the top."""
        return MEM_WORDS * 4 - (thread + 1) * self.frame_bytes


def instr_width(ins: Instr) -> int | None:
    """Width of the instruction's last integer type modifier, if any."""
    return next((type_width(m) for m in reversed(ins.mods) if m in INT_TYPES), None)


def instr_type(ins: Instr) -> tuple[str, int]:
    """(kind letter s/u/b/p, width) of the instruction's last integer type modifier."""
    for m in reversed(ins.mods):
        if m in INT_TYPES:
            return ("p" if m == "pred" else m[0]), type_width(m)
    raise LoweringError(f"no integer type in `{ins.text}` at PTX line {ins.line}")

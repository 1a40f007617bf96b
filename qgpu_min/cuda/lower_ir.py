"""The lowering's virtual code: machine operations over unlimited virtual registers, plus control pseudo-ops."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import QgpuError

RZ = "rz"                       # the zero register
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

"""Block-local clean-ups on the virtual code before register allocation.

Constant propagation: a register known to hold a constant (set by `ADD d, rz, imm`) is replaced by the
immediate where an instruction can take one (operand B, or swapped into B for commutative ops; the
offset of a memory address), and by rz when it is 0. Branch inversion: `BR (x ^ 1)` with x a 0/1
compare result becomes `BR x` with the targets swapped. The definitions left unread go to dead-code
removal (lower_regalloc.dead_code).
"""
from __future__ import annotations

from ..machine.isa import ALU_OPS, MEM_OPS, SHFL_OPS, VOTE_OPS, signed32
from .lower_cfg import BB
from .lower_ir import M32, RZ, V

COMMUTATIVE = {"ADD", "MUL", "MULHU", "AND", "OR", "XOR", "SEQ", "SNE", "MIN", "MAX", "MINU", "MAXU"}
COMPARES = {"SEQ", "SNE", "SLT", "SLE", "SLTU", "SLEU"}
ADDRESSED = set(MEM_OPS) - set(SHFL_OPS) - set(VOTE_OPS)   # base register + immediate offset


_imm = signed32   # an immediate operand holds the word's signed value


def _propagate(ops: list[V], params: bool = False) -> None:
    known: dict[str, int] = {}
    bound: dict[str, tuple[int, int]] = {}      # register -> (parameter, part) it was just set to
    for v in ops:
        if v.op in ALU_OPS and v.op not in ("S2R", "NOP"):
            if params and v.param is None and v.frame is None and not v.bimm:
                # a parameter becomes this instruction's immediate; the launch writes it there instead
                if v.b in bound:
                    (v.param, v.param_part), v.b, v.imm, v.bimm = bound[v.b], RZ, 0, True
                elif v.a in bound and v.op in COMMUTATIVE:
                    (v.param, v.param_part), v.a, v.b, v.imm, v.bimm = bound[v.a], v.b, RZ, 0, True
            if v.a in known and known[v.a] == 0:
                v.a = RZ
            if not v.bimm and v.b in known and v.param is None:
                v.b, v.imm, v.bimm = RZ, _imm(known[v.b]), True
            elif v.a in known and not v.bimm and v.op in COMMUTATIVE:
                v.a, v.b, v.imm, v.bimm = v.b, RZ, _imm(known[v.a]), True
            if v.c in known and known[v.c] == 0:
                v.c = RZ
            if v.op in ("ADD", "OR", "XOR") and v.a == RZ and not v.bimm:    # 0 + x: a move, coalescable
                v.a, v.b, v.imm, v.bimm = v.b, RZ, 0, True
        elif v.op in ADDRESSED and v.a in known and v.frame is None:
            v.imm, v.a = _imm(v.imm + known[v.a]), RZ
        for d in v.defs():
            known.pop(d, None)
            bound.pop(d, None)
        if v.op == "ADD" and v.a == RZ and v.bimm and v.param is not None and v.d != RZ:
            bound[v.d] = (v.param, v.param_part)
        if params and v.is_move and v.d != RZ and v.a != v.d:       # a copy (cvta) of a constant is one too
            if v.a in bound:
                bound[v.d] = bound[v.a]
            elif v.a in known:
                known[v.d] = known[v.a]
        if v.op == "ADD" and v.a == RZ and v.bimm and v.param is None and v.frame is None and v.d != RZ:
            known[v.d] = v.imm & M32


def _last_def(ops: list[V], reg: str, end: int) -> int | None:
    return next((i for i in range(end - 1, -1, -1) if reg in ops[i].defs()), None)


def _invert_branch(b: BB) -> None:
    """BR on (compare result ^ 1), possibly through moves: branch on the compare, targets swapped."""
    t, ops = b.term, b.ops
    if t.op != "BR":
        return
    reg, end = t.a, len(ops)
    i = _last_def(ops, reg, end)
    while i is not None and ops[i].is_move and _last_def(ops, ops[i].a, end) == _last_def(ops, ops[i].a, i):
        reg = ops[i].a              # a copy whose source is not redefined before the branch
        i = _last_def(ops, reg, i)
    if i is None or not (ops[i].op == "XOR" and ops[i].bimm and ops[i].imm == 1):
        return
    x = ops[i].a
    j = _last_def(ops, x, i)
    if j is None or ops[j].op not in COMPARES or _last_def(ops, x, end) != j:
        return
    t.a, t.t, t.f = x, t.f, t.t      # the negation stays for other readers; dead-code removal drops it


def optimize(blocks: dict[str, BB], params: bool = False) -> None:
    """Constant propagation and branch inversion in every block; ``params``: also fold parameters into
    the immediates of the instructions that read them (each such slot is then a parameter slot)."""
    for b in blocks.values():
        _propagate(b.ops, params)
        _invert_branch(b)

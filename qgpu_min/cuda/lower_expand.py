"""Machine ops a target's block format lacks, rewritten with ops it has (one table, one pass).

A target may leave an op out of every slot (the GPU in the weights has no MULHU: its one multiplier
gives the low 32 bits). Rather than refusing such kernels, the lowering rewrites each use into ops the
format does hold, on the virtual code before blocks are formed; the machine's own format lacks nothing,
so the interpreter's programs are unchanged. Each expansion is exact for every 32-bit input.
"""
from __future__ import annotations

from typing import Callable

from ..machine.isa import BlockFormat
from .lower_ir import RZ, V

M16 = 0xFFFF


def _mulhu(v: V, tmp: Callable[[], str]) -> list[V]:
    """hi32(a * b), unsigned, from four 16 x 16-bit products, every partial sum within 32 bits:
    t = ah*bl + (al*bl >> 16); u = al*bh + (t & M16); hi = ah*bh + (t >> 16) + (u >> 16)."""
    out: list[V] = []

    def op(name: str, a: str, b: str | int) -> str:
        d = tmp()
        out.append(V(name, d, a, imm=b, bimm=True, line=v.line) if isinstance(b, int)
                   else V(name, d, a, b, line=v.line))
        return d

    al, ah = op("AND", v.a, M16), op("SHR", v.a, 16)
    if v.bimm and v.param is not None:           # a parameter bound into the immediate at launch: a register
        d = tmp()
        out.append(V("ADD", d, RZ, imm=v.imm, bimm=True, param=v.param, param_part=v.param_part, line=v.line))
        bl, bh = op("AND", d, M16), op("SHR", d, 16)
    elif v.bimm:                                 # a constant multiplier (division by a constant): its halves
        b = v.imm & 0xFFFFFFFF
        bl, bh = b & M16, b >> 16
    else:
        bl, bh = op("AND", v.b, M16), op("SHR", v.b, 16)
    t = op("ADD", op("MUL", ah, bl), op("SHR", op("MUL", al, bl), 16))
    u = op("ADD", op("MUL", al, bh), op("AND", t, M16))
    hi = op("ADD", op("MUL", ah, bh), op("SHR", t, 16))
    out.append(V("ADD", v.d, hi, op("SHR", u, 16), line=v.line))
    return out


EXPANSIONS: dict[str, Callable[[V, Callable[[], str]], list[V]]] = {"MULHU": _mulhu}


def expand_missing_ops(code: list[V], fmt: BlockFormat) -> list[V]:
    """`code` with every op that fits no slot of `fmt` and has an expansion replaced by that expansion."""
    missing = {op for op in EXPANSIONS if not fmt.fits_some_slot(op)}
    if not missing or not any(v.op in missing for v in code):
        return code
    count = 0

    def tmp() -> str:
        nonlocal count
        count += 1
        return f"$x{count}"
    out: list[V] = []
    for v in code:
        if v.op in missing and v.d != RZ:
            out += EXPANSIONS[v.op](v, tmp)
        elif v.op not in missing:
            out.append(v)
    return out

"""Machine ops a target's block format lacks, rewritten with ops it has (one table, one pass).

A target may leave an op out of every slot (the GPU in the weights has no MULHU: its one multiplier
gives the low 32 bits; its memory loads whole words). Rather than refusing such kernels, the lowering rewrites each use into ops the
format does hold, on the virtual code before blocks are formed; the machine's own format lacks nothing,
so the interpreter's programs are unchanged. Each expansion is exact for every 32-bit input.
"""
from __future__ import annotations

from typing import Callable

from ..machine.isa import MEM_OPS, BlockFormat
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


def _subword_load(v: V, tmp: Callable[[], str]) -> list[V]:
    """LDB/LDBU/LDH/LDHU as a word load and a shift (little-endian, as the machine). The word's address
    keeps a halfword's bit 0, so a misaligned halfword still faults (as a misaligned word)."""
    size = 1 if v.op.startswith("LDB") else 2
    signed = not v.op.endswith("U")
    out: list[V] = []

    def op(name: str, a: str, b: str | int, d: str | None = None, **kw) -> str:
        d = d or tmp()
        out.append(V(name, d, a, imm=b, bimm=True, line=v.line, **kw) if isinstance(b, int)
                   else V(name, d, a, b, line=v.line, **kw))
        return d
    addr = op("ADD", v.a, v.imm, frame=v.frame)           # a frame offset is fixed later, on this op
    word = op("LD", op("AND", addr, -4 if size == 1 else -3), 0)
    shifted = op("SHR", word, op("SHL", op("AND", addr, 3 if size == 1 else 2), 3))
    bits = 8 * size
    if signed:
        op("SRA", op("SHL", shifted, 32 - bits), 32 - bits, d=v.d)
    else:
        op("AND", shifted, (1 << bits) - 1, d=v.d)
    return out


EXPANSIONS: dict[str, Callable[[V, Callable[[], str]], list[V]]] = {
    "MULHU": _mulhu, **{op: _subword_load for op in ("LDB", "LDBU", "LDH", "LDHU")}}


def _lacks(fmt: BlockFormat, op: str) -> bool:
    return not fmt.allows_mem(op) if op in MEM_OPS else not fmt.fits_some_slot(op)


def expand_missing_ops(code: list[V], fmt: BlockFormat) -> list[V]:
    """`code` with every op that `fmt` cannot hold and has an expansion replaced by that expansion (its
    parts must be ops the format holds)."""
    missing = {op for op in EXPANSIONS if _lacks(fmt, op)}
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

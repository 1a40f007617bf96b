"""Expansions of integer operations the ISA lacks: division, bit counts, bit reversal.

Division by a variable is a shift-subtract loop, one block per step, over the dividend's significant
bits (its leading zeros are skipped first; all 32 steps for a zero divisor). Its results for a zero
divisor (PTX leaves them unspecified) are: unsigned x / 0 = 0xFFFFFFFF, x % 0 = x; signed x / 0 = -1
for x >= 0 and 1 for x < 0, x % 0 = x. A constant zero divisor takes the same loop. INT_MIN / -1 =
INT_MIN and INT_MIN % -1 = 0 (wrapping). Division by a constant uses a multiply by a magic number
(Granlund-Montgomery), on magnitudes for signed division.
"""
from __future__ import annotations

from ..machine.isa import signed32
from .lower_ir import M32, RZ



def udiv_const(lw, n: str, d: int) -> str:
    """n / d for a constant d != 0, unsigned."""
    d &= M32
    if d == 1:
        return n
    if d & (d - 1) == 0:
        return lw.emit("SHR", lw.tmp(), n, d.bit_length() - 1)
    if d > 0x80000000:
        return lw.emit("SLEU", lw.tmp(), lw.const(d), n)
    l = (d - 1).bit_length()                            # ceil(log2 d)
    m = ((1 << 32) * ((1 << l) - d)) // d + 1           # < 2^32
    t1 = lw.emit("MULHU", lw.tmp(), n, m)
    t2 = lw.emit("SUB", lw.tmp(), n, t1)
    lw.emit("SHR", t2, t2, 1)
    lw.emit("ADD", t2, t2, t1)
    return lw.emit("SHR", t2, t2, l - 1)


def _abs(lw, x: str) -> tuple[str, str]:
    """(|x| as unsigned, sign mask of x)."""
    s = lw.emit("SRA", lw.tmp(), x, 31)
    a = lw.emit("XOR", lw.tmp(), x, s)
    lw.emit("SUB", a, a, s)
    return a, s


def _apply_sign(lw, x: str, s: str) -> str:
    """x negated where the mask s is all ones."""
    t = lw.emit("XOR", lw.tmp(), x, s)
    return lw.emit("SUB", t, t, s)


def sdiv_const(lw, n: str, d: int) -> str:
    """n / d for a constant d != 0, signed, truncating."""
    d &= M32
    sd = signed32(d)
    if sd == 1:
        return n
    a, s = _abs(lw, n)
    q = udiv_const(lw, a, abs(sd) & M32)
    if sd < 0:
        s = lw.emit("XOR", lw.tmp(), s, M32)
    return _apply_sign(lw, q, s)


def divmod_loop(lw, n: str, d: str, signed: bool) -> tuple[str, str]:
    """(quotient, remainder) by a 32-iteration restoring division loop."""
    if signed:
        an, sn = _abs(lw, n)
        ad, sd = _abs(lw, d)
        q, r = divmod_loop(lw, an, ad, signed=False)
        sq = lw.emit("XOR", lw.tmp(), sn, sd)
        return _apply_sign(lw, q, sq), _apply_sign(lw, r, sn)
    qn = lw.emit("ADD", lw.tmp(), n, 0)         # dividend bits shift out at the top, quotient bits in
    r = lw.emit("ADD", lw.tmp(), RZ, 0)
    i = lw.emit("ADD", lw.tmp(), RZ, 32)
    # skip the dividend's leading zeros (binary search): small dividends take few steps. Not for a
    # zero divisor, whose every step yields a quotient bit of 1.
    nonzero = lw.emit("SNE", lw.tmp(), d, 0)
    t, z = lw.tmp(), lw.tmp()
    for s in (16, 8, 4, 2, 1):
        lw.emit("SHR", t, qn, 32 - s)
        lw.emit("SEQ", z, t, 0)
        lw.emit("AND", z, z, nonzero)
        lw.emit("SHL", z, z, s.bit_length() - 1)
        lw.emit("SHL", qn, qn, z)
        lw.emit("SUB", i, i, z)
    loop, done = lw.new_label(), lw.new_label()
    lw.jmp(loop)
    lw.label(loop)
    top = lw.emit("SHR", lw.tmp(), r, 31)
    lw.emit("SHL", r, r, 1)
    nb = lw.emit("SHR", lw.tmp(), qn, 31)
    lw.emit("SHL", qn, qn, 1)
    lw.emit("OR", r, r, nb)
    ge = lw.emit("SLEU", lw.tmp(), d, r)
    lw.emit("OR", ge, ge, top)
    t = lw.emit("SEL", lw.tmp(), ge, d, c=RZ)
    lw.emit("SUB", r, r, t)
    lw.emit("OR", qn, qn, ge)
    lw.emit("SUB", i, i, 1)
    lw.br(i, loop, done)
    lw.label(done)
    return qn, r


def popc(lw, x: str) -> str:
    t = lw.emit("SHR", lw.tmp(), x, 1)
    lw.emit("AND", t, t, 0x55555555)
    v = lw.emit("SUB", lw.tmp(), x, t)
    lw.emit("SHR", t, v, 2)
    lw.emit("AND", t, t, 0x33333333)
    lw.emit("AND", v, v, 0x33333333)
    lw.emit("ADD", v, v, t)
    lw.emit("SHR", t, v, 4)
    lw.emit("ADD", v, v, t)
    lw.emit("AND", v, v, 0x0F0F0F0F)
    lw.emit("MUL", v, v, 0x01010101)
    return lw.emit("SHR", v, v, 24)


def clz(lw, x: str) -> str:
    """Leading zeros: smear the highest set bit right, count the zeros left."""
    v = lw.emit("ADD", lw.tmp(), x, 0)
    t = lw.tmp()
    for k in (1, 2, 4, 8, 16):
        lw.emit("SHR", t, v, k)
        lw.emit("OR", v, v, t)
    lw.emit("XOR", v, v, M32)
    return popc(lw, v)


def brev(lw, x: str) -> str:
    v = lw.emit("ADD", lw.tmp(), x, 0)
    t = lw.tmp()
    for k, m in ((1, 0x55555555), (2, 0x33333333), (4, 0x0F0F0F0F), (8, 0x00FF00FF)):
        lw.emit("SHR", t, v, k)
        lw.emit("AND", t, t, m)
        lw.emit("AND", v, v, m)
        lw.emit("SHL", v, v, k)
        lw.emit("OR", v, v, t)
    lw.emit("SHR", t, v, 16)
    lw.emit("SHL", v, v, 16)
    return lw.emit("OR", v, v, t)

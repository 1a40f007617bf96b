"""Expansions of integer operations the ISA lacks: division, bit counts, bit reversal.

Division by a variable is a restoring loop, one step per quotient bit: a binary search finds how far the
divisor shifts up under the dividend, then each step subtracts the shifted divisor where it fits and
shifts it back down by one (a remainder's step is one block of the GPU's format). Its results for a zero
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


def divmod_loop(lw, n: str, d: str, signed: bool, want_rem: bool) -> str:
    """n / d (want_rem False) or n % d by a restoring division loop over the quotient's bits only."""
    if signed:
        an, sn = _abs(lw, n)
        ad, sd = _abs(lw, d)
        u = divmod_loop(lw, an, ad, False, want_rem)
        return _apply_sign(lw, u, sn if want_rem else lw.emit("XOR", lw.tmp(), sn, sd))
    # k = the largest shift with d << k <= n, by a binary search (d << (k + s) <= n is d <= n >> (k + s), free
    # of overflow; k stays small: one write-back token), then one step per quotient bit, k down to 0: the
    # remainder r loses d << k where it can (r - (d << k) where r >= d << k; below, it wraps above r, so MINU
    # picks the right one). A zero divisor ends with k = 31; its steps subtract nothing.
    r = lw.emit("ADD", lw.tmp(), n, 0)
    k, ks, t, c = lw.emit("ADD", lw.tmp(), RZ, 0), lw.tmp(), lw.tmp(), lw.tmp()
    for s in (16, 8, 4, 2, 1):
        lw.emit("ADD", ks, k, s)
        lw.emit("SHR", t, n, ks)
        lw.emit("SLTU", c, t, d)        # d in the immediate's place: a parameter divisor folds in
        lw.emit("SEL", k, c, k, c=ks)
    loop, done = lw.new_label(), lw.new_label()
    if want_rem:                        # the remainder shifts d in each step and carries only r and k
        lw.jmp(loop)
        lw.label(loop)
        dd = lw.emit("SHL", lw.tmp(), d, k)
        diff = lw.emit("SUB", lw.tmp(), r, dd)
        lw.emit("MINU", r, r, diff)
        more = lw.emit("SNE", lw.tmp(), k, 0)
        lw.emit("SUB", k, k, 1)
        lw.br(more, loop, done)
        lw.label(done)
        return r
    # the quotient carries dd = d << k (one op a step fewer) and shifts its bits in at the bottom of q;
    # x / 0 = 0xFFFFFFFF: q starts at -1 and its one step (dd = 0 = d) shifts in a 1
    dd = lw.emit("SHL", lw.tmp(), d, k)
    q = lw.emit("SEQ", lw.tmp(), d, 0)
    lw.emit("SUB", q, RZ, q)
    lw.jmp(loop)
    lw.label(loop)
    ge = lw.emit("SLEU", lw.tmp(), dd, r)
    lw.emit("ADD", q, q, q)
    lw.emit("OR", q, q, ge)
    diff = lw.emit("SUB", lw.tmp(), r, dd)
    lw.emit("MINU", r, r, diff)
    more = lw.emit("SNE", lw.tmp(), dd, d)
    lw.emit("SHR", dd, dd, 1)
    lw.br(more, loop, done)
    lw.label(done)
    return q


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

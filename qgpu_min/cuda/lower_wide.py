"""Exact 64-bit integer values as register pairs: a 64-bit PTX register %rd is the virtual registers
(%rd, %rd^) holding its low and high words. Dead-code removal drops high words nobody reads (address
arithmetic only ever needs the low word, since memory is 4 KiB).

Supported on 64-bit types: add, sub, mul.lo, mul.hi, mad, mul.wide/mad.wide (from 32-bit sources),
div/rem (a 64-step shift-subtract loop, same zero-divisor results as 32-bit), and, or, xor, not, neg,
abs, min, max, shl, shr (constant or variable amounts, clamped as PTX), setp, selp, mov (including
{lo, hi} packing), cvt, cvta, ld/st (two words), popc, clz, brev, bfi (constant field) and 64-bit
parameters; atomics (lower_mem: one lane at a time). Not: bfind, bfe, atomic inc/dec.
"""
from __future__ import annotations

from .lower_arith import brev, clz, popc
from .lower_ir import M32, RZ
from .ptx import Imm, Instr, Reg, SReg, Sym



def hi(name: str) -> str:
    return RZ if name == RZ else name + "^"


class WideOps:
    """Mixin for lower_ops.Lowerer: the 64-bit forms of the instructions."""

    def src2(self, o) -> tuple:
        if isinstance(o, Reg):
            n = self.name(o.name)
            return n, hi(n)
        if isinstance(o, Imm):
            return o.value & M32, (o.value >> 32) & M32
        if isinstance(o, (SReg, Sym)):
            return self.src(o), 0
        raise self.err(f"operand {o} is not supported here")

    def dst2(self, o) -> tuple[str, str]:
        d = self.dst(o)
        return d, hi(d)

    def set2(self, d: tuple[str, str], lo, hi_) -> None:
        self.mov(d[0], lo)
        self.mov(d[1], hi_)

    # ---- arithmetic -----------------------------------------------------------------------
    def add64(self, a: tuple, b: tuple) -> tuple[str, str]:
        lo = self.alu("ADD", self.tmp(), a[0], b[0])
        carry = self.alu("SLTU", self.tmp(), lo, a[0])
        h = self.alu("ADD", self.tmp(), a[1], b[1])
        self.emit("ADD", h, h, carry)
        return lo, h

    def sub64(self, a: tuple, b: tuple) -> tuple[str, str]:
        a0 = self.reg(a[0])
        lo = self.alu("SUB", self.tmp(), a0, b[0])
        borrow = self.alu("SLTU", self.tmp(), a0, b[0])
        h = self.alu("SUB", self.tmp(), self.reg(a[1]), b[1])
        self.emit("SUB", h, h, borrow)
        return lo, h

    def mul64(self, a: tuple, b: tuple) -> tuple[str, str]:
        lo = self.alu("MUL", self.tmp(), a[0], b[0])
        h = self.alu("MULHU", self.tmp(), a[0], b[0])
        for x, y in ((a[0], b[1]), (a[1], b[0])):
            t = self.alu("MUL", self.tmp(), x, y)
            self.emit("ADD", h, h, t)
        return lo, h

    def acc(self, total: str, carry: str, x) -> None:
        """total += x, carry += the carry out of that addition."""
        self.alu("ADD", total, total, x)
        c = self.alu("SLTU", self.tmp(), total, x)
        self.emit("ADD", carry, carry, c)

    def mulhi64(self, kind: str, a: tuple, b: tuple) -> tuple[str, str]:
        """High 64 bits of the 128-bit product, from 32-bit limb products."""
        a = (self.reg(a[0]), self.reg(a[1]))
        b = (self.reg(b[0]), self.reg(b[1]))
        lo = {(i, j): self.emit("MUL", self.tmp(), a[i], b[j]) for i in (0, 1) for j in (0, 1) if i + j}
        hi_ = {(i, j): self.emit("MULHU", self.tmp(), a[i], b[j]) for i in (0, 1) for j in (0, 1)}
        limb1, c1 = self.emit("ADD", self.tmp(), hi_[0, 0], 0), self.emit("ADD", self.tmp(), RZ, 0)
        self.acc(limb1, c1, lo[0, 1])
        self.acc(limb1, c1, lo[1, 0])
        limb2, c2 = self.emit("ADD", self.tmp(), c1, 0), self.emit("ADD", self.tmp(), RZ, 0)
        for x in (hi_[0, 1], hi_[1, 0], lo[1, 1]):
            self.acc(limb2, c2, x)
        limb3 = self.emit("ADD", self.tmp(), hi_[1, 1], c2)
        r = (limb2, limb3)
        if kind == "s":         # signed: subtract b where a < 0 and a where b < 0
            for x, y in ((a, b), (b, a)):
                s = self.emit("SRA", self.tmp(), x[1], 31)
                r = self.sub64(r, (self.emit("AND", self.tmp(), y[0], s), self.emit("AND", self.tmp(), y[1], s)))
        return r

    def wide_mul(self, kind: str, a, b) -> tuple[str, str]:
        """mul.wide.{s,u}32: the full 64-bit product of two 32-bit values."""
        lo = self.alu("MUL", self.tmp(), a, b)
        h = self.tmp()
        self._mulhi(kind, 32, h, a, b)
        return lo, h

    def w_binop(self, ins: Instr) -> None:
        op = ins.opcode
        if "cc" in ins.mods or "sat" in ins.mods:
            raise self.err("carry/saturating arithmetic is not supported")
        d = self.dst2(ins.operands[0])
        a, b = self.src2(ins.operands[1]), self.src2(ins.operands[2])
        if op == "add":
            r = self.add64(a, b)
        elif op == "sub":
            r = self.sub64(a, b)
        elif op in ("mul", "mad"):
            r = self.mulhi64(ins.mods[-1][0], a, b) if "hi" in ins.mods else self.mul64(a, b)
            if op == "mad":
                r = self.add64(r, self.src2(ins.operands[3]))
        else:
            mop = {"and": "AND", "or": "OR", "xor": "XOR"}[op]
            r = (self.alu(mop, self.tmp(), a[0], b[0]), self.alu(mop, self.tmp(), a[1], b[1]))
        self.set2(d, *r)

    def w_unary(self, ins: Instr) -> None:
        d, a = self.dst2(ins.operands[0]), self.src2(ins.operands[1])
        if ins.opcode == "not":
            r = (self.alu("XOR", self.tmp(), a[0], M32), self.alu("XOR", self.tmp(), a[1], M32))
        elif ins.opcode == "neg":
            r = self.sub64((0, 0), a)
        else:       # abs
            s = self.alu("SRA", self.tmp(), a[1], 31)
            x = (self.alu("XOR", self.tmp(), a[0], s), self.alu("XOR", self.tmp(), a[1], s))
            r = self.sub64(x, (s, s))
        self.set2(d, *r)

    def abs64(self, x: tuple) -> tuple[tuple, str]:
        """(|x|, sign mask of x)."""
        s = self.emit("SRA", self.tmp(), self.reg(x[1]), 31)
        y = (self.alu("XOR", self.tmp(), x[0], s), self.alu("XOR", self.tmp(), x[1], s))
        return self.sub64(y, (s, s)), s

    def divmod64(self, n: tuple, d: tuple, signed: bool) -> tuple[tuple, tuple]:
        """(quotient, remainder) by a 64-iteration shift-subtract loop."""
        if signed:
            (an, sn), (ad, sd) = self.abs64(n), self.abs64(d)
            q, r = self.divmod64(an, ad, False)
            sq = self.emit("XOR", self.tmp(), sn, sd)
            return self.sub64(tuple(self.emit("XOR", self.tmp(), x, sq) for x in q), (sq, sq)), \
                self.sub64(tuple(self.emit("XOR", self.tmp(), x, sn) for x in r), (sn, sn))
        d = (self.reg(d[0]), self.reg(d[1]))
        q = [self.alu("ADD", self.tmp(), n[0], 0), self.alu("ADD", self.tmp(), n[1], 0)]
        r = [self.emit("ADD", self.tmp(), RZ, 0), self.emit("ADD", self.tmp(), RZ, 0)]
        i = self.emit("ADD", self.tmp(), RZ, 64)
        loop, done = self.new_label(), self.new_label()
        self.jmp(loop)
        self.label(loop)
        top = self.emit("SHR", self.tmp(), r[1], 31)
        t = self.tmp()
        for hi_w, lo_w in ((r[1], r[0]), (r[0], q[1]), (q[1], q[0])):    # shift {r:q} left by one
            self.emit("SHL", hi_w, hi_w, 1)
            self.emit("SHR", t, lo_w, 31)
            self.emit("OR", hi_w, hi_w, t)
        self.emit("SHL", q[0], q[0], 1)
        ge = self.compare64("ls", "u", d, tuple(r))
        self.emit("OR", ge, ge, top)
        sub = (self.emit("SEL", self.tmp(), ge, d[0], c=RZ), self.emit("SEL", self.tmp(), ge, d[1], c=RZ))
        nr = self.sub64(tuple(r), sub)
        self.mov(r[0], nr[0])
        self.mov(r[1], nr[1])
        self.emit("OR", q[0], q[0], ge)
        self.emit("SUB", i, i, 1)
        self.br(i, loop, done)
        self.label(done)
        return tuple(q), tuple(r)

    def w_divrem(self, ins: Instr) -> None:
        d = self.dst2(ins.operands[0])
        q, r = self.divmod64(self.src2(ins.operands[1]), self.src2(ins.operands[2]), ins.mods[-1][0] == "s")
        self.set2(d, *(q if ins.opcode == "div" else r))

    # ---- compares -------------------------------------------------------------------------
    def compare64(self, cmp: str, kind: str, a: tuple, b: tuple) -> str:
        from .lower_ops import CMP_OPS
        if cmp not in CMP_OPS:
            raise self.err(f"compare `{cmp}` is not supported")
        op, swap, force_unsigned = CMP_OPS[cmp]
        if swap:
            a, b = b, a
        if op in ("SEQ", "SNE"):
            e0 = self.compare(cmp, "u", 32, a[0], b[0], self.tmp())
            e1 = self.compare(cmp, "u", 32, a[1], b[1], self.tmp())
            return self.emit("AND" if op == "SEQ" else "OR", self.tmp(), e0, e1)
        signed = kind == "s" and not force_unsigned
        h = self.compare("lt", "s" if signed else "u", 32, a[1], b[1], self.tmp())
        e = self.compare("eq", "u", 32, a[1], b[1], self.tmp())
        low = self.compare("lo" if op == "SLT" else "ls", "u", 32, a[0], b[0], self.tmp())
        self.emit("AND", low, low, e)
        return self.emit("OR", self.tmp(), h, low)

    def w_minmax(self, ins: Instr) -> None:
        kind = ins.mods[-1][0]
        d = self.dst2(ins.operands[0])
        a, b = self.src2(ins.operands[1]), self.src2(ins.operands[2])
        c = self.compare64("lt", kind, a, b)
        first, second = (a, b) if ins.opcode == "min" else (b, a)
        r = [self.emit("SEL", self.tmp(), c, first[i], c=self.reg(second[i])) for i in (0, 1)]
        self.set2(d, *r)

    def w_selp(self, ins: Instr) -> None:
        d = self.dst2(ins.operands[0])
        a, b, p = self.src2(ins.operands[1]), self.src2(ins.operands[2]), self.rsrc(ins.operands[3])
        r = [self.emit("SEL", self.tmp(), p, a[i], c=self.reg(b[i])) for i in (0, 1)]
        self.set2(d, *r)

    # ---- bit counts -----------------------------------------------------------------------
    def w_popc(self, ins: Instr) -> None:
        a = self.src2(ins.operands[1])
        self.emit("ADD", self.dst(ins.operands[0]), popc(self, self.reg(a[0])), popc(self, self.reg(a[1])))

    def w_clz(self, ins: Instr) -> None:
        a = self.src2(ins.operands[1])
        lo = self.emit("ADD", self.tmp(), clz(self, self.reg(a[0])), 32)
        z = self.alu("SEQ", self.tmp(), a[1], 0)
        self.emit("SEL", self.dst(ins.operands[0]), z, lo, c=clz(self, self.reg(a[1])))

    def w_brev(self, ins: Instr) -> None:
        a = self.src2(ins.operands[1])
        self.set2(self.dst2(ins.operands[0]), brev(self, self.reg(a[1])), brev(self, self.reg(a[0])))

    def w_bfi(self, ins: Instr) -> None:
        d, f, b, pos, ln = ins.operands[:5]
        pos, ln = self.src(pos), self.src(ln)
        if not isinstance(pos, int) or not isinstance(ln, int):
            raise self.err("bfi is supported with constant position and length")
        pos, ln = pos & 255, ln & 255
        mask = (((1 << min(ln, 64)) - 1) << pos) & (2 ** 64 - 1) if pos < 64 else 0
        b = self.src2(b)
        field = self.shl64_const(self.src2(f), pos) if mask else (RZ, RZ)     # the field bits: f << pos
        r = []
        for k in (0, 1):
            m = (mask >> 32 * k) & M32
            t = self.alu("AND", self.tmp(), field[k], m) if m else RZ
            u = self.alu("AND", self.tmp(), b[k], ~m & M32)
            r.append(self.emit("OR", self.tmp(), u, t))
        self.set2(self.dst2(d), *r)

    def shl64_const(self, a: tuple, n: int) -> tuple:
        a = (self.reg(a[0]), self.reg(a[1]))
        if n == 0:
            return a
        if n >= 64:
            return RZ, RZ
        if n >= 32:
            return RZ, self.emit("SHL", self.tmp(), a[0], n - 32)
        return (self.emit("SHL", self.tmp(), a[0], n),
                self.emit("OR", self.tmp(), self.emit("SHL", self.tmp(), a[1], n),
                          self.emit("SHR", self.tmp(), a[0], 32 - n)))

    # ---- shifts ---------------------------------------------------------------------------
    def w_shl(self, ins: Instr) -> None:
        self.w_shift(ins, True)

    def w_shr(self, ins: Instr) -> None:
        self.w_shift(ins, False)

    def w_shift(self, ins: Instr, left: bool) -> None:
        kind = ins.mods[-1][0]
        arith = not left and kind == "s"
        d, a, n = self.dst2(ins.operands[0]), self.src2(ins.operands[1]), self.src(ins.operands[2])
        a = (self.reg(a[0]), self.reg(a[1]))
        fill = self.emit("SRA", self.tmp(), a[1], 31) if arith else RZ
        if isinstance(n, int):
            n = min(n, 64)
            if n == 0:
                r = a
            elif n < 32 and left:
                r = (self.emit("SHL", self.tmp(), a[0], n),
                     self.emit("OR", self.tmp(), self.emit("SHL", self.tmp(), a[1], n),
                               self.emit("SHR", self.tmp(), a[0], 32 - n)))
            elif n < 32:
                r = (self.emit("OR", self.tmp(), self.emit("SHR", self.tmp(), a[0], n),
                               self.emit("SHL", self.tmp(), a[1], 32 - n)),
                     self.emit("SRA" if arith else "SHR", self.tmp(), a[1], n))
            elif n < 64 and left:
                r = (RZ, self.emit("SHL", self.tmp(), a[0], n - 32))
            elif n < 64:
                r = (self.emit("SRA" if arith else "SHR", self.tmp(), a[1], n - 32), fill)
            else:
                r = (RZ, RZ) if left else (fill, fill)
            self.set2(d, *r)
            return
        m = self.emit("AND", self.tmp(), n, 31)
        inv = self.emit("XOR", self.tmp(), m, 31)
        small = self.emit("SLTU", self.tmp(), n, 32)
        inrange = self.emit("SLTU", self.tmp(), n, 64)
        if left:        # n < 32: {hi << m | lo >> (32 - m), lo << m};  32 <= n < 64: {lo << m, 0}
            lo_s = self.emit("SHL", self.tmp(), a[0], m)
            spill = self.emit("SHR", self.tmp(), a[0], 1)
            self.emit("SHR", spill, spill, inv)
            hi_s = self.emit("SHL", self.tmp(), a[1], m)
            self.emit("OR", hi_s, hi_s, spill)
            lo = self.emit("SEL", self.tmp(), small, lo_s, c=RZ)
            h = self.emit("SEL", self.tmp(), small, hi_s, c=lo_s)
            self.emit("SEL", h, inrange, h, c=RZ)
            self.set2(d, lo, h)
            return
        sh = "SRA" if arith else "SHR"
        hi_s = self.emit(sh, self.tmp(), a[1], m)
        spill = self.emit("SHL", self.tmp(), a[1], 1)
        self.emit("SHL", spill, spill, inv)
        lo_s = self.emit("SHR", self.tmp(), a[0], m)
        self.emit("OR", lo_s, lo_s, spill)
        lo = self.emit("SEL", self.tmp(), small, lo_s, c=hi_s)
        h = self.emit("SEL", self.tmp(), small, hi_s, c=fill)
        self.emit("SEL", lo, inrange, lo, c=fill)
        self.emit("SEL", h, inrange, h, c=fill)
        self.set2(d, lo, h)

"""Exact 64-bit integer values as register pairs: a 64-bit PTX register %rd is the virtual registers
(%rd, %rd^) holding its low and high words. Dead-code removal drops high words nobody reads (address
arithmetic only ever needs the low word, since memory is 4 KiB).

Supported on 64-bit types: add, sub, mul.lo, mad.lo, mul.wide/mad.wide (from 32-bit sources), and, or,
xor, not, neg, abs, min, max, shl, shr (constant or variable amounts, clamped as PTX), setp, selp, mov
(including {lo, hi} packing), cvt, cvta, ld/st (two words) and 64-bit parameters. Not: div/rem,
mul.hi, popc/clz/brev/bfind, atomics on 64-bit words.
"""
from __future__ import annotations

from .lower_ir import RZ
from .ptx import Imm, Instr, Reg, SReg, Sym

M32 = 0xFFFFFFFF


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
            if "hi" in ins.mods:
                raise self.err("64-bit mul.hi is not supported")
            r = self.mul64(a, b)
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

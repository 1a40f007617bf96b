"""Bit-manipulation instructions: popc, clz, brev, bfind, bfe, bfi, prmt, funnel shifts (shf)."""
from __future__ import annotations

from .lower_arith import brev, clz, popc
from .lower_ir import M32, RZ, instr_type
from .ptx import Function, Imm, Instr, Pair, Reg, Vec


def _written(o) -> list[str]:
    """Register names an instruction's first operand names (a superset of what it writes)."""
    if isinstance(o, Reg):
        return [o.name]
    if isinstance(o, Vec):
        return [x.name for x in o.items if isinstance(x, Reg)]
    if isinstance(o, Pair):
        return [x.name for x in (o.first, o.second) if isinstance(x, Reg)]
    return []


def constant_registers(fn: Function) -> dict[str, int]:
    """Registers whose ONLY definition in fn is an unguarded `mov` of an immediate: their value is that
    constant wherever they are read (nvcc materialises constant controls this way: `mov.u32 %r8, 14101;
    prmt.b32 %r9, %r7, %r6, %r8;`)."""
    defs: dict[str, list[Instr]] = {}
    for ins in fn.body:
        if isinstance(ins, Instr):
            for r in _written(ins.operands[0]) if ins.operands else ():
                defs.setdefault(r, []).append(ins)
    return {r: d[0].operands[1].value & M32 for r, d in defs.items()
            if len(d) == 1 and d[0].opcode == "mov" and d[0].pred is None and isinstance(d[0].operands[1], Imm)}


class BitOps:
    """Mixin for lower_ops.Lowerer."""

    def const_src(self, o) -> int | str:
        """src(o), or the constant a register holds when constant_registers says it has one."""
        if isinstance(o, Reg):
            value = constant_registers(self.scope.fn).get(o.name)
            if value is not None:
                return value
        return self.src(o)

    def op_shf(self, ins: Instr) -> None:
        """Funnel shift of the 64-bit pair {b:a}: shf.l gives the high word of it << n, shf.r the low
        word of it >> n; n = c & 31 (wrap) or min(c, 32) (clamp)."""
        d, a, b, c = (ins.operands[0], *ins.operands[1:4])
        d, a, b, n = self.dst(d), self.rsrc(a), self.rsrc(b), self.src(c)
        left, clamp = "l" in ins.mods, "clamp" in ins.mods
        keep, into, out_op, in_op = (b, a, "SHL", "SHR") if left else (a, b, "SHR", "SHL")
        if isinstance(n, int):
            n = min(n, 32) if clamp else n & 31
            if n == 32:
                self.mov(d, into)
            elif n == 0:
                self.mov(d, keep)
            else:
                t = self.emit(out_op, self.tmp(), keep, n)
                u = self.emit(in_op, self.tmp(), into, 32 - n)
                self.emit("OR", d, t, u)
            return
        m = self.emit("AND", self.tmp(), n, 31)
        t = self.emit(out_op, self.tmp(), keep, m)
        u = self.emit(in_op, self.tmp(), into, 1)        # two steps: a shift by 32 - n, also for n = 0
        inv = self.emit("XOR", self.tmp(), m, 31)
        self.emit(in_op, u, u, inv)
        if not clamp:
            self.emit("OR", d, t, u)
            return
        self.emit("OR", t, t, u)
        big = self.emit("SLTU", self.tmp(), n, 32)
        self.emit("SEL", d, big, t, c=into)

    def _unary32(self, ins: Instr):
        kind, w = instr_type(ins)
        if w != 32:
            raise self.err(f"{ins.opcode} on {w}-bit values is not supported")
        return self.dst(ins.operands[0]), self.rsrc(ins.operands[1])

    def op_popc(self, ins: Instr) -> None:
        d, x = self._unary32(ins)
        self.mov(d, popc(self, x))

    def op_clz(self, ins: Instr) -> None:
        d, x = self._unary32(ins)
        self.mov(d, clz(self, x))

    def op_brev(self, ins: Instr) -> None:
        d, x = self._unary32(ins)
        self.mov(d, brev(self, x))

    def op_bfind(self, ins: Instr) -> None:
        kind, w = instr_type(ins)
        d, x = self._unary32(ins)
        if kind == "s":
            x = self.emit("XOR", self.tmp(), x, self.emit("SRA", self.tmp(), x, 31))
        c = clz(self, x)
        if "shiftamt" in ins.mods:      # 0xFFFFFFFF for zero, else the leading-zero count
            z = self.emit("SEQ", self.tmp(), x, 0)
            self.emit("SEL", d, z, M32, c=c)
            return
        t = self.emit("SUB", self.tmp(), RZ, c)
        self.emit("ADD", d, t, 31)

    def op_bfe(self, ins: Instr) -> None:
        kind, w = instr_type(ins)
        d, a, pos, ln = ins.operands[:4]
        pos, ln = self.const_src(pos), self.const_src(ln)
        if w != 32 or not isinstance(pos, int) or not isinstance(ln, int):
            raise self.err("bfe is supported on 32-bit values with constant position and length (an immediate "
                           "or a register set once by `mov` of one)")
        pos, ln, d, a = pos & 255, ln & 255, self.dst(d), self.rsrc(a)
        if ln == 0 or (pos >= 32 and kind == "u"):
            self.mov(d, 0)
        elif pos >= 32:
            self.emit("SRA", d, a, 31)
        else:
            end = min(pos + ln, 32)
            t = self.emit("SHL", self.tmp(), a, 32 - end)
            self.emit("SRA" if kind == "s" else "SHR", d, t, 32 - end + pos)

    def op_bfi(self, ins: Instr) -> None:
        d, f, b, pos, ln = ins.operands[:5]
        pos, ln = self.const_src(pos), self.const_src(ln)
        if not isinstance(pos, int) or not isinstance(ln, int) or instr_type(ins)[1] != 32:
            raise self.err("bfi is supported on 32-bit values with constant position and length (an immediate "
                           "or a register set once by `mov` of one)")
        pos, ln, d = pos & 255, ln & 255, self.dst(d)
        if ln == 0 or pos >= 32:
            self.mov(d, self.src(b))
            return
        mask = (((1 << min(ln, 32)) - 1) << pos) & M32
        t = self.alu("SHL", self.tmp(), self.src(f), pos)
        self.emit("AND", t, t, mask)
        u = self.alu("AND", self.tmp(), self.src(b), ~mask & M32)
        self.emit("OR", d, t, u)

    def op_prmt(self, ins: Instr) -> None:
        d, a, b, c = ins.operands[:4]
        sel = self.const_src(c)
        if any(m in ins.mods for m in ("f4e", "b4e", "rc8", "ecl", "ecr", "rc16")):
            raise self.err("prmt is supported in the default mode only (not f4e, b4e, rc8, ecl, ecr, rc16)")
        if not isinstance(sel, int):
            raise self.err(f"the selector {c.name if isinstance(c, Reg) else c} is not a known constant: prmt needs "
                           "an immediate or a register set once by `mov` of one (a selector computed at run "
                           "time is not supported)")
        srcs = (self.rsrc(a), self.rsrc(b))
        acc = RZ
        for i in range(4):
            s = (sel >> 4 * i) & 15
            x, k = srcs[(s & 7) >> 2], s & 3
            if s & 8:   # replicate the byte's sign bit
                t = self.emit("SHL", self.tmp(), x, 24 - 8 * k)
                self.emit("SRA", t, t, 31)
            else:
                t = self.emit("SHR", self.tmp(), x, 8 * k)
            self.emit("AND", t, t, 0xFF)
            if i:
                self.emit("SHL", t, t, 8 * i)
            acc = self.emit("OR", self.tmp(), acc, t) if acc != RZ else t
        self.mov(self.dst(d), acc)

"""Memory and warp instructions: ld/st (incl. parameters), atomics, shuffles, votes."""
from __future__ import annotations

from ..machine.isa import LANES, SPECIAL
from .lower_ir import RZ, V, instr_type
from .lower_wide import hi
from .ptx import Instr, Mem, Pair, Reg, Sym, Vec, type_width

ATOM_KIND = {"add": "ADD", "min": "MIN", "max": "MAX", "exch": "EXCH", "and": "AND", "or": "OR", "xor": "XOR",
             "cas": "CAS", "inc": "INC", "dec": "DEC"}
LOAD = {(8, "s"): "LDB", (8, "u"): "LDBU", (8, "b"): "LDBU", (16, "s"): "LDH", (16, "u"): "LDHU",
        (16, "b"): "LDHU"}
STORE = {8: "STB", 16: "STH", 32: "ST"}


class MemOps:
    """Mixin for lower_ops.Lowerer."""

    def _space(self, ins: Instr) -> str:
        return next((m for m in ins.mods if m in ("global", "shared", "local", "const", "param")), "generic")

    def _param_ref(self, m: Mem) -> tuple[str, int] | None:
        if isinstance(m, Mem) and isinstance(m.base, Sym):
            name = m.base.name
            if name in self.scope.alias:
                return ("alias", self.scope.alias[name] + f"+{m.offset}")
            if self.scope.fn is self.kernel and name in self.params:
                return ("kernel", m.offset)
            if any(dcl.name == name and dcl.space == "param" for dcl in self.scope.fn.decls):
                return ("alias", self.name(name) + f"+{m.offset}")
        return None

    def op_ld(self, ins: Instr) -> None:
        kind, w = instr_type(ins)
        dsts, m = ins.operands[0], ins.operands[1]
        ref = self._param_ref(m) if self._space(ins) in ("param", "generic") else None
        if ref is not None:
            if ref[0] == "alias":
                self.mov(self.dst(dsts), ref[1])
                if w == 64:
                    self.mov(hi(self.dst(dsts)), hi(ref[1]))
                return
            idx = self.params[m.base.name]
            if m.offset:
                raise self.err("parameters are read whole (no by-value structs)")
            self.emit("ADD", self.dst(dsts), RZ, 0, param=idx)
            if w == 64:
                self.emit("ADD", hi(self.dst(dsts)), RZ, 0, param=idx, param_part=1)
            return
        if self._space(ins) == "param":
            raise self.err("unknown parameter")
        items = dsts.items if isinstance(dsts, Vec) else (dsts,)
        base, off = self.address(m)
        op = "LD" if w >= 32 else LOAD[(w, kind)]
        for i, r in enumerate(items):
            d = self.dst(r)
            self.emit(op, d, base, off + i * w // 8)
            if w == 64:
                self.emit(op, hi(d), base, off + i * 8 + 4)
            elif self.reg_width(r) == 64:       # a narrower load into a 64-bit register extends it
                self.emit("SRA", hi(d), d, 31) if kind == "s" else self.mov(hi(d), 0)

    def reg_width(self, r) -> int | None:
        """Declared width of a PTX register (`.reg .b64 %rd<5>` makes %rd3 64-bit)."""
        if not isinstance(r, Reg):
            return None
        for decl in self.scope.fn.regs:
            if r.name == decl.prefix or (decl.count is not None and r.name.startswith(decl.prefix)
                                         and r.name[len(decl.prefix):].isdigit()):
                return type_width(decl.type)
        return None

    def op_ldu(self, ins: Instr) -> None:
        self.op_ld(ins)

    def op_st(self, ins: Instr) -> None:
        kind, w = instr_type(ins)
        m, vals = ins.operands[0], ins.operands[1]
        ref = self._param_ref(m) if self._space(ins) in ("param", "generic") else None
        if ref is not None:
            if ref[0] != "alias":
                raise self.err("stores to kernel parameters are not supported")
            if w == 64:
                self.set2((ref[1], hi(ref[1])), *self.src2(vals))
            else:
                self.mov(ref[1], self.src(vals))
            return
        items = vals.items if isinstance(vals, Vec) else (vals,)
        base, off = self.address(m)
        for i, v in enumerate(items):
            words = self.src2(v) if w == 64 else (self.src(v),)
            for k, x in enumerate(words):
                self.out.append(V(STORE[min(w, 32)], RZ, base, self.reg(x),
                                  imm=self._imm(off + i * w // 8 + 4 * k), line=self.line))

    def _atom(self, ins: Instr, returns: bool) -> None:
        kind, w = instr_type(ins)
        op = next((ATOM_KIND[m] for m in ins.mods if m in ATOM_KIND), None)
        if op is None:
            raise self.err("unknown atomic operation")
        if w == 64:
            self._atom64(ins, op, kind, returns)
            return
        if w != 32:
            raise self.err("atomics are supported on 32- and 64-bit integers")
        if op in ("MIN", "MAX") and kind == "u":
            op += "U"
        ops = ins.operands
        d = self.dst(ops[0]) if returns else RZ
        m, rest = (ops[1], ops[2:]) if returns else (ops[0], ops[1:])
        base, off = self.address(m)
        b = self.rsrc(rest[0])
        c = self.rsrc(rest[1]) if op == "CAS" else RZ
        self.out.append(V("ATOM." + op, d, base, b, c, imm=self._imm(off), line=self.line))

    def _atom64(self, ins: Instr, op: str, kind: str, returns: bool) -> None:
        """A 64-bit atomic as a read-modify-write of two words, one lane at a time. Atomic because a
        warp's turn ends only at a barrier, exit or backward branch (isa: scheduling) and each lane's
        read-modify-write has only forward branches; the loop's back edge lies between two lanes'."""
        if op in ("INC", "DEC"):
            raise self.err("64-bit atomic inc/dec is not supported")
        ops = ins.operands
        d = self.dst2(ops[0]) if returns else None
        m, rest = (ops[1], ops[2:]) if returns else (ops[0], ops[1:])
        base, off = self.address(m)
        b = self.src2(rest[0])
        c = self.src2(rest[1]) if op == "CAS" else None
        lane = self.emit("S2R", self.tmp(), b=SPECIAL["laneid"])
        k = self.emit("ADD", self.tmp(), RZ, 0)
        loop, do, skip, done = (self.new_label() for _ in range(4))
        self.label(loop)
        mine = self.emit("SEQ", self.tmp(), lane, k)
        self.br(mine, do, skip)
        self.label(do)
        old = (self.emit("LD", self.tmp(), base, off), self.emit("LD", self.tmp(), base, off + 4))
        if op == "ADD":
            new = self.add64(old, b)
        elif op in ("AND", "OR", "XOR"):
            new = tuple(self.alu(op, self.tmp(), old[i], b[i]) for i in (0, 1))
        elif op == "EXCH":
            new = b
        elif op == "CAS":
            eq = self.compare64("eq", "u", old, b)
            new = tuple(self.emit("SEL", self.tmp(), eq, c[i], c=old[i]) for i in (0, 1))
        else:       # MIN / MAX
            lt = self.compare64("lt", kind, old, b)
            keep_old = lt if op == "MIN" else self.emit("XOR", self.tmp(), lt, 1)
            new = tuple(self.emit("SEL", self.tmp(), keep_old, old[i], c=self.reg(b[i])) for i in (0, 1))
        for i in (0, 1):
            self.out.append(V("ST", RZ, base, self.reg(new[i]), imm=self._imm(off + 4 * i), line=self.line))
        if d is not None:
            self.set2(d, *old)
        self.jmp(skip)
        self.label(skip)
        self.emit("ADD", k, k, 1)
        more = self.emit("SLTU", self.tmp(), k, LANES)
        self.br(more, loop, done)
        self.label(done)

    def op_atom(self, ins):
        self._atom(ins, True)

    def op_red(self, ins):
        self._atom(ins, False)

    def op_vote(self, ins: Instr) -> None:
        mode = next((m for m in ins.mods if m in ("ballot", "any", "all", "uni")), None)
        if mode is None:
            raise self.err("unknown vote mode")
        d, p = self.dst(ins.operands[0]), self.src(ins.operands[1])
        if mode != "uni":
            self._vote(mode.upper(), d, p)
            return
        al, an = self._vote("ALL", self.tmp(), p), self._vote("ANY", self.tmp(), p)   # uniform: all or none true
        self.emit("XOR", an, an, 1)
        self.emit("OR", d, al, an)

    def _vote(self, mode: str, d: str, p: str | int) -> str:
        """VOTE.<mode> d over predicate p; a constant predicate folds: ANY / ALL to itself (the voting lane is
        active), BALLOT to the active mask or 0."""
        if isinstance(p, int) and (mode != "BALLOT" or not p):
            self.mov(d, int(bool(p)) if mode != "BALLOT" else 0)
            return d
        return self.emit("VOTE." + mode, d, RZ, 1 if isinstance(p, int) else p)

    def op_activemask(self, ins: Instr) -> None:
        self.emit("VOTE.BALLOT", self.dst(ins.operands[0]), RZ, 1)

    def op_shfl(self, ins: Instr) -> None:
        mode = next((m for m in ins.mods if m in ("idx", "up", "down", "bfly")), None)
        if mode is None:
            raise self.err("unknown shuffle mode")
        d = ins.operands[0]
        if isinstance(d, Pair):
            self.shfl_preds.add(self.dst(d.second))
            d = d.first
        a, b, c = ins.operands[1:4]
        bv = self.src(b)
        av = self.rsrc(a)
        if av == RZ:        # every lane's zero register reads 0: the shuffle is a move of 0
            self.mov(self.dst(d), 0)
            return
        self.out.append(V("SHFL." + mode.upper(), self.dst(d), av,
                          RZ if isinstance(bv, int) else bv, self.rsrc(c),
                          imm=bv & 31 if isinstance(bv, int) else 0, bimm=isinstance(bv, int), line=self.line))

"""PTX instructions -> virtual machine code (lower_ir.V), expanding what the ISA lacks.

Value representation: every PTX register of up to 32 bits becomes one 32-bit virtual register; one
narrower than 32 bits keeps only its low bits meaningful (inputs are sign/zero-extended where an
operation depends on the high bits: compares, shifts right, min/max, division). A 64-bit register is
a pair of virtual registers (lower_wide). Predicates are registers holding 0/1.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..machine.isa import ALU_OPS, SPECIAL, signed32
from .lower_arith import divmod_loop, sdiv_const, udiv_const
from .lower_bits import BitOps
from .lower_ir import INT_TYPES, M32, RZ, LoweringError, MemoryLayout, V, instr_type, instr_width
from .lower_mem import MemOps
from .lower_opt import COMMUTATIVE
from .lower_wide import WideOps, hi
from .ptx import FloatImm, Function, Imm, Instr, Label, Mem, Pair, PtxModule, Reg, SReg, Sym, Vec, type_width

DYNAMIC_SHARED = -1      # pseudo parameter index: the base address of extern __shared__ memory
FLOAT_TYPES = {"f16", "f16x2", "bf16", "bf16x2", "tf32", "f32", "f64", "e4m3x2", "e5m2x2"}
CONST_SREGS = {"%tid.z": 0, "%ctaid.z": 0, "%ntid.z": 1, "%nctaid.z": 1, "WARP_SZ": 4}
CMP_OPS = {  # cmp -> (machine op, swap operands, force unsigned)
    "eq": ("SEQ", False, False), "ne": ("SNE", False, False),
    "lt": ("SLT", False, False), "le": ("SLE", False, False),
    "gt": ("SLT", True, False), "ge": ("SLE", True, False),
    "lo": ("SLT", False, True), "ls": ("SLE", False, True),
    "hi": ("SLT", True, True), "hs": ("SLE", True, True),
}
NOPS = {"membar", "fence", "pmevent", "prefetch", "prefetchu"}
WIDE = {"add": "w_binop", "sub": "w_binop", "mul": "w_binop", "mad": "w_binop", "and": "w_binop",
        "or": "w_binop", "xor": "w_binop", "not": "w_unary", "neg": "w_unary", "abs": "w_unary",
        "min": "w_minmax", "max": "w_minmax", "selp": "w_selp", "shl": "w_shl", "shr": "w_shr",
        "div": "w_divrem", "rem": "w_divrem", "popc": "w_popc", "clz": "w_clz", "brev": "w_brev", "bfind": None,
        "bfe": None, "bfi": "w_bfi", "cnot": None, "slct": None}


@dataclass
class Scope:
    """One inlined function body: register/label renaming and parameter aliases."""
    fn: Function
    prefix: str
    alias: dict[str, str] = field(default_factory=dict)    # callee param/retval name -> caller vreg base
    ret_label: str | None = None


class Lowerer(WideOps, BitOps, MemOps):
    def __init__(self, module: PtxModule, kernel: Function, layout: MemoryLayout, max_inline_depth: int = 8) -> None:
        self.module = module
        self.kernel = kernel
        self.layout = layout
        self.params = {p.name: i for i, p in enumerate(kernel.params)}
        self.out: list[V] = []
        self.n_tmp = 0
        self.n_calls = 0
        self.max_depth = max_inline_depth
        self.line = 0
        self.ins: Instr | None = None
        self.scope: Scope | None = None
        self.shfl_preds: set[str] = set()

    # ---- emission helpers ---------------------------------------------------------------
    def err(self, why: str) -> LoweringError:
        ins = self.ins
        return LoweringError(f"unsupported instruction `{ins.text}` at PTX line {ins.line}: {why}" if ins
                             else why)

    def tmp(self) -> str:
        self.n_tmp += 1
        return f"$t{self.n_tmp}"

    def emit(self, op: str, d: str = RZ, a: str = RZ, b: str | int = RZ, c: str = RZ, **kw) -> str:
        if isinstance(b, int):
            v = V(op, d, a, RZ, c, imm=self._imm(b), bimm=True, line=self.line, **kw)
        else:
            v = V(op, d, a, b, c, line=self.line, **kw)
        self.out.append(v)
        return d

    _imm = staticmethod(signed32)   # an immediate operand holds the word's signed value

    def alu(self, op: str, d: str, a: str | int, b: str | int) -> str:
        if isinstance(a, int):
            if op in COMMUTATIVE and not isinstance(b, int):
                a, b = b, a
            else:
                a = self.reg(a)
        return self.emit(op, d, a, b)

    def const(self, x: int) -> str:
        if x & M32 == 0:
            return RZ
        return self.emit("ADD", self.tmp(), RZ, x)

    def reg(self, x: str | int) -> str:
        return self.const(x) if isinstance(x, int) else x

    def mov(self, d: str, x: str | int) -> None:
        if isinstance(x, int):
            self.emit("ADD", d, RZ, x)
        else:
            self.emit("ADD", d, x, 0)

    def label(self, name: str) -> None:
        self.out.append(V("LABEL", t=name, line=self.line))

    def jmp(self, target: str) -> None:
        self.out.append(V("JMP", t=target, line=self.line))

    def br(self, cond: str, t: str, f: str) -> None:
        self.out.append(V("BR", a=cond, t=t, f=f, line=self.line))

    def new_label(self) -> str:
        self.n_tmp += 1
        return f"$q{self.n_tmp}"

    # ---- operands -----------------------------------------------------------------------
    def name(self, reg: str) -> str:
        return reg + self.scope.prefix

    def dst(self, o) -> str:
        if isinstance(o, Reg):
            return self.name(o.name)
        if isinstance(o, Sym) and o.name == "_":
            return RZ
        raise self.err(f"destination {o} is not a register")

    def src(self, o) -> str | int:
        """A register name or an integer constant."""
        if isinstance(o, Reg):
            return self.name(o.name)
        if isinstance(o, Imm):
            return o.value & M32
        if isinstance(o, SReg):
            if o.name in CONST_SREGS:
                return CONST_SREGS[o.name]
            key = o.name.lstrip("%")
            if key not in SPECIAL:
                raise self.err(f"special register {o.name} is not available on this machine")
            return self.emit("S2R", self.tmp(), b=SPECIAL[key])
        if isinstance(o, Sym):
            return self.symbol_address(o.name)
        if isinstance(o, FloatImm):
            raise self.err("floating point is not supported")
        raise self.err(f"operand {o} is not supported here")

    def rsrc(self, o) -> str:
        return self.reg(self.src(o))

    def symbol_address(self, name: str) -> str | int:
        lay = self.layout
        if name in lay.symbols:
            return lay.symbols[name]
        if name in lay.local_depot:
            return self.local_address(lay.local_depot[name])
        if name in lay.dynamic_shared:      # its base address is set by the launch, like a parameter
            return self.emit("ADD", self.tmp(), RZ, 0, param=DYNAMIC_SHARED)
        raise self.err(f"unknown symbol {name}")

    def local_address(self, offset: int) -> str:
        """Per-thread frame at the top of memory: MEM - (tid.lin + 1) * frame + offset."""
        t = self.emit("S2R", self.tmp(), b=SPECIAL["tid.lin"])
        self.emit("MUL", t, t, 0, frame=("neg",))
        return self.emit("ADD", t, t, 0, frame=("top", offset))

    def ext(self, x: str | int, kind: str, w: int) -> str | int:
        """Sign/zero-extend the low w bits (w < 32); identity for 32/64-bit and predicates."""
        if w >= 32 or kind == "p":
            return x
        if isinstance(x, int):
            x &= (1 << w) - 1
            return x - (1 << w) & M32 if kind == "s" and x >> (w - 1) else x
        if kind == "s":
            t = self.emit("SHL", self.tmp(), x, 32 - w)
            return self.emit("SRA", t, t, 32 - w)
        return self.emit("AND", self.tmp(), x, (1 << w) - 1)

    def address(self, m) -> tuple[str, int]:
        """(base register, byte offset) of a memory operand."""
        if not isinstance(m, Mem):
            raise self.err("expected a memory operand")
        if m.base is None:
            return RZ, m.offset
        if isinstance(m.base, Reg):
            return self.name(m.base.name), m.offset
        a = self.symbol_address(m.base.name)
        if isinstance(a, int):
            return RZ, a + m.offset
        return a, m.offset

    # ---- driver -------------------------------------------------------------------------
    def lower_kernel(self) -> list[V]:
        self.body(Scope(self.kernel, ""))
        for v in self.out:
            if set(v.uses()) & self.shfl_preds:
                raise LoweringError(f"the predicate result of a shuffle is not supported (PTX line {v.line})")
        return self.out

    def body(self, scope: Scope) -> None:
        outer = self.scope
        self.scope = scope
        for item in scope.fn.body:
            if isinstance(item, Label):
                self.label(item.name + scope.prefix)
                continue
            self.ins, self.line = item, item.line
            self.instr(item)
        self.scope = outer

    def instr(self, ins: Instr) -> None:
        if any(m in FLOAT_TYPES for m in ins.mods) or any(isinstance(o, FloatImm) for o in ins.operands):
            raise self.err("floating point is not supported")
        if ins.pred is None or ins.opcode in ("bra", "ret", "exit"):
            self.dispatch(ins)
            return
        p = self.name(ins.pred[0])
        start = len(self.out)
        self.dispatch(ins)
        body = self.out[start:]
        dests = {d for v in body for d in v.defs()}
        d = self.dst(ins.operands[0]) if ins.operands and isinstance(ins.operands[0], Reg) else None
        targets = dests - {v.d for v in body if v.d.startswith("$t")}
        if d in dests and targets <= {d, hi(d)} and all(v.op in ALU_OPS for v in body):
            # guarded ALU op: compute into temporaries, then select
            for x in sorted(targets):
                t = self.tmp()
                written = False
                for v in body:
                    if written:
                        v.a, v.b, v.c = (t if r == x else r for r in (v.a, v.b, v.c))
                    if v.d == x:
                        v.d, written = t, True
                if ins.pred[1]:
                    self.emit("SEL", x, p, x, c=t)
                else:
                    self.emit("SEL", x, p, t, c=x)
            return
        # anything else: branch around it
        del self.out[start:]
        do, skip = self.new_label(), self.new_label()
        self.br(p, skip, do) if ins.pred[1] else self.br(p, do, skip)
        self.label(do)
        self.dispatch(ins)
        self.jmp(skip)
        self.label(skip)

    def dispatch(self, ins: Instr) -> None:
        if ins.opcode in NOPS:
            return
        if ins.opcode in WIDE and instr_width(ins) == 64:
            if WIDE[ins.opcode] is None:
                raise self.err(f"64-bit {ins.opcode} is not supported")
            handler = getattr(self, WIDE[ins.opcode])
        else:
            handler = getattr(self, "op_" + ins.opcode, None)
        if handler is None:
            raise self.err(f"`{ins.opcode}` is not supported by the machine")
        try:
            handler(ins)
        except (IndexError, AttributeError, TypeError, KeyError, ValueError) as e:
            # compiler output always has the operands a handler reads; hand-edited PTX may not (too few
            # operands, a number where a register or label belongs)
            raise self.err(f"its operands are not what `{ins.opcode}` takes ({type(e).__name__}: {e})") from None

    # ---- control ------------------------------------------------------------------------
    def op_bra(self, ins: Instr) -> None:
        target = ins.operands[0].name + self.scope.prefix
        if ins.pred is None:
            self.jmp(target)
            return
        p, cont = self.name(ins.pred[0]), self.new_label()
        self.br(p, cont, target) if ins.pred[1] else self.br(p, target, cont)
        self.label(cont)

    def op_brx(self, ins: Instr) -> None:
        idx = self.rsrc(ins.operands[0])
        targets = self.scope.fn.branch_targets.get(ins.operands[1].name)
        if not targets:
            raise self.err("jump table not found")
        for i, t in enumerate(targets[:-1]):
            c = self.emit("SEQ", self.tmp(), idx, i)
            nxt = self.new_label()
            self.br(c, t + self.scope.prefix, nxt)
            self.label(nxt)
        self.jmp(targets[-1] + self.scope.prefix)

    def op_ret(self, ins: Instr) -> None:
        target = self.scope.ret_label
        if ins.pred is not None:
            p, cont, go = self.name(ins.pred[0]), self.new_label(), self.new_label()
            self.br(p, cont, go) if ins.pred[1] else self.br(p, go, cont)
            self.label(go)
        if target is None:
            self.out.append(V("EXIT", line=self.line))
        else:
            self.jmp(target)
        if ins.pred is not None:
            self.label(cont)

    def op_exit(self, ins: Instr) -> None:
        saved = self.scope.ret_label
        self.scope.ret_label = None
        self.op_ret(ins)
        self.scope.ret_label = saved

    def op_bar(self, ins: Instr) -> None:
        if "warp" in ins.mods:
            return          # __syncwarp: lanes of a warp already run in lockstep when converged
        if "red" in ins.mods:
            self.bar_red(ins)
            return
        if ins.operands and not (isinstance(ins.operands[0], Imm) and ins.operands[0].value == 0) \
                or len(ins.operands) > 1:
            raise self.err("only barrier 0 with all threads (__syncthreads) is supported")
        if "arrive" in ins.mods:
            raise self.err("barrier arrive forms are not supported")
        self.out.append(V("BAR", line=self.line))

    op_barrier = op_bar

    def bar_red(self, ins: Instr) -> None:
        """__syncthreads_count/and/or: two CTA counters (threads voting true, threads taking part),
        read before and after a round of atomic adds between barriers; the result is the difference,
        so the counters never need resetting."""
        mode = next((m for m in ins.mods if m in ("popc", "and", "or")), None)
        if mode is None or len(ins.operands) != 3 or ins.operands[1] != Imm(0):
            raise self.err("only bar.red.{popc,and,or} on barrier 0 with all threads is supported")
        lay = self.layout
        if "$bar.red" not in lay.symbols:
            lay.symbols["$bar.red"] = lay.static_bytes
            lay.entries.append(("shared", "__syncthreads_count/and/or counters", lay.static_bytes, 8))
            lay.static_bytes += 8
        at = lay.symbols["$bar.red"]
        d, p = self.dst(ins.operands[0]), self.rsrc(ins.operands[2])
        before = [self.emit("LD", self.tmp(), RZ, at + 4 * k) for k in (0, 1)]
        self.out.append(V("BAR", line=self.line))
        self.out.append(V("ATOM.ADD", RZ, RZ, p, imm=at, line=self.line))
        self.out.append(V("ATOM.ADD", RZ, RZ, self.const(1), imm=at + 4, line=self.line))
        self.out.append(V("BAR", line=self.line))
        votes, members = (self.emit("SUB", self.tmp(), self.emit("LD", self.tmp(), RZ, at + 4 * k), before[k])
                          for k in (0, 1))
        if mode == "popc":
            self.mov(d, votes)
        elif mode == "or":
            self.emit("SNE", d, votes, 0)
        else:
            self.emit("SEQ", d, votes, members)

    def op_call(self, ins: Instr) -> None:
        ret, fsym, args = ins.operands
        callee = self.module.functions.get(fsym.name)
        if callee is None:
            known = {"vprintf": "printf is not supported on this machine",
                     "__assertfail": "assert is not supported on this machine",
                     "malloc": "device malloc is not supported", "free": "device free is not supported"}
            raise self.err(known.get(fsym.name, f"function {fsym.name} has no body in this PTX"))
        depth = self.scope.prefix.count("@")
        if depth >= self.max_depth:
            raise self.err(f"calls nested deeper than {self.max_depth} (recursion?) cannot be inlined")
        lay = self.layout
        for decl in callee.decls:   # the callee's .local variables join the thread's frame
            if decl.space == "local" and decl.name not in lay.local_depot:
                lay.place_local(decl.name, decl.align, decl.elem_bytes * decl.count)
        self.n_calls += 1
        scope = Scope(callee, f"@{self.n_calls}{self.scope.prefix}")
        for p, a in zip(callee.params, args.items):
            scope.alias[p.name] = a.name + self.scope.prefix
        if ret is not None:
            for p, a in zip(callee.returns, ret.items):
                scope.alias[p.name] = a.name + self.scope.prefix
        scope.ret_label = self.new_label()
        self.body(scope)
        self.ins, self.line = ins, ins.line
        self.label(scope.ret_label)

    # ---- moves and conversions ----------------------------------------------------------
    def op_mov(self, ins: Instr) -> None:
        d, s = ins.operands[:2]
        kind, w = instr_type(ins)
        if isinstance(s, Vec):              # pack {lo, hi}
            if w == 64 and len(s.items) == 2:
                self.set2(self.dst2(d), self.src(s.items[0]), self.src(s.items[1]))
                return
            if w == 32 and len(s.items) == 2:
                lo = self.ext(self.src(s.items[0]), "u", 16)
                top = self.alu("SHL", self.tmp(), self.src(s.items[1]), 16)
                self.alu("OR", self.dst(d), lo, top)
                return
            raise self.err("vector packing of this shape is not supported")
        if isinstance(d, Vec):              # unpack
            if w == 64 and len(d.items) == 2:
                lo, h = self.src2(s)
                self.mov(self.dst(d.items[0]), lo)
                self.mov(self.dst(d.items[1]), h)
                return
            if w == 32 and len(d.items) == 2:
                x = self.src(s)
                self.mov(self.dst(d.items[0]), x)
                self.alu("SHR", self.dst(d.items[1]), x, 16)
                return
            raise self.err("vector unpacking of this shape is not supported")
        if w == 64:
            self.set2(self.dst2(d), *self.src2(s))
        else:
            self.mov(self.dst(d), self.src(s))

    def op_cvta(self, ins: Instr) -> None:
        if instr_type(ins)[1] == 64:
            self.set2(self.dst2(ins.operands[0]), *self.src2(ins.operands[1]))
        else:
            self.mov(self.dst(ins.operands[0]), self.src(ins.operands[1]))

    def op_cvt(self, ins: Instr) -> None:
        types = [m for m in ins.mods if m in INT_TYPES]
        if len(types) != 2 or "sat" in ins.mods:
            raise self.err("only integer width conversions without saturation are supported")
        (dk, dw), (sk, sw) = ((t[0], type_width(t)) for t in types)
        if dw == 64 and sw == 64:
            self.set2(self.dst2(ins.operands[0]), *self.src2(ins.operands[1]))
            return
        x = self.src(ins.operands[1])
        if dw > sw:
            x = self.ext(x, sk, sw)
        if dw < 64:
            self.mov(self.dst(ins.operands[0]), x)
            return
        if sk != "s":
            h = 0
        elif isinstance(x, int):
            h = M32 if x >> 31 else 0
        else:
            h = self.emit("SRA", self.tmp(), x, 31)
        self.set2(self.dst2(ins.operands[0]), x, h)

    # ---- arithmetic ---------------------------------------------------------------------
    def _binop(self, ins: Instr):
        kind, w = instr_type(ins)
        d, a, b = ins.operands[:3]
        return kind, w, self.dst(d), self.src(a), self.src(b)

    def _simple(self, ins: Instr, op: str) -> None:
        if "cc" in ins.mods or "sat" in ins.mods:
            raise self.err("carry/saturating arithmetic is not supported")
        kind, w, d, a, b = self._binop(ins)
        if op == "SUB" and isinstance(a, int):
            a = self.reg(a)
        self.alu(op, d, a, b)

    def op_add(self, ins):
        self._simple(ins, "ADD")

    def op_sub(self, ins):
        self._simple(ins, "SUB")

    def op_and(self, ins):
        self._simple(ins, "AND")

    def op_or(self, ins):
        self._simple(ins, "OR")

    def op_xor(self, ins):
        self._simple(ins, "XOR")

    def op_not(self, ins: Instr) -> None:
        kind, w = instr_type(ins)
        self.alu("XOR", self.dst(ins.operands[0]), self.src(ins.operands[1]), 1 if kind == "p" else M32)

    def op_cnot(self, ins: Instr) -> None:
        kind, w = instr_type(ins)
        self.alu("SEQ", self.dst(ins.operands[0]), self.ext(self.src(ins.operands[1]), "u", w), 0)

    def op_neg(self, ins: Instr) -> None:
        self.emit("SUB", self.dst(ins.operands[0]), RZ, self.src(ins.operands[1]))

    def op_abs(self, ins: Instr) -> None:
        kind, w = instr_type(ins)
        if w == 64:
            raise self.err("64-bit abs is not supported")
        x = self.reg(self.ext(self.src(ins.operands[1]), "s", w))
        s = self.emit("SRA", self.tmp(), x, 31)
        t = self.emit("XOR", self.tmp(), x, s)
        self.emit("SUB", self.dst(ins.operands[0]), t, s)

    def op_sad(self, ins: Instr) -> None:
        """d = c + |a - b| (__sad, __usad): max(a, b) - min(a, b) in the instruction's signedness."""
        kind, w, d, a, b = self._binop(ins)
        if w == 64:
            raise self.err("64-bit sad is not supported")
        a, b = self.reg(self.ext(a, kind, w)), self.reg(self.ext(b, kind, w))
        big = self.emit("MAX" if kind == "s" else "MAXU", self.tmp(), a, b)
        small = self.emit("MIN" if kind == "s" else "MINU", self.tmp(), a, b)
        t = self.emit("SUB", self.tmp(), big, small)
        self.alu("ADD", d, t, self.src(ins.operands[3]))

    def _minmax(self, ins: Instr, signed_op: str) -> None:
        kind, w, d, a, b = self._binop(ins)
        if w == 64:
            raise self.err("64-bit min/max is not supported")
        a, b = self.ext(a, kind, w), self.ext(b, kind, w)
        self.alu(signed_op if kind == "s" else signed_op + "U", d, a, b)

    def op_min(self, ins):
        self._minmax(ins, "MIN")

    def op_max(self, ins):
        self._minmax(ins, "MAX")

    def _mulhi(self, kind: str, w: int, d: str, a, b) -> None:
        if w == 64:
            raise self.err("64-bit mul.hi needs the upper 32 bits (64-bit values are narrowed)")
        if w < 32:
            p = self.alu("MUL", self.tmp(), self.ext(a, kind, w), self.ext(b, kind, w))
            self.emit("SRA" if kind == "s" else "SHR", d, p, w)
            return
        if kind != "s":
            self.alu("MULHU", d, a, b)
            return
        a, b = self.reg(a), self.reg(b)
        # signed high word = unsigned high word - (a < 0 ? b : 0) - (b < 0 ? a : 0)
        h = self.emit("MULHU", self.tmp(), a, b)
        t = self.emit("SRA", self.tmp(), a, 31)
        self.emit("AND", t, t, b)
        u = self.emit("SRA", self.tmp(), b, 31)
        self.emit("AND", u, u, a)
        self.emit("SUB", h, h, t)
        self.emit("SUB", d, h, u)

    def _mul(self, ins: Instr, d: str, a, b) -> None:
        kind, w = instr_type(ins)
        if "hi" in ins.mods:
            self._mulhi(kind, w, d, a, b)
        elif "wide" in ins.mods and w < 32:
            self.alu("MUL", d, self.ext(a, kind, w), self.ext(b, kind, w))
        elif "wide" in ins.mods:
            self.set2((d, hi(d)), *self.wide_mul(kind, a, b))
        else:
            self.alu("MUL", d, a, b)

    def op_mul(self, ins: Instr) -> None:
        kind, w, d, a, b = self._binop(ins)
        self._mul(ins, d, a, b)

    def op_mad(self, ins: Instr) -> None:
        if "cc" in ins.mods or "sat" in ins.mods:
            raise self.err("carry/saturating arithmetic is not supported")
        kind, w, d, a, b = self._binop(ins)
        if "wide" in ins.mods and w == 32:
            self.set2((d, hi(d)), *self.add64(self.wide_mul(kind, a, b), self.src2(ins.operands[3])))
            return
        c = self.src(ins.operands[3])
        t = self.tmp()
        self._mul(ins, t, a, b)
        self.alu("ADD", d, t, c)

    def op_div(self, ins: Instr) -> None:
        self._divrem(ins, want_rem=False)

    def op_rem(self, ins: Instr) -> None:
        self._divrem(ins, want_rem=True)

    def _divrem(self, ins: Instr, want_rem: bool) -> None:
        kind, w, d, a, b = self._binop(ins)
        if w == 64:
            raise self.err("64-bit division is not supported (64-bit values are narrowed)")
        signed = kind == "s"
        a, b = self.ext(a, kind, w), self.ext(b, kind, w)
        if isinstance(a, int) and isinstance(b, int) and b:
            sa = signed32(a) if signed else a
            sb = signed32(b) if signed else b
            q = abs(sa) // abs(sb) * (1 if (sa < 0) == (sb < 0) else -1)
            self.mov(d, (sa - q * sb) if want_rem else q)
            return
        a = self.reg(a)
        if isinstance(b, int) and b:
            q = (sdiv_const if signed else udiv_const)(self, a, b)
            if want_rem:
                t = self.emit("MUL", self.tmp(), q, self._imm(b))
                self.emit("SUB", d, a, t)
            else:
                self.mov(d, q)
            return
        self.mov(d, divmod_loop(self, a, self.reg(b), signed, want_rem))

    def _shift(self, ins: Instr, left: bool) -> None:
        kind, w, d, a, b = self._binop(ins)
        arith = not left and kind == "s"
        a = a if left else self.ext(a, kind, w)
        op = "SHL" if left else "SRA" if arith else "SHR"
        if isinstance(b, int):
            if b >= 32:
                if arith:
                    self.alu("SRA", d, a, 31)
                else:
                    self.mov(d, 0)
            else:
                self.alu(op, d, a, b)
            return
        if arith:           # PTX clamps the amount: >= 32 fills with the sign
            amt = self.emit("MINU", self.tmp(), b, 31)
            self.alu("SRA", d, a, amt)
            return
        t = self.alu(op, self.tmp(), a, b)
        ok = self.emit("SLTU", self.tmp(), b, 32)
        self.emit("SEL", d, ok, t, c=RZ)

    def op_shl(self, ins):
        self._shift(ins, True)

    def op_shr(self, ins):
        self._shift(ins, False)

    # ---- compares and selects -----------------------------------------------------------
    def compare(self, cmp: str, kind: str, w: int, a, b, d: str) -> str:
        if cmp not in CMP_OPS:
            raise self.err(f"compare `{cmp}` is not supported")
        op, swap, force_unsigned = CMP_OPS[cmp]
        signed = kind == "s" and not force_unsigned
        if op in ("SLT", "SLE") and not signed:
            op += "U"
        a, b = self.ext(a, "s" if signed else "u", w), self.ext(b, "s" if signed else "u", w)
        if swap:
            a, b = b, a
        if isinstance(a, int) and op not in COMMUTATIVE and isinstance(b, str):
            # k < b  ==  !(b <= k)   (and k <= b == !(b < k))
            flip = {"SLT": "SLE", "SLE": "SLT", "SLTU": "SLEU", "SLEU": "SLTU"}[op]
            t = self.alu(flip, self.tmp(), b, a)
            return self.emit("XOR", d, t, 1)
        return self.alu(op, d, a, b)

    def op_setp(self, ins: Instr) -> None:
        kind, w = instr_type(ins)
        cmp = ins.mods[0]
        combine = next((m for m in ins.mods if m in ("and", "or", "xor")), None)
        dst = ins.operands[0]
        p, q = (self.dst(dst.first), self.dst(dst.second)) if isinstance(dst, Pair) else (self.dst(dst), None)
        if w == 64:
            t = self.compare64(cmp, kind, self.src2(ins.operands[1]), self.src2(ins.operands[2]))
        else:
            t = self.compare(cmp, kind, w, self.src(ins.operands[1]), self.src(ins.operands[2]), self.tmp())
        if q is not None:
            nq = self.emit("XOR", self.tmp(), t, 1)
        if combine:
            c = self.rsrc(ins.operands[3])
            op = combine.upper()
            self.emit(op, p, t, c)
            if q is not None:
                self.emit(op, q, nq, c)
        else:
            self.mov(p, t)
            if q is not None:
                self.mov(q, nq)

    def op_set(self, ins: Instr) -> None:
        types = [m for m in ins.mods if m in INT_TYPES]
        if len(types) != 2:
            raise self.err("set needs a destination and source integer type")
        kind, w = types[1][0], type_width(types[1])
        t = self.compare(ins.mods[0], kind, w, self.src(ins.operands[1]), self.src(ins.operands[2]), self.tmp())
        self.emit("SUB", self.dst(ins.operands[0]), RZ, t)

    def op_selp(self, ins: Instr) -> None:
        d, a, b, p = ins.operands[:4]
        self.emit("SEL", self.dst(d), self.rsrc(p), self.src(a), c=self.rsrc(b))

    def op_slct(self, ins: Instr) -> None:
        d, a, b, c = ins.operands[:4]
        neg = self.emit("SLT", self.tmp(), self.rsrc(c), 0)
        self.emit("SEL", self.dst(d), neg, self.src(b), c=self.rsrc(a))

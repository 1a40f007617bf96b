"""Cost table of the library: MLP layers, units, heads and residual dims per op, measured by compiling it."""
from __future__ import annotations

from dataclasses import dataclass

from . import lib
from .compile import BaseShape, Plan, emit, mem_heads, plan
from .ir import Circuit, Gate, MemOp


@dataclass
class Cost:
    name: str
    mlp_layers: int   # depth in MLP sublayers
    units: int        # gate units (without clears or the shared constant unit)
    clear_units: int
    heads: int
    peak_dims: int    # residual dims live at once, inputs and outputs included


def _peak_dims(p: Plan) -> int:
    peak = 0
    for t in range(-1, 2 * p.n_layers):
        live = sum(len(p.dims[g]) for g in p.live_groups(t) if g in p.dims)
        peak = max(peak, live)
    return peak


def measure(name: str, c: Circuit, shape: BaseShape = BaseShape()) -> Cost:
    p = plan(c, shape)
    layers = emit(p)
    mlp_layers = len({p.layer_of[id(op)] for op in p.ops if isinstance(op, Gate)})
    units = sum(len(op.units) for op in p.ops if isinstance(op, Gate))
    heads = sum(mem_heads(op) for op in p.ops if isinstance(op, MemOp))
    clears = sum(lw.units for lw in layers) - units - len(layers)
    return Cost(name, mlp_layers, units, clears, heads, _peak_dims(p))


def _binary(name: str, build) -> Cost:
    c = Circuit(name)
    a, b = c.input_word("a"), c.input_word("b")
    out = build(c, a, b)
    for g in (out if isinstance(out, list) else [out]):
        c.output(g)
    return measure(name, c)


OPS = {
    "add": lambda c, a, b: lib.add(c, a, b),
    "sub": lambda c, a, b: lib.sub(c, a, b),
    "and": lambda c, a, b: lib.word_and(c, a, b),
    "or": lambda c, a, b: lib.word_or(c, a, b),
    "xor": lambda c, a, b: lib.word_xor(c, a, b),
    "not": lambda c, a, b: lib.word_not(a),
    "eq/ne": lambda c, a, b: lib.eq(c, a, b),
    "lt/le (u or s)": lambda c, a, b: lib.ult(c, a, b),
    "shl": lambda c, a, b: lib.shift(c, a, b, "shl"),
    "shr": lambda c, a, b: lib.shift(c, a, b, "shr"),
    "sra": lambda c, a, b: lib.shift(c, a, b, "sra"),
    "min/max": lambda c, a, b: lib.minmax(c, a, b, True, False),
    "mux (1-bit select)": lambda c, a, b: lib.mux_word(c, a[0], a, b),
    "mul.lo": lambda c, a, b: lib.mul_lo(c, a, b),
}


def memory_cost() -> Cost:
    c = Circuit("mem")
    addr = c.input("waddr", 17)
    val = c.input_word("v")
    ra = c.input("raddr", 16)
    mem = c.memory("ram", 16, (2,) * 32)
    for g in c.access(mem, addr, val, [ra])[0]:
        c.output(g)
    return measure("memory read+write (32-bit, 1 port)", c)


def alu_cost(shifter: str) -> Cost:
    c = Circuit("alu")
    a, b = c.input_word("a"), c.input_word("b")
    op = c.input("op", len(lib.ALU_OPS))
    for g in lib.alu(c, op, a, b, shifter=shifter):
        c.output(g)
    return measure(f"fused ALU: {len(lib.ALU_OPS)} ops + select ({shifter})", c)


def lanes_cost(lanes: int = 4, ops: tuple[str, ...] = lib.ALU_OPS, chain: int = 1) -> Cost:
    """A GPU-like datapath: per lane a 16-register file in a DeltaNet memory (2 read ports), then `chain`
    dependent fused-ALU ops (the first on the two register reads, each next on the previous result)."""
    c = Circuit("lanes")
    op, s1, s2 = c.input("op", len(ops)), c.input("src1", 16), c.input("src2", 16)
    wa, wv = c.input("waddr", 18), c.input_word("wval")
    for lane in range(lanes):
        r, other = c.access(c.memory(f"regs{lane}", 16, (2,) * 32), wa, wv, [s1, s2])
        for k in range(chain):
            r = lib.alu(c, op, r, other, ops, (), f"alu{lane}.{k}")
        for g in r:
            c.output(g)
    shifts = "" if {"shl", "shr", "sra"} & set(ops) else " (no shifts)"
    return measure(f"{lanes} lanes x {chain} dependent op(s){shifts}", c)


def cost_table(include_mul: bool = True) -> list[Cost]:
    rows = [_binary(k, f) for k, f in OPS.items() if include_mul or k != "mul.lo"]
    rows += [alu_cost("onehot"), alu_cost("barrel")]
    rows.append(memory_cost())
    return rows


def format_table(rows: list[Cost]) -> str:
    head = f"{'op':44} {'MLP layers':>10} {'units':>7} {'clears':>7} {'heads':>5} {'peak dims':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.name:44} {r.mlp_layers:>10} {r.units:>7} {r.clear_units:>7} {r.heads:>5} {r.peak_dims:>9}")
    return "\n".join(lines)

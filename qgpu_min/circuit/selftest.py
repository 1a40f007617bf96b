"""Self-test: the library's exactness through compiled weights (fp32 and bf16), static margins, text mute.

Each check returns (name, ok, detail). Used by `qgpu-min selftest` and by the tests.
"""
from __future__ import annotations

import numpy as np

from qgpu_min.model import kernels
from qgpu_min.model.bf16 import bf16_to_f32, f32_to_bf16

from . import lib
from .compile import BaseShape, LayerWeights, Plan, add_mute, check_exact_weights, emit, plan
from .ir import Circuit, CircuitError, Group, Word
from .margin import static_check, text_gate_check
from .run import circuit_model, embedding_rows, read_groups
from .sim import group_value, simulate, word_inputs, word_value
from .tokens import normalised_text_rows, text_gates

MASK = 0xFFFFFFFF
Check = tuple[str, bool, str]


def _s32(x: np.ndarray) -> np.ndarray:
    x = x & MASK
    return np.where(x >= 2**31, x - 2**32, x)


def _shift_ref(a: np.ndarray, b: np.ndarray, kind: str) -> np.ndarray:
    n = np.minimum(b, 31)
    if kind == "shl":
        return np.where(b < 32, (a << n) & MASK, 0)
    if kind == "shr":
        return np.where(b < 32, a >> n, 0)
    return np.where(b < 32, _s32(a) >> n, _s32(a) >> 31) & MASK


# name -> (builder(c, a, b) -> word or bit, reference(a, b) -> ints)
OPS = {
    "add": (lambda c, a, b: lib.add(c, a, b), lambda a, b: (a + b) & MASK),
    "sub": (lambda c, a, b: lib.sub(c, a, b), lambda a, b: (a - b) & MASK),
    "and": (lambda c, a, b: lib.word_and(c, a, b), lambda a, b: a & b),
    "or": (lambda c, a, b: lib.word_or(c, a, b), lambda a, b: a | b),
    "xor": (lambda c, a, b: lib.word_xor(c, a, b), lambda a, b: a ^ b),
    "not": (lambda c, a, b: lib.word_not(a), lambda a, b: ~a & MASK),
    "shl": (lambda c, a, b: lib.shift(c, a, b, "shl"), lambda a, b: _shift_ref(a, b, "shl")),
    "shr": (lambda c, a, b: lib.shift(c, a, b, "shr"), lambda a, b: _shift_ref(a, b, "shr")),
    "sra": (lambda c, a, b: lib.shift(c, a, b, "sra"), lambda a, b: _shift_ref(a, b, "sra")),
    "eq": (lambda c, a, b: lib.eq(c, a, b), lambda a, b: a == b),
    "ne": (lambda c, a, b: lib.ne(c, a, b), lambda a, b: a != b),
    "ult": (lambda c, a, b: lib.ult(c, a, b), lambda a, b: a < b),
    "ule": (lambda c, a, b: lib.ule(c, a, b), lambda a, b: a <= b),
    "slt": (lambda c, a, b: lib.slt(c, a, b), lambda a, b: _s32(a) < _s32(b)),
    "sle": (lambda c, a, b: lib.sle(c, a, b), lambda a, b: _s32(a) <= _s32(b)),
    "min": (lambda c, a, b: lib.minmax(c, a, b, True, False, "min"), lambda a, b: np.where(_s32(a) < _s32(b), a, b)),
    "max": (lambda c, a, b: lib.minmax(c, a, b, True, True, "max"), lambda a, b: np.where(_s32(a) > _s32(b), a, b)),
    "minu": (lambda c, a, b: lib.minmax(c, a, b, False, False, "minu"), lambda a, b: np.minimum(a, b)),
    "maxu": (lambda c, a, b: lib.minmax(c, a, b, False, True, "maxu"), lambda a, b: np.maximum(a, b)),
    "mux": (lambda c, a, b: lib.mux_word(c, b[0], a, b), lambda a, b: np.where(b & 1, a, b)),
    "mul": (lambda c, a, b: lib.mul_lo(c, a, b), lambda a, b: (a * b) & MASK),
}
GROUPS = (tuple(k for k in OPS if k != "mul"), ("mul",))


def operands(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n operand pairs: edge cases first (0, +-1, extremes, carries through every bit, every shift amount),
    then random words, random small values and random shift amounts."""
    edge = [0, 1, MASK, 2**31 - 1, 2**31, 0x80000001, 0x7FFFFFFE, 0x0F0F0F0F, 0xF0F0F0F0, 0xAAAAAAAA]
    pairs = [(x, y) for x in edge for y in edge]
    pairs += [((1 << k) - 1, 1) for k in range(33)] + [(MASK, (1 << k)) for k in range(32)]
    pairs += [(0xDEADBEEF, s) for s in range(40)] + [(0x80000000 | (1 << (k % 31)), k) for k in range(34)]
    rng = np.random.default_rng(seed)
    a, b = [np.array([p[i] & MASK for p in pairs], np.int64) for i in (0, 1)]
    m = max(0, n - len(a))
    ra = rng.integers(0, 2**32, m)
    rb = rng.integers(0, 2**32, m)
    small = rng.random(m) < 0.25
    rb[small] = rng.integers(0, 40, small.sum())
    neg = rng.random(m) < 0.1
    ra[neg] = rng.integers(-300, 300, neg.sum()) & MASK
    keep = max(n, len(a))  # every edge case, always
    return np.concatenate([a, ra])[:keep], np.concatenate([b, rb])[:keep]


def op_circuit(names: tuple[str, ...]) -> tuple[Circuit, Word, Word, dict]:
    c = Circuit("ops")
    a, b = c.input_word("a"), c.input_word("b")
    outs = {}
    for k in names:
        r = OPS[k][0](c, a, b)
        outs[k] = r
        for g in (r if isinstance(r, list) else [r]):
            c.output(g)
    return c, a, b, outs


def check_library(n: int, modes: tuple[str, ...] = ("fp32", "bf16"), seed: int = 0,
                  shape: BaseShape = BaseShape()) -> list[Check]:
    """Every op on n operand pairs: IR simulation and compiled weights (each mode) against NumPy."""
    results: list[Check] = []
    A, B = operands(n, seed)
    for names in GROUPS:
        c, a, b, outs = op_circuit(names)
        inp = {**word_inputs(a, A), **word_inputs(b, B)}
        vals, _ = simulate(c, inp)
        p = plan(c, shape)
        layers = emit(p)
        check_exact_weights(layers)
        margins = static_check(p)
        results.append((f"static margins ({', '.join(names) if len(names) < 3 else 'alu ops'})", margins.ok,
                        f"{margins.units} units, worst margin {margins.worst_margin:.1e}, "
                        f"max active pre-activation {margins.max_active}"
                        + ("" if margins.ok else "; " + margins.problems[0])))
        rows = embedding_rows(p, inp)
        hidden = {mode: _run_compiled(layers, shape, rows, mode) for mode in modes}
        for k in names:
            want = np.asarray(OPS[k][1](A, B)).astype(np.int64)
            out = outs[k]

            def ir_values(groups: list[Group]) -> np.ndarray:
                return np.stack([group_value(vals, g, len(A)) for g in groups], 1)
            got_ir = _pack(ir_values, out)
            ok = bool((got_ir == want).all())
            detail = f"{len(A)} cases" if ok else _first_diff("IR", A, B, got_ir, want)
            for mode in modes:
                try:
                    got = _compiled_value(p, hidden[mode], out)
                except CircuitError as e:
                    ok, detail = False, f"{mode}: {e}"
                    continue
                if not (got == want).all():
                    ok, detail = False, _first_diff(mode, A, B, got, want)
            results.append((f"{k} exact (IR, {'/'.join(modes)})", ok, detail))
    return results


def _pack(values_of, out) -> np.ndarray:
    """The integer a word (or one bit) holds per case; values_of(groups) gives element indices [N, groups]."""
    bits = values_of(out if isinstance(out, list) else [out])
    return (bits << np.arange(bits.shape[1])).sum(axis=1)


def _run_compiled(layers: list[LayerWeights], shape: BaseShape, rows: np.ndarray, mode: str) -> np.ndarray:
    """Final hidden rows [N, hidden] of the compiled layers run by the model runtime, one token per
    embedding row, all in one sequence."""
    model = circuit_model(layers, shape, rows, mode)
    return model.forward_hidden(model.new_state(), list(range(len(rows))))


def _compiled_value(p: Plan, hidden: np.ndarray, out) -> np.ndarray:
    """The integer a word (or bit) holds per row of compiled hidden states; raises unless exact."""
    return _pack(lambda groups: read_groups(p, hidden, groups), out)


def _first_diff(where: str, A, B, got, want) -> str:
    i = int(np.argmax(got != want))
    return f"{where}: a={int(A[i]):#x} b={int(B[i]):#x} got {int(got[i]):#x} want {int(want[i]):#x}"


def check_alu(n: int, modes: tuple[str, ...] = ("fp32", "bf16"), seed: int = 0,
              shape: BaseShape = BaseShape(), shifter: str = "onehot") -> list[Check]:
    """The fused ALU (lib.alu: 15 ops and a pass-through option in 2 MLP layers), a random op per case."""
    A, B = operands(n, seed)
    rng = np.random.default_rng(seed + 1)
    names = lib.ALU_OPS
    c = Circuit("alu")
    a, b, x = c.input_word("a"), c.input_word("b"), c.input_word("x")
    op = c.input("op", len(names) + 1)
    r = lib.alu(c, op, a, b, names, (x,), shifter=shifter)
    for g in r:
        c.output(g)
    OP = rng.integers(0, len(names) + 1, len(A))
    X = rng.integers(0, 2**32, len(A))
    want = X.copy()
    for k, name in enumerate(names):
        m = OP == k
        want[m] = np.asarray(OPS[{"sltu": "ult"}.get(name, name)][1](A[m], B[m])).astype(np.int64)
    inp = {**word_inputs(a, A), **word_inputs(b, B), **word_inputs(x, X), op: OP}
    vals, _ = simulate(c, inp)
    got = word_value(vals, r, len(A))
    ok = bool((got == want).all())
    detail = f"{len(A)} cases" if ok else _first_diff("IR", A, B, got, want)
    p = plan(c, shape)
    layers = emit(p)
    margins = static_check(p)
    rows = embedding_rows(p, inp)
    for mode in modes:
        h = _run_compiled(layers, shape, rows, mode)
        try:
            got = _compiled_value(p, h, r)
        except CircuitError as e:
            ok, detail = False, f"{mode}: {e}"
            continue
        if not (got == want).all():
            ok, detail = False, _first_diff(mode, A, B, got, want)
    what = f"fused ALU ({shifter} shifter)"
    return [(f"{what}, {len(names)} ops + select in {p.n_layers} layers (IR, {'/'.join(modes)})", ok, detail),
            (f"static margins ({what})", margins.ok, f"worst margin {margins.worst_margin:.1e}")]


def check_memory(tokens: int = 60, modes: tuple[str, ...] = ("fp32", "bf16"), seed: int = 0,
                 shape: BaseShape = BaseShape()) -> list[Check]:
    """A 16-word RAM with two read ports over a token sequence: compiled reads == a plain Python model of
    the memory (a dict of rows: write row a, none, or all rows, then read both ports), which the IR
    simulation must also give. The dict shares nothing with the circuit or its simulator."""
    rng = np.random.default_rng(seed)
    rows = 16
    c = Circuit("ram")
    wa, wv = c.input("waddr", rows + 2), c.input_word("wval")
    ra = [c.input("raddr0", rows), c.input("raddr1", rows)]
    mem = c.memory("ram", rows, (2,) * 32)
    ports = c.access(mem, wa, wv, ra)
    total = lib.add(c, ports[0], ports[1])
    for g in ports[0] + ports[1] + total:
        c.output(g)
    WA = np.concatenate([[rows + 1], rng.integers(0, rows + 1, tokens - 1)])
    RA = [rng.integers(0, rows, tokens), rng.integers(0, rows, tokens)]
    WV = rng.integers(0, 2**32, tokens)
    inp = {wa: WA, ra[0]: RA[0], ra[1]: RA[1], **word_inputs(wv, WV)}
    ram: dict[int, int] = {}
    want = []
    for t in range(tokens):       # element rows: no write; rows + 1: every row
        for r in (range(rows) if WA[t] == rows + 1 else [int(WA[t])] if WA[t] < rows else []):
            ram[r] = int(WV[t])
        a, b = ram[int(RA[0][t])], ram[int(RA[1][t])]
        want.append([a, b, (a + b) % 2**32])
    want = np.array(want)
    state, sim = None, []
    for t in range(tokens):
        vals, state = simulate(c, {g: np.asarray(v)[t:t + 1] for g, v in inp.items()}, state)
        sim.append([word_value(vals, w, 1)[0] for w in (ports[0], ports[1], total)])
    if not (np.array(sim) == want).all():
        return [("memory read/write sequence (IR simulation)", False,
                 f"token {int(np.argmax((np.array(sim) != want).any(1)))} differs from the plain model")]
    p = plan(c, shape)
    layers = emit(p)
    emb = embedding_rows(p, inp)
    out = []
    for mode in modes:
        h = _run_compiled(layers, shape, emb, mode)
        try:
            got = np.stack([_compiled_value(p, h, w) for w in (ports[0], ports[1], total)], 1)
            ok = bool((got == want).all())
            detail = f"{tokens} tokens" if ok else f"token {int(np.argmax((got != want).any(1)))} differs"
        except CircuitError as e:
            ok, detail = False, str(e)
        out.append((f"memory read/write sequence ({mode})", ok, detail))
    return out


def check_text_mute(n_text: int = 256, modes: tuple[str, ...] = ("fp32", "bf16"), seed: int = 0,
                    shape: BaseShape = BaseShape()) -> list[Check]:
    """Circuit layers (a RAM + adder) over random text embeddings: every text token's residual and the
    DeltaNet state come out unchanged, bit for bit, also after circuit tokens have written memory."""
    rng = np.random.default_rng(seed)
    c = Circuit("mute")
    wa, wv, ra = c.input("waddr", 18), c.input_word("wval"), c.input("raddr", 16)
    port = c.access(c.memory("ram", 16, (2,) * 32), wa, wv, [ra])[0]
    for g in lib.add(c, port, wv):
        c.output(g)
    p = plan(c, shape)
    layers = emit(p)
    scale = 2 / np.sqrt(shape.hidden)  # the synthetic checkpoints' embedding scale
    text_bits = f32_to_bf16((rng.standard_normal((n_text, shape.hidden)) * scale).astype(np.float32))
    text = bf16_to_f32(text_bits)
    normed = normalised_text_rows(text_bits, shape.eps)
    gates = text_gates(p, normed)
    add_mute(layers, gates, shape)
    worst = text_gate_check(layers, normed, shape.qk_rows)
    circ = embedding_rows(p, {wa: np.array([17, 3, 16]), ra: np.array([3, 3, 3]),
                              **word_inputs(wv, np.array([7, 12345, 0]))})
    emb = np.concatenate([text, circ])
    tau = min(g.tau for g in gates.values())
    results = [("text gate margin", worst <= -90, f"tau {tau:.3g}, highest text pre-activation {worst:.1f}")]
    for mode in modes:
        model = circuit_model(layers, shape, emb, mode)
        st = model.new_state()
        ids = list(range(n_text))
        # the final norm (neutral weight) of an unchanged residual is the norm of the embedding itself
        want = model.r(kernels.rmsnorm(text, np.zeros(shape.hidden, np.float32), shape.eps, plus_one=True))
        same_text = bool(np.array_equal(model.forward_hidden(st, ids), want))
        untouched = all(not st.recurrent[i].any() for i in st.recurrent)
        st2 = model.new_state()
        model.forward_hidden(st2, [n_text, n_text + 1])
        before = {i: st2.recurrent[i].copy() for i in st2.recurrent}
        model.forward_hidden(st2, ids[:64])
        kept = all(np.array_equal(before[i], st2.recurrent[i]) for i in before)
        ok = same_text and untouched and kept
        results.append((f"text mute ({mode})", ok, f"residual unchanged {same_text}, state untouched {untouched}, "
                        f"memory kept across text {kept}"))
    return results


def run_selftest(quick: bool = False, seed: int = 0) -> list[Check]:
    n = 200 if quick else 2000
    out = check_library(n, seed=seed)
    out += check_alu(n, seed=seed)
    out += check_alu(n, seed=seed, shifter="barrel")
    out += check_memory(24 if quick else 200, seed=seed)
    out += check_text_mute(128 if quick else 512, seed=seed)
    return out

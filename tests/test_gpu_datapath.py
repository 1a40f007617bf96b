"""The lane datapath (qgpu_min/gpu/datapath.py) against the interpreter's ALU table, in the IR simulator.

Independent oracle: the expected values come from qgpu_min.machine.interp.ALU (plain Python integer
arithmetic per opcode) applied to operands picked in NumPy from the same random source choices; no
circuit code computes them."""
from __future__ import annotations

import numpy as np
import pytest

from qgpu_min.circuit.ir import Circuit, CircuitError
from qgpu_min.circuit.sim import group_value, simulate, word_inputs, word_value
from qgpu_min.gpu.datapath import ALU_OF_OPCODE, CoreFormat, block_inputs, lane_datapath
from qgpu_min.machine.interp import ALU


def _build(fmt: CoreFormat, third: bool = True):
    c = Circuit("lane")
    f = block_inputs(c, fmt)
    regs = [c.input_word(f"reg{i}") for i in range(fmt.reads)]
    sps = [c.input_word(f"spv{i}") for i in range(fmt.specials)]
    ld = c.input_word("ld")
    out = lane_datapath(c, fmt, f, regs, sps, ld)
    # (the compiled check leaves out the third operand: every output is held to the end, over the residual)
    for w in out.results + [out.address, out.store_data] + ([out.third] if third else []):
        for g in w:
            c.output(g)
    c.output(out.cond)
    return c, f, regs, sps, ld, out


def _words(rng, n: int) -> np.ndarray:
    """Random words with many small and negative values (where carries and signs matter)."""
    kind = rng.integers(0, 4, n)
    big = rng.integers(0, 1 << 32, n, dtype=np.int64)
    small = rng.integers(-40, 40, n) & 0xFFFFFFFF
    edge = rng.choice(np.array([0, 1, 31, 32, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF], np.int64), n)
    return np.where(kind == 0, small, np.where(kind == 1, edge, big))


def _pick(names, sel, vals: dict) -> np.ndarray:
    out = np.zeros(len(sel), np.int64)
    for j, n in enumerate(names):
        out[sel == j] = vals[n][sel == j]
    return out


def _run(fmt: CoreFormat, n: int, seed: int) -> None:
    c, f, regs, sps, ld, out = _build(fmt)
    rng = np.random.default_rng(seed)
    inputs, vals = {}, {"zero": np.zeros(n, np.int64)}
    for i, w in enumerate(regs):
        vals[f"r{i}"] = _words(rng, n)
        inputs.update(word_inputs(w, vals[f"r{i}"]))
    spv = [rng.integers(0, 64, n) for _ in sps]
    for w, v in zip(sps, spv):
        inputs.update(word_inputs(w, v))
    vals["ld"] = _words(rng, n)
    inputs.update(word_inputs(ld, vals["ld"]))
    chosen = {}
    for k, s in enumerate(f.slots):
        opcodes, names = fmt.opcodes(k), fmt.alu_names(k)
        chosen[k] = rng.integers(0, len(opcodes), n)
        inputs[s.op] = np.array([names.index(ALU_OF_OPCODE[opcodes[i]]) for i in chosen[k]])
        for g in (s.a, s.b, s.c):
            inputs[g] = rng.integers(0, g.size, n)
        vals[f"imm{k}"] = _words(rng, n)
        inputs.update(word_inputs(s.imm, vals[f"imm{k}"]))
        inputs[s.special] = rng.integers(0, fmt.specials, n)
    for g in (f.mem_a, f.mem_data, f.cond, f.mem_c):
        inputs[g] = rng.integers(0, g.size, n)
    mimm = _words(rng, n)
    inputs.update(word_inputs(f.mem_imm, mimm))
    values, _ = simulate(c, inputs)

    for k, s in enumerate(f.slots):
        v = dict(vals, imm=vals[f"imm{k}"])
        if k < fmt.pre:
            v["sp"] = np.choose(inputs[s.special], spv)
        a, b, cc = (_pick(fmt.sources(k, o), inputs[g], v) for o, g in (("a", s.a), ("b", s.b), ("c", s.c)))
        ops = [fmt.opcodes(k)[i] for i in chosen[k]]
        want = np.array([ALU["ADD" if op == "S2R" else op](int(x), int(y), int(z))
                         for op, x, y, z in zip(ops, a, b, cc)], np.int64)
        got = word_value(values, out.results[k], n)
        bad = np.nonzero(got != want)[0]
        assert not len(bad), f"slot {k}: {ops[bad[0]]}({a[bad[0]]}, {b[bad[0]]}, {cc[bad[0]]}) gave {got[bad[0]]}, want {want[bad[0]]}"
        vals[f"s{k}"] = want
    base = _pick(fmt.sources("mem", "a"), inputs[f.mem_a], vals)
    assert (word_value(values, out.address, n) == (base + mimm) & 0xFFFFFFFF).all()
    data = _pick(fmt.sources("mem", "b"), inputs[f.mem_data], dict(vals, imm=mimm))
    assert (word_value(values, out.store_data, n) == data).all()
    third = _pick(fmt.sources("mem", "c"), inputs[f.mem_c], vals)
    assert (word_value(values, out.third, n) == third).all()
    cond = _pick(fmt.sources("cond", "c"), inputs[f.cond], vals) != 0
    assert (group_value(values, out.cond, n) == cond).all()


def test_every_alu_opcode_and_source_exact() -> None:
    _run(CoreFormat(), 600, 1)


def test_typed_narrow_format_exact() -> None:
    fmt = CoreFormat(pre=2, post=1, reads=3, slot_opcodes=(("ADD", "SUB", "SLT", "S2R"), ("AND", "SHL", "SEL"),
                                                            ("MINU", "SNE", "SLEU")))
    _run(fmt, 400, 2)


@pytest.mark.slow
def test_every_alu_opcode_and_source_exact_many() -> None:
    _run(CoreFormat(), 6000, 3)


def test_sources_and_errors() -> None:
    fmt = CoreFormat(pre=2, post=1, reads=2)
    assert fmt.sources(0, "a") == ("r0", "r1", "zero", "sp")
    assert fmt.sources(2, "b") == ("r0", "r1", "s0", "s1", "ld", "imm", "zero")
    assert fmt.sources("mem", "a") == ("r0", "r1", "s0", "s1", "zero")
    assert "S2R" not in fmt.opcodes(2)
    c = Circuit("x")
    f = block_inputs(c, fmt)
    with pytest.raises(CircuitError, match="register reads"):
        lane_datapath(c, fmt, f, [c.input_word("r")], [c.input_word(f"s{i}") for i in range(11)])


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_compiled_weights_match_the_simulator(mode: str) -> None:
    """The datapath compiled into Qwen3.5 layers and run by the model runtime gives, group for group,
    what the IR simulator gives (which the tests above tie to the interpreter's ALU)."""
    from qgpu_min.circuit.compile import BaseShape, emit, plan
    from qgpu_min.circuit.margin import static_check
    from qgpu_min.circuit.run import circuit_model, embedding_rows, read_groups

    fmt = CoreFormat()
    c, f, regs, sps, ld, out = _build(fmt, third=False)
    rng = np.random.default_rng(5)
    n = 32
    inputs = {}
    for w in regs + sps + [ld] + [s.imm for s in f.slots] + [f.mem_imm]:
        inputs.update(word_inputs(w, _words(rng, n)))
    for s in f.slots:
        for g in (s.op, s.a, s.b, s.c, s.special):
            inputs[g] = rng.integers(0, g.size, n)
    for g in (f.mem_a, f.mem_data, f.cond, f.mem_c):
        inputs[g] = rng.integers(0, g.size, n)
    values, _ = simulate(c, inputs)
    p = plan(c, BaseShape())
    assert static_check(p).ok
    model = circuit_model(emit(p), p.shape, embedding_rows(p, inputs), mode)
    got = read_groups(p, model.forward_hidden(model.new_state(), list(range(n))), c.outputs)
    want = np.stack([group_value(values, g, n) for g in c.outputs], axis=1)
    assert (got == want).all()

"""Circuit IR and exact integer simulator: library ops against NumPy, gate validation, memories, errors."""
import numpy as np
import pytest

from qgpu_min.circuit import lib
from qgpu_min.circuit.ir import MAX_ROWS, MAX_TAP, Circuit, CircuitError, Unit, bit_not, const_bit
from qgpu_min.circuit.selftest import GROUPS, OPS, op_circuit, operands
from qgpu_min.circuit.sim import group_value, simulate, word_inputs, word_value


def _check_ops(n: int, seed: int) -> None:
    A, B = operands(n, seed)
    for names in GROUPS:
        c, a, b, outs = op_circuit(names)
        vals, _ = simulate(c, {**word_inputs(a, A), **word_inputs(b, B)})
        for k in names:
            out = outs[k]
            got = (word_value(vals, out, len(A)) if isinstance(out, list) else group_value(vals, out, len(A)))
            want = np.asarray(OPS[k][1](A, B)).astype(np.int64)
            bad = np.nonzero(got != want)[0]
            assert not bad.size, f"{k}: a={A[bad[0]]:#x} b={B[bad[0]]:#x} got {got[bad[0]]:#x} want {want[bad[0]]:#x}"


def test_library_ops_exact_in_ir():
    _check_ops(400, seed=1)


@pytest.mark.slow
def test_library_ops_exact_in_ir_many():
    _check_ops(20000, seed=2)


def test_operands_cover_edges():
    A, B = operands(10, seed=0)
    assert len(A) > 200  # the edge cases are always included
    for x in (0, 0xFFFFFFFF, 2**31 - 1, 2**31):
        assert x in A and x in B
    assert all(((1 << k) - 1) in A for k in range(33))  # carries through every bit


def test_add_with_carry_bit():
    c = Circuit("adc")
    a, b = c.input_word("a"), c.input_word("b")
    cin = c.input("cin", 2)
    s = lib.add(c, a, b, cin)
    A = np.array([0xFFFFFFFF, 5, 0x7FFFFFFF, 0], np.int64)
    B = np.array([0, 6, 0, 0], np.int64)
    C = np.array([1, 1, 1, 0], np.int64)
    vals, _ = simulate(c, {**word_inputs(a, A), **word_inputs(b, B), cin: C})
    assert word_value(vals, s, 4).tolist() == [0, 12, 0x80000000, 0]


def test_views_cost_nothing_and_are_exact():
    c = Circuit("v")
    x = c.input("x", 2)
    y = bit_not(x)
    one = const_bit(1)
    z = lib.bit_from_ands(c, "z", [[(y, 1), (one, 1)]])
    vals, _ = simulate(c, {x: np.array([0, 1])})
    assert group_value(vals, y, 2).tolist() == [1, 0]
    assert group_value(vals, one, 2).tolist() == [1, 1]
    assert group_value(vals, z, 2).tolist() == [1, 0]
    assert len(c.ops) == 1  # only z is a gate


def test_onehot_mux_selects_each_option():
    c = Circuit("mux")
    words = [c.input_word(f"w{k}") for k in range(3)]
    sel = c.input("sel", 3)
    out = lib.mux_onehot(c, sel, words)
    rng = np.random.default_rng(0)
    W = rng.integers(0, 2**32, (3, 50))
    S = rng.integers(0, 3, 50)
    vals, _ = simulate(c, {sel: S, **{g: v for k in range(3) for g, v in word_inputs(words[k], W[k]).items()}})
    assert (word_value(vals, out, 50) == W[S, np.arange(50)]).all()
    with pytest.raises(CircuitError, match="selector of size"):
        lib.mux_onehot(c, sel, words[:2])


def test_gate_that_is_not_one_hot_is_rejected():
    c = Circuit("bad")
    x = c.input("x", 2)
    # writes +1 to element 1 without removing the default: two active elements when x = 1
    c.gate("bad", 2, 0, [Unit(((x, 1, 1),), 0, ((1, 1),))])
    with pytest.raises(CircuitError, match="not one-hot"):
        simulate(c, {x: np.array([0, 1])})


def test_memory_write_read_and_initialise():
    c = Circuit("m")
    wa, ra = c.input("wa", 4 + 2), c.input("ra", 4)
    v = [c.input(f"v{i}", 2) for i in range(3)]
    mem = c.memory("mem", 4, (2, 2, 2))
    out = c.access(mem, wa, v, [ra])[0]
    seq = [(5, 0, 3), (2, 7, 2), (4, 0, 2), (1, 1, 1), (4, 0, 3)]  # (write addr, value, read addr)
    state, got = None, []
    for w, val, r in seq:
        inp = {wa: np.array([w]), ra: np.array([r]), **{g: np.array([(val >> i) & 1]) for i, g in enumerate(v)}}
        vals, state = simulate(c, inp, state)
        got.append(sum(int(group_value(vals, g, 1)[0]) << i for i, g in enumerate(out)))
    # init all rows to 0, write 7 to row 2 (read own write), no write, write 1 to row 1, row 3 still 0
    assert got == [0, 7, 7, 1, 0]


def test_reading_an_unwritten_row_raises():
    c = Circuit("m")
    wa, ra = c.input("wa", 5), c.input("ra", 4)
    v = c.input("v", 2)
    c.access(c.memory("mem", 4, (2,)), wa, [v], [ra])
    with pytest.raises(CircuitError, match="never written"):
        simulate(c, {wa: np.array([4]), ra: np.array([1]), v: np.array([0])})


@pytest.mark.parametrize("bad", ["rows", "fields", "addr", "taps", "twice", "input"])
def test_malformed_circuits_raise(bad):
    c = Circuit("x")
    if bad == "rows":
        with pytest.raises(CircuitError, match="rows"):
            c.memory("m", MAX_ROWS + 1, (2,))
    elif bad == "fields":
        with pytest.raises(CircuitError, match="does not fit"):
            c.memory("m", 4, (2,) * 33)
    elif bad == "addr":
        m = c.memory("m", 4, (2,))
        with pytest.raises(CircuitError, match="write address"):
            c.access(m, c.input("a", 4), [c.input("v", 2)], [])
    elif bad == "taps":
        m = c.memory("m", 4, (2, 2))
        wa, v = c.input("a", 5), [c.input("v", 2)] * 2
        for taps in ([1], [0, MAX_TAP + 1], [-1, 0]):
            with pytest.raises(CircuitError, match="value_taps"):
                c.access(m, wa, v, [], value_taps=taps)
    elif bad == "twice":
        m = c.memory("m", 4, (2,))
        c.access(m, None, [], [c.input("r", 4)])
        with pytest.raises(CircuitError, match="twice"):
            c.access(m, None, [], [c.input("r2", 4)])
    else:
        x = c.input("x", 3)
        with pytest.raises(CircuitError, match="needs 1 values in 0..2"):
            simulate(c, {x: np.array([3])})

"""Decode views (a view element standing for several elements) and memory fields with alternative
sources (a channel block per source, exactly one present per write), in the IR simulator and through
compiled weights in fp32 and bf16.

Independent oracle: expected values are computed in NumPy / plain dicts from the raw token inputs
(integer bit arithmetic and a per-row dict of written words), not by the simulator."""
from __future__ import annotations

import numpy as np
import pytest

from qgpu_min.circuit import lib
from qgpu_min.circuit.compile import emit, plan
from qgpu_min.circuit.ir import Circuit, CircuitError, decode_view, onehot_bits, view
from qgpu_min.circuit.run import circuit_model, embedding_rows, read_groups
from qgpu_min.circuit.sim import group_value, simulate

MODES = ("fp32", "bf16")


def _compiled(c: Circuit, inp: dict, groups: list, mode: str) -> np.ndarray:
    p = plan(c)
    model = circuit_model(emit(p), p.shape, embedding_rows(p, inp), mode)
    n = len(next(iter(inp.values())))
    return read_groups(p, model.forward_hidden(model.new_state(), list(range(n))), groups)


def _simulated(c: Circuit, inp: dict, groups: list) -> np.ndarray:
    out, state = [], None
    for t in range(len(next(iter(inp.values())))):
        vals, state = simulate(c, {g: np.asarray(v)[t:t + 1] for g, v in inp.items()}, state)
        out.append([group_value(vals, g, 1)[0] for g in groups])
    return np.array(out)


def test_decode_views_in_gates_and_addresses():
    c = Circuit("views")
    x = c.input("x", 16)
    bits = onehot_bits(x, 4)
    parity = lib.bit_from_ands(c, "par", [[(bits[0], 1), (bits[1], 0)], [(bits[0], 0), (bits[1], 1)]])
    mem = c.memory("m", 3, (4,))
    waddr = decode_view(x, 5, lambda e: 4, "all")            # every token writes all rows (element rows+1)
    row = decode_view(x, 3, lambda e: e % 3, "x%3")
    out = c.access(mem, waddr, [decode_view(x, 4, lambda e: e // 4, "x//4")], [row])[0][0]
    for g in (parity, out):
        c.output(g)
    xs = np.arange(16)
    want = np.stack([(xs & 1) ^ ((xs >> 1) & 1), xs // 4], axis=1)
    assert (_simulated(c, {x: xs}, [parity, out]) == want).all()
    for mode in MODES:
        assert (_compiled(c, {x: xs}, [parity, out], mode) == want).all()


def test_view_must_stay_one_hot():
    c = Circuit("bad")
    x = c.input("x", 4)
    with pytest.raises(CircuitError, match="same element"):
        view(x, ((0, 1), (1, 2)))


def _two_path_ram():
    """A 4-row memory of 8-bit words with two paths: 'now' (this token's value) and 'late' (bits 0-3
    from two tokens back, bits 4-7 from one token back)."""
    c = Circuit("paths")
    waddr = c.input("waddr", 5)                 # rows 0..3, 4 = none
    now = [c.input(f"now{i}", 3) for i in range(8)]       # bit, or 2 = absent
    chunk = [c.input(f"ch{i}", 3) for i in range(4)]      # a packet chunk's bits, 2 = absent
    raddr = c.input("raddr", 4)
    mem = c.memory("ram", 4, (2,) * 8)
    alts = [(i, chunk[i], 2) for i in range(4)] + [(4 + i, chunk[i], 1) for i in range(4)]
    out = c.access(mem, waddr, now, [raddr], alternatives=alts)[0]
    for g in out:
        c.output(g)
    return c, waddr, now, chunk, raddr, out


def test_alternative_sources_exact_from_the_first_token():
    c, waddr, now, chunk, raddr, out = _two_path_ram()
    rng = np.random.default_rng(3)
    T = 40
    WA = np.full(T, 4)
    NOW = np.full(T, -1)            # word written through 'now', -1 = absent
    CH = np.full(T, -1)             # chunk carried by the token, -1 = absent
    RA = np.zeros(T, np.int64)
    ram: dict[int, int] = {}
    want = []
    packets = set(range(8, T, 4))      # write through 'late' at t; chunk tokens at t-2, t-1
    chunked = {t - k for t in packets for k in (1, 2)}
    for t in range(T):
        if t < 4:                       # initialise every row through 'now' (no history needed)
            WA[t], NOW[t] = t, int(rng.integers(0, 256))
        elif t in packets:
            WA[t] = int(rng.integers(0, 4))
        elif t - 1 not in chunked and t - 2 not in chunked and rng.random() < 0.5:
            WA[t], NOW[t] = int(rng.integers(0, 4)), int(rng.integers(0, 256))   # 'late' is absent here
        if t in chunked:
            CH[t] = int(rng.integers(0, 16))
    for t in range(T):
        if WA[t] < 4:
            ram[int(WA[t])] = int(NOW[t]) if NOW[t] >= 0 else int(CH[t - 2]) | int(CH[t - 1]) << 4
        RA[t] = int(rng.choice(sorted(ram)))
        want.append(ram[int(RA[t])])
    want = np.array(want)
    inp = {waddr: WA, raddr: RA}
    for i in range(8):
        inp[now[i]] = np.where(NOW >= 0, (NOW >> i) & 1, 2)
    for i in range(4):
        inp[chunk[i]] = np.where(CH >= 0, (CH >> i) & 1, 2)
    weights = 1 << np.arange(8)
    assert ((_simulated(c, inp, out) * weights).sum(axis=1) == want).all()
    for mode in MODES:
        assert ((_compiled(c, inp, out, mode) * weights).sum(axis=1) == want).all(), mode


def test_alternative_sources_must_be_exactly_one():
    c, waddr, now, chunk, raddr, out = _two_path_ram()
    step = {waddr: np.array([0]), raddr: np.array([0]), **{g: np.array([1]) for g in now},
            **{g: np.array([2]) for g in chunk}}
    _, state = simulate(c, step)
    _, state = simulate(c, {**step, **{g: np.array([1]) for g in chunk}}, state)
    both = {**step, waddr: np.array([1])}
    _, state = simulate(c, {**step, waddr: np.array([4])}, state)       # chunks 2 and 1 tokens back present
    with pytest.raises(CircuitError, match="2 of its sources present"):
        simulate(c, both, state)
    with pytest.raises(CircuitError, match="size field\\+1"):
        c2 = Circuit("x")
        m = c2.memory("m", 2, (2,))
        c2.access(m, c2.input("w", 3), [c2.input("v", 3)], [], alternatives=[(0, c2.input("u", 2), 1)])


def test_product_addresses_read_and_write_exactly():
    """A 2 x 4 x 4 = 32-row memory addressed by three one-hot parts (no group holds the product one-hot);
    'every' on the middle part writes its 4 rows at once (a power of 4, as an exact spread needs)."""
    from qgpu_min.circuit.ir import Product
    c = Circuit("prod")
    w, l, r = c.input("w", 2), c.input("l", 5), c.input("r", 4)     # l: 4 values + 'every'
    rw, rl, rr = c.input("rw", 2), c.input("rl", 4), c.input("rr", 4)
    v = c.input("v", 16)
    mem = c.memory("m", 32, (16,))
    out = c.access(mem, Product((w, l, r), (2, 4, 4), (None, 4, None)), [v], [Product((rw, rl, rr), (2, 4, 4))])[0][0]
    c.output(out)
    rng = np.random.default_rng(0)
    T = 30
    W, Lx, R, V = rng.integers(0, 2, T), rng.integers(0, 4, T), rng.integers(0, 4, T), rng.integers(0, 16, T)
    Lx[:8] = 4                                  # 'every' l: initialise (w, *, r) for all w, r
    W[:8], R[:8] = np.repeat([0, 1], 4), np.tile(np.arange(4), 2)
    ram, RW, RL, RR, want = {}, [], [], [], []
    for t in range(T):
        for lv in (range(4) if Lx[t] == 4 else [Lx[t]]):
            ram[(W[t], lv, R[t])] = V[t]
        k = list(ram)[rng.integers(0, len(ram))]
        RW.append(k[0]); RL.append(k[1]); RR.append(k[2]); want.append(ram[k])
    inp = {w: W, l: Lx, r: R, v: V, rw: np.array(RW), rl: np.array(RL), rr: np.array(RR)}
    assert (_simulated(c, inp, [out])[:, 0] == want).all()
    for mode in MODES:
        assert (_compiled(c, inp, [out], mode)[:, 0] == want).all(), mode

"""Exact integer simulator of the circuit IR, vectorised over a batch of independent cases.

Gates are evaluated unit by unit with integer ReLUs, exactly the arithmetic the compiled SwiGLU units
perform; every gate's result is checked to be one-hot on every case (a gate that is not is a bug in its
construction and raises). Memories keep per-case rows across tokens; reading a never-written row raises.
"""
from __future__ import annotations

import numpy as np

from .ir import CONST, Circuit, CircuitError, Gate, Group, MemOp

Values = dict  # id(root group) -> int64 [batch]


def group_value(values: Values, g: Group, batch: int) -> np.ndarray:
    """The element index of group/view g per case (-1 where the view has no active element)."""
    if g.root is CONST:
        base = np.zeros(batch, dtype=np.int64)
    else:
        base = values[id(g.root)]
    if g.base is None:
        return base
    out = np.full(batch, -1, dtype=np.int64)
    for v, p in enumerate(g.perm):
        if p is not None:
            out[base == p] = v
    return out


def new_state(circuit: Circuit, batch: int) -> dict:
    return {id(m): np.full((batch, m.rows, len(m.fields)), -1, dtype=np.int64) for m in circuit.memories}


def _eval_gate(values: Values, gate: Gate, batch: int) -> np.ndarray:
    acc = np.zeros((batch, gate.out.size), dtype=np.int64)
    acc[:, gate.default] = 1
    cache: dict[tuple[int, int], np.ndarray] = {}
    for u in gate.units:
        pre = np.full(batch, -u.theta, dtype=np.int64)
        for g, e, w in u.terms:
            key = (id(g), e)
            if key not in cache:
                cache[key] = (group_value(values, g, batch) == e).astype(np.int64)
            pre += w * cache[key]
        a = np.maximum(pre, 0)
        for e, c in u.out:
            acc[:, e] += c * a
    ok = (acc.sum(axis=1) == 1) & ((acc == 0) | (acc == 1)).all(axis=1)
    if not ok.all():
        bad = int(np.argmin(ok))
        raise CircuitError(f"gate {gate.out.name} is not one-hot on case {bad}: {acc[bad].tolist()}")
    return acc.argmax(axis=1)


def _eval_mem(values: Values, op: MemOp, state: dict, batch: int) -> None:
    rows = state[id(op.mem)]
    idx = np.arange(batch)
    if op.write_addr is not None:
        addr = group_value(values, op.write_addr, batch)
        w = addr < op.mem.rows
        vals = np.stack([group_value(values, g, batch) for g in op.write_value], axis=1)
        rows[idx[w], addr[w]] = vals[w]
        every = addr == op.mem.rows + 1
        rows[every] = vals[every][:, None, :]
    for port, a in enumerate(op.read_addrs):
        addr = group_value(values, a, batch)
        got = rows[idx, addr]
        if (got < 0).any():
            bad = int(np.argmax((got < 0).any(axis=1)))
            raise CircuitError(f"memory {op.mem.name}: case {bad} reads row {int(addr[bad])}, never written")
        for i, g in enumerate(op.outputs[port]):
            values[id(g)] = got[:, i]


def simulate(circuit: Circuit, inputs: dict, state: dict | None = None) -> tuple[Values, dict]:
    """Run one token per case. inputs: {input group: int array [batch] of element indices}.

    Returns (values by id(group), memory state); pass the state back for the next token."""
    missing = [g.name for g in circuit.inputs if g not in inputs]
    if missing:
        raise CircuitError(f"simulate: no value for inputs {missing[:5]}")
    batch = len(np.asarray(inputs[circuit.inputs[0]]))
    values: Values = {}
    for g in circuit.inputs:
        v = np.asarray(inputs[g], dtype=np.int64)
        if v.shape != (batch,) or (v < 0).any() or (v >= g.size).any():
            raise CircuitError(f"simulate: input {g.name} needs {batch} values in 0..{g.size - 1}")
        values[id(g)] = v
    state = new_state(circuit, batch) if state is None else state
    for op in circuit.ops:
        if isinstance(op, Gate):
            values[id(op.out)] = _eval_gate(values, op, batch)
        else:
            _eval_mem(values, op, state, batch)
    return values, state


# Words <-> integers -------------------------------------------------------------------------------------


def word_inputs(word: list[Group], x: np.ndarray) -> dict:
    x = np.asarray(x, dtype=np.int64) & 0xFFFFFFFF
    return {g: (x >> i) & 1 for i, g in enumerate(word)}


def word_value(values: Values, word: list[Group], batch: int) -> np.ndarray:
    out = np.zeros(batch, dtype=np.int64)
    for i, g in enumerate(word):
        b = group_value(values, g, batch)
        if (b < 0).any() or (b > 1).any():
            raise CircuitError(f"word bit {g.name} is not a bit")
        out |= b << i
    return out

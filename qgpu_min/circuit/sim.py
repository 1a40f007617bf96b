"""Exact integer simulator of the circuit IR, vectorised over a batch of independent cases.

Gates are evaluated unit by unit with integer ReLUs, exactly the arithmetic the compiled SwiGLU units
perform; every gate's result is checked to be one-hot on every case (a gate that is not is a bug in its
construction and raises). Memories keep per-case rows across tokens; reading a never-written row raises.
A reset empties a memory. An all-rows write is what the model does exactly only on empty rows, or on
rows that all still hold one earlier all-rows write (equal rows: the delta rule then replaces them):
anything else raises.
Write fields taken from earlier tokens (MemOp.value_taps) read a per-case history of the last MAX_TAP
tokens' values of their groups; writing one that reaches back before the sequence start raises (the
model's conv state is zeros there, so the row would be corrupt).
"""
from __future__ import annotations

import numpy as np

from .ir import Product, CONST, MAX_TAP, Circuit, CircuitError, Gate, Group, MemOp

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
    for v in range(g.size):
        ps = g.phys_set(v)
        if len(ps) == 1:
            out[base == ps[0]] = v
        elif ps:
            out[np.isin(base, ps)] = v
    return out


SEEN, HISTORY, EVERY = "tokens seen", "history", "all-rows tags"  # state keys besides id(memory) -> rows


def _delayed_roots(circuit: Circuit) -> dict[int, Group]:
    """Root groups some write field takes from an earlier token (the constant group needs no history)."""
    roots: dict[int, Group] = {}
    for op in circuit.ops:
        if isinstance(op, MemOp) and op.write_addr is not None:
            for g, d in op.all_sources():
                if d and g.root is not CONST:
                    roots.setdefault(id(g.root), g.root)
    return roots


def new_state(circuit: Circuit, batch: int) -> dict:
    """Memory rows (-1: never written), the tokens seen so far, and per delayed root group its values on
    the last MAX_TAP tokens, newest first (-1: before the sequence start)."""
    state: dict = {id(m): np.full((batch, m.rows, len(m.fields)), -1, dtype=np.int64) for m in circuit.memories}
    state[SEEN] = 0
    state[EVERY] = {id(m): np.zeros((batch, m.rows), dtype=np.int64) for m in circuit.memories}
    state[HISTORY] = {gid: np.full((batch, MAX_TAP), -1, dtype=np.int64) for gid in _delayed_roots(circuit)}
    return state


def _push_history(values: Values, state: dict) -> None:
    """After a token: its values become the newest history entry."""
    for gid, h in state[HISTORY].items():
        h[:, 1:] = h[:, :-1].copy()
        h[:, 0] = values[gid]
    state[SEEN] += 1


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


def _write_fields(values: Values, op: MemOp, state: dict, writes: np.ndarray, batch: int) -> np.ndarray:
    """The value written per case and field [batch, fields]; a field with tap d is its group's value d
    tokens earlier. A field with alternative sources takes the one that is present (not its 'absent'
    element; a tap before the sequence start is absent too): exactly one must be, in every case that writes."""
    cols = []
    for i, size in enumerate(op.mem.fields):
        col = np.full(batch, -1, dtype=np.int64)
        present = np.zeros(batch, dtype=np.int64)
        for g, d in op.field_sources(i):
            if d == 0:
                v = group_value(values, g, batch)
            else:
                past = {} if g.root is CONST else {id(g.root): state[HISTORY][id(g.root)][:, d - 1]}
                v = group_value(past, g, batch) if state[SEEN] >= d or g.root is CONST else np.full(batch, -1)
            here = (v >= 0) & (v < size)
            col[here] = v[here]
            present += here
        bad = writes & (present != 1)
        if bad.any():
            k = int(np.argmax(bad))
            early = [d for _, d in op.field_sources(i) if d > state[SEEN]]
            if early and not present[k]:
                raise CircuitError(f"memory {op.mem.name}: case {k} writes field {i} from {early[0]} tokens back, "
                                   f"before the sequence start (only {state[SEEN]} tokens seen)")
            raise CircuitError(f"memory {op.mem.name}: case {k} writes field {i} with {int(present[k])} of its "
                               f"sources present (needs exactly 1)")
        cols.append(col)
    return np.stack(cols, axis=1)


def _product_rows(values: Values, a: Product, batch: int) -> list[list[int]]:
    """Per case, the rows a product address names (empty: none; several: 'every' elements)."""
    choices = []
    for g, r, ev in zip(a.parts, a.radix, a.every):
        v = group_value(values, g, batch)
        choices.append([list(range(r)) if ev is not None and x == ev else [int(x)] if 0 <= x < r else []
                        for x in v])
    out = []
    for k in range(batch):
        rows = [0]
        for part, r in zip(choices, a.radix):
            rows = [row * r + d for row in rows for d in part[k]]
        out.append(rows)
    return out


def _all_rows_tag(rows: list[int]) -> int:
    """A nonzero tag naming the row set of an all-rows write."""
    return (hash(tuple(rows)) & ((1 << 62) - 1)) | 1


def _write(op: MemOp, state: dict, k: int, rows: list[int], vals: np.ndarray) -> None:
    """Case k writes vals into `rows` (several: an all-rows write, checked as the model's algebra needs)."""
    mem, tags = state[id(op.mem)], state[EVERY][id(op.mem)]
    tag = _all_rows_tag(rows) if len(rows) > 1 else 0
    if tag:
        empty = bool((mem[k, rows] < 0).all())
        uniform = bool((tags[k, rows] == tag).all())
        if not (empty or uniform):
            raise CircuitError(f"memory {op.mem.name}: case {k} writes {len(rows)} rows at once over rows that are "
                               f"not empty (reset the memory first)")
    mem[k, rows] = vals
    tags[k, rows] = tag


def _eval_mem(values: Values, op: MemOp, state: dict, batch: int) -> None:
    rows = state[id(op.mem)]
    idx = np.arange(batch)
    if op.reset is not None:
        wipe = group_value(values, op.reset, batch) == 1
        rows[wipe] = -1
        state[EVERY][id(op.mem)][wipe] = 0
    if isinstance(op.write_addr, Product):
        targets = _product_rows(values, op.write_addr, batch)
        writes = np.array([bool(t) for t in targets])
        vals = _write_fields(values, op, state, writes, batch)
        for k, t in enumerate(targets):
            if t:
                _write(op, state, k, t, vals[k])
    elif op.write_addr is not None:
        addr = group_value(values, op.write_addr, batch)
        w = addr < op.mem.rows
        every = addr == op.mem.rows + 1
        vals = _write_fields(values, op, state, w | every, batch)
        rows[idx[w], addr[w]] = vals[w]
        state[EVERY][id(op.mem)][idx[w], addr[w]] = 0
        for k in np.nonzero(every)[0]:
            _write(op, state, int(k), list(range(op.mem.rows)), vals[k])
    for port, a in enumerate(op.read_addrs):
        if isinstance(a, Product):
            hits = _product_rows(values, a, batch)
            if any(len(h) != 1 for h in hits):
                bad = next(k for k, h in enumerate(hits) if len(h) != 1)
                raise CircuitError(f"memory {op.mem.name}: case {bad} reads {len(hits[bad])} rows through {a.name}")
            addr = np.array([h[0] for h in hits], dtype=np.int64)
        else:
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
    _push_history(values, state)
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

"""An exact argmax over a structured LM head without computing every logit (the step engine's head).

A circuit model's tied head rows are built from fields: a token is a tuple (kind, field, field, ...), and its
row is a fixed row for its kind plus, for each field, columns that depend on that field alone (one-hot
elements, or a bit of a binary field). Then a token's logit x . E[t] is, in exact arithmetic, its kind's base
plus one term per factor (a field, or one bit of it): the largest logit of a kind is the sum of each factor's
largest term, found in a few thousand multiply-adds instead of the head's 1.3 million.

The argmax is still the whole head's, bit for bit (csrc/circuit.c, qgpu_head_bound_argmax): the candidate
(each factor at its best value, in the kind whose bound is largest) gets its logit from the chunked product's
own code, so its bits are the head's; it is taken only when every other token's logit is provably smaller:
its kind's bound (or, for the candidate's own kind, the bound less the smallest gap between a factor's best
and second-best term) plus a bound on the fp32 rounding of the chunked sum stays below the candidate's logit
(in bf16 mode below its rounded logit less one bf16 step, so no other token can round to a tie). Otherwise,
and for a non-finite hidden, the whole set's logits are computed and the first maximum taken. Kinds whose
rows do not decompose this way are multiplied exactly every time.

`factor_tables(head, tokens)` derives the tables from the head's rows and the token tuples alone, and checks
that they rebuild every decomposed row exactly.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .bf16 import bf16_to_f32


@dataclass
class Factor:
    kind: int                 # index into HeadTables.kinds
    field: int                # tuple position of the field (1, 2, ...)
    bit: int                  # -1: the field's whole value; else this bit of it
    values: np.ndarray        # int64 [n]: the values it takes in the kind
    cols: np.ndarray          # int64 [m]: positions (in HeadTables.cols) of the columns that depend on it
    weights: np.ndarray       # f64 [n, m]: those columns' weights for each value


@dataclass
class HeadTables:
    cols: np.ndarray                      # int64 [U]: the head's columns that hold a nonzero
    kinds: list[str]
    base: np.ndarray                      # f64 [K, U]: each kind's columns that do not vary within it
    absmax: np.ndarray                    # f64 [K, U]: the largest |weight| of each column in each kind
    terms: np.ndarray                     # int64 [K]: the most nonzero weights a row of the kind has
    factors: list[Factor]
    radix: list[list[int]]                # per kind: each field's domain size (fields 1..)
    lookup: list[np.ndarray]              # per kind: token id at the mixed-radix index of its fields (-1: none)
    exact: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))   # ids of kinds not decomposed
    token_kinds: list[str] = field(default_factory=list)                      # each token's kind


def tables_arrays(t: HeadTables) -> dict[str, np.ndarray]:
    """The tables as plain arrays (a cache stores them; tables_from_arrays gives them back)."""
    out = {"cols": t.cols, "kinds": np.array(t.kinds), "base": t.base, "absmax": t.absmax, "terms": t.terms,
           "exact": np.asarray(t.exact, np.int64), "token_kinds": np.array(t.token_kinds),
           "f.meta": np.array([[f.kind, f.field, f.bit] for f in t.factors], np.int64).reshape(-1, 3),
           "radix.n": np.array([len(r) for r in t.radix], np.int64),
           "radix": np.array([v for r in t.radix for v in r], np.int64)}
    for i, f in enumerate(t.factors):
        out[f"f{i}.values"], out[f"f{i}.cols"], out[f"f{i}.weights"] = f.values, f.cols, f.weights
    for i, lk in enumerate(t.lookup):
        out[f"lookup{i}"] = lk
    return out


def tables_from_arrays(a: dict[str, np.ndarray]) -> HeadTables:
    """The HeadTables tables_arrays wrote (KeyError / ValueError when the arrays are not such tables)."""
    kinds = [str(k) for k in a["kinds"]]
    factors = [Factor(int(k), int(fl), int(b), a[f"f{i}.values"], a[f"f{i}.cols"], a[f"f{i}.weights"])
               for i, (k, fl, b) in enumerate(a["f.meta"])]
    ends = np.cumsum(a["radix.n"])
    radix = [a["radix"][e - n:e].tolist() for n, e in zip(a["radix.n"], ends)]
    if len(radix) != len(kinds) or a["base"].shape != (len(kinds), a["cols"].size):
        raise ValueError("the head tables' arrays do not agree with each other")
    return HeadTables(a["cols"], kinds, a["base"], a["absmax"], a["terms"], factors, radix,
                      [a[f"lookup{i}"] for i in range(len(kinds))], a["exact"], [str(k) for k in a["token_kinds"]])


class _Keys:
    """Whether a column (values over a kind's rows) is a function of a key (same key, same value); each key's
    sort is done once."""

    def __init__(self) -> None:
        self._sorted: dict = {}

    def depends(self, col: np.ndarray, name: tuple, key: np.ndarray) -> bool:
        if name not in self._sorted:
            order = np.argsort(key, kind="stable")
            self._sorted[name] = (order, key[order][1:] == key[order][:-1])
        order, same = self._sorted[name]
        c = col[order]
        return bool(np.all(c[1:][same] == c[:-1][same]))


def _distinct_rows(sub: np.ndarray, rng: np.random.Generator) -> bool:
    """Whether no two rows are equal: two random projections of each row, compared as pairs (equal rows give
    equal pairs; unequal ones almost never do, and if they did the kind would only be multiplied exactly)."""
    h = sub @ rng.standard_normal((sub.shape[1], 2))
    return np.unique(h.view(np.complex128)).size == sub.shape[0]


def factor_tables(head_bits: np.ndarray, tokens: list[tuple]) -> HeadTables:
    """The tables of a head [V, d] (bf16 bits) whose row t belongs to tokens[t] (a tuple: kind, then int fields)."""
    used = np.flatnonzero((head_bits & np.uint16(0x7FFF)).any(axis=0))
    E = bf16_to_f32(np.ascontiguousarray(head_bits[:, used]))     # f32 holds bf16 values exactly
    names = [t[0] for t in tokens]
    kinds = list(dict.fromkeys(names))
    kind_of = np.array([kinds.index(k) for k in names]) if len(kinds) < 64 else \
        np.array([{k: i for i, k in enumerate(kinds)}[k] for k in names])
    K, U = len(kinds), used.size
    base, absmax, terms = np.zeros((K, U)), np.zeros((K, U)), np.zeros(K, np.int64)
    factors: list[Factor] = []
    radix: list[list[int]] = []
    lookup: list[np.ndarray] = []
    exact: list[int] = []
    rng = np.random.default_rng(0)
    for ki, kind in enumerate(kinds):
        keys = _Keys()
        rows = np.flatnonzero(kind_of == ki)
        fields = np.array([tokens[i][1:] for i in rows], np.int64).reshape(rows.size, -1)
        kcols = np.flatnonzero((E[rows] != 0).any(axis=0))     # the columns the kind uses: the others are 0
        sub = E[np.ix_(rows, kcols)]
        absmax[ki, kcols] = np.abs(sub).max(axis=0)
        terms[ki] = int((sub != 0).sum(axis=1).max())
        varying = np.flatnonzero((sub != sub[0]).any(axis=0))
        base[ki, kcols] = sub[0]
        base[ki, kcols[varying]] = 0.0
        # each varying column depends on one field (else the kind is not decomposed); a field whose every
        # column depends on one bit of it is split into bit factors, else it is one factor
        by_field: dict[int, list[int]] = {}
        ok = True
        for c in varying:
            f = next((f for f in range(fields.shape[1]) if keys.depends(sub[:, c], (f, -1), fields[:, f])), None)
            if f is None:
                ok = False
                break
            by_field.setdefault(f, []).append(int(c))
        owner: dict[tuple[int, int], list[int]] = {}
        for f, cs in by_field.items():
            nbits = int(fields[:, f].max()).bit_length()
            bit_of = [next((b for b in range(nbits) if keys.depends(sub[:, c], (f, b), fields[:, f] >> b & 1)), None)
                      for c in cs]
            for c, b in zip(cs, bit_of):
                owner.setdefault((f, -1 if None in bit_of else b), []).append(c)
        dom = [int(fields[:, f].max()) + 1 for f in range(fields.shape[1])] if fields.size else []
        # the decomposition must rebuild every row of the kind exactly, else the kind is multiplied exactly
        rebuilt = np.tile(base[ki, kcols], (rows.size, 1))
        kfactors = []
        for (f, b), cs in sorted(owner.items()):
            key = fields[:, f] if b < 0 else fields[:, f] >> b & 1
            values, first = np.unique(key, return_index=True)
            w = sub[first][:, cs]
            kfactors.append(Factor(ki, f + 1, b, values.astype(np.int64), kcols[np.asarray(cs, np.int64)],
                                   w.astype(np.float64)))
            rebuilt[:, cs] += w[np.searchsorted(values, key)]
        distinct = _distinct_rows(sub.astype(np.float64), rng)      # two tokens with one row would tie
        if not ok or not distinct or not np.array_equal(rebuilt, sub) or int(np.prod(dom or [1])) > 1 << 20:
            exact.append(ki)
            radix.append([])
            lookup.append(np.zeros(0, np.int64))
            continue
        factors += kfactors
        table = np.full(int(np.prod(dom or [1])), -1, np.int64)
        strides = np.cumprod([1] + dom[:-1]) if dom else np.zeros(0, np.int64)
        table[(fields * strides).sum(axis=1) if dom else np.zeros(rows.size, np.int64)] = rows
        radix.append(dom)
        lookup.append(table)
    return HeadTables(used.astype(np.int64), kinds, base, absmax, terms, factors, radix, lookup,
                      np.asarray(exact, np.int64), [t[0] for t in tokens])

"""Where the circuit's residual dims go in a base model: a permutation chosen for the base's embedding.

The planner numbers the circuit's residual dims without knowing the base. Any permutation of them is exact
(every circuit layer reads and writes the residual only through its own norm and matrices, which are
permuted with it), but it decides which of the base's dims stay free for the text gates: a sublayer's gate
lives on the dims that are zero on circuit tokens there, and needs every normalised text embedding on
one side of a hyperplane through those dims (tokens.find_text_gate). A dim on which every text row has
the same sign is such a hyperplane by itself. So the dims the circuit leaves free in the most sublayers go
to the base dims where the text rows are most one-signed.
"""
from __future__ import annotations

import numpy as np

from .compile import Coo, LayerWeights, Plan, free_dims
from .tokens import CHUNK

READS_RESIDUAL = ("gate", "up", "qkv", "z", "b", "a")      # matrices whose columns are residual dims
WRITES_RESIDUAL = ("down", "out")                          # matrices whose rows are residual dims
RESIDUAL_VECTORS = ("in_norm", "post_norm")


def one_signed(text_rows: np.ndarray) -> np.ndarray:
    """Per dim, |sum of u_d| / sum of |u_d| over the text rows, in [0, 1]: 1 when every row has the same sign."""
    total, absolute = np.zeros(text_rows.shape[1]), np.zeros(text_rows.shape[1])
    for i in range(0, len(text_rows), CHUNK):
        x = text_rows[i:i + CHUNK].astype(np.float64)
        total += x.sum(axis=0)
        absolute += np.abs(x).sum(axis=0)
    return np.abs(total) / np.maximum(absolute, 1e-30)


def free_counts(p: Plan) -> np.ndarray:
    """Per plan dim, in how many of the circuit's sublayers it is zero on circuit tokens (free for a gate)."""
    counts = np.zeros(p.shape.hidden, np.int64)
    for dims in free_dims(p).values():
        counts[dims] += 1
    return counts


def choose_dims(p: Plan, text_rows: np.ndarray) -> np.ndarray:
    """perm[j]: the base dim that plan dim j goes to. Plan dims by how often they are free (most first) meet
    base dims by how one-signed the text is there (most first); ties keep their order."""
    by_freedom = np.argsort(-free_counts(p), kind="stable")
    by_sign = np.argsort(-one_signed(text_rows), kind="stable")
    perm = np.empty(p.shape.hidden, np.int64)
    perm[by_freedom] = by_sign
    return perm


def in_plan_order(text_rows: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """The text rows with plan dim j in column j (what the circuit's sublayers see, in the plan's numbering)."""
    return text_rows[:, perm]


def place_layer(lw: LayerWeights, perm: np.ndarray) -> LayerWeights:
    """The layer with its residual dims moved to the base's: plan dim j becomes dim perm[j]."""
    mats = {}
    for name, m in lw.mats.items():
        rows, cols, vals = m.summed()
        if name in READS_RESIDUAL:
            cols = perm[cols]
        elif name in WRITES_RESIDUAL:
            rows = perm[rows]
        moved = Coo(m.shape)
        moved.add_many(rows, cols, vals)
        mats[name] = moved
    vecs = dict(lw.vecs)
    for name in RESIDUAL_VECTORS:
        moved = np.empty_like(lw.vecs[name])
        moved[perm] = lw.vecs[name]
        vecs[name] = moved
    return LayerWeights(mats, vecs, lw.units, lw.heads)


def place_rows(token_rows: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """Embedding rows [N, hidden] with plan dim j moved to column perm[j]."""
    out = np.empty_like(token_rows)
    out[:, perm] = token_rows
    return out

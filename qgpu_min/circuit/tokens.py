"""Circuit tokens: their embedding rows, the output code, and the text gate found from the base embedding.

A circuit token's embedding row is the circuit's input state: the constant dims, the ballast, and one
active element per input group (its fields, chosen per token, plus its own output code). The embedding is
tied to the LM head, so the same row scores the token as an output: the circuit's last layer writes the
output groups, at a large amplitude, onto the code dims, and the token whose code matches wins the argmax.

Silence on text. Every circuit sublayer output is exactly zero on a text token only if every unit's
pre-activation is <= -90 there (silu then returns -0.0 in fp32 and bf16). Without biases that needs a
linear functional T(u) = lam . u that is negative on every normalised text embedding and 0 on circuit
tokens; `text_gates` looks for one per sublayer on the dims that are zero on circuit tokens there, and
reports its margin tau. If none exists for a checkpoint (the text embeddings do not lie in an open
half-space of those dims), exact silence is impossible with this construction: with max_leaks > 0 the gate
that silences all but at most that many rows is taken, and those rows are reported (Mute.leaks), never
claimed silent; else the build says so and stops.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qgpu_min.model.bf16 import bf16_to_f32

from .compile import Mute, Plan, free_dims
from .ir import CircuitError
from .run import embedding_rows


@dataclass
class CircuitTokens:
    """names[i] is circuit token i (vocabulary id base_vocab + i); fields[g] its input elements [N]."""

    names: list[str]
    fields: dict  # Group -> int array [N]

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise CircuitError(f"no circuit token named {name!r}") from None


def token_rows(p: Plan, toks: CircuitTokens) -> np.ndarray:
    """Embedding rows f32 [N, hidden] of the circuit tokens (exact in bf16: small integers)."""
    return embedding_rows(p, toks.fields)


CHUNK = 16384  # text rows per step: the real vocabulary (248k x 2048) never needs float64 copies whole


def normalised_text_rows(embed_bits: np.ndarray, eps: float) -> np.ndarray:
    """What a circuit sublayer (RMSNorm with neutral weight) sees for each text token, f32 [V, hidden]."""
    out = np.empty(embed_bits.shape, np.float32)
    for i in range(0, len(out), CHUNK):
        e = bf16_to_f32(np.asarray(embed_bits[i:i + CHUNK]))
        ms = np.mean(e.astype(np.float64) ** 2, axis=1, keepdims=True)
        out[i:i + CHUNK] = e / np.sqrt(ms + eps)
    return out


def _chunks(X: np.ndarray, cols: list[int]):
    for i in range(0, len(X), CHUNK):
        yield X[i:i + CHUNK, cols].astype(np.float64)


LEAK_MARGIN = 0.05     # a fallback gate keeps every row it silences at least this far below zero


def find_text_gate(text_rows: np.ndarray, free_dims: list[int], hidden: int, max_leaks: int = 0) -> Mute:
    """lam on free_dims with lam . u <= -tau < 0 for every normalised text row u: the least-squares
    solution of lam . u = -1 (through the normal equations, in row chunks), then perceptron passes over
    the rows it still misses. Where no such lam is found, and at most max_leaks rows have lam . u above
    -LEAK_MARGIN, those rows are the gate's leaks and tau is the margin over the others."""
    if not free_dims:
        raise CircuitError("no residual dims left outside the circuit for the text gate")
    n = len(free_dims)
    if len(text_rows) <= n:  # fewer rows than unknowns: the minimum-norm solution through the rows' Gram matrix
        X = text_rows[:, free_dims].astype(np.float64)
        lam = X.T @ np.linalg.lstsq(X @ X.T, -np.ones(len(X)), rcond=None)[0]
    else:
        G, r = np.zeros((n, n)), np.zeros(n)
        for X in _chunks(text_rows, free_dims):
            G += X.T @ X
            r += X.sum(axis=0)
        lam = -np.linalg.lstsq(G, r, rcond=None)[0]
    for _ in range(200):
        push, bad = np.zeros(n), 0
        for X in _chunks(text_rows, free_dims):
            miss = X @ lam > -0.5
            push += X[miss].sum(axis=0)
            bad += int(miss.sum())
        if not bad:
            break
        lam -= 0.1 * push / bad
    scores = np.concatenate([X @ lam for X in _chunks(text_rows, free_dims)])
    leaks = np.zeros(0, np.int64)
    if scores.max() >= 0 and max_leaks:
        worst = np.flatnonzero(scores > -LEAK_MARGIN)
        if len(worst) <= max_leaks:
            leaks = worst
    silent = np.ones(len(text_rows), bool)
    silent[leaks] = False
    tau = -float(scores[silent].max()) if silent.any() else 0.0
    if tau <= 0:
        raise CircuitError(f"no text gate: the {len(text_rows)} text embeddings do not lie in an open half-space "
                           f"of the {n} dims that are zero on circuit tokens (best margin {tau:.3g}"
                           + (f"; {int((scores > -LEAK_MARGIN).sum())} rows would leak, more than the "
                              f"{max_leaks} allowed" if max_leaks else "") +
                           "); text tokens cannot be made exactly silent with this circuit layout")
    full = np.zeros(hidden)
    full[free_dims] = lam
    max_abs = np.zeros(hidden)
    for i in range(0, len(text_rows), CHUNK):
        block = text_rows[i:i + CHUNK][silent[i:i + CHUNK]]
        if len(block):
            max_abs = np.maximum(max_abs, np.abs(block).max(axis=0))
    return Mute(full, tau, max_abs, leaks=leaks)


def text_gates(p: Plan, text_rows: np.ndarray, max_leaks: int = 0) -> dict:
    """A text gate per sublayer: {("attn", L): Mute, ("mlp", L): Mute}. First one gate for all of them, on the
    dims free at every sublayer (one search instead of one per sublayer: at the real vocabulary a search costs
    seconds to minutes), when it silences every row; else each sublayer's own, on the dims that are zero on
    circuit tokens at that point (dims freed earlier count too), with up to max_leaks rows left out (see
    find_text_gate; leaked_rows gives their union)."""
    hidden = p.shape.hidden
    free = free_dims(p)
    always = sorted(set.intersection(*(set(f) for f in free.values()))) if free else []
    if always:
        try:
            shared = find_text_gate(text_rows, always, hidden)
            return {key: shared for key in free}
        except CircuitError:
            pass
    return {key: find_text_gate(text_rows, dims, hidden, max_leaks) for key, dims in free.items()}


def leaked_rows(gates: dict) -> np.ndarray:
    """The text rows some gate does not silence: a row leaking into one sublayer changes what every later one
    sees, so it is not silent at all."""
    return np.unique(np.concatenate([np.zeros(0, np.int64)] + [g.leaks for g in gates.values()]))

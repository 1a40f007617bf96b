"""Run a launch through the GPU circuit in the IR simulator (qgpu_min.circuit.sim), token by token.

The same protocol as the compiled model, without weights: the test oracle for the circuit itself and a
debugging aid. The next token is the one whose code the circuit's output groups spell."""
from __future__ import annotations

import numpy as np

from ..circuit.run import row_words
from ..circuit.sim import group_value, simulate
from .vocab import Token, Vocab


def _step(vocab: Vocab, t: Token, state: dict | None) -> tuple[dict, dict]:
    f = vocab.fields(t)
    return simulate(vocab.gc.circuit, {g: np.array([v]) for g, v in f.items()}, state)


def _next_token(vocab: Vocab, values: dict) -> Token:
    outs = vocab.gc.probes["outs"]
    code = {k: int(group_value(values, outs[k], 1)[0]) for k in ("kind", "l", "w", "p", "e")}
    for k in ("pay", "b"):
        code[k] = [int(group_value(values, g, 1)[0]) for g in outs[k]]
    return vocab.of_code(code)


def run(vocab: Vocab, prompt: list[Token], max_generated: int = 2000) -> tuple[list[Token], dict]:
    """Feed the prompt, then the circuit's own tokens until HALT or FAULT. Returns (generated, state)."""
    state, values = None, None
    for t in prompt:
        values, state = _step(vocab, t, state)
    generated: list[Token] = []
    while len(generated) < max_generated:
        t = _next_token(vocab, values)
        generated.append(t)
        if t[0] in ("halt", "fault"):
            break
        values, state = _step(vocab, t, state)
    return generated, state


def memory_words(vocab: Vocab, state: dict) -> list[int]:
    """The data memory's words, decoded from the simulated memory rows (bits of each row)."""
    rows = state[id(vocab.gc.data_memory)][0]
    return row_words(np.asarray(rows))

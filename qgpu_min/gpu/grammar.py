"""Which tokens the protocol lets the model generate after each token of one launch (docs/gpu.md, "Protocol").

The step engine (model/step_engine.py) multiplies only those rows of the LM head: after an EXEC, a W1 or a
W3 the next token is an EXEC of one of the program's blocks, lanes and the launch's warps, either parity, a
W1 or WA of any entry and value, the CTA token of a CTA in the grid and a warp of the block, HALT or FAULT;
after a WA a WB; after a WB a W3. What a launch has (its blocks, warps and grid) is read from its prompt,
never from the program: every block but 0 is named by a `clear` or a `rom` token, each warp has an `init`,
and a `grid` token comes when the grid is not 1x1. Each row's logit is the one the whole head gives it, so
the argmax is the whole head's whenever the model's choice lies in the set; `--check` asks for the whole
vocabulary at every step and compares.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .vocab import Token

STOP = -1                 # next_set of a token the launch ends with (never fed back)


@dataclass(frozen=True)
class LaunchShape:
    blocks: int
    warps: int
    grid: tuple[int, int]


def launch_shape_of(prompt: list[Token]) -> LaunchShape:
    """The program's block count, the block's warps and the grid, as the prompt states them."""
    blocks = 1 + max((t[-1] for t in prompt if t[0] in ("rom", "clear")), default=0)
    warps = sum(1 for t in prompt if t[0] == "init")
    grid = next((t[1:3] for t in prompt if t[0] == "grid"), (1, 1))
    return LaunchShape(blocks, max(1, warps), grid)


def _allowed_after_step(t: Token, s: LaunchShape) -> bool:
    kind = t[0]
    if kind == "exec":
        return t[1] < s.blocks and t[3] < s.warps
    if kind == "cta":
        return t[1] < s.grid[0] and t[2] < s.grid[1] and t[3] < s.warps
    return kind in ("w1", "wa", "halt", "fault")


# the set read after each kind of token: 0 after a step's token (and after the prompt's last), 1 after WA,
# 2 after WB; the launch ends after HALT and FAULT
_AFTER = {"wa": 1, "wb": 2, "halt": STOP, "fault": STOP}


def token_sets(tokens: list[Token], shape: LaunchShape | None, whole: bool = False) -> tuple[list[np.ndarray], np.ndarray]:
    """(sets, next_set) for StepEngine.rules over the vocabulary `tokens` (ids are positions): the allowed
    ids after a step's token, after WA and after WB; next_set[id] names the set read after token id. whole:
    one set, the whole vocabulary, after every token (what --check compares)."""
    next_set = np.array([_AFTER.get(t[0], 0) for t in tokens], np.int32)
    if whole:
        return [np.arange(len(tokens), dtype=np.int64)], np.where(next_set == STOP, STOP, 0).astype(np.int32)
    sets = [np.array([i for i, t in enumerate(tokens) if _allowed_after_step(t, shape)], np.int64),
            np.array([i for i, t in enumerate(tokens) if t[0] == "wb"], np.int64),
            np.array([i for i, t in enumerate(tokens) if t[0] == "w3"], np.int64)]
    return sets, next_set

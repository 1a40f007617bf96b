"""Static checks of compiled gates: interval margins with bf16 rounding, and the text gate.

Gate units (ir.py) compute relu(S - theta) over integer sums S of one-hot indicators. Compiled, each
pre-activation is K*(S - theta) with features that are 1 up to a relative error e (fp32: ~5e-7 from the
RMSNorm eps; bf16: 0, the normalised 1 rounds to exactly 1). A unit is safe when
  - every value it takes on its active side (S - theta in 0..hi) is an integer times K that bf16 holds
    exactly: hi <= 256 (DESIGN 5.10: each term is rounded on its own in bf16), and
  - its margin 0.5 / (sum|w| + |theta|), the relative feature error that would move the pre-activation
    by half a step, is far above e (min_margin, default 1e-4, 100x the fp32 error).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qgpu_min.model.bf16 import bf16_to_f32

from .compile import LayerWeights, Plan
from .ir import CircuitError, Gate, Unit, weights_by_element
from .tokens import CHUNK

BF16_EXACT_INT = 256


@dataclass
class MarginReport:
    units: int
    worst_margin: float
    worst_margin_gate: str
    max_active: int
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def unit_interval(unit: Unit) -> tuple[int, int, int]:
    """(min, max) of S - theta over all one-hot inputs, and sum |w| + |theta|."""
    const, groups = weights_by_element(unit)
    lo = hi = const - unit.theta
    for size, ws in groups.values():
        vals = list(ws.values()) + ([0] if len(ws) < size else [])  # an element without a term adds 0
        lo += min(vals)
        hi += max(vals)
    return lo, hi, abs(unit.theta) + sum(abs(w) for _, _, w in unit.terms)


def static_check(p: Plan, min_margin: float = 1e-4) -> MarginReport:
    """Every gate unit of the plan checked for bf16 exactness and margin (module docstring); the problems
    are listed in the report, nothing is raised."""
    problems = []
    worst, worst_gate, max_active, n = float("inf"), "", 0, 0
    for op in p.ops:
        if not isinstance(op, Gate):
            continue
        for u in op.units:
            n += 1
            lo, hi, absw = unit_interval(u)
            margin = 0.5 / max(absw, 1)
            if margin < worst:
                worst, worst_gate = margin, op.out.name
            max_active = max(max_active, hi)
            if hi > BF16_EXACT_INT:
                problems.append(f"gate {op.out.name}: active pre-activation reaches {hi} > {BF16_EXACT_INT}, "
                                "not exact in bf16")
            if margin < min_margin:
                problems.append(f"gate {op.out.name}: margin {margin:.2e} below the safe bound {min_margin:.0e}")
    return MarginReport(n, worst, worst_gate, max_active, problems)


def text_pre_max(layers: list[LayerWeights], text_rows: np.ndarray, qk_rows: int) -> np.ndarray:
    """Per text row, the largest pre-activation (MLP gate, query, key) it reaches in any circuit layer, f64 [V]:
    what decides whether the circuit is silent on that token (every value <= -90). text_rows: normalised text
    embedding rows f32 [V, hidden] (what every circuit sublayer sees on a text token while the ones before are
    silent on it); qk_rows: the query and key rows of in_proj_qkv (values need no gate)."""
    top = np.full(len(text_rows), -np.inf)
    for lw in layers:
        for name in ("gate", "qkv"):
            sp = lw.mats[name].to_sparse(exact=False)
            used = np.nonzero(np.diff(sp.indptr))[0]
            if name == "qkv":
                used = used[used < qk_rows]
            if not used.size:
                continue
            dense = np.zeros((used.size, sp.shape[1]), np.float32)
            rows = np.repeat(np.arange(sp.shape[0]), np.diff(sp.indptr))
            sel = np.isin(rows, used)
            dense[np.searchsorted(used, rows[sel]), sp.indices[sel]] = bf16_to_f32(sp.values[sel])
            for row in range(0, len(text_rows), CHUNK):   # in blocks: [V, units] stays small
                block = (text_rows[row:row + CHUNK] @ dense.T).max(axis=1)
                top[row:row + CHUNK] = np.maximum(top[row:row + CHUNK], block)
    return top


def text_gate_check(layers: list[LayerWeights], text_rows: np.ndarray, qk_rows: int, limit: float = -90.0) -> float:
    """The largest pre-activation any text token reaches in any circuit layer (text_pre_max); raises if it is
    above `limit` (then some circuit unit would write on text tokens)."""
    top = text_pre_max(layers, text_rows, qk_rows)
    if len(top) and top.max() > limit:
        i = int(np.argmax(top))
        raise CircuitError(f"text row {i} reaches pre-activation {top[i]:.1f} > {limit} in a circuit layer; the "
                           "circuit would not be silent on text")
    return float(top.max()) if len(top) else -np.inf

"""Where a launch's generated tokens go, and what protocol changes would save: a packing model replayed over
the reference interpreter (gpu/check.expected_tokens: the tokens today's protocol prescribes), no model run.

    python3 tools/token_model.py            # the README's dot launch and each suite case at its first shape that fits
    python3 tools/token_model.py --all      # every suite launch that fits the GPU

Columns (generated tokens per launch):
- today: the protocol as built (per lane: EXEC, then per write-back entry one W1 for a value in [-128, 128),
  else WA WB W3).
- no-entry: write-back tokens without the entry field (the model's `ptr` memory knows the next entry), so the
  same token budget carries more bits: W1 for [-2048, 2048), else two 16-bit tokens.
- warp-exec: one EXEC per warp step for all its lanes (lane-parallel execution), write-back as today.
- both+uniform: no-entry and warp-exec, and a value every active lane writes alike is written once.
- both+packed: that, and one 16-bit token carries an entry's values of all n active lanes when each fits
  16 // n signed bits (4 lanes: [-8, 8)).

Then the prompt (program.prompt_parts, today's protocol): `prompt` all of it, `kept` what a launch feeds when
its program's load part is kept (gpu/model.load_state: the launch part only).
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import readme_dot  # noqa: E402
from prompt_order_check import SPEC, launches  # noqa: E402

from qgpu_min.gpu.check import expected_tokens  # noqa: E402
from qgpu_min.gpu.program import prompt_parts  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ("today", "no-entry", "warp-exec", "both+uniform", "both+packed")
PROMPT = ("prompt", "kept")


def _signed(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


def packing(expected) -> dict[str, int]:
    """Generated tokens of one launch under each column's protocol (see the module docstring)."""
    execs, steps, other = 0, set(), 0
    values: dict[tuple, dict[int, int]] = defaultdict(dict)    # (cta, step, entry) -> lane -> value
    for token, info in expected:
        kind = token[0]
        if kind == "exec":
            execs += 1
            steps.add((info.cta, info.step))
        elif kind in ("w1", "w3"):        # the token that ends a write-back
            values[(info.cta, info.step, info.entry)][info.lane] = _signed(info.value)
        elif kind in ("cta", "halt", "fault"):
            other += 1

    def cost(v: int, small: int, wide: int) -> int:
        return 1 if -small <= v < small else wide
    every = [v for lanes in values.values() for v in lanes.values()]
    def entry(lanes: dict[int, int], packed: bool) -> int:
        vs = list(lanes.values())
        bits = 16 // len(vs)
        if packed and all(-(1 << (bits - 1)) <= v < 1 << (bits - 1) for v in vs):
            return 1
        return cost(vs[0], 2048, 2) if len(set(vs)) == 1 else sum(cost(v, 2048, 2) for v in vs)
    uniform = sum(entry(lanes, False) for lanes in values.values())
    packed = sum(entry(lanes, True) for lanes in values.values())
    counts = {"today": execs + sum(cost(v, 128, 3) for v in every) + other,
              "no-entry": execs + sum(cost(v, 2048, 2) for v in every) + other,
              "warp-exec": len(steps) + sum(cost(v, 128, 3) for v in every) + other,
              "both+uniform": len(steps) + uniform + other,
              "both+packed": len(steps) + packed + other}
    assert counts["today"] == len(expected), "the model of today's protocol must count what check.py prescribes"
    return counts


def dot_launch():
    program, memory = readme_dot.gpu_image(SPEC)
    return "README dot", program, memory, readme_dot.BLOCK, (1, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="every suite launch that fits (default: one per case)")
    args = ap.parse_args()
    rows, seen = [], set()
    for name, program, memory, block, grid in [dot_launch(), *launches(None)]:
        case = name.rsplit("-g", 1)[0]
        if not args.all and case in seen:
            continue
        seen.add(case)
        load, rest = prompt_parts(program, memory, block, SPEC, grid)
        counts = packing(expected_tokens(program, memory, block, SPEC, None, grid))
        rows.append((name, {**counts, "prompt": len(load) + len(rest), "kept": len(rest)}))
    cols = COLUMNS + PROMPT
    print(f"{'launch':<40}" + "".join(f"{c:>14}" for c in COLUMNS) + " |" + "".join(f"{c:>9}" for c in PROMPT))
    def line(label: str, values: dict, fmt: str) -> str:
        return (f"{label:<40}" + "".join(f"{values[c]:>14{fmt}}" for c in COLUMNS) + " |"
                + "".join(f"{values[c]:>9{fmt}}" for c in PROMPT))
    for name, counts in rows:
        print(line(name, counts, ""))
    total = {c: sum(r[1][c] for r in rows) for c in cols}
    print(line("total", total, ""))
    print(line("median", {c: float(np.median([r[1][c] for r in rows])) for c in cols}, ".1f"))
    print(f"{'total / today':<40}" + "".join(f"{total[c] / total['today']:>14.3f}" for c in COLUMNS))
    return 0


if __name__ == "__main__":
    sys.exit(main())

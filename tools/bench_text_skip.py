#!/usr/bin/env python3
"""Text through a built checkpoint with and without skipping the GPU's layers (model/text_skip.py), side by side.

    python tools/bench_text_skip.py MERGED [--mode fp32|bf16] [--rounds 3] [--prompt-len 64] [--decode 16]

One process, one loaded model; each round prefills the same text prompt (ids the build claims silent) on a
new state with the skip and running every layer, in alternating order, then decodes the same text tokens on
both states taking turns token by token (so both sides see the same machine load), and checks that both give
the same logits bit for bit. Prints the best prefill, the decode medians and the median of the per-token
ratios. With --base DIR, the base checkpoint the GPU was built on is timed once at the end (what the skip can
at most reach: the same text without the GPU's layers).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a checkpoint built by `qgpu-min build`")
    ap.add_argument("--base", help="the base checkpoint it was built on (timed as a third side)")
    ap.add_argument("--mode", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from qgpu_min.gpu.merged import load_checkpoint
    from qgpu_min.model import load_model

    model = load_checkpoint(args.model, args.mode)
    rule = model.text_skip
    if rule is None:
        print(f"{args.model}: not a built checkpoint (no manifest), nothing to skip", file=sys.stderr)
        return 2
    silent = np.flatnonzero(rule.silent)
    rng = np.random.default_rng(args.seed)
    prompt = rng.choice(silent, args.prompt_len).tolist()
    tokens = rng.choice(silent, args.decode).tolist()
    base = load_model(args.base, args.mode) if args.base else None
    sides = {"skip": rule, "every layer": None}
    print(f"{args.model}: {rule.layers} GPU layers of {len(model.config.layer_types)}, {silent.size} silent ids; "
          f"{args.mode}, prompt {args.prompt_len}, decode {args.decode}, {args.rounds} rounds", file=sys.stderr)
    prefill = {n: [] for n in sides}
    decode = {n: [] for n in sides}
    states = {}
    for r in range(args.rounds):
        # prefill: each side on a new state, in alternating order; decode: the sides take turns token by
        # token (the order alternating too), so both see the same machine load
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        for name in order:
            model.text_skip = sides[name]
            states[name] = model.new_state()
            prefill[name].append(timed(lambda st=states[name]: model.prefill(st, prompt)))
        logits = {}
        for i, tok in enumerate(tokens):
            for name in (order if i % 2 == 0 else order[::-1]):
                model.text_skip = sides[name]
                t = time.perf_counter()
                logits[name] = model.decode(states[name], tok)
                decode[name].append(time.perf_counter() - t)
        if not np.array_equal(logits["skip"], logits["every layer"]):
            print("the skip changed the logits: not exact", file=sys.stderr)
            return 1
        print(f"  round {r + 1}: " + ", ".join(f"{n} prefill {len(prompt) / prefill[n][-1]:.1f} tok/s, decode median "
                                             f"{1e3 * np.median(decode[n][-len(tokens):]):.0f} ms" for n in sides),
              file=sys.stderr)
    model.text_skip = rule
    print(f"{'':12} {'prefill tok/s (best)':>21} {'decode ms/token (median, best)':>31}   "
          f"({args.rounds} rounds; logits equal bit for bit)")
    for n in sides:
        print(f"{n:12} {len(prompt) / min(prefill[n]):21.1f} {1e3 * np.median(decode[n]):22.1f} {1e3 * min(decode[n]):8.1f}")
    pairs = np.array(decode["every layer"]) / np.array(decode["skip"])
    print(f"skip vs every layer: prefill {min(prefill['every layer']) / min(prefill['skip']):.2f}x (best rounds), "
          f"decode {np.median(pairs):.3f}x (median of {pairs.size} token pairs; skip faster in {int((pairs > 1).sum())})")
    if base is not None:
        state = base.new_state()
        tb = timed(lambda: base.prefill(state, prompt))
        td = [timed(lambda t=t: base.decode(state, t)) for t in tokens]
        print(f"base (after): prefill {len(prompt) / tb:.1f} tok/s, decode median {1e3 * np.median(td):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

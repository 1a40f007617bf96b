#!/usr/bin/env python3
"""Text through a built checkpoint with and without skipping the GPU's layers (model/text_skip.py), side by side.

    python tools/bench_text_skip.py MERGED [--mode fp32|bf16] [--rounds 3] [--prompt-len 64] [--decode 16]

One process, one loaded model; each round times a prefill of the same text prompt and decode steps of the
same text tokens (drawn from the ids the build claims silent) once with the skip and once running every
layer, in alternating order, and checks that both give the same logits bit for bit. Prints each side's best
round and the ratios. With --base DIR, the base checkpoint the GPU was built on is timed too (what the skip
can at most reach: the same text without the GPU's layers).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def run_text(model, prompt: list[int], tokens: list[int]) -> tuple[float, float, np.ndarray]:
    """(prefill s, decode s per token, the last logits) for prompt then tokens, on a new state."""
    state = model.new_state()
    t = time.perf_counter()
    model.prefill(state, prompt)
    prefill_s = time.perf_counter() - t
    t = time.perf_counter()
    for tok in tokens:
        logits = model.decode(state, tok)
    return prefill_s, (time.perf_counter() - t) / len(tokens), logits


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
    sides = {"skip": rule, "every layer": None}
    base = load_model(args.base, args.mode) if args.base else None
    print(f"{args.model}: {rule.layers} GPU layers of {len(model.config.layer_types)}, {silent.size} silent ids; "
          f"{args.mode}, prompt {args.prompt_len}, decode {args.decode}, {args.rounds} rounds", file=sys.stderr)
    model.text_skip = None
    run_text(model, prompt[:4], tokens[:2])         # page the weights in, both paths
    model.text_skip = rule
    run_text(model, prompt[:4], tokens[:2])
    results: dict[str, list] = {name: [] for name in [*sides, *(["base"] if base else [])]}
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        logits = {}
        for name in order:
            model.text_skip = sides[name]
            *times, logits[name] = run_text(model, prompt, tokens)
            results[name].append(times)
        if not np.array_equal(logits["skip"], logits["every layer"]):
            print("the skip changed the logits: not exact", file=sys.stderr)
            return 1
        if base is not None:
            *times, want = run_text(base, prompt, tokens)
            results["base"].append(times)
            if not np.array_equal(logits["skip"][:want.shape[0]], want):
                print("the base's logits differ from the merged model's", file=sys.stderr)
                return 1
        print(f"  round {r + 1}: " + ", ".join(f"{n} prefill {len(prompt) / t[0]:.1f} decode {1 / t[1]:.2f} tok/s"
                                             for n, t in ((n, results[n][-1]) for n in results)), file=sys.stderr)
    best = {n: (len(prompt) / min(t[0] for t in ts), 1 / min(t[1] for t in ts)) for n, ts in results.items()}
    print(f"{'':14} {'prefill tok/s':>14} {'decode tok/s':>13}   (best of {args.rounds}; logits equal bit for bit)")
    for n, (p, d) in best.items():
        print(f"{n:14} {p:14.1f} {d:13.2f}")
    s, e = best["skip"], best["every layer"]
    print(f"skip / every layer: prefill {s[0] / e[0]:.2f}x, decode {s[1] / e[1]:.2f}x")
    if base is not None:
        b = best["base"]
        print(f"skip / base: prefill {s[0] / b[0]:.2f}x, decode {s[1] / b[1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

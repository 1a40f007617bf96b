#!/usr/bin/env python3
"""Aggregate decode tokens/s against batch size: several sequences decoded together (Model.decode_batch),
one pass over the weights per step for all of them.

    python tools/bench_batch.py --model DIR                      # text: B independent prompts, B = 1 2 4 8 16
    python tools/bench_batch.py --model DIR --quant int8         # the same with the weights quantized at load
    python tools/bench_batch.py --merged DIR [--quant int8]      # launches: B dot launches (launch_many)

Text: B prompts of --prompt-len random ids are prefilled (untimed), then --steps decode_batch steps are timed;
aggregate tok/s = B * steps / time. Launches: launch_many of the README dot kernel with B argument sets through
a merged checkpoint, timed whole (prefill of the launches included), aggregate generated tokens / time. The
batch sizes run in interleaved rounds (--rounds), best round kept, so machine load hits every size alike.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def text_round(model, batch: int, prompt_len: int, steps: int, seed: int) -> float:
    """Aggregate decode tokens/s of `batch` sequences decoded together."""
    rng = np.random.default_rng(seed)
    vocab = min(model.config.vocab_size, 248044)
    states = [model.new_state() for _ in range(batch)]
    tokens = [int(model.prefill(s, rng.integers(0, vocab, prompt_len).tolist()).argmax()) for s in states]
    t = time.perf_counter()
    for _ in range(steps):
        tokens = [int(x) for x in model.decode_batch(states, tokens).argmax(axis=1)]
    return batch * steps / (time.perf_counter() - t)


def launch_round(merged: str, quant: str | None, batch: int) -> float:
    """Aggregate generated tokens/s of `batch` dot launches through the merged checkpoint, prefill included."""
    from qgpu_min.host.launch import compile_kernel, launch_many
    k = compile_kernel(ROOT / "examples" / "dot.cu")
    rng = np.random.default_rng(batch)
    sets = [[rng.integers(-9, 10, 3).tolist(), rng.integers(-9, 10, 3).tolist(), [0], 3] for _ in range(batch)]
    t = time.perf_counter()
    results = launch_many(k, sets, block=(3, 1), backend="model", model=merged, quant=quant)
    elapsed = time.perf_counter() - t
    for r, (a, b, _, _) in zip(results, sets):     # the GPU's answers, checked against the host's own sum
        assert r.arrays["out"].tolist() == [int(np.dot(a, b))], (r.arrays["out"], a, b)
    return sum(r.tokens["generated"] for r in results) / elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--model", help="a checkpoint: text decode")
    where.add_argument("--merged", help="a merged checkpoint from `qgpu-min build`: dot launches")
    ap.add_argument("--quant", choices=("int8",))
    ap.add_argument("--sizes", default="1,2,4,8,16", help="batch sizes (default 1,2,4,8,16)")
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--steps", type=int, default=8, help="timed decode steps per round (text)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    t = time.perf_counter()
    if args.model:
        from qgpu_min.model import load_model
        model = load_model(args.model, "fp32", quant=args.quant)
        model.decode(model.new_state(), 1)     # page the weights in
        run = lambda b, r: text_round(model, b, args.prompt_len, args.steps, 1000 * r + b)  # noqa: E731
    else:
        launch_round(args.merged, args.quant, 1)   # load (and quantize) once, untimed
        run = lambda b, r: launch_round(args.merged, args.quant, b)  # noqa: E731
    print(f"loaded in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    best: dict[int, list[float]] = {b: [] for b in sizes}
    for r in range(args.rounds):
        for b in sizes:
            best[b].append(run(b, r))
            print(f"  round {r + 1}, batch {b}: {best[b][-1]:.2f} tok/s", file=sys.stderr)
    one = max(best[sizes[0]])
    what = "text decode" if args.model else "dot launches through the merged model (prefill included)"
    print(f"{what}, {args.model or args.merged}{', int8' if args.quant else ''}")
    print(f"{'batch':>5}  {'aggregate tok/s':>15}  {'per sequence':>12}  {'vs batch ' + str(sizes[0]):>11}  rounds")
    for b in sizes:
        top = max(best[b])
        print(f"{b:>5}  {top:>15.2f}  {top / b:>12.2f}  {top / one:>10.2f}x  "
              + " ".join(f"{x:.2f}" for x in best[b]))
    if args.json:
        args.json.write_text(json.dumps({"sizes": sizes, "tok_s": best, "quant": args.quant,
                                         "model": args.model, "merged": args.merged}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Write a synthetic Qwen3.5 checkpoint (exact published format, random weights).

    python tools/make_checkpoint.py OUT_DIR                          # tiny (hidden 64), for tests
    python tools/make_checkpoint.py OUT_DIR --size 2b --layers 2     # published 2B shapes, 2 layers
    python tools/make_checkpoint.py OUT_DIR --layer-types linear_attention,full_attention --shards 2
"""
import argparse
import sys
import time

from qgpu_min.model.synthetic import SIZES, write_synthetic_checkpoint


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--layers", type=int, help="number of layers, repeating the size's layer pattern")
    ap.add_argument("--layer-types", help="comma-separated explicit layer_types (overrides --layers)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--untied", action="store_true", help="write a separate lm_head.weight")
    ap.add_argument("--vocab-size", type=int, help="override the size's vocab_size")
    ap.add_argument("--hidden-size", type=int, help="override the size's hidden_size")
    args = ap.parse_args()
    overrides = {k: v for k, v in (("vocab_size", args.vocab_size), ("hidden_size", args.hidden_size)) if v}
    types = args.layer_types.split(",") if args.layer_types else None
    t0 = time.time()
    path = write_synthetic_checkpoint(args.out_dir, size=args.size, layer_types=types, layers=args.layers,
                                      seed=args.seed, shards=args.shards, tie=not args.untied, **overrides)
    print(f"wrote {path} in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A launch through a merged checkpoint with its logits over the GPU's rows of the LM head (the default) and
over the whole vocabulary (what --check does), and with --int8 through the same checkpoint quantized at load
(GPU rows), side by side in one process, rounds interleaved.

    python3 tools/bench_launch_logits.py MERGED_DIR [--rounds N] [--mode fp32|bf16] [--int8]

Prints decode tokens/s of the README dot launch each way and whether all generated the same tokens and
result. A benchmark: it asserts nothing about time.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from qgpu_min.gpu.backend import SPEC  # noqa: E402
from qgpu_min.gpu.merged import load_merged  # noqa: E402
from qgpu_min.gpu.model import run_launch  # noqa: E402
from qgpu_min.gpu.program import prompt_parts  # noqa: E402

sys.path.insert(0, str(ROOT / "tools"))
import readme_dot  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a merged checkpoint (qgpu-min build)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--mode", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--int8", action="store_true", help="also the checkpoint quantized at load (--quant int8)")
    a = ap.parse_args()
    program, memory = readme_dot.gpu_image(SPEC)
    load, rest = prompt_parts(program, memory, readme_dot.BLOCK, SPEC)
    spent = [0.0]

    def timed(model):
        decode = model.decode

        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            out = decode(*args, **kwargs)
            spent[0] += time.perf_counter() - t0
            return out
        model.decode = wrapper

    sides = {"GPU rows": (load_merged(a.model, SPEC), False)}
    sides["whole vocabulary"] = (sides["GPU rows"][0], True)
    if a.int8:
        sides["int8, GPU rows"] = (load_merged(a.model, SPEC, "int8"), False)
    for cg, _ in {id(cg): (cg, f) for cg, f in sides.values()}.values():
        timed(cg.model(a.mode))
    rates: dict[str, list[float]] = {name: [] for name in sides}
    runs = {}
    for _ in range(a.rounds):
        for name, (cg, full) in sides.items():
            spent[0] = 0.0
            r = run_launch(cg, load + rest, a.mode, load_len=len(load), full_vocab=full)
            rates[name].append((len(r.generated) - 1) / spent[0])   # HALT is not fed back
            runs[name] = (r.generated, r.memory)
    for name, values in rates.items():
        print(f"decode tokens/s, {name}: {', '.join(f'{x:.2f}' for x in values)}")
    same = all(run == runs["GPU rows"] for run in runs.values())
    print(f"same tokens and memory: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

"""A launch through a merged checkpoint with its logits over the GPU's rows of the LM head (the default) and
over the whole vocabulary (what --check does), side by side in one process, rounds interleaved.

    python3 tools/bench_launch_logits.py MERGED_DIR [--rounds N] [--mode fp32|bf16]

Prints decode tokens/s of the README dot launch each way and whether both generated the same tokens and
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
    a = ap.parse_args()
    cg = load_merged(a.model, SPEC)
    program, memory = readme_dot.gpu_image(SPEC)
    load, rest = prompt_parts(program, memory, readme_dot.BLOCK, SPEC)
    model = cg.model(a.mode)
    decode, spent = model.decode, [0.0]

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        out = decode(*args, **kwargs)
        spent[0] += time.perf_counter() - t0
        return out
    model.decode = timed
    rates: dict[bool, list[float]] = {False: [], True: []}
    runs = {}
    for _ in range(a.rounds):
        for full in (False, True):
            spent[0] = 0.0
            r = run_launch(cg, load + rest, a.mode, load_len=len(load), full_vocab=full)
            rates[full].append((len(r.generated) - 1) / spent[0])   # HALT is not fed back
            runs[full] = (r.generated, r.memory)
    print(f"decode tokens/s, logits over the GPU's rows: {', '.join(f'{x:.2f}' for x in rates[False])}; "
          f"over the whole vocabulary: {', '.join(f'{x:.2f}' for x in rates[True])}")
    same = runs[False] == runs[True]
    print(f"same tokens and memory: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

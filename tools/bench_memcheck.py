"""The cost of --memcheck: suite kernels launched on the interpreter with and without it, interleaved in
one run (this machine is shared and noisy), and the ratio of the medians.

    python tools/bench_memcheck.py [--rounds 5]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from kernel_suite import CASES  # noqa: E402

from qgpu_min.host.launch import compile_kernel, launch  # noqa: E402

KERNELS = ("dot_shared-dot_shared", "block_scan", "histogram_shared", "matmul_tiled", "bitonic_sort", "local_array")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    rounds = ap.parse_args().rounds
    cases = [c for c in CASES if c.id in KERNELS] or list(CASES[:5])
    jobs = []
    for c in cases:
        shape = c.shapes[-1]
        args = c.make(np.random.default_rng(0), shape)
        jobs.append((c.id, compile_kernel(c.path, kernel=c.kernel, compiler="zig"), args, shape))
    times: dict[tuple[str, bool], list[float]] = {}
    for _ in range(rounds):
        for name, k, args, shape in jobs:
            for checked in (False, True):
                t = time.perf_counter()
                launch(k, [a.copy() if isinstance(a, np.ndarray) else a for a in args], grid=shape.grid,
                       block=shape.block, memcheck=checked)
                times.setdefault((name, checked), []).append(time.perf_counter() - t)
    print(f"{'kernel':20s} {'plain ms':>9s} {'memcheck ms':>12s} {'ratio':>6s}")
    ratios = []
    for name, *_ in jobs:
        p, m = (statistics.median(times[(name, c)]) for c in (False, True))
        ratios.append(m / p)
        print(f"{name:20s} {p * 1e3:9.1f} {m * 1e3:12.1f} {m / p:6.2f}")
    print(f"median ratio {statistics.median(ratios):.2f} over {len(jobs)} kernels, {rounds} interleaved rounds")


if __name__ == "__main__":
    main()

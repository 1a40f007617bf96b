"""The step engine's batched calls against their one-token forms, side by side in one run.

    python tools/bench_engine.py [--json] [--mode fp32|bf16] [--repeat N] [--lanes N] [--kernel NAME]

For each of tools/bench_gpu.py's launches (or --kernel NAME), on the circuit-only GPU:

- prefill: the launch's whole token stream (prompt and generated) fed through StepEngine.prefill 8 tokens a
  call (qgpu_circuit_prefill_batch) and 1 token a call, taking turns, each on a fresh state;
- lockstep: --lanes copies of the state after the launch's prompt decoded together (StepEngine.decode_many)
  and one after another (StepEngine.decode), taking turns.

Each pair must give the same bits (the last hidden and every state array; the same generated tokens): a
difference is printed and the exit status is 1. Times are the best of --repeat; nothing here asserts a time.
The copies of a state are made before each timed call, outside it.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from bench_gpu import KERNELS, compile_kernels  # noqa: E402


def same_state(a, b) -> bool:
    return (all(np.array_equal(a.recurrent[i].view(np.uint32), b.recurrent[i].view(np.uint32))
                and np.array_equal(a.conv[i].view(np.uint32), b.conv[i].view(np.uint32))
                and np.array_equal(a.clean[i], b.clean[i]) for i in a.recurrent)
            and a.zero == b.zero and a.pos == b.pos)


def launch_ids(kernel: tuple, mode: str) -> tuple[list[int], list[int]]:
    """The prompt and generated ids of one launch on the circuit backend."""
    from qgpu_min.host.launch import launch
    _, gpu_k, args, threads = kernel
    res = launch(gpu_k, args, block=(threads, 1), backend="circuit", mode=mode)
    return res.extra["trace"]["prompt_ids"], res.extra["trace"]["generated_ids"]


def bench_prefill(engine, model, ids: np.ndarray, repeat: int) -> dict:
    from qgpu_min.model import step_engine
    batch = step_engine.BATCH
    times = {batch: [], 1: []}
    ok = True
    for _ in range(repeat):
        out = {}
        for lanes in (batch, 1):
            state = model.new_state()
            t0 = time.perf_counter()
            x = engine.prefill(state, ids, lanes=lanes)
            times[lanes].append(time.perf_counter() - t0)
            out[lanes] = (x, state)
        ok &= np.array_equal(out[batch][0].view(np.uint32), out[1][0].view(np.uint32))
        ok &= same_state(out[batch][1], out[1][1])
    b, one = min(times[batch]), min(times[1])
    return {"tokens": int(ids.size), "batched_tokens_per_s": round(ids.size / b, 1),
            "one_tokens_per_s": round(ids.size / one, 1), "ratio": round(one / b, 3), "same_bits": bool(ok)}


def bench_lockstep(engine, model, rules, prompt: list[int], lanes: int, repeat: int) -> dict:
    start = model.new_state()
    first = engine.first(start, prompt, rules)
    t_many, t_one, ok, tokens = [], [], True, 0
    for _ in range(repeat):
        a = [copy.deepcopy(start) for _ in range(lanes)]
        b = [copy.deepcopy(start) for _ in range(lanes)]
        t0 = time.perf_counter()
        many = engine.decode_many(a, [first] * lanes, rules, [100000] * lanes)
        t_many.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        one = [engine.decode(s, first, rules, 100000) for s in b]
        t_one.append(time.perf_counter() - t0)
        ok &= many == one and all(same_state(x, y) for x, y in zip(a, b))
        tokens = sum(len(g) for g in one)
    m, o = min(t_many), min(t_one)
    return {"lanes": lanes, "tokens": tokens, "lockstep_tokens_per_s": round(tokens / m, 1),
            "one_by_one_tokens_per_s": round(tokens / o, 1), "ratio": round(o / m, 3), "same_bits": bool(ok)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--mode", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--lanes", type=int, default=8)
    ap.add_argument("--kernel", choices=sorted(KERNELS), action="append")
    a = ap.parse_args()
    if a.repeat < 1 or not 1 <= a.lanes <= 64:
        ap.error("--repeat must be >= 1 and --lanes within 1..64")
    from qgpu_min.gpu import backend
    cg = backend.compiled(backend.SPEC)
    engine, model, rules = cg.engine(a.mode), cg.model(a.mode), cg.launch_rules(a.mode)
    out = {"mode": a.mode, "repeat": a.repeat, "load_1min": round(os.getloadavg()[0], 2), "launches": []}
    with tempfile.TemporaryDirectory() as tmp:
        kernels = {k: v for k, v in compile_kernels(Path(tmp)).items() if not a.kernel or k in a.kernel}
    for name, kernel in kernels.items():
        prompt, generated = launch_ids(kernel, a.mode)
        ids = np.asarray(prompt + generated[:-1], np.int64)       # the tokens a launch feeds (HALT is not fed)
        row = {"name": name, "prefill": bench_prefill(engine, model, ids, a.repeat),
               "lockstep": bench_lockstep(engine, model, rules, prompt, a.lanes, a.repeat)}
        out["launches"].append(row)
        if not a.json:
            p, s = row["prefill"], row["lockstep"]
            print(f"{name:10s} prefill {p['tokens']:4d} tokens: 8 a call {p['batched_tokens_per_s']:7.0f} tok/s, "
                  f"1 a call {p['one_tokens_per_s']:7.0f} ({p['ratio']:.2f}x){'' if p['same_bits'] else '  DIFFERENT BITS'}"
                  f" | lockstep {s['lanes']} x {s['tokens'] // s['lanes']} tokens: {s['lockstep_tokens_per_s']:6.0f} "
                  f"tok/s, one by one {s['one_by_one_tokens_per_s']:6.0f} ({s['ratio']:.2f}x)"
                  f"{'' if s['same_bits'] else '  DIFFERENT BITS'}", flush=True)
    same = all(r["prefill"]["same_bits"] and r["lockstep"]["same_bits"] for r in out["launches"])
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"mode {a.mode}, best of {a.repeat}, load average (1 min) at the start {out['load_1min']}; "
              f"same bits everywhere: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

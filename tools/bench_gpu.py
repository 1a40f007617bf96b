"""Benchmark the GPU in the weights (--backend circuit) next to the reference interpreter, in one run.

    python tools/bench_gpu.py [--json] [--mode fp32|bf16] [--repeat N] [--cold] [--batch N]
    python tools/bench_gpu.py --model DIR [--mode fp32|bf16]      # through a merged checkpoint (qgpu-min build)

First the compiled GPU: loaded from the cache (qgpu_min.gpu.cache) or compiled on first use, with the time it
took and which it was (--cold compiles into a fresh temporary cache, so the first-use compile time is
measured), then the runtime model built from its layers. Then the launches: examples/dot.cu with the README's
arguments and three small kernels written here, within the GPU's limits today (one warp of <= 4 threads,
one CTA, word loads and stores, atomics). Each runs through qgpu_min.host.launch.launch(..., backend='circuit')
with the step engine's prefill and decode (model/step_engine.py) wrapped to time them apart, and through
backend='interp'. Per launch: prompt and generated tokens, prefill seconds and tokens/s, decode tokens/s
(tokens fed back: every generated token but the last, which is HALT), peak RSS so far, both backends' launch
times and their ratio, and whether the arrays agree. Beside it, the per-token path the engine replaces: the
same launch's tokens replayed through Model.prefill and Model.decode with the whole vocabulary's argmax
(column `per-tok`, and `per_token_tokens_per_s`), taking turns with the engine run, and whether it chose the
same tokens. `tokens_per_s` is decode tokens over decode seconds of all launches. Times are the best of
--repeat runs; nothing here asserts a time. The 1-minute load average is printed first: on a shared machine
it says how far to trust the numbers.

--model DIR runs the same launches through a merged checkpoint (backend='model': every Qwen layer after the
GPU's, the whole vocabulary's logits) instead of the circuit-only model; "GPU" then reports loading it.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import readme_dot  # noqa: E402

# name -> (CUDA source or None for an example file, arguments, threads)
KERNELS = {
    "dot": (None, readme_dot.ARGS, readme_dot.BLOCK[0]),
    "vadd": ("""
        __global__ void vadd(const int* a, const int* b, int* c) {
            int i = threadIdx.x;
            c[i] = a[i] + b[i];
        }""", [[1, -2, 300, 70000], [10, 20, -30, 5], [0, 0, 0, 0]], 4),
    "collatz": ("""
        __global__ void collatz(const int* x, int* steps) {
            int t = threadIdx.x, v = x[t], s = 0;
            while (v != 1) {                      // lanes leave the loop at different trips
                v = (v & 1) ? 3 * v + 1 : v >> 1;
                s++;
            }
            steps[t] = s;
        }""", [[6, 3, 1, 7], [0, 0, 0, 0]], 4),
    "histogram": ("""
        __global__ void histogram(const int* x, int* hist, int* top) {
            int v = x[threadIdx.x];
            atomicAdd(&hist[v & 3], 1);
            atomicMax(top, v);
        }""", [[5, 2, 9, 6], [0, 0, 0, 0], [0]], 4),
}


def rss_mib() -> float:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class ModelTimer:
    """Wraps a Model's prefill and decode (instance attributes) to time them and count their tokens."""

    def __init__(self, model) -> None:
        self.model = model
        self._prefill, self._decode = model.prefill, model.decode
        model.prefill, model.decode = self.prefill, self.decode
        self.reset()

    def reset(self) -> None:
        self.prefill_s = self.decode_s = 0.0
        self.prefill_tokens = self.decode_tokens = 0

    def prefill(self, state, token_ids, *args, **kwargs):
        t0 = time.perf_counter()
        out = self._prefill(state, token_ids, *args, **kwargs)
        self.prefill_s += time.perf_counter() - t0
        self.prefill_tokens += len(token_ids)
        return out

    def decode(self, state, token_id, *args, **kwargs):
        t0 = time.perf_counter()
        out = self._decode(state, token_id, *args, **kwargs)
        self.decode_s += time.perf_counter() - t0
        self.decode_tokens += 1
        return out

    def restore(self) -> None:
        self.model.prefill, self.model.decode = self._prefill, self._decode


class EngineTimer(ModelTimer):
    """The same for a step engine: its prefill (tokens fed) and decode (tokens generated, each fed in turn)."""

    def decode(self, state, token_id, *args, **kwargs):
        t0 = time.perf_counter()
        out = self._decode(state, token_id, *args, **kwargs)
        self.decode_s += time.perf_counter() - t0
        self.decode_tokens += len(out)
        return out


def per_token_replay(model, prompt: list[int], generated: list[int]) -> tuple[float, float, bool]:
    """The per-token path the engine replaces, over a launch's tokens: Model.prefill, then Model.decode of each
    generated token but the last, each step's argmax over the whole vocabulary. (prefill s, decode s, whether
    every argmax is the launch's token.)"""
    import numpy as np
    state = model.new_state()
    t0 = time.perf_counter()
    same = int(np.argmax(model.prefill(state, prompt))) == generated[0]
    t1 = time.perf_counter()
    for i, t in enumerate(generated[:-1]):
        same &= int(np.argmax(model.decode(state, t))) == generated[i + 1]
    return t1 - t0, time.perf_counter() - t1, bool(same)


def load_merged_gpu(model_dir: str) -> tuple[object, dict]:
    """A merged checkpoint, loaded once and registered where backend 'model' finds it (so the launches use
    this object, whose model the timer wraps), timed."""
    from qgpu_min.gpu import backend
    from qgpu_min.gpu.merged import load_merged

    t0 = time.perf_counter()
    cg = load_merged(model_dir, backend.SPEC)
    backend._MERGED[str(Path(model_dir).resolve())] = cg
    return cg, {"source": f"merged checkpoint {model_dir}", "seconds": round(time.perf_counter() - t0, 3),
                "cache_dir": None, "layers": cg.n_layers, "vocab": None, "rss_mib": round(rss_mib(), 1)}


def load_gpu() -> tuple[object, dict]:
    """The compiled GPU through the backend's own path (cache or first-use compile), timed."""
    from qgpu_min.gpu import backend

    messages: list[str] = []
    try:   # with the cache module, its progress messages say whether it compiled
        from qgpu_min.gpu.cache import default_cache_dir
        progress, cache_dir = messages.append, str(default_cache_dir())
    except ImportError:
        progress, cache_dir = None, None
    t0 = time.perf_counter()
    cg = backend.compiled(backend.SPEC, progress=progress)
    seconds = time.perf_counter() - t0
    if progress is None:
        source = "compiled (no cache module)"
    else:
        source = "compiled" if any("compiling" in m for m in messages) else "cache"
    info = {"source": source, "seconds": round(seconds, 3), "cache_dir": cache_dir,
            "layers": len(cg.layers), "vocab": len(cg.tokens), "rss_mib": round(rss_mib(), 1)}
    return cg, info


def compile_kernels(tmp: Path) -> dict:
    from qgpu_min.gpu.program import block_format
    from qgpu_min.gpu.layout import GpuSpec
    from qgpu_min.host.launch import compile_kernel, for_format

    out = {}
    for name, (src, args, threads) in KERNELS.items():
        if src is None:
            path = ROOT / "examples" / f"{name}.cu"
        else:
            path = tmp / f"{name}.cu"
            path.write_text(src)
        k = compile_kernel(path)
        # lowered once for the GPU's block format, so launch() does not lower it again on every run
        out[name] = (k, for_format(k, block_format(GpuSpec())), args, threads)
    return out


def best(fn, repeat: int):
    """(result of the last run, the best wall time)."""
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return result, min(times)


def bench_launch(name: str, kernels: tuple, timer: ModelTimer, mode: str, repeat: int, cg,
                 model_dir: str | None = None) -> dict:
    """A launch fed its whole prompt (the kept program loads emptied first), best of `repeat`; then the same
    launch again, taking up the program's kept load (gpu/model.load_state), best of `repeat`. model_dir: through
    that merged checkpoint (backend 'model') instead of the circuit-only model."""
    from qgpu_min.host.launch import launch

    backend, options = ("model", {"model": model_dir}) if model_dir else ("circuit", {})

    machine_k, gpu_k, args, threads = kernels
    interp, interp_s = best(lambda: launch(machine_k, args, block=(threads, 1), backend="interp"), repeat)
    runs, per_token = [], []
    for _ in range(repeat):
        cg.loaded.clear()
        timer.reset()
        t0 = time.perf_counter()
        res = launch(gpu_k, args, block=(threads, 1), backend=backend, mode=mode, **options)
        total = time.perf_counter() - t0
        runs.append((total, timer.prefill_s, timer.decode_s, timer.prefill_tokens, timer.decode_tokens, res))
        if model_dir is None:     # the per-token path, in turn with the engine's run
            trace = res.extra["trace"]
            per_token.append(per_token_replay(cg.model(mode), trace["prompt_ids"], trace["generated_ids"]))
    circuit_s = min(r[0] for r in runs)
    prefill_s = min(r[1] for r in runs)
    decode_s = min(r[2] for r in runs)
    _, _, _, prefill_tokens, decode_tokens, res = runs[-1]
    again, kept_s = best(lambda: launch(gpu_k, args, block=(threads, 1), backend=backend, mode=mode, **options),
                         repeat)
    match = all(list(r.arrays[k]) == list(interp.arrays[k]) for r in (res, again) for k in interp.arrays)
    extra = {}
    if per_token:
        pt_decode = min(p[1] for p in per_token)
        extra = {"per_token_prefill_s": round(min(p[0] for p in per_token), 4), "per_token_decode_s": round(pt_decode, 4),
                 "per_token_decode_tokens_per_s": round(decode_tokens / pt_decode, 1) if pt_decode else None,
                 "per_token_same_tokens": all(p[2] for p in per_token)}
        match &= extra["per_token_same_tokens"]
    return {**extra, "name": name, "threads": threads, "arrays": {k: [int(x) for x in v] for k, v in res.arrays.items()},
            "match": match, "prompt_tokens": res.tokens["prompt"], "generated_tokens": res.tokens["generated"],
            "prefill_tokens": prefill_tokens, "decode_tokens": decode_tokens,
            "prefill_s": round(prefill_s, 4), "prefill_tokens_per_s": round(prefill_tokens / prefill_s, 1),
            "decode_s": round(decode_s, 4),
            "decode_tokens_per_s": round(decode_tokens / decode_s, 1) if decode_s else None,
            "circuit_s": round(circuit_s, 4), "interp_s": round(interp_s, 5),
            "kept_load_s": round(kept_s, 4), "prompt_reused": again.extra["prompt_reused"],
            "circuit_over_interp": round(circuit_s / interp_s, 1), "rss_mib": round(rss_mib(), 1)}


def bench_batch(n: int, mode: str, repeat: int) -> dict:
    """n dot launches (the README's arguments, scalar varied) through launch_many on the circuit backend, with
    the core's threads set to 1 and then to all, best of `repeat` each: launches/s and the ratio."""
    from qgpu_min.host.launch import compile_kernel, launch_many
    from qgpu_min.model import kernels
    k = compile_kernel(ROOT / "examples" / "dot.cu")
    args = [[[1, 2, 3], [4, 5, 6], [0], 1 + j % 3] for j in range(n)]
    cores = kernels.threads()
    times = {}
    for t in (1, cores):
        kernels.set_threads(t)
        try:
            _, times[t] = best(lambda: launch_many(k, args, block=(3, 1), backend="circuit", mode=mode), repeat)
        finally:
            kernels.set_threads(None)
    return {"launches": n, "threads": cores, "one_thread_s": round(times[1], 3), "all_threads_s": round(times[cores], 3),
            "launches_per_s": round(n / times[cores], 1), "speedup": round(times[1] / times[cores], 2)}


def main() -> int:
    from qgpu_min.gpu import kept_state
    # every launch's prefill is timed over its whole prompt: no load state from the files a process before left
    os.environ[kept_state.ENV_VAR] = "0"
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--mode", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--repeat", type=int, default=1, help="runs per launch; times are the best (default 1)")
    ap.add_argument("--cold", action="store_true", help="compile into a fresh temporary cache (first-use time)")
    ap.add_argument("--model", metavar="DIR", help="launch through this merged checkpoint (qgpu-min build)")
    ap.add_argument("--only", metavar="NAMES", help=f"comma-separated launches to run (of {', '.join(KERNELS)})")
    ap.add_argument("--batch", type=int, default=0, metavar="N",
                    help="also N dot launches through launch_many on 1 thread and on all, side by side")
    a = ap.parse_args()
    only = a.only.split(",") if a.only else list(KERNELS)
    if not only or set(only) - set(KERNELS):
        ap.error(f"--only takes names of {', '.join(KERNELS)}")
    if a.cold and a.model:
        ap.error("--cold compiles the circuit-only GPU; a merged checkpoint is built by `qgpu-min build`")
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    load = os.getloadavg()[0]
    out: dict = {"mode": a.mode, "repeat": a.repeat, "load_avg_1m": round(load, 2), "model": a.model}
    if not a.json:
        print(f"load average (1 min): {load:.2f}; mode {a.mode}; best of {a.repeat}")
    with tempfile.TemporaryDirectory() as tmp:
        kernels = {name: k for name, k in compile_kernels(Path(tmp)).items() if name in only}
    cold = tempfile.TemporaryDirectory(prefix="qgpu-bench-cache-") if a.cold else None
    if cold is not None:
        os.environ["QGPU_CACHE_DIR"] = cold.name     # an empty cache: the GPU is compiled, then removed
    try:
        cg, gpu = load_merged_gpu(a.model) if a.model else load_gpu()
    finally:
        if cold is not None:
            cold.cleanup()
    t0 = time.perf_counter()
    model = cg.model(a.mode)
    gpu["model_build_s"] = round(time.perf_counter() - t0, 3)
    gpu["rss_mib_after_model"] = round(rss_mib(), 1)
    out["gpu"] = gpu
    if not a.json:
        print(f"GPU: {gpu['layers']} layers, {gpu['vocab'] or 'all the checkpoint'}'s tokens; {gpu['source']} in "
              f"{gpu['seconds']:.2f} s ({gpu['cache_dir']}); runtime model built in {gpu['model_build_s']:.2f} s; peak RSS "
              f"{gpu['rss_mib_after_model']:.0f} MiB")
    timer = ModelTimer(model) if a.model else EngineTimer(cg.engine(a.mode))
    try:
        launches = [bench_launch(name, k, timer, a.mode, a.repeat, cg, a.model) for name, k in kernels.items()]
    finally:
        timer.restore()
    out["launches"] = launches
    if a.batch and not a.model:
        out["batch"] = bench_batch(a.batch, a.mode, a.repeat)
    dec_tokens = sum(r["decode_tokens"] for r in launches)
    dec_s = sum(r["decode_s"] for r in launches)
    pre_tokens = sum(r["prefill_tokens"] for r in launches)
    pre_s = sum(r["prefill_s"] for r in launches)
    out["tokens_per_s"] = round(dec_tokens / dec_s, 1)
    out["prefill_tokens_per_s"] = round(pre_tokens / pre_s, 1)
    if not a.model:
        pt_s = sum(r["per_token_decode_s"] for r in launches)
        out["per_token_tokens_per_s"] = round(dec_tokens / pt_s, 1)
        out["per_token_prefill_tokens_per_s"] = round(
            sum(r["prompt_tokens"] for r in launches) / sum(r["per_token_prefill_s"] for r in launches), 1)
        out["decode_speedup"] = round(pt_s / dec_s, 2)
    out["peak_rss_mib"] = round(rss_mib(), 1)
    out["all_match"] = all(r["match"] for r in launches)
    if a.json:
        print(json.dumps(out))
    else:
        head = (f"{'launch':<10} {'thr':>3} {'prompt':>6} {'gen':>5} {'prefill s':>9} {'pre tok/s':>9} "
                f"{'decode s':>9} {'dec tok/s':>9} {'circuit s':>9} {'kept s':>7} {'interp s':>9} {'ratio':>7} "
                f"{'RSS MiB':>8} {'per-tok':>7} ok")
        print("\n" + head + "\n" + "-" * len(head))
        for r in launches:
            print(f"{r['name']:<10} {r['threads']:>3} {r['prompt_tokens']:>6} {r['generated_tokens']:>5} "
                  f"{r['prefill_s']:>9.3f} {r['prefill_tokens_per_s']:>9.0f} {r['decode_s']:>9.3f} "
                  f"{r['decode_tokens_per_s'] or 0:>9.0f} {r['circuit_s']:>9.3f} {r['kept_load_s']:>7.3f} "
                  f"{r['interp_s']:>9.4f} "
                  f"{r['circuit_over_interp']:>7.0f} {r['rss_mib']:>8.0f} "
                  f"{r.get('per_token_decode_tokens_per_s') or 0:>7.0f} {'yes' if r['match'] else 'NO'}")
        print(f"\ndecode: {dec_tokens} tokens in {dec_s:.2f} s = {out['tokens_per_s']:.0f} tokens/s; prefill: "
              f"{pre_tokens} tokens in {pre_s:.2f} s = {out['prefill_tokens_per_s']:.0f} tokens/s; "
              f"peak RSS {out['peak_rss_mib']:.0f} MiB")
        if "batch" in out:
            b = out["batch"]
            print(f"batch: {b['launches']} dot launches through launch_many: {b['one_thread_s']:.2f} s on 1 thread, "
                  f"{b['all_threads_s']:.2f} s on {b['threads']} ({b['launches_per_s']:.1f} launches/s, "
                  f"{b['speedup']:.2f}x)")
        if not a.model:
            print(f"per-token path (Model.prefill/decode, whole-vocabulary argmax): decode "
                  f"{out['per_token_tokens_per_s']:.0f} tokens/s, prefill {out['per_token_prefill_tokens_per_s']:.0f} "
                  f"tokens/s; engine decode / per-token decode: {out['decode_speedup']:.2f}x")
        print("ratio = circuit launch time / interpreter launch time (same kernel and arguments); kept s = the "
              "same launch again, its program's load taken up (prompt tokens not fed: "
              + ", ".join(f"{r['name']} {r['prompt_reused']}" for r in launches) + ")")
    return 0 if out["all_match"] else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Benchmark the runtime at full Qwen3.5-2B shapes against the memory-bandwidth floor and HF transformers.

    python tools/bench_model.py                          # 24 layers, synthetic checkpoint in /tmp (reused)
    python tools/bench_model.py --layers 4 --no-hf       # quick
    python tools/bench_model.py --model DIR              # any checkpoint directory (e.g. the fetched model)
    python tools/bench_model.py --int8 --rounds 2 --no-hf # ours bf16 against ours --quant int8, interleaved
    python tools/bench_model.py --bf16-mode --no-hf      # also ours in bf16 mode (bf16 activations: AMX tiles)

One run measures, each in its own process (so peak RSS is each side's own):
  ours: prefill tokens/s, decode tokens/s, and the machine's memory-copy bandwidth (NumPy copy, counted
        as bytes read + written, best of single- and multi-threaded); the floor is the weight bytes a
        decoded token reads (every layer matrix, the norms, the LM head, the embedding row) / bandwidth.
        Also the rate of reading alone (a NumPy max over the buffer), which is all decode does with weights,
        and the read floor it gives (higher than the copy floor where reads alone cannot use the bandwidth
        a copy's reads and writes together do).
  ours int8 (--int8): the same with the checkpoint quantized at load (--quant int8); its floor is its own
        (Q8 bytes). With --rounds R the ours workers alternate R times; the table shows each one's best round.
  ours bf16 mode (--bf16-mode): the same in bf16 mode, which rounds activations to bf16 as torch's bf16
        inference does, and so multiplies bf16 by bf16 like llama.cpp's bf16 GGUF (on AMX tiles where the CPU
        has them); "ours" is fp32 mode (fp32 activations).
  transformers: the same prompt and decode count through Qwen3_5ForCausalLM on CPU, in fp32 when the free
        memory allows it (bf16 otherwise, which torch runs much slower on CPU; the table says which).
The synthetic checkpoint comes from qgpu_min.model.synthetic.write_synthetic_checkpoint (published format,
2B shapes, random weights); at 24 layers it is ~4.5 GB on disk.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

RESULT = "BENCH-RESULT "
GB = 1e9


# ---- measurements (run inside the worker processes) ---------------------------------------------------------

class CopyBench:
    """Memory-copy bandwidth in bytes/s (read + written), best of one thread and all cores; and the rate of
    reading alone (a vectorized NumPy max over the same buffer: what decode does with weights), likewise."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.src = np.ones(nbytes // 8, np.float64)
        self.dst = np.empty_like(self.src)
        self.threads = os.cpu_count() or 1
        bounds = np.linspace(0, len(self.src), self.threads + 1).astype(np.int64)
        self.parts = [(self.dst[a:b], self.src[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]

    def _best(self, run, repeats: int, bytes_moved: int) -> float:
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            run()
            times.append(time.perf_counter() - t)
        return bytes_moved / min(times)

    def measure(self, repeats: int) -> dict[str, float]:
        copied, read = 2 * self.nbytes, self.nbytes
        single = self._best(lambda: np.copyto(self.dst, self.src), repeats, copied)
        read_single = self._best(lambda: self.src.view(np.uint32).max(), repeats, read)
        with ThreadPoolExecutor(self.threads) as pool:  # NumPy drops the GIL while copying and reducing
            multi = self._best(lambda: list(pool.map(lambda p: np.copyto(*p), self.parts)), repeats, copied)
            read_multi = self._best(lambda: list(pool.map(lambda p: p[1].view(np.uint32).max(), self.parts)),
                                    repeats, read)
        return {"single": single, "multi": multi, "best": max(single, multi),
                "read_single": read_single, "read_multi": read_multi, "read_best": max(read_single, read_multi)}


def copy_bandwidth(nbytes: int = 1 << 29, repeats: int = 5) -> dict[str, float]:
    return CopyBench(nbytes).measure(repeats)


def _nbytes(w) -> int:
    if isinstance(w, np.ndarray):
        return w.nbytes
    if hasattr(w, "scales"):
        return w.nbytes                                                            # Q8: int8 weights + scales
    return sum(getattr(w, a).nbytes for a in ("indptr", "indices", "values"))  # CSR sparse matrix


def decode_bytes(model) -> int:
    """Weight bytes one decoded token reads: all layer tensors, final norm, LM head (its Q8 form when
    quantized), one embedding row."""
    w = model.weights
    layers = sum(_nbytes(t) for layer in w.layers for t in layer.values())
    head = w.lm_head if w.head_q8 is None else w.head_q8
    return layers + _nbytes(w.final_norm) + _nbytes(head) + w.embed.shape[1] * w.embed.itemsize


def _prompt(vocab: int, n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, min(vocab, 248044), n).tolist()  # no special/reserved ids


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def worker_ours(path: str, prompt_len: int, n_decode: int, warmup: int, seed: int, paired: int,
                quant: str | None = None, mode: str = "fp32") -> dict:
    from qgpu_min.model import kernels, load_model

    t = time.perf_counter()
    model = load_model(path, mode, quant=quant)
    load_s = time.perf_counter() - t
    prompt = _prompt(model.config.vocab_size, prompt_len, seed)
    for _ in range(warmup):  # page the mapped weights in and warm the caches, on a throwaway state
        model.decode(model.new_state(), prompt[0])
    state = model.new_state()
    t = time.perf_counter()
    logits = model.prefill(state, prompt)
    prefill_s = time.perf_counter() - t
    tok = int(logits.argmax())
    times = []
    for _ in range(n_decode):
        t = time.perf_counter()
        tok = int(model.decode(state, tok).argmax())
        times.append(time.perf_counter() - t)
    peak_rss = _peak_rss()  # before the paired phase's copy buffers
    # Paired phase: each decode token right after a bandwidth measurement, so both see the same load from
    # the rest of the machine; their ratio is steadier than the whole-run figures on a shared machine.
    nbytes = decode_bytes(model)
    bench, ratios = CopyBench(1 << 28), []
    for _ in range(paired):
        bw = bench.measure(repeats=2)["best"]
        t = time.perf_counter()
        tok = int(model.decode(state, tok).argmax())
        ratios.append((time.perf_counter() - t) / (nbytes / bw))
    return {"load_s": load_s, "prefill_tok_s": prompt_len / prefill_s, "decode_tok_s": n_decode / sum(times),
            "mode": mode, "isa": kernels.isa(),
            "decode_ms_median": 1e3 * float(np.median(times)), "decode_ms_best": 1e3 * min(times),
            "bytes_per_token": nbytes, "peak_rss": peak_rss,
            "paired_floor_ratios": ratios}


def worker_hf(path: str, prompt_len: int, n_decode: int, warmup: int, seed: int, dtype: str) -> dict:
    import torch
    from transformers import Qwen3_5ForCausalLM

    torch.set_num_threads(os.cpu_count() or 1)
    config = json.loads((Path(path) / "config.json").read_text())
    tied = config.get("tie_word_embeddings", config.get("text_config", {}).get("tie_word_embeddings", False))
    t = time.perf_counter()
    # The nested checkpoint loads as a text-only model (visual/mtp tensors skipped); tying is a top-level
    # field of the nested config, so it is passed on explicitly.
    model = Qwen3_5ForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), tie_word_embeddings=tied).eval()
    load_s = time.perf_counter() - t
    prompt = _prompt(model.config.vocab_size, prompt_len, seed)

    params = inspect.signature(model.forward).parameters
    cache_arg = "cache" if "cache" in params else "past_key_values"  # renamed in transformers 5.x
    # Only the last position's logits, as our prefill computes (not 248320 logits for every prompt token).
    last_only = {"logits_to_keep": 1} if "logits_to_keep" in params else {}

    def step(ids: list[int], cache):
        out = model(torch.tensor([ids]), use_cache=True, **{cache_arg: cache}, **last_only)
        return out.logits[0, -1], getattr(out, cache_arg)

    with torch.no_grad():
        for _ in range(warmup):
            step(prompt[:1], None)
        t = time.perf_counter()
        logits, cache = step(prompt, None)
        prefill_s = time.perf_counter() - t
        tok = int(logits.argmax())
        times = []
        for _ in range(n_decode):
            t = time.perf_counter()
            logits, cache = step([tok], cache)
            tok = int(logits.argmax())
            times.append(time.perf_counter() - t)
    return {"load_s": load_s, "prefill_tok_s": prompt_len / prefill_s, "decode_tok_s": n_decode / sum(times),
            "decode_ms_median": 1e3 * float(np.median(times)), "decode_ms_best": 1e3 * min(times),
            "peak_rss": _peak_rss(), "dtype": dtype}


def worker_llama(bench: str, gguf: str, prompt_len: int, n_decode: int, reps: int) -> dict:
    """llama.cpp's llama-bench on a GGUF: prefill of prompt_len tokens and decode of n_decode (from an empty
    context), all CPUs, `reps` repetitions each (its own mean); peak RSS is the child's (this worker runs
    only it)."""
    threads = os.cpu_count() or 1
    proc = subprocess.run([bench, "-m", gguf, "-p", str(prompt_len), "-n", str(n_decode), "-t", str(threads),
                           "-r", str(reps), "-o", "json"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"llama-bench failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    records = json.loads(proc.stdout)
    pp = next(r for r in records if r["n_prompt"] == prompt_len and r["n_gen"] == 0)
    tg = next(r for r in records if r["n_gen"] == n_decode and r["n_prompt"] == 0)
    return {"prefill_tok_s": pp["avg_ts"], "decode_tok_s": tg["avg_ts"], "type": tg.get("model_type", ""),
            "peak_rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, "gguf": gguf,
            "bytes": Path(gguf).stat().st_size}


# ---- driver ----------------------------------------------------------------------------------------------

def _mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def text_tensors(path: Path) -> tuple[int, int]:
    """(parameters, stored bytes) of the text model, from the safetensors headers (nothing is loaded)."""
    from qgpu_min.model.safetensors_io import read_checkpoint_headers
    from qgpu_min.model.weights import SKIPPED_PREFIXES

    headers = read_checkpoint_headers(path, keep=lambda n: not n.startswith(SKIPPED_PREFIXES))
    return sum(int(np.prod(t.shape)) for t in headers.values()), sum(t.end - t.begin for t in headers.values())


def hf_dtype(path: Path) -> tuple[str | None, str]:
    """fp32 if it fits in the free memory with room for loading, else bf16, else none; and why."""
    params, free = text_tensors(path)[0], _mem_available()
    for dtype, size in (("float32", 4), ("bfloat16", 2)):
        need = params * size * 1.3 + 1.5 * GB  # weights, load-time copies, torch itself
        if need < free:
            return dtype, f"{params * size / GB:.1f} GB of {dtype} weights, {free / GB:.1f} GB free"
    return None, f"{params} parameters do not fit in {free / GB:.1f} GB free memory"


def run_worker(kind: str, args: argparse.Namespace, path: Path, *extra: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", kind, "--model", str(path), "--prompt-len", str(args.prompt_len),
           "--decode", str(args.decode), "--warmup", str(args.warmup), "--seed", str(args.seed),
           "--paired", str(args.paired), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT):])
    raise RuntimeError(f"{kind} benchmark failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")


def synthetic_checkpoint(layers: int, where: Path | None) -> Path:
    from qgpu_min.model.synthetic import write_synthetic_checkpoint

    path = where or Path(tempfile.gettempdir()) / f"qgpu-bench-2b-{layers}"
    if (path / "config.json").exists() and (path / "model.safetensors.index.json").exists():
        n = len(json.loads((path / "config.json").read_text())["text_config"]["layer_types"])
        if n == layers:
            return path
        raise SystemExit(f"{path} holds a {n}-layer checkpoint, not {layers}: pass another --checkpoint-dir")
    t = time.perf_counter()
    print(f"writing a synthetic 2B-shape checkpoint with {layers} layers to {path} ...", file=sys.stderr)
    write_synthetic_checkpoint(path, size="2b", layers=layers)
    print(f"  done in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return path


def _paired(result: dict) -> str:
    r = result["paired_floor_ratios"]
    return f"{np.median(r):.2f}x, {min(r):.2f}x ({len(r)} tokens)" if r else "-"


def _fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def _aligned(rows: list[tuple[str, ...]]) -> str:
    """Rows of cells as text columns, each as wide as its widest cell."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def table(ours: dict, hf: dict | None, hf_note: str, args: argparse.Namespace, path: Path) -> str:
    bw = ours["bandwidth"]["best"]
    floor_ms = 1e3 * ours["bytes_per_token"] / bw
    read_floor_ms = 1e3 * ours["bytes_per_token"] / ours["bandwidth"]["read_best"]
    rows = [("checkpoint", str(path), "", ""),
            ("text weights (mapped)", f"{text_tensors(path)[1] / GB:.3f} GB", "", ""),
            ("prompt / decoded tokens", f"{args.prompt_len} / {args.decode}", "", ""),
            ("CPUs, load average (1 min) at start", f"{os.cpu_count()}, {args.load_at_start:.1f}", "", ""),
            ("weights read per decoded token", f"{ours['bytes_per_token'] / GB:.3f} GB", "", ""),
            ("copy bandwidth (1 thread / all)",
             f"{ours['bandwidth']['single'] / GB:.1f} / {ours['bandwidth']['multi'] / GB:.1f} GB/s", "", ""),
            ("decode floor (bytes / bandwidth)", f"{floor_ms:.0f} ms/token", "", ""),
            ("read bandwidth (1 thread / all)",
             f"{ours['bandwidth']['read_single'] / GB:.1f} / {ours['bandwidth']['read_multi'] / GB:.1f} GB/s", "", ""),
            ("read floor (bytes / read bandwidth)", f"{read_floor_ms:.0f} ms/token", "", "")]
    h = hf or {}
    rows += [
        ("", "ours", f"transformers ({h.get('dtype', hf_note)})" if hf else "transformers", "ours / transformers"),
        ("load", _fmt(ours["load_s"], "{:.1f} s"), _fmt(h.get("load_s"), "{:.1f} s"), ""),
        ("prefill", _fmt(ours["prefill_tok_s"], "{:.1f} tok/s"), _fmt(h.get("prefill_tok_s"), "{:.1f} tok/s"),
         _fmt(ours["prefill_tok_s"] / h["prefill_tok_s"] if hf else None, "{:.2f}x faster")),
        ("decode", _fmt(ours["decode_tok_s"], "{:.2f} tok/s"), _fmt(h.get("decode_tok_s"), "{:.2f} tok/s"),
         _fmt(ours["decode_tok_s"] / h["decode_tok_s"] if hf else None, "{:.2f}x faster")),
        ("decode token, median / best", f"{ours['decode_ms_median']:.0f} / {ours['decode_ms_best']:.0f} ms",
         f"{h['decode_ms_median']:.0f} / {h['decode_ms_best']:.0f} ms" if hf else "-", ""),
        ("decode time / floor (mean, best)",
         f"{1e3 / ours['decode_tok_s'] / floor_ms:.2f}x, {ours['decode_ms_best'] / floor_ms:.2f}x",
         f"{1e3 / h['decode_tok_s'] / floor_ms:.2f}x, {h['decode_ms_best'] / floor_ms:.2f}x" if hf else "-", ""),
        ("decode / floor, paired (median, best)", _paired(ours), "", ""),
        ("decode time / read floor (mean, best)",
         f"{1e3 / ours['decode_tok_s'] / read_floor_ms:.2f}x, {ours['decode_ms_best'] / read_floor_ms:.2f}x",
         f"{1e3 / h['decode_tok_s'] / read_floor_ms:.2f}x, {h['decode_ms_best'] / read_floor_ms:.2f}x" if hf else "-",
         ""),
        ("peak RSS", f"{ours['peak_rss'] / GB:.2f} GB",
         _fmt(h.get("peak_rss", None) and h["peak_rss"] / GB, "{:.2f} GB"), ""),
    ]
    return _aligned(rows)


def int8_table(ours: dict, q8: dict, runs: dict) -> str:
    """ours bf16 against ours --quant int8: each one's best round, per-round decode tok/s, and the ratios."""
    bw = ours["bandwidth"]["best"]
    rows = [("", "ours (bf16 weights)", "ours --quant int8", "int8 / bf16"),
            ("weights read per decoded token", f"{ours['bytes_per_token'] / GB:.3f} GB",
             f"{q8['bytes_per_token'] / GB:.3f} GB", f"{q8['bytes_per_token'] / ours['bytes_per_token']:.2f}x"),
            ("load", f"{ours['load_s']:.1f} s", f"{q8['load_s']:.1f} s", ""),
            ("prefill", f"{ours['prefill_tok_s']:.1f} tok/s", f"{q8['prefill_tok_s']:.1f} tok/s",
             f"{q8['prefill_tok_s'] / ours['prefill_tok_s']:.2f}x"),
            ("decode (best round)", f"{ours['decode_tok_s']:.2f} tok/s", f"{q8['decode_tok_s']:.2f} tok/s",
             f"{q8['decode_tok_s'] / ours['decode_tok_s']:.2f}x"),
            ("decode per round", " ".join(f"{r['decode_tok_s']:.2f}" for r in runs["ours"]),
             " ".join(f"{r['decode_tok_s']:.2f}" for r in runs["ours int8"]), ""),
            ("decode time / own floor (mean)", f"{1e3 / ours['decode_tok_s'] / (1e3 * ours['bytes_per_token'] / bw):.2f}x",
             f"{1e3 / q8['decode_tok_s'] / (1e3 * q8['bytes_per_token'] / bw):.2f}x", ""),
            ("decode / own floor, paired (median, best)", _paired(ours), _paired(q8), ""),
            ("peak RSS", f"{ours['peak_rss'] / GB:.2f} GB", f"{q8['peak_rss'] / GB:.2f} GB", "")]
    return _aligned(rows)


def mode_table(ours: dict, b16: dict, runs: dict) -> str:
    """ours in fp32 mode against ours in bf16 mode: each one's best round and the ratios."""
    rows = [("", "ours (fp32 mode)", "ours bf16 mode", "bf16 / fp32 mode"),
            ("SIMD level", ours["isa"], b16["isa"], ""),
            ("prefill", f"{ours['prefill_tok_s']:.1f} tok/s", f"{b16['prefill_tok_s']:.1f} tok/s",
             f"{b16['prefill_tok_s'] / ours['prefill_tok_s']:.2f}x"),
            ("prefill per round", " ".join(f"{r['prefill_tok_s']:.1f}" for r in runs["ours"]),
             " ".join(f"{r['prefill_tok_s']:.1f}" for r in runs["ours bf16 mode"]), ""),
            ("decode (best round)", f"{ours['decode_tok_s']:.2f} tok/s", f"{b16['decode_tok_s']:.2f} tok/s",
             f"{b16['decode_tok_s'] / ours['decode_tok_s']:.2f}x"),
            ("peak RSS", f"{ours['peak_rss'] / GB:.2f} GB", f"{b16['peak_rss'] / GB:.2f} GB", "")]
    return _aligned(rows)


def vs_table(sides: dict[str, dict], runs: dict[str, list[dict]]) -> str:
    """Every side's best round (decode, prefill, peak RSS), each round's decode, and ours against each
    llama.cpp side."""
    names = list(sides)
    rows = [("", *names),
            ("decode tok/s (best round)", *(f"{sides[n]['decode_tok_s']:.2f}" for n in names)),
            ("decode tok/s per round", *(" ".join(f"{r['decode_tok_s']:.2f}" for r in runs[n]) for n in names)),
            ("prefill tok/s (best round)", *(f"{sides[n]['prefill_tok_s']:.1f}" for n in names)),
            ("prefill tok/s per round", *(" ".join(f"{r['prefill_tok_s']:.1f}" for r in runs[n]) for n in names)),
            ("peak RSS", *(f"{sides[n]['peak_rss'] / GB:.2f} GB" for n in names))]
    for other in (n for n in names if n.startswith("llama.cpp")):
        for mine in (n for n in names if n.startswith("ours")):
            rows.append((f"{mine} / {other}: decode, prefill",
                         *(f"{sides[mine]['decode_tok_s'] / sides[other]['decode_tok_s']:.2f}x, "
                           f"{sides[mine]['prefill_tok_s'] / sides[other]['prefill_tok_s']:.2f}x" if n == mine else ""
                           for n in names)))
    return _aligned(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="checkpoint directory to benchmark (default: a synthetic 2B-shape one)")
    ap.add_argument("--layers", type=int, default=24, help="layers of the synthetic checkpoint (default 24)")
    ap.add_argument("--checkpoint-dir", type=Path, help="where to write/reuse the synthetic checkpoint")
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--decode", type=int, default=16, help="decoded tokens timed (default 16)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed decode steps first (pages weights in)")
    ap.add_argument("--paired", type=int, default=8,
                    help="extra decode steps, each timed right after a bandwidth measurement (default 8)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-hf", action="store_true", help="skip transformers")
    ap.add_argument("--int8", action="store_true", help="also run ours with --quant int8")
    ap.add_argument("--bf16-mode", action="store_true", help="also run ours in bf16 mode")
    ap.add_argument("--rounds", type=int, default=1, help="alternate the ours workers this many times (best kept)")
    ap.add_argument("--quant", choices=("int8",), help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("fp32", "bf16"), default="fp32", help=argparse.SUPPRESS)
    ap.add_argument("--llama-bench", help="llama.cpp's llama-bench binary: run it on each --gguf beside ours")
    ap.add_argument("--gguf", action="append", default=[], help="a GGUF of the same checkpoint (repeatable; "
                    "tools/llama_cpp_convert.py makes one)")
    ap.add_argument("--llama-reps", type=int, default=2, help="llama-bench repetitions per round (default 2)")
    ap.add_argument("--hf-dtype", choices=("auto", "float32", "bfloat16"), default="auto")
    ap.add_argument("--json", type=Path, help="also write the raw numbers here")
    ap.add_argument("--worker", choices=("ours", "hf", "bandwidth", "llama"), help=argparse.SUPPRESS)
    ap.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker == "ours":
        print(RESULT + json.dumps(worker_ours(args.model, args.prompt_len, args.decode, args.warmup, args.seed,
                                              args.paired, args.quant, args.mode)))
        return 0
    if args.worker == "llama":
        print(RESULT + json.dumps(worker_llama(args.llama_bench, args.gguf[0], args.prompt_len, args.decode,
                                               args.llama_reps)))
        return 0
    if args.worker == "bandwidth":
        print(RESULT + json.dumps(copy_bandwidth()))
        return 0
    if args.worker == "hf":
        print(RESULT + json.dumps(worker_hf(args.model, args.prompt_len, args.decode, args.warmup, args.seed,
                                            args.dtype)))
        return 0

    path = Path(args.model) if args.model else synthetic_checkpoint(args.layers, args.checkpoint_dir)
    args.load_at_start = os.getloadavg()[0]  # other work on the machine skews every number below
    # Bandwidth in its own process (its buffers must not count in our peak RSS), just before and just after
    # ours, best kept: other load on the machine only lowers it, and a higher bandwidth is a stricter floor.
    bands = [run_worker("bandwidth", args, path)]
    runs: dict[str, list[dict]] = {"ours": [], "ours int8": [], "ours bf16 mode": []}
    llama_names = {g: f"llama.cpp {Path(g).stem}" for g in args.gguf} if args.llama_bench else {}
    for name in llama_names.values():
        runs[name] = []
    for _ in range(max(1, args.rounds)):     # every side once per round, so machine load hits them alike
        runs["ours"].append(run_worker("ours", args, path))
        if args.int8:
            runs["ours int8"].append(run_worker("ours", args, path, "--quant", "int8"))
        if args.bf16_mode:
            runs["ours bf16 mode"].append(run_worker("ours", args, path, "--mode", "bf16"))
        for gguf, name in llama_names.items():
            runs[name].append(run_worker("llama", args, path, "--llama-bench", args.llama_bench, "--gguf", gguf,
                                         "--llama-reps", str(args.llama_reps)))
        bands.append(run_worker("bandwidth", args, path))
    bandwidth = {k: max(b[k] for b in bands) for k in bands[0]}
    # each side's best round for decode, with its best prefill of all rounds (machine load only slows a round)
    best = {name: {**max(r, key=lambda x: x["decode_tok_s"]), "prefill_tok_s": max(x["prefill_tok_s"] for x in r)}
            for name, r in runs.items() if r}
    for result in best.values():
        result["bandwidth"] = bandwidth
    ours, q8, b16 = best["ours"], best.get("ours int8"), best.get("ours bf16 mode")
    llama = {name: best[name] for name in llama_names.values()}
    hf, note = None, "not run (--no-hf)"
    if not args.no_hf:
        try:
            import torch  # noqa: F401
            import transformers  # noqa: F401
        except ImportError:
            note = "not installed"
        else:
            dtype, why = hf_dtype(path) if args.hf_dtype == "auto" else (args.hf_dtype, "chosen")
            note = why
            if dtype is not None:
                try:
                    hf = run_worker("hf", args, path, "--dtype", dtype)
                except RuntimeError as e:  # the other sides' numbers are still worth printing
                    note = f"failed: {str(e)[-300:]}"
    print(table(ours, hf, note, args, path))
    if q8 is not None:
        print(int8_table(ours, q8, runs))
    if b16 is not None:
        print(mode_table(ours, b16, runs))
    if llama:
        print(vs_table({"ours": ours, **({"ours int8": q8} if q8 else {}), **({"ours bf16 mode": b16} if b16 else {}),
                        **llama}, runs))
    if hf is None:
        print(f"transformers: {note}")
    elif args.hf_dtype == "auto":
        print(f"transformers dtype: {hf['dtype']} ({note})")
    if args.json:
        args.json.write_text(json.dumps({"ours": ours, "ours_int8": q8, "ours_bf16_mode": b16, "llama_cpp": llama,
                                         "rounds": runs,
                                         "transformers": hf,
                                         "transformers_note": note,
                                         "checkpoint": str(path), "prompt_len": args.prompt_len,
                                         "decode": args.decode}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

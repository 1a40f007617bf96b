"""Benchmark the C core against the machine's copy bandwidth and NumPy, side by side in one run.

    python tools/bench_kernels.py [--threads N] [--isa amx|avx512|avx2|generic] [--repeat R] [--no-lm-head]
    python tools/bench_kernels.py --only bf16x    # one section: bf16 mode's products, fp32 code vs AMX tiles

Matvec (decode) at Qwen3.5-2B shapes: GB/s of weights read, next to the copy rate of a buffer of the same
size (np.copyto; bytes copied per second) and NumPy doing the same product (bf16 -> f32 in row chunks, then
a BLAS matvec). Then every matvec of one decoded token through 24 layers (one call each, and grouped by
shared input with matvec_bf16_multi) next to copying the same bytes; matmul (prefill) GFLOP/s; bf16 mode's
products (bf16_x) against the fp32 code on the same bf16 activations; the sparse
path at several densities; the DeltaNet step; and a 64-token prompt's recurrences, per-token calls vs the
prefill kernels.
Times are the best of --repeat runs; on a shared machine the load average printed first says how much
to trust them.
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Callable

import numpy as np

from qgpu_min.model import kernels as K
from qgpu_min.model import kernels_ref as R
from qgpu_min.model.bf16 import bf16_to_f32, round_bf16

MATVEC_SHAPES = [("mlp gate/up, in_proj_qkv", 6144, 2048), ("mlp down", 2048, 6144),
                 ("LM head (tied embedding)", 248320, 2048)]
NUMPY_CHUNK = 1 << 23  # weights widened per NumPy chunk (32 MiB of f32), as a memory-frugal NumPy would


def best_time(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm up: page in, spin up threads
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def random_weights(rng: np.random.Generator, out: int, n_in: int) -> np.ndarray:
    """bf16 bits of values +-[2^-7, 2^-6): finite, normal, the magnitude of real weights."""
    w = rng.integers(0, 2**10, size=(out, n_in), dtype=np.uint16)
    w |= np.uint16(0x3C00)
    w |= (rng.integers(0, 2, size=(out, n_in), dtype=np.uint16) << np.uint16(15))
    return w


def numpy_matvec(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    rows = max(1, NUMPY_CHUNK // w.shape[1])
    return np.concatenate([bf16_to_f32(w[r:r + rows]) @ x for r in range(0, w.shape[0], rows)])


def bench_matvec(rng: np.random.Generator, repeat: int, lm_head: bool) -> None:
    print("\nmatvec (decode): GB/s of bf16 weights read; ratios are time / copy time of the same bytes")
    print(f"{'shape':>16} {'what':<26} {'copy':>7} {'C':>7} {'numpy':>7} {'C/copy':>7} {'numpy/C':>8}")
    for what, out, n_in in MATVEC_SHAPES:
        if out > 100_000 and not lm_head:
            continue
        w = random_weights(rng, out, n_in)
        x = rng.standard_normal(n_in).astype(np.float32)
        dst = np.empty_like(w)
        t_copy = best_time(lambda: np.copyto(dst, w), repeat)
        del dst
        t_c = best_time(lambda: K.matvec_bf16(w, x), repeat)
        t_np = best_time(lambda: numpy_matvec(w, x), max(1, repeat // 2))
        gb = w.nbytes / 1e9
        print(f"{out:>7}x{n_in:<8} {what:<26} {gb / t_copy:7.1f} {gb / t_c:7.1f} {gb / t_np:7.1f} "
              f"{t_c / t_copy:7.2f} {t_np / t_c:8.1f}")


# Every decode matvec of one Qwen3.5-2B layer of each kind, grouped as they share an input (a group is one
# fused call with matvec_bf16_multi); the 2B model has 18 DeltaNet + 6 attention layers.
DELTANET_LAYER = [[("in_proj_qkv", 6144, 2048), ("in_proj_z", 2048, 2048), ("in_proj_b", 16, 2048),
                   ("in_proj_a", 16, 2048)], [("out_proj", 2048, 2048)],
                  [("gate_proj", 6144, 2048), ("up_proj", 6144, 2048)], [("down_proj", 2048, 6144)]]
ATTENTION_LAYER = [[("q_proj", 4096, 2048), ("k_proj", 512, 2048), ("v_proj", 512, 2048)],
                   [("o_proj", 2048, 4096)], [("gate_proj", 6144, 2048), ("up_proj", 6144, 2048)],
                   [("down_proj", 2048, 6144)]]
DECODE_LAYERS = [("deltanet", 18), ("attention", 6)]


def bench_decode_layers(rng: np.random.Generator, repeat: int) -> None:
    """The matvecs of one decoded token through 24 layers (2.8 GB, each layer its own weights, so every pass
    streams from memory), next to copying the same bytes."""
    kinds = {"deltanet": [[random_weights(rng, o, i) for _, o, i in g] for g in DELTANET_LAYER],
              "attention": [[random_weights(rng, o, i) for _, o, i in g] for g in ATTENTION_LAYER]}
    xs = {n: rng.standard_normal(n).astype(np.float32) for n in (2048, 4096, 6144)}
    # every layer its own copy: one layer's weights (~115 MB) can sit in a large L3, and reused they would
    # be read from there instead of from memory
    layers = [[[w.copy() for w in g] for g in kinds[kind]] for kind, count in DECODE_LAYERS for _ in range(count)]
    nbytes = sum(w.nbytes for layer in layers for g in layer for w in g)
    biggest = max((w for g in kinds["deltanet"] for w in g), key=lambda w: w.nbytes)
    dst = np.empty_like(biggest)
    t_copy = best_time(lambda: np.copyto(dst, biggest), repeat) * nbytes / biggest.nbytes

    def separate() -> None:
        for layer in layers:
            for group in layer:
                for w in group:
                    K.matvec_bf16(w, xs[w.shape[1]])

    def fused() -> None:
        for layer in layers:
            for group in layer:
                K.matvec_bf16_multi(group, xs[group[0].shape[1]])

    calls = sum(len(g) for layer in layers for g in layer)
    print(f"\ndecode matvecs of one token, 24 layers ({calls} calls, {nbytes / 1e9:.2f} GB of weights): "
          f"copy {t_copy * 1e3:.1f} ms")
    for name, fn in (("separate", separate), ("fused", fused)):
        t = best_time(fn, repeat)
        print(f"  {name:<9} {t * 1e3:7.1f} ms  {nbytes / t / 1e9:5.1f} GB/s  time/copy {t / t_copy:5.2f}")


def bench_matmul(rng: np.random.Generator, repeat: int) -> None:
    out, n_in, n = 6144, 2048, 64
    w = random_weights(rng, out, n_in)
    x = rng.standard_normal((n, n_in)).astype(np.float32)
    w32 = bf16_to_f32(w)
    flop = 2.0 * out * n_in * n
    t_c = best_time(lambda: K.matmul_bf16(w, x), repeat)
    t_np = best_time(lambda: x @ bf16_to_f32(w).T, repeat)
    t_blas = best_time(lambda: x @ w32.T, repeat)
    print(f"\nmatmul (prefill) {out}x{n_in}, {n} tokens: C {flop / t_c / 1e9:.1f} GFLOP/s, numpy convert+matmul "
          f"{flop / t_np / 1e9:.1f}, numpy f32 BLAS on pre-widened weights {flop / t_blas / 1e9:.1f}")
    q8 = K.quantize_q8(w)           # --quant int8's form of the same matrix
    t_q8 = best_time(lambda: K.matmul_bf16(q8, x), repeat)
    print(f"  the same, Q8 weights (--quant int8): C {flop / t_q8 / 1e9:.1f} GFLOP/s")


def bench_bf16x(rng: np.random.Generator, repeat: int) -> None:
    """bf16 mode's products (bf16 activations, bf16_x=True: AMX tiles at the amx level) against the same
    products told nothing (fp32 code), rounds interleaved: prefill (64 tokens, one matrix) and decode (one
    token through copies of the matrix adding up to 1 GB, more than any L3 here, so weights come from DRAM)."""
    print(f"\nbf16 activations, fp32 code vs bf16_x=True (isa {K.isa()}): GFLOP/s (decode: GB/s of weights)")
    for out, n_in in ((6144, 2048), (2048, 6144)):
        w = random_weights(rng, out, n_in)
        for n in (64, 1):
            ws = [w] if n > 1 else [np.roll(w, i) for i in range(max(1, (1 << 30) // w.nbytes))]
            x = round_bf16(rng.standard_normal((n, n_in)).astype(np.float32))
            times = {False: [], True: []}
            for _ in range(repeat):
                for flag in times:
                    times[flag].append(best_time(lambda: [K.matmul_bf16(m, x, bf16_x=flag) for m in ws], 1))
            t_plain, t_flag = min(times[False]), min(times[True])
            unit, work = ("GB/s", sum(m.nbytes for m in ws)) if n == 1 else ("GFLOP/s", 2.0 * out * n_in * n)
            print(f"  {out}x{n_in}, {n:>2} tokens: fp32 code {work / t_plain / 1e9:6.1f} {unit}, bf16_x "
                  f"{work / t_flag / 1e9:6.1f}, ratio {t_plain / t_flag:5.2f}x")
            del ws


def bench_sparse(rng: np.random.Generator, repeat: int) -> None:
    out, n_in = 6144, 2048
    print(f"\nsparse {out}x{n_in} matvec vs dense (ms)")
    w_full = random_weights(rng, out, n_in)
    x = rng.standard_normal(n_in).astype(np.float32)
    t_dense = best_time(lambda: K.matvec_bf16(w_full, x), repeat)
    for density in (0.001, 0.01, 0.05, 0.2):
        w = np.where(rng.random((out, n_in)) < density, w_full, np.uint16(0))
        sp = K.SparseBF16.from_dense(w)
        t_sp = best_time(lambda: K.matvec_bf16(sp, x), repeat)
        print(f"  density {density:<6} sparse {t_sp * 1e3:7.3f}  dense {t_dense * 1e3:7.3f}  "
              f"dense/sparse {t_dense / t_sp:6.1f}")


def deltanet_inputs(rng: np.random.Generator, lead: tuple[int, ...], h: int, dk: int,
                    dv: int) -> tuple[np.ndarray, ...]:
    """q, k, v, g, beta for tokens of shape `lead` (() one token, (T,) a prompt), as the model makes them:
    q, k l2-normalised (q also / sqrt(dk)), g <= 0, beta in (0, 1)."""
    q = R.l2norm(rng.standard_normal(lead + (h, dk)).astype(np.float32)) / np.float32(np.sqrt(dk))
    k = R.l2norm(rng.standard_normal(lead + (h, dk)).astype(np.float32))
    v = rng.standard_normal(lead + (h, dv)).astype(np.float32)
    return q, k, v, -rng.random(lead + (h,)).astype(np.float32), rng.random(lead + (h,)).astype(np.float32)


def bench_deltanet(rng: np.random.Generator, repeat: int) -> None:
    h, dk, dv = 16, 128, 128
    S = np.zeros((h, dk, dv), np.float32)
    q, k, v, g, beta = deltanet_inputs(rng, (), h, dk, dv)
    t_c = best_time(lambda: K.deltanet_step(S, q, k, v, g, beta), repeat * 10)
    unknown = np.zeros(h, np.int32)   # a trained layer's heads (decay < 1) as decode runs them: dense, threaded
    t_decode = best_time(lambda: K.deltanet_step_sparse(S, q, k, v, g, beta, unknown), repeat * 10)
    t_ref = best_time(lambda: R.deltanet_step(S, q, k, v, g, beta), repeat * 10)
    print(f"\ndeltanet step {h}x{dk}x{dv}: C {t_c * 1e6:.0f} us (one thread, plain C), as decode runs it "
          f"(deltanet_step_sparse) {t_decode * 1e6:.0f} us, numpy {t_ref * 1e6:.0f} us")


def bench_prefill_recurrences(rng: np.random.Generator, repeat: int) -> None:
    """A 2B DeltaNet layer's recurrences over a 64-token prompt: one call per token vs one call in all."""
    t, h, dk, dv, c, k = 64, 16, 128, 128, 6144, 4
    S = np.zeros((h, dk, dv), np.float32)
    q, kk, v, g, beta = deltanet_inputs(rng, (t,), h, dk, dv)
    state, taps = np.zeros((c, k - 1), np.float32), rng.standard_normal((c, k)).astype(np.float32)
    x = rng.standard_normal((t, c)).astype(np.float32)
    runs = {"deltanet": (lambda: [K.deltanet_step(S, q[i], kk[i], v[i], g[i], beta[i]) for i in range(t)],
                         lambda: K.deltanet_prefill(S, q, kk, v, g, beta)),
            "conv": (lambda: [K.conv_update(state, x[i], taps) for i in range(t)],
                     lambda: K.conv_prefill(state, x, taps))}
    print(f"\nprefill recurrences, {t} tokens (ms): per-token calls vs one prefill call")
    for name, (steps, prefill) in runs.items():
        t_steps, t_prefill = best_time(steps, repeat), best_time(prefill, repeat)
        print(f"  {name:<9} steps {t_steps * 1e3:7.3f}  prefill {t_prefill * 1e3:7.3f}  "
              f"steps/prefill {t_steps / t_prefill:5.2f}")


SECTIONS = {"matvec": bench_matvec,
            "decode": lambda rng, repeat, _: bench_decode_layers(rng, repeat),
            "matmul": lambda rng, repeat, _: bench_matmul(rng, repeat),
            "bf16x": lambda rng, repeat, _: bench_bf16x(rng, repeat),
            "sparse": lambda rng, repeat, _: bench_sparse(rng, repeat),
            "deltanet": lambda rng, repeat, _: bench_deltanet(rng, repeat),
            "recurrences": lambda rng, repeat, _: bench_prefill_recurrences(rng, repeat)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=None, help="threads for the C kernels (default: all CPUs)")
    ap.add_argument("--isa", choices=K.ISA_NAMES, default=None, help="SIMD level (default: the best)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-lm-head", action="store_true", help="skip the 1 GB LM-head shape")
    ap.add_argument("--only", choices=sorted(SECTIONS), help="run one section")
    args = ap.parse_args()
    K.set_threads(args.threads)
    isa = K.set_isa(args.isa)
    print(f"C core: isa {isa}, {K.threads()} threads; cpus {os.cpu_count()}; "
          f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    rng = np.random.default_rng(0)
    for name, section in SECTIONS.items():
        if args.only in (None, name):
            section(rng, args.repeat, not args.no_lm_head)


if __name__ == "__main__":
    main()

"""Issue #2 acceptance: kernels written the way new users write CUDA (tutorials, class exercises),
outside the suite in tests/kernels/, each with an independent NumPy/Python statement of its result,
run exactly through the library API and the `qgpu-min run --json` command, from zig clang's and
nvcc's PTX, at 2-3 launch shapes. Findings are written up in docs/user_trial.md.

Kernels that do not run exactly are kept with a strict xfail naming the cause, so a fix shows up.
Default run: library API at every shape per compiler, and the CLI at the first shape with zig clang;
`-m slow` adds the CLI with nvcc.
"""
from __future__ import annotations

import functools
import json
import math
import os
import re
import shutil
import subprocess
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from qgpu_min.cli import main
from compilers import missing, skip_if_missing
from qgpu_min.errors import QgpuError
from qgpu_min.host.launch import compile_kernel, launch
from qgpu_min.machine.interp import StepLimitError

DIR = Path(__file__).resolve().parent / "user_kernels"
COMPILERS = ("zig", "nvcc")
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
Dim = tuple[int, int]


@dataclass(frozen=True)
class UCase:
    file: str
    kernel: str | None
    shapes: tuple[tuple[Dim, Dim], ...]                  # (grid, block)
    make: Callable[[np.random.Generator, Dim, Dim], list]  # arguments: np.int64 arrays / ints
    expect: Callable[[list, Dim, Dim], dict]             # {param index: final contents}
    xfail: dict = field(default_factory=dict)            # compiler -> reason (strict xfail)
    step_limit: int | None = None                        # lower for kernels expected to hang

    @property
    def id(self) -> str:
        return Path(self.file).stem + (f"-{self.kernel}" if self.kernel else "")


def nthreads(grid: Dim, block: Dim) -> int:
    return grid[0] * grid[1] * block[0] * block[1]


def arr(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def ctrunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def crem(a: int, b: int) -> int:
    return a - b * ctrunc_div(a, b)


def s32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


def edge_ints(rng, n, lo=I32_MIN, hi=I32_MAX):
    v = rng.integers(lo, hi, n, endpoint=True)
    edges = [e for e in (0, 1, -1, lo, hi) if lo <= e <= hi]
    v[: min(n, len(edges))] = edges[: min(n, len(edges))]
    return v


# ---- references ------------------------------------------------------------------------------

def fizz_expect(a, g, b):
    n = a[1]
    out = np.zeros(len(a[0]), np.int64)
    for i in range(n):
        v = i + 1
        out[i] = -3 if v % 15 == 0 else -1 if v % 3 == 0 else -2 if v % 5 == 0 else v
    return {0: out}


def life_ref(cur, W, H):
    g = cur.reshape(H, W)
    n = sum(np.roll(np.roll(g, dy, 0), dx, 1) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx)
    return ((n == 3) | ((g == 1) & (n == 2))).astype(np.int64).ravel()


def conv_ref(img, W, H):
    f = np.array([[1, 2, 1], [0, -1, 0], [-2, 3, 4]])
    p = np.pad(img.reshape(H, W), 1)
    out = np.zeros((H, W), np.int64)
    for dy in range(3):
        for dx in range(3):
            out += f[dy, dx] * p[dy:dy + H, dx:dx + W]
    return out.ravel()


def fib_pair(k: int) -> tuple[int, int]:
    a, b = 0, 1
    for _ in range(k):
        a, b = b, a + b
    return a & 0xFFFFFFFF, a & 0xFFFFFFFFFFFFFFFF


def votes(x: np.ndarray):
    n = len(x)
    ballot, npos, anye, alle = (np.zeros(n, np.int64) for _ in range(4))
    for w in range(0, n, 4):  # launch shapes use whole 4-lane warps along x
        seg = x[w:w + 4]
        bits = sum(1 << j for j, v in enumerate(seg) if v > 0)
        ballot[w:w + 4], npos[w:w + 4] = bits, bin(bits).count("1")
        anye[w:w + 4], alle[w:w + 4] = int(any(v % 2 == 0 for v in seg)), int(all(v % 2 == 0 for v in seg))
    return ballot, npos, anye, alle


def digits_ref(v: int):
    neg, m = v < 0, abs(v)
    s = str(m)
    r = int(s[::-1])
    return sum(map(int, s)), -r if neg else r


def switch_ref(c: int) -> int:
    return {4: 1111, 3: 111, 2: 11, 1: 1, 7: -7, 8: -8}.get(c, 42)


TEXT = b"Hello, World! The quick brown fox jumps over the lazy dog. zZ~{@[`"


def caesar_ref(s: bytes, k: int) -> np.ndarray:
    out = []
    for c in s:
        if 97 <= c <= 122:
            c = 97 + (c - 97 + k) % 26
        elif 65 <= c <= 90:
            c = 65 + (c - 65 + k) % 26
        out.append(c)
    return arr(out)


def bits_ref(v):
    return bin(int(v)).count("1"), bin(int(v)).count("1") & 1, int(v).bit_length() - 1


def sieve_ref(n):
    return arr([int(k >= 2 and all(k % p for p in range(2, math.isqrt(k) + 1))) for k in range(n)])


def xorshift_ref(seed0, rounds, T):
    out = []
    for t in range(T):
        s = (seed0 ^ (t * 2654435761)) & 0xFFFFFFFF
        s = s or 1
        for _ in range(rounds):
            s ^= (s << 13) & 0xFFFFFFFF
            s ^= s >> 17
            s ^= (s << 5) & 0xFFFFFFFF
        out.append(s)
    return arr(out)


def wrap_ref(a, d, g, b):
    x = [int(v) for v in a[0]]
    n = a[-1]
    res = [arr(a[k]).copy() for k in range(2, 7)]
    for i in range(n):
        res[0][i] = ctrunc_div(x[i], d)
        res[1][i] = crem(x[i], d)
        res[2][i] = crem(crem(x[i], d) + d, d)
        res[3][i] = ((i - 3) * 7) & 0xFFFFFFFF
        res[4][i] = int((x[i] & 0xFFFFFFFF) > (d & 0xFFFFFFFF))
    return {k + 2: r for k, r in enumerate(res)}


def ll_ref(a, g, b):
    T, ch = nthreads(g, b), a[5]
    x, y = arr(a[0]).reshape(T, ch), arr(a[1]).reshape(T, ch)
    acc = [sum(int(p) * int(p) + int(p) * int(q) for p, q in zip(x[t], y[t])) for t in range(T)]
    return {2: arr([v & 0xFFFFFFFF for v in acc]), 3: arr([v >> 32 for v in acc]), 4: arr(acc)}


def counting_ref(a, g, b):
    keys = arr(a[0])
    return {1: np.sort(keys), 2: np.bincount(keys, minlength=8)}


def matvec_make(rows, cols):
    return lambda r, g, b: [r.integers(-1000, 1000, rows * cols), r.integers(-1000, 1000, cols), np.zeros(rows, np.int64), rows, cols]


def grade_make(n):
    return lambda r, g, b: [r.integers(0, 101, n), np.zeros(11, np.int64), 10, 11, n]


# ---- the cases -------------------------------------------------------------------------------

CASES = [
    UCase("fizzbuzz.cu", None, (((1, 1), (16, 1)), ((3, 1), (8, 1)), ((2, 1), (32, 1))),
          lambda r, g, b: [np.zeros(nthreads(g, b), np.int64), nthreads(g, b) - 3], fizz_expect),
    UCase("relu_clamp.cu", None, (((1, 1), (32, 1)), ((3, 1), (7, 1))),
          lambda r, g, b: [edge_ints(r, nthreads(g, b), -100, 100), *(np.zeros(nthreads(g, b), np.int64),) * 2, -50, 70,
                           nthreads(g, b) - 1],
          lambda a, g, b: {1: np.where(np.arange(len(a[0])) < a[5], np.maximum(a[0], 0), 0),
                           2: np.where(np.arange(len(a[0])) < a[5], np.clip(a[0], -50, 70), 0)}),
    UCase("running_max.cu", None, (((1, 1), (8, 1)), ((2, 1), (16, 1)), ((3, 1), (4, 1))),
          lambda r, g, b: [edge_ints(r, 50), 50, arr([I32_MIN, I32_MAX])],
          lambda a, g, b: {2: arr([a[0].max(), a[0].min()])}),
    UCase("isqrt.cu", None, (((1, 1), (16, 1)), ((2, 1), (12, 1))),
          lambda r, g, b: [np.concatenate([arr([0, 1, 2, 3, 4, 0xFFFFFFFF, 65535 ** 2, 65535 ** 2 - 1]),
                                           r.integers(0, 2**32, nthreads(g, b) - 8)]),
                           np.zeros(nthreads(g, b), np.int64), np.zeros(nthreads(g, b), np.int64), nthreads(g, b)],
          lambda a, g, b: {1: arr([math.isqrt(int(v)) for v in a[0]]), 2: arr([math.isqrt(int(v)) for v in a[0]])}),
    UCase("modexp.cu", None, (((1, 1), (8, 1)), ((2, 1), (4, 1))),
          lambda r, g, b: [r.integers(0, 2**32, nthreads(g, b)), r.integers(0, 2**31, nthreads(g, b)),
                           np.zeros(nthreads(g, b), np.int64), 1000000007 if g[0] == 1 else 4294967291, nthreads(g, b)],
          lambda a, g, b: {2: arr([pow(int(x), int(e), a[3]) for x, e in zip(a[0], a[1])])}),
    UCase("sieve.cu", None, (((1, 1), (8, 1)), ((1, 1), (32, 1)), ((1, 1), (5, 1))),
          lambda r, g, b: [np.zeros({8: 128, 32: 100, 5: 37}[b[0]], np.int64), {8: 128, 32: 100, 5: 37}[b[0]]],
          lambda a, g, b: {0: sieve_ref(a[1])}),
    UCase("counting_sort.cu", None, (((1, 1), (8, 1)), ((1, 1), (32, 1)), ((1, 1), (12, 1))),
          lambda r, g, b: [r.integers(0, 8, 40), np.zeros(40, np.int64), np.zeros(8, np.int64), 40], counting_ref),
    UCase("text_ops.cu", "caesar", (((3, 1), (32, 1)), ((3, 1), (24, 1))),
          lambda r, g, b: [arr(list(TEXT)), np.zeros(len(TEXT), np.int64), 3 if b[0] == 32 else 13, len(TEXT)],
          lambda a, g, b: {1: caesar_ref(TEXT, a[2])}),
    UCase("text_ops.cu", "to_upper", (((3, 1), (32, 1)), ((9, 1), (8, 1))),
          lambda r, g, b: [arr(list(TEXT)), len(TEXT)], lambda a, g, b: {0: arr(list(TEXT.upper()))}),
    UCase("reverse_dyn.cu", None, (((1, 1), (32, 1)), ((1, 1), (7, 1))),
          lambda r, g, b: [edge_ints(r, b[0]), b[0]], lambda a, g, b: {0: a[0][::-1]}),
    UCase("matvec_cols.cu", None, (((1, 3), (4, 4)), ((1, 2), (2, 8)), ((1, 10), (3, 1))),
          matvec_make(10, 7), lambda a, g, b: {2: arr(a[0]).reshape(10, 7) @ arr(a[1])}),
    UCase("conv3x3.cu", None, (((3, 2), (4, 4)), ((2, 2), (8, 4)), ((3, 3), (3, 3))),
          lambda r, g, b: [r.integers(-500, 500, 63), np.zeros(63, np.int64), 9, 7],
          lambda a, g, b: {1: conv_ref(arr(a[0]), 9, 7)}),
    UCase("life.cu", None, (((1, 2), (8, 4)), ((2, 3), (4, 2))),
          lambda r, g, b: [r.integers(0, 2, 48), np.zeros(48, np.int64), 8, 6],
          lambda a, g, b: {1: life_ref(arr(a[0]), 8, 6)}),
    UCase("fib.cu", None, (((1, 1), (16, 1)), ((2, 1), (12, 1))),
          lambda r, g, b: [np.concatenate([arr([0, 1, 2, 46, 47, 48, 93]), r.integers(0, 94, nthreads(g, b) - 7)]),
                           *(np.zeros(nthreads(g, b), np.int64),) * 3, nthreads(g, b)],
          lambda a, g, b: {1: arr([fib_pair(int(k))[0] for k in a[0]]),
                           2: arr([fib_pair(int(k))[1] & 0xFFFFFFFF for k in a[0]]),
                           3: arr([fib_pair(int(k))[1] >> 32 for k in a[0]])}),
    UCase("bitcount.cu", None, (((1, 1), (20, 1)), ((4, 1), (8, 1))),
          lambda r, g, b: [np.concatenate([arr([0, 1, 0xFFFFFFFF, 0x80000000]), r.integers(0, 2**32, nthreads(g, b) - 4)]),
                           *(np.zeros(nthreads(g, b), np.int64),) * 3, nthreads(g, b)],
          lambda a, g, b: {k + 1: arr([bits_ref(v)[k] for v in a[0]]) for k in range(3)}),
    UCase("xorshift.cu", None, (((1, 1), (32, 1)), ((5, 1), (6, 1))),
          lambda r, g, b: [np.zeros(nthreads(g, b), np.int64), int(r.integers(0, 2**32)), 5],
          lambda a, g, b: {0: xorshift_ref(a[1], a[2], len(a[0]))}),
    UCase("vote.cu", None, (((1, 1), (8, 1)), ((2, 1), (12, 1)), ((1, 1), (32, 1))),
          lambda r, g, b: [r.integers(-5, 6, nthreads(g, b)), *(np.zeros(nthreads(g, b), np.int64),) * 4],
          lambda a, g, b: dict(zip((1, 2, 3, 4), votes(arr(a[0]))))),
    UCase("shfl_bcast.cu", None, (((1, 1), (8, 1)), ((3, 1), (12, 1))),
          lambda r, g, b: [edge_ints(r, nthreads(g, b)), np.zeros(nthreads(g, b), np.int64), np.zeros(nthreads(g, b), np.int64)],
          lambda a, g, b: {1: np.repeat(arr(a[0])[::4], 4), 2: arr(a[0]).reshape(-1, 4)[:, [1, 2, 3, 0]].ravel()}),
    UCase("cas_max.cu", None, (((1, 1), (16, 1)), ((3, 1), (8, 1))),
          lambda r, g, b: [edge_ints(r, nthreads(g, b) - 2, -1000, 1000), arr([I32_MIN]), arr([1]), nthreads(g, b) - 2],
          lambda a, g, b: {1: arr([a[0].max()]), 2: arr([s32(functools.reduce(lambda p, v: p * int(v), a[0], 1))])}),
    UCase("aos.cu", "aos_struct", (((1, 1), (12, 1)), ((2, 1), (5, 1))),
          lambda r, g, b: [r.integers(-100, 100, 4 * 10), 3, 9],
          lambda a, g, b: {0: (lambda p: (p.__setitem__(slice(0, 9), p[:9] + 3 * np.stack([p[:9, 2], p[:9, 3], 0 * p[:9, 0], 0 * p[:9, 0]], 1)), p.ravel())[1])(arr(a[0]).reshape(10, 4).copy())}),
    UCase("aos.cu", "aos_flat", (((1, 1), (16, 1)), ((3, 1), (4, 1))),
          lambda r, g, b: [r.integers(-3000, 3000, 36), np.zeros(12, np.int64), 12],
          lambda a, g, b: {1: arr(a[0]).reshape(12, 3)[:, 0] * arr(a[0]).reshape(12, 3)[:, 1] - arr(a[0]).reshape(12, 3)[:, 2]}),
    UCase("templ.cu", "_Z5scaleILi3EEvPii", (((1, 1), (16, 1)), ((2, 1), (8, 1))),
          lambda r, g, b: [edge_ints(r, 14), 14], lambda a, g, b: {0: arr([s32(int(v) * 3 + 3) for v in a[0]])}),
    UCase("templ.cu", "_Z5scaleILin7EEvPii", (((1, 1), (16, 1)),),
          lambda r, g, b: [edge_ints(r, 14), 14], lambda a, g, b: {0: arr([s32(int(v) * -7 - 7) for v in a[0]])}),
    UCase("templ.cu", "block_sum", (((3, 1), (16, 1)), ((1, 1), (16, 1))),
          lambda r, g, b: [r.integers(-10**6, 10**6, 16 * g[0]), np.zeros(g[0], np.int64)],
          lambda a, g, b: {1: arr(a[0]).reshape(-1, 16).sum(1)}),
    UCase("matrix2d.cu", None, (((2, 2), (4, 4)), ((1, 3), (8, 2)), ((1, 1), (6, 5))),
          lambda r, g, b: [r.integers(-99, 99, 30), r.integers(-99, 99, 30), np.zeros(30, np.int64), np.zeros(30, np.int64), 5, 6],
          lambda a, g, b: {2: (arr(a[0]).reshape(5, 6) + 2 * arr(a[1]).reshape(6, 5).T).ravel(),
                           3: ((arr(a[0]).reshape(5, 6) - np.arange(5)[:, None]) ** 2 - np.arange(6)[None, :]).ravel()}),
    UCase("digits.cu", None, (((1, 1), (16, 1)), ((3, 1), (4, 1))),
          lambda r, g, b: [np.concatenate([arr([0, 7, -7, 1230, -1000, 999999999, -123456789]),
                                           r.integers(-10**9 + 1, 10**9, nthreads(g, b) - 7)]),
                           np.zeros(nthreads(g, b), np.int64), np.zeros(nthreads(g, b), np.int64), nthreads(g, b)],
          lambda a, g, b: {1: arr([digits_ref(int(v))[0] for v in a[0]]), 2: arr([digits_ref(int(v))[1] for v in a[0]])}),
    UCase("switch_fall.cu", None, (((1, 1), (16, 1)), ((2, 1), (12, 1))),
          lambda r, g, b: [r.integers(-1, 10, nthreads(g, b)), np.zeros(nthreads(g, b), np.int64), nthreads(g, b)],
          lambda a, g, b: {1: arr([switch_ref(int(c)) for c in a[0]])}),
    UCase("ll_acc.cu", None, (((1, 1), (8, 1)), ((2, 1), (12, 1))),
          lambda r, g, b: [r.integers(-2**30, 2**30, 3 * nthreads(g, b)), r.integers(-2**30, 2**30, 3 * nthreads(g, b)),
                           *(np.zeros(nthreads(g, b), np.int64),) * 3, 3], ll_ref),
    UCase("wrap_mod.cu", None, (((1, 1), (16, 1)), ((2, 1), (8, 1)), ((1, 1), (7, 1))),
          lambda r, g, b: [edge_ints(r, nthreads(g, b), I32_MIN + 1), {16: 7, 8: -5, 7: 1 << 20}[b[0]],
                           *(np.zeros(nthreads(g, b), np.int64),) * 5, nthreads(g, b)],
          lambda a, g, b: wrap_ref(a, a[1], g, b)),
    UCase("histo_pct.cu", None, (((1, 1), (8, 1)), ((2, 1), (16, 1)), ((4, 1), (4, 1))),
          grade_make(60), lambda a, g, b: {1: np.bincount(np.minimum(arr(a[0]) // 10, 10), minlength=11)}),
    UCase("host_prog.cu", None, (((1, 1), (8, 1)), ((2, 1), (4, 1))),
          lambda r, g, b: [r.integers(-40000, 40000, 8), 3, 8], lambda a, g, b: {0: arr(a[0]) ** 2 - 3}),
    UCase("warp_sum32.cu", "warp_sum", (((1, 1), (32, 1)), ((3, 1), (8, 1))),
          lambda r, g, b: [r.integers(-10**6, 10**6, nthreads(g, b)), arr([0])], lambda a, g, b: {1: arr([a[0].sum()])}),
]

WARP32 = ("the textbook reduction hard-codes a 32-lane warp (offsets 16, 8, 4 then lane % 32 == 0); on the "
          "4-lane machine shuffles past the warp return the lane's own value, so v is doubled 3 times and only "
          "thread 0 of each 32 adds: out = 8 * sum(lanes 0..3). Documented (warpSize is 4) but silent: no warning")
UNROLLED = ("Harris's 'unroll the last warp' reduction runs its last 5 steps without __syncthreads(), relying on "
            "32 lanes in lockstep; here a warp is 4 lanes and (with no loop in those steps) each warp runs to its "
            "next barrier before the next warp starts, so thread 0 adds partial sums that other warps have not formed yet: 1..32 gives 152, "
            "not 528. Documented (warpSize is 4) but silent")
CASES.append(UCase("reduce_unrolled.cu", None, (((2, 1), (32, 1)),),
                   lambda r, g, b: [r.integers(-10**6, 10**6, 64), np.zeros(2, np.int64)],
                   lambda a, g, b: {1: arr(a[0]).reshape(2, 32).sum(1)}, {"zig": UNROLLED, "nvcc": UNROLLED}))
CASES.append(UCase("warp_sum32.cu", "warp_sum32", (((1, 1), (32, 1)),),
                   lambda r, g, b: [r.integers(-10**6, 10**6, 32), arr([0])], lambda a, g, b: {1: arr([a[0].sum()])},
                   {"zig": WARP32, "nvcc": WARP32}))


# ---- second round: more idioms (recursion, local arrays, small types, locks, 64-bit atomics, intrinsics) --

NAIVE_LOCK = ("spin-until-acquired lock inside one warp: the lane that wins the CAS leaves the loop to a higher "
              "PC and, with lowest-PC-first reconvergence (no independent thread scheduling), waits there while "
              "its warp-mates spin forever at the loop header: the launch stops at the step limit (QgpuError) "
              "naming the loop's PTX line and this cause. On sm_70+ GPUs this kernel terminates; here it is a "
              "documented limit (docs/machine.md, 'Locks and waiting')")
LOCK_ZIG = ("the done-flag lock (`while (!done) { if (atomicCAS(lock, 0, 1) == 0) { ...; done = true; } }`, "
            "the pre-Volta-safe form) is rewritten by clang 22 into `L: atom.cas; @p bra L;` then the critical "
            "section, i.e. the naive spin lock: the warp deadlocks (step limit). nvcc keeps the structure and is exact")


@dataclass(frozen=True)
class Perm:
    """Expected: some order of these values (slot numbers handed out by atomics)."""
    values: np.ndarray


def median_ref(x):
    n = len(x)
    return arr([int(np.median(x[np.clip(np.arange(i - 2, i + 3), 0, n - 1)])) for i in range(n)])


def funnel_ref(a, b):
    return arr([(((int(h) << 32 | int(l)) << (i & 31)) >> 32) & 0xFFFFFFFF for i, (l, h) in enumerate(zip(a, b))])


def s8(v):
    return ((int(v) + 128) & 0xFF) - 128


CASES += [
    UCase("recursion.cu", "rec_gcd", (((1, 1), (16, 1)), ((3, 1), (4, 1))),
          lambda r, g, b: [np.concatenate([arr([0, 7, 0, 12]), r.integers(0, 10**6, 8)]),
                           np.concatenate([arr([0, 0, 5, 18]), r.integers(0, 10**6, 8)]), np.zeros(12, np.int64), 12],
          lambda a, g, b: {2: arr([math.gcd(int(x), int(y)) for x, y in zip(a[0], a[1])])}),
    UCase("median_local.cu", None, (((1, 1), (32, 1)), ((2, 1), (12, 1))),
          lambda r, g, b: [edge_ints(r, 20), np.zeros(20, np.int64), 20], lambda a, g, b: {1: median_ref(arr(a[0]))}),
    UCase("small_types.cu", "sat_add16", (((1, 1), (32, 1)), ((3, 1), (8, 1))),
          lambda r, g, b: [edge_ints(r, 24, -32768, 32767), r.integers(-32768, 32768, 24), np.zeros(24, np.int64), 24],
          lambda a, g, b: {2: np.clip(arr(a[0]) + arr(a[1]), -32768, 32767)}),
    UCase("small_types.cu", "byte_sign", (((1, 1), (32, 1)), ((5, 1), (4, 1))),
          lambda r, g, b: [edge_ints(r, 19, -128, 127), np.zeros(19, np.int64), np.zeros(19, np.int64), 19],
          lambda a, g, b: {1: (arr(a[0]) < 0).astype(np.int64), 2: arr([s8(abs(int(v))) for v in a[0]])}),
    UCase("mutex.cu", "locked_sum", (((1, 1), (12, 1)), ((3, 1), (4, 1))),
          lambda r, g, b: [arr([0]), arr([0]), np.zeros(11, np.int64), r.integers(-1000, 1000, 10), 10],
          lambda a, g, b: {1: arr([a[3].sum()]), 2: Perm(arr(list(range(10)) + [10]))}, {"zig": LOCK_ZIG}, 20000),
    UCase("mutex.cu", "naive_lock", (((1, 1), (8, 1)),),
          lambda r, g, b: [arr([0]), arr([0]), r.integers(-1000, 1000, 8), 8],
          lambda a, g, b: {1: arr([a[2].sum()])}, {"zig": NAIVE_LOCK, "nvcc": NAIVE_LOCK}, 20000),
    UCase("atomic64.cu", None, (((1, 1), (20, 1)), ((3, 1), (8, 1))),
          lambda r, g, b: [edge_ints(r, 20), arr([0]), 20],
          lambda a, g, b: {1: arr([sum(int(v) ** 2 for v in a[0]) % 2**64])}),
    UCase("sync_count.cu", None, (((2, 1), (12, 1)),),
          lambda r, g, b: [r.integers(-3, 4, 24), np.zeros(6, np.int64)],
          lambda a, g, b: {1: arr([f(arr(a[0])[k * 12:(k + 1) * 12]) for k in range(2)
                                   for f in (lambda s: (s > 0).sum(), lambda s: int((s != 0).all()), lambda s: int((s < 0).any()))])}),
    UCase("funnelshift.cu", None, (((1, 1), (32, 1)), ((2, 1), (8, 1))),
          lambda r, g, b: [r.integers(0, 2**32, 16), r.integers(0, 2**32, 16), np.zeros(16, np.int64), 16],
          lambda a, g, b: {2: funnel_ref(a[0], a[1])}),
    UCase("mul24.cu", None, (((1, 1), (16, 1)),),
          lambda r, g, b: [edge_ints(r, 16), edge_ints(r, 16), np.zeros(16, np.int64), 16],
          lambda a, g, b: {2: arr([s32((int(x) & 0x7FFFFF) * (int(y) & 0x3FF)) for x, y in zip(a[0], a[1])])}),
    UCase("byte_perm.cu", None, (((1, 1), (16, 1)),),
          lambda r, g, b: [r.integers(0, 2**32, 16), r.integers(0, 2**32, 16), np.zeros(16, np.int64), 16],
          lambda a, g, b: {2: arr([sum(((int(y) << 32 | int(x)) >> (8 * ((0x3715 >> (4 * k)) & 7)) & 0xFF) << (8 * k)
                                       for k in range(4)) for x, y in zip(a[0], a[1])])}),
    UCase("usad.cu", None, (((1, 1), (16, 1)),),
          lambda r, g, b: [r.integers(0, 2**32, 16), r.integers(0, 2**32, 16), np.zeros(16, np.int64), 16],
          lambda a, g, b: {2: arr([(abs(int(x) - int(y)) + 7) & 0xFFFFFFFF for x, y in zip(a[0], a[1])])}),
    UCase("vec_types.cu", "manhattan", (((1, 1), (16, 1)), ((2, 1), (4, 1))),
          lambda r, g, b: [r.integers(-10**5, 10**5, 16), r.integers(-10**5, 10**5, 16), np.zeros(8, np.int64), 8],
          lambda a, g, b: {2: np.abs(arr(a[0]) - arr(a[1])).reshape(8, 2).sum(1)}),
    UCase("vec_types.cu", "dot4", (((1, 1), (12, 1)), ((3, 1), (4, 1))),
          lambda r, g, b: [r.integers(-10**4, 10**4, 36), r.integers(-10**4, 10**4, 36), np.zeros(9, np.int64), 9],
          lambda a, g, b: {2: (arr(a[0]) * arr(a[1])).reshape(9, 4).sum(1)}),
]


# ---- third round: size_t indices, reference parameters, pointer walking, __device__ globals ----------

def row_scan_ref(a, g, b):
    rows, cols = a[2], a[1]
    m = arr(a[0]).reshape(rows, cols)
    tab = arr([3, 1, 4, 1, 5, 9, 2, 6])
    out = np.cumsum(m, 1) + tab[np.arange(rows) & 7][:, None]
    return {0: out.ravel(), 3: Perm(arr(range(rows)))}


CASES += [
    UCase("idioms.cu", "fma_sizet", (((1, 1), (32, 1)), ((3, 1), (8, 1))),
          lambda r, g, b: [edge_ints(r, 22), edge_ints(r, 22), edge_ints(r, 22), 22],
          lambda a, g, b: {2: arr([s32(int(x) * int(y) + int(z)) for x, y, z in zip(a[0], a[1], a[2])])}),
    UCase("idioms.cu", "sort_triples", (((1, 1), (16, 1)), ((2, 1), (4, 1))),
          lambda r, g, b: [edge_ints(r, 24), 8], lambda a, g, b: {0: np.sort(arr(a[0]).reshape(8, 3), 1).ravel()}),
    UCase("idioms.cu", "row_scan", (((1, 1), (12, 1)), ((3, 1), (4, 1))),
          lambda r, g, b: [r.integers(-10**6, 10**6, 60), 5, 12, np.zeros(12, np.int64)], row_scan_ref),
]


# ---- waiting for another warp (warps are preempted at loop back edges) --------------------------
CASES += [
    UCase("cross_warp.cu", "shared_flag", (((1, 1), (8, 1)), ((2, 1), (32, 1))),
          lambda r, g, b: [arr([0])], lambda a, g, b: {0: arr([8])}, step_limit=5000),
    UCase("cross_warp.cu", "global_flag", (((1, 1), (8, 1)), ((1, 1), (30, 1))),
          lambda r, g, b: [arr([0, 0]), arr([0])], lambda a, g, b: {0: arr([1, 42]), 1: arr([42])}, step_limit=5000),
    UCase("cross_warp.cu", "warp_chain", (((1, 1), (32, 1)), ((1, 1), (12, 1))),
          lambda r, g, b: [arr([0, 0]), np.zeros(b[0] // 4, np.int64)],
          lambda a, g, b: {0: arr([b[0] // 4] * 2), 1: arr(range(b[0] // 4 - 1, -1, -1))}, step_limit=20000),
    UCase("cross_warp.cu", "warp_lock_sum", (((1, 1), (32, 1)), ((3, 1), (8, 1))),
          lambda r, g, b: [arr([0]), arr([0]), r.integers(-1000, 1000, 24), 22],
          lambda a, g, b: {1: arr([a[2][:22].sum()])}, step_limit=20000),
]

# ---- running -----------------------------------------------------------------------------------

@functools.cache
def _compiled(file: str, kernel: str | None, compiler: str):
    return compile_kernel(DIR / file, kernel=kernel, compiler=compiler)


def _args(case: UCase, shape) -> list:
    return case.make(np.random.default_rng(zlib.crc32(f"{case.id}/{shape}".encode())), *shape)


def _check(case: UCase, args: list, shape, arrays: list[np.ndarray]) -> None:
    exp = case.expect(args, *shape)
    ptrs = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    for k, i in enumerate(ptrs):
        want = exp.get(i, args[i])
        got = np.asarray(arrays[k], dtype=object)
        if isinstance(want, Perm):
            want, got = np.sort(want.values), np.sort(np.asarray(arrays[k], dtype=np.int64))
        w = [int(v) for v in np.asarray(want).ravel()]
        g = [int(v) for v in got.ravel()]
        assert len(g) == len(w), f"param {i}: length {len(g)} != {len(w)}"
        bad = [j for j in range(len(w)) if (g[j] - w[j]) % (1 << 64) != 0 and (g[j] - w[j]) % (1 << 32) != 0]
        assert not bad, f"param {i} wrong at {bad[:8]}: got {[g[j] for j in bad[:8]]}, want {[w[j] for j in bad[:8]]}"


def _raises(reason: str, api: bool) -> type[BaseException]:
    """The exception an expected failure must raise: through the CLI always a failed assertion."""
    if not api or reason in (WARP32, UNROLLED):
        return AssertionError
    return StepLimitError  # NAIVE_LOCK, LOCK_ZIG


def _mark(case: UCase, compiler: str, api: bool = True):
    reason = case.xfail.get(compiler)
    return [pytest.mark.xfail(strict=True, reason=reason, raises=_raises(reason, api))] if reason else []


API_PARAMS = [pytest.param(c, comp, s, id=f"{c.id}-{comp}-g{s[0][0]}x{s[0][1]}b{s[1][0]}x{s[1][1]}", marks=_mark(c, comp))
              for c in CASES for comp in COMPILERS for s in c.shapes]
# The CLI shares the library's path after argument parsing: nvcc's (slower) CLI runs are in the slow set.
CLI_PARAMS = [pytest.param(c, comp, id=f"{c.id}-{comp}", marks=_mark(c, comp, api=False) + ([pytest.mark.slow] if comp == "nvcc" else []))
              for c in CASES for comp in COMPILERS]


@pytest.mark.parametrize("case,compiler,shape", API_PARAMS)
def test_user_kernel_api(case: UCase, compiler: str, shape) -> None:
    skip_if_missing(compiler)
    args = _args(case, shape)
    k = _compiled(case.file, case.kernel, compiler)
    r = launch(k, [a.copy() if isinstance(a, np.ndarray) else a for a in args], grid=shape[0], block=shape[1],
               step_limit=case.step_limit)
    _check(case, args, shape, list(r.arrays.values()))


def _cli_value(a) -> str:
    return "[" + ",".join(str(int(v)) for v in a) + "]" if isinstance(a, np.ndarray) else str(a)


@pytest.mark.parametrize("case,compiler", CLI_PARAMS)
def test_user_kernel_cli(case: UCase, compiler: str) -> None:
    """`qgpu-min run FILE --arg ... --grid --block --compiler C --json`, first shape."""
    skip_if_missing(compiler)
    shape = case.shapes[0]
    args = _args(case, shape)
    cmd = ["run", str(DIR / case.file), "--compiler", compiler, "--json", "--backend", "interp",
           "--grid", "{},{}".format(*shape[0]), "--block", "{},{}".format(*shape[1])]
    cmd += ["--kernel", case.kernel] if case.kernel else []
    cmd += ["--step-limit", str(case.step_limit)] if case.step_limit else []
    for a in args:
        cmd.append(f"--arg={_cli_value(a)}")
    res = CliRunner().invoke(main, cmd)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    assert out["grid"] == list(shape[0]) and out["block"] == list(shape[1]) and out["backend"] == "interp"
    _check(case, args, shape, list(out["arrays"].values()))


# ---- outside the limits: the error must name the problem ----------------------------------------
# (source file, kernel, args, grid, block, regex the message must match)
ERRORS = [
    ("bad_inputs.cu", "uses_float", [[1, 2, 3], [0, 0, 0], 3], (1, 1), (4, 1),
     r"unsupported instruction `cvt\.rn\.f32\.s32 .*` at PTX line \d+: floating point is not supported"),
    ("bad_inputs.cu", "big_shared", [[0] * 32], (1, 1), (32, 1),
     r"need 2048 words of memory; the machine has 1024 \(over by 1024\)"),
    ("bad_inputs.cu", "spin_forever", [[0, 0]], (1, 1), (2, 1),
     r"did not halt within the step limit of 3000 .*CTA 0 \(0, 0\), warp 0, block B\d+ \(lanes \[0, 1\] live\)"),
    ("debug_print.cu", None, [[0] * 4], (1, 1), (4, 1), r"`call\.uni .*vprintf.*` at PTX line \d+: .*printf"),
    ("recursion.cu", "rec_binom", [[5], [2], [0], 1], (1, 1), (1, 1), r"_Z5binomii.*nested deeper than 8 \(recursion\?\)"),
    ("fizzbuzz.cu", None, [[0] * 64, 64], (1, 1), (64, 1), r"64 threads exceeds the machine's 32 threads per CTA \(over by 32\)"),
    ("fizzbuzz.cu", None, [[0] * 65, 65], (65, 1), (1, 1), r"65 CTAs exceeds the machine's 64 CTAs per launch \(over by 1\)"),
    ("relu_clamp.cu", None, [[0] * 400] * 3 + [1, 2, 3], (1, 1), (4, 1), r"needs 1200 words of memory .*has 1024 \(over by 176\)"),
    ("templ.cu", "scale", [[0] * 4, 4], (1, 1), (4, 1),
     r"'scale' is ambiguous.*_Z5scaleILi3EEvPii.*_Z5scaleILin7EEvPii.*pass .*the mangled name"),
]


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("file,kernel,args,grid,block,pattern", ERRORS, ids=[f"{e[0][:-3]}-{e[1]}-{e[4][0]}" for e in ERRORS])
def test_user_error_is_clear(file, kernel, args, grid, block, pattern, compiler) -> None:
    skip_if_missing(compiler)
    with pytest.raises(QgpuError, match=pattern):
        k = compile_kernel(DIR / file, kernel=kernel, compiler=compiler)
        launch(k, [np.asarray(a, np.int64) if isinstance(a, list) else a for a in args], grid=grid, block=block,
               step_limit=3000)


@pytest.mark.parametrize("compiler", COMPILERS)
def test_step_limit_names_ptx_line_and_causes(compiler) -> None:
    """An intra-warp spin lock stops at the step limit with the PTX line of the loop and the likely causes."""
    skip_if_missing(compiler)
    k = _compiled("mutex.cu", "naive_lock", compiler)
    with pytest.raises(StepLimitError) as e:
        launch(k, [[0], [0], [1, 2, 3, 4], 4], block=4, step_limit=2000)
    line = int(re.search(r"PTX line (\d+): `", str(e.value)).group(1))
    assert re.search(r"block B\d+ .*PTX line \d+: `.+` \(source mutex.cu:\d+: `while \(atomicCAS\(lock, 0, 1\) "
                     r"!= 0\) \{ \}`\)\. Likely causes: a spin lock .* ONE warp.*32-lane warps.*one lane per warp.*"
                     r"--step-limit", str(e.value)), str(e.value)
    # the named line is the spin loop's branch back: to a label above it, with the CAS in between
    text = k.ptx.splitlines()
    assert " bra" in text[line - 1], text[line - 1]
    target = text[line - 1].split()[-1].rstrip(";")
    label = max(i for i, t in enumerate(text[:line]) if t.split("//")[0].strip() == target + ":")
    assert any(".cas" in t for t in text[label:line]), text[label:line]


SPIN_PTX = """.version 7.0
.target sm_52
.address_size 64
.file 1 "/home/user/spin.cu"
.visible .entry spin(.param .u64 spin_param_0)
{
.reg .pred %p<2>;
.reg .b32 %r<2>;
.reg .b64 %rd<2>;
ld.param.u64 %rd1, [spin_param_0];
$L__BB0_1:
.loc 1 7 5
ld.volatile.global.u32 %r1, [%rd1];
setp.eq.s32 %p1, %r1, 0;
@%p1 bra $L__BB0_1;
ret;
}
"""


def test_step_limit_names_cuda_line_from_loc() -> None:
    k = compile_kernel(SPIN_PTX)
    with pytest.raises(StepLimitError, match=r"PTX line 15: `@%p1 bra \$L__BB0_1;` \(source spin\.cu:7\)\. "
                                             r"Likely causes"):
        launch(k, [[0]], block=1, step_limit=100)


def test_user_error_cli_exit_status() -> None:
    """The CLI prints `error: <message>` and exits 1 for a kernel the machine cannot run (floating point)."""
    res = CliRunner().invoke(main, ["run", str(DIR / "bad_inputs.cu"), "--kernel", "uses_float", "--compiler", "zig",
                                    "--arg", "[1,2]", "--arg", "zeros(2)", "--arg", "2", "--backend", "interp"])
    assert res.exit_code == 1 and "error: unsupported instruction `cvt.rn.f32.s32" in res.output, res.output


def test_user_cli_subprocess_env_compiler() -> None:
    """The installed `qgpu-min` command, compiler chosen by QGPU_CUDA_COMPILER as docs/cuda.md says."""
    exe = shutil.which("qgpu-min")
    if exe is None or missing("nvcc"):
        pytest.skip("qgpu-min is not on PATH or nvcc is missing")
    env = dict(os.environ, QGPU_CUDA_COMPILER="nvcc")
    res = subprocess.run([exe, "run", str(DIR / "digits.cu"), "--arg", "[1230,-45,7]", "--arg", "zeros(3)",
                          "--arg", "zeros(3)", "--arg", "3", "--json", "--backend", "interp"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["compiler"].startswith("nvcc") and out["block"] == [3, 1]
    assert out["arrays"] == {"in": [1230, -45, 7], "dsum": [6, 9, 7], "rev": [321, -54, 7]}


# ---- on the GPU in the weights -------------------------------------------------------------------
# every case at its first shape with zig clang, on --backend circuit under --check, fp32 and bf16 (a launch
# over the GPU's limits is skipped with the refusal as the reason); a few quick ones by default, one in bf16
GPU_DEFAULT = ("fizzbuzz", "relu_clamp", "small_types-byte_sign")


def _gpu_params():
    out = []
    for mode in ("fp32", "bf16"):
        for c in CASES:
            if c.xfail.get("zig"):
                continue
            marks = [] if c.id in GPU_DEFAULT and (mode == "fp32" or c.id == "relu_clamp") else [pytest.mark.slow]
            out.append(pytest.param(c, mode, id=f"{c.id}-{mode}", marks=marks))
    return out


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("case, mode", _gpu_params())
def test_user_kernel_on_the_gpu(case: UCase, mode: str) -> None:
    from qgpu_min.gpu.program import GpuLaunchError
    from qgpu_min.machine.isa import CapacityError
    skip_if_missing("zig")
    shape = case.shapes[0]
    args = _args(case, shape)
    k = _compiled(case.file, case.kernel, "zig")
    try:
        r = launch(k, [a.copy() if isinstance(a, np.ndarray) else a for a in args], grid=shape[0], block=shape[1],
                   step_limit=case.step_limit, backend="circuit", mode=mode, check=True)
    except (CapacityError, GpuLaunchError) as e:
        pytest.skip(f"does not fit the GPU in the weights: {e}")
    _check(case, args, shape, list(r.arrays.values()))

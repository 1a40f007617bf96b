"""The kernel suite: CUDA kernels in tests/kernels/, each with an independent NumPy statement of its result.

A Case names a .cu file and kernel, the launch shapes to run it at, an argument generator
`make(rng, shape) -> [arg per parameter]` (pointer: int64 array, scalar: int) and a reference
`expect(args, shape) -> {parameter index: expected final contents}`. Pointer parameters missing from
the reference must come back unchanged. Values are compared as 32-bit words. References state what
the kernel computes (np.dot, np.cumsum, np.sort, ...) rather than replaying its loops, and do their
arithmetic in int64, reduced to 32 bits at the end (two's-complement wrap-around).

Shapes respect the machine (qgpu_min/machine/isa.py): 4-lane warps, <= 32 threads per CTA, 1024
words of memory for all arrays + shared + local. Kernels using shuffles run with whole warps only
(a shuffle reading a lane that does not exist is undefined in CUDA).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
I32_MIN, I32_MAX, U32_MAX = -(2**31), 2**31 - 1, 2**32 - 1
Dim = tuple[int, int]


@dataclass(frozen=True)
class Shape:
    grid: Dim
    block: Dim

    @property
    def nblocks(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def bsize(self) -> int:
        return self.block[0] * self.block[1]

    @property
    def threads(self) -> int:
        return self.nblocks * self.bsize

    def __str__(self) -> str:
        g, b = self.grid, self.block
        return f"g{g[0]}x{g[1]}-b{b[0]}x{b[1]}"


@dataclass(frozen=True)
class Unordered:
    """Expected contents whose first `prefix` words may come in any order (atomic slot allocation)."""
    values: np.ndarray
    prefix: int


Args = list  # per parameter: np.ndarray (pointer) or int (scalar)


@dataclass(frozen=True)
class Case:
    file: str
    kernel: str | None
    shapes: tuple[Shape, ...]
    make: Callable[[np.random.Generator, Shape], Args]
    expect: Callable[[Args, Shape], dict]

    @property
    def id(self) -> str:
        return Path(self.file).stem + (f"-{self.kernel}" if self.kernel else "")

    @property
    def path(self) -> Path:
        return KERNEL_DIR / self.file


# ---------------------------------------------------------------------------------------------
# Helpers: data, 32-bit arithmetic, C semantics
# ---------------------------------------------------------------------------------------------

def s32(x) -> np.ndarray:
    """Wrap integer values (int64, or Python ints in object arrays) to signed 32-bit, as int64."""
    x = u32(x)
    return np.where(x >= 2**31, x - 2**32, x)


def u32(x) -> np.ndarray:
    return np.asarray(np.asarray(x).astype(object) % 2**32, dtype=np.int64)


def words(x) -> np.ndarray:
    """32-bit words of int values, for comparing regardless of signedness."""
    return np.asarray(x, dtype=np.int64) & 0xFFFFFFFF


def ints(rng: np.random.Generator, n: int, lo: int = I32_MIN, hi: int = I32_MAX,
         edges: tuple[int, ...] = ()) -> np.ndarray:
    """n random ints in [lo, hi], with the range's ends, 0, +-1 and `edges` placed at random positions."""
    v = rng.integers(lo, hi, size=n, endpoint=True, dtype=np.int64)
    specials = [e for e in (lo, hi, 0, -1, 1, *edges) if lo <= e <= hi]
    k = min(len(specials), n // 3)
    if k:
        v[rng.choice(n, size=k, replace=False)] = rng.choice(specials, size=k, replace=False)
    return v


def uints(rng: np.random.Generator, n: int, lo: int = 0, hi: int = U32_MAX, edges: tuple[int, ...] = ()) -> np.ndarray:
    return ints(rng, n, lo, hi, (0x80000000, 0x7FFFFFFF, U32_MAX, *edges))


def cdiv(a, b) -> np.ndarray:
    """C integer division: truncates toward zero."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def cmod(a, b) -> np.ndarray:
    """C remainder: has the sign of the dividend."""
    return np.asarray(a, dtype=np.int64) - np.asarray(b, dtype=np.int64) * cdiv(a, b)


def n_for(rng: np.random.Generator, shape: Shape, spare: int = 3) -> int:
    """An element count that the launch covers: all threads, or up to `spare` fewer (a partial last warp)."""
    return int(rng.integers(max(1, shape.threads - spare), shape.threads, endpoint=True))


def padded(a: np.ndarray, length: int, fill: int = 0) -> np.ndarray:
    out = np.full(length, fill, dtype=np.int64)
    out[: len(a)] = a
    return out


def per_block(a: np.ndarray, shape: Shape, fill: int = 0) -> np.ndarray:
    """A 1-D grid's data as rows of one block each (missing elements = fill)."""
    return padded(a, shape.threads, fill).reshape(shape.nblocks, shape.bsize)


def per_warp(a: np.ndarray, shape: Shape, fill: int = 0) -> np.ndarray:
    """Rows of one warp (4 lanes) each; shapes of shuffle kernels have whole warps."""
    assert shape.bsize % 4 == 0
    return padded(a, shape.threads, fill).reshape(-1, 4)


def bit_count(x) -> np.ndarray:
    return np.bitwise_count(words(x).astype(np.uint32)).astype(np.int64)


def bit_reverse(x) -> np.ndarray:
    bytes_le = words(x).astype("<u4").view(np.uint8).reshape(-1, 4)
    bits = np.unpackbits(bytes_le, axis=1, bitorder="little")[:, ::-1]
    return np.packbits(bits, axis=1, bitorder="little").view("<u4").ravel().astype(np.int64)


def bit_length(x) -> np.ndarray:
    return np.array([int(v).bit_length() for v in words(x)], dtype=np.int64)


def S(grid: int | Dim, block: int | Dim) -> Shape:
    as_dim = lambda d: (d, 1) if isinstance(d, int) else d
    return Shape(as_dim(grid), as_dim(block))


# Launch shape sets. The first shape of each case is the one the default (fast) test run uses.
ANY_1D = (S(2, 7), S(1, 1), S(1, 3), S(1, 4), S(3, 8), S(1, 32), S(4, 5), S(2, 32))
WARPS_1D = (S(2, 8), S(1, 4), S(3, 12), S(1, 32), S(4, 16), S(2, 20))
POW2_1D = (S(2, 8), S(1, 1), S(1, 2), S(1, 4), S(3, 16), S(1, 32), S(2, 32))
ONE_BLOCK = (S(1, 8), S(1, 1), S(1, 3), S(1, 4), S(1, 13), S(1, 32))
GRID_2D = (S((2, 2), (4, 2)), S((1, 1), (4, 4)), S((3, 1), (2, 5)), S((1, 2), (8, 3)),
           S((2, 3), (3, 3)), S((1, 1), (1, 1)))


# ---------------------------------------------------------------------------------------------
# The cases
# ---------------------------------------------------------------------------------------------

def _binary(fn, unsigned: bool = False):
    """make/expect for `k(const T* a, const T* b, T* c, int n)` with c = fn(a, b)."""
    gen = uints if unsigned else ints

    def make(rng, shape):
        n = n_for(rng, shape)
        return [gen(rng, n), gen(rng, n), gen(rng, n), n]

    return make, lambda a, s: {2: fn(a[0], a[1])}


def _saxpy_make(rng, shape):
    n = n_for(rng, shape)
    return [n, int(ints(rng, 1)[0]), ints(rng, n), ints(rng, n)]


def _dot_make(rng, shape, grid_stride=True):
    n = int(rng.integers(1, 3 * shape.threads, endpoint=True)) if grid_stride else n_for(rng, shape)
    return [ints(rng, n), ints(rng, n), ints(rng, 1), n]


def _dot_expect(a, s):
    return {2: s32(a[2] + np.dot(a[0], a[1]))}


def _reduce_make(rng, shape):
    """(in, per-block out, n); n may leave the last block empty."""
    n = n_for(rng, shape, spare=shape.bsize + 1)
    return [ints(rng, n), ints(rng, shape.nblocks), n]


def _warp_sum_make(rng, shape):
    n = n_for(rng, shape, spare=5)
    return [ints(rng, n), ints(rng, _warp_count(shape)), n]


def _exclusive_make(rng, shape):
    n = n_for(rng, shape, spare=shape.bsize + 1)
    return [ints(rng, n), ints(rng, n), ints(rng, shape.nblocks), n]


def _exclusive_expect(a, s):
    rows = per_block(a[0], s)
    return {1: s32(np.cumsum(rows, axis=1) - rows).ravel()[: a[3]], 2: s32(rows.sum(axis=1))}


def _histogram_make(rng, shape):
    n = int(rng.integers(1, 3 * shape.threads, endpoint=True))
    bins = int(2 ** rng.integers(0, 4, endpoint=True))
    return [uints(rng, n), rng.integers(0, 50, size=bins), n, bins]


def _histogram_shared_expect(a, s):
    v = a[0][: a[2]]
    return {1: a[1] + np.bincount(np.where(v < 0, 0, np.minimum(v // 100, 7)), minlength=8)}


def _branch_make(rng, shape):
    n = n_for(rng, shape)
    if rng.random() < 0.5:  # the whole range (but INT_MIN, whose negation is undefined in C)
        return [ints(rng, n, I32_MIN + 1), ints(rng, n), n]
    return [ints(rng, n, -3000, 3000, edges=(-1000, -1001, 999, 1000)), ints(rng, n), n]


def _compare_make(rng, shape):
    n = n_for(rng, shape)
    a = ints(rng, n)
    b = np.where(rng.random(n) < 0.3, a, ints(rng, n))  # some equal pairs
    return [a, b, ints(rng, n), n]


def _compare_expect(a, s):
    x, y, ux, uy = a[0], a[1], words(a[0]), words(a[1])
    flags = [x < y, ux < uy, x <= y, ux <= uy, x > y, ux > uy, x == y, x >= 0, ux >= 2**31]
    return {2: sum(f.astype(np.int64) << k for k, f in enumerate(flags))}


def _helpers_expect(a, s):
    t = np.clip(a[1], 0, 16)
    blend = s32(a[0] * (16 - t) + a[1] * t) >> 4
    return {2: s32(np.clip(blend, a[4], a[5]) + np.arange(a[3]) ** 2)}


def _block_reverse_expect(a, s):
    n = a[2]
    return {1: np.concatenate([blk[::-1] for blk in np.split(a[0], range(s.bsize, n, s.bsize))])}


def _helpers_make(rng, shape):
    n = n_for(rng, shape)
    lo, hi = sorted(int(v) for v in rng.integers(-(2**26), 2**26, size=2))
    return [ints(rng, n, -(2**26), 2**26), ints(rng, n, -40, 40), ints(rng, n), n, lo, hi]


def _vote_expect(a, s):
    count = np.repeat((per_warp(a[0], s) < 0).sum(axis=1), 4)[: a[3]]
    return {1: count, 2: (count != 0).astype(np.int64)}


def _warp_count(shape: Shape) -> int:
    return shape.nblocks * math.ceil(shape.bsize / 4)


def _collatz_ref(x: int, limit: int) -> int:
    steps = 0
    while x != 1 and steps < limit:
        x = x // 2 if x % 2 == 0 else 3 * x + 1
        steps += 1
    return steps


def _digit_sum(x: int, b: int) -> int:
    s = x % b
    while x := x // b:
        s += x % b
    return s


def _primes_upto(m: int) -> np.ndarray:
    sieve = np.ones(m + 1, dtype=bool)
    sieve[:2] = False
    for p in range(2, math.isqrt(m) + 1):
        if sieve[p]:
            sieve[p * p::p] = False
    return sieve


def _matmul_make(rng, shape):
    m = max(1, shape.grid[1] * shape.block[1] - int(rng.integers(0, 2)))
    p = max(1, shape.grid[0] * shape.block[0] - int(rng.integers(0, 2)))
    k = int(rng.integers(1, 6))
    return [ints(rng, m * k), ints(rng, k * p), ints(rng, m * p), m, k, p]


def _matmul_expect(a, s):
    A, B, m, k, p = a[0], a[1], a[3], a[4], a[5]
    return {2: s32(A.reshape(m, k) @ B.reshape(k, p)).ravel()}


def _tiled_make(rng, shape):
    n = int(rng.integers(4 * shape.grid[0] - 3, 4 * shape.grid[0], endpoint=True))
    return [ints(rng, n * n, -1000, 1000), ints(rng, n * n), ints(rng, n * n), n]


def _tiled_shape(g: int) -> Shape:
    return S((g, g), (4, 4))


def _stencil2d_make(rng, shape):
    w = max(1, shape.grid[0] * shape.block[0] - int(rng.integers(0, 2)))
    h = max(1, shape.grid[1] * shape.block[1] - int(rng.integers(0, 2)))
    return [ints(rng, w * h), ints(rng, w * h), w, h]


def _stencil2d_expect(a, s):
    w, h = a[2], a[3]
    p = np.pad(a[0].reshape(h, w), 1)
    c = p[1:-1, 1:-1]
    return {1: s32(4 * c - p[1:-1, :-2] - p[1:-1, 2:] - p[:-2, 1:-1] - p[2:, 1:-1]).ravel()}


def _transpose_make(rng, shape):
    cols = max(1, shape.grid[0] * shape.block[0] - int(rng.integers(0, 2)))
    rows = max(1, shape.grid[1] * shape.block[1] - int(rng.integers(0, 2)))
    return [ints(rng, rows * cols), ints(rng, rows * cols), rows, cols]


def _compact_make(rng, shape):
    n = n_for(rng, shape)
    return [ints(rng, n, -50, 50), np.full(n, -7, dtype=np.int64), np.zeros(1, dtype=np.int64), n]


def _compact_expect(a, s):
    kept = a[0][a[0] > 0]
    return {1: Unordered(padded(kept, a[3], -7), len(kept)), 2: np.array([len(kept)])}


def _div_make(rng, shape, unsigned=False):
    n = n_for(rng, shape)
    if unsigned:
        a, b = uints(rng, n), uints(rng, n, 1, U32_MAX, edges=(1, 2, 3, 7))
        small = rng.random(n) < 0.5  # small divisors give quotients with many bits
        b[small] = rng.integers(1, 100, size=int(small.sum()))
    else:
        a = ints(rng, n, edges=(7, -7, 100, -100))
        b = ints(rng, n, edges=(1, -2, 3, -3, I32_MIN, I32_MAX))
        small = rng.random(n) < 0.5
        b[small] = rng.integers(-60, 60, size=int(small.sum()))
        b[b == 0] = 5
        b[(a == I32_MIN) & (b == -1)] = -2  # INT_MIN / -1 is undefined in C
    return [a, b, ints(rng, n), ints(rng, n), n]


def _bitonic_make(rng, shape):
    n = n_for(rng, shape, spare=shape.bsize // 2)
    return [ints(rng, n), n]


def _bitonic_expect(a, s):
    blocks = np.sort(per_block(a[0], s, I32_MAX), axis=1).ravel()
    return {0: blocks[: a[1]]}


def _gcd_make(rng, shape):
    n = n_for(rng, shape)
    g = rng.integers(1, 1000, size=n)
    a = g * rng.integers(0, 4_000_000, size=n) % 2**32
    b = g * rng.integers(0, 4_000_000, size=n) % 2**32
    a[: min(2, n)] = [U32_MAX, 0][: min(2, n)]
    return [a, b, uints(rng, n), n]


def _matvec_make(rng, shape):
    rows, cols = n_for(rng, shape), int(rng.integers(1, 6))
    return [ints(rng, rows * cols), ints(rng, cols), ints(rng, rows), rows, cols]


def _atomic_stats_make(rng, shape):
    n = n_for(rng, shape)
    return [ints(rng, n)] + [ints(rng, 1) for _ in range(4)] + [n]


def _shifts_expect(a, s):
    x, u, k = a[0], words(a[0]), a[1] & 31
    return {2: x >> k, 3: u >> k, 4: s32(x << k), 5: words((u << k) | (u >> (32 - k)))}


def _powmod_make(rng, shape):
    n = n_for(rng, shape)
    return [uints(rng, n), uints(rng, n), uints(rng, n), int(rng.integers(1, 65536)), n]


def _index_2d_make(rng, shape):
    w = max(1, shape.grid[0] * shape.block[0] - int(rng.integers(0, 2)))
    h = max(1, shape.grid[1] * shape.block[1] - 1)
    return [ints(rng, w * h), w, h]


def s16(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.int64) & 0xFFFF
    return np.where(x >= 2**15, x - 2**16, x)


def _bytes_make(rng, shape):
    n = n_for(rng, shape)
    return [ints(rng, n, 0, 255), ints(rng, n, 0, 255), n, int(rng.integers(-300, 300))]


def _widen_make(rng, shape):
    n = n_for(rng, shape)
    return [ints(rng, n, -(2**15), 2**15 - 1), ints(rng, n), n]


def _narrow_make(rng, shape):
    n = n_for(rng, shape)
    return [ints(rng, n), ints(rng, n, -(2**15), 2**15 - 1), n]


def _fir_make(rng, shape):
    n_out = n_for(rng, shape)
    return [ints(rng, n_out + 4, -(2**20), 2**20), ints(rng, n_out), n_out]


def _counters_make(rng, shape):
    n = n_for(rng, shape)
    limit = int(rng.integers(0, 10))
    return [uints(rng, n), rng.integers(0, limit, size=1, endpoint=True), rng.integers(0, limit, size=1, endpoint=True),
            ints(rng, 1), uints(rng, 1), limit, n]


def _counters_expect(a, s):
    inp, n, m = a[0], a[6], a[5] + 1
    return {1: (a[1] + n) % m, 2: (a[2] - n) % m, 3: s32(a[3] - (inp & 0xFF).sum()),
            4: a[4] & np.bitwise_and.reduce(inp | 0x0F0F0000, keepdims=True)}


def _gather_make(rng, shape):
    n = n_for(rng, shape)
    return [ints(rng, n), rng.integers(0, n, size=n), rng.permutation(n), ints(rng, n), ints(rng, n), n]


def _gather_expect(a, s):
    scattered = np.empty_like(a[0])
    scattered[a[2]] = a[0]
    return {3: a[0][a[1]], 4: scattered}


def _find_key_make(rng, shape):
    n, length = n_for(rng, shape), int(rng.integers(1, 12))
    return [ints(rng, length, -5, 10), length, ints(rng, n, -5, 12), ints(rng, n), ints(rng, n), n]


def _find_key_expect(a, s):
    table, keys = a[0], a[2]
    hits = [np.flatnonzero(table == k) for k in keys]
    pos = np.array([h[0] if len(h) else -1 for h in hits])
    before = np.array([np.count_nonzero(table[: p if p >= 0 else len(table)] > 0) for p in pos])
    return {3: pos, 4: before}


def _wide_make(rng, shape):
    n = n_for(rng, shape)
    a, b = ints(rng, n), ints(rng, n)
    a[:2], b[:2] = [I32_MAX, I32_MIN][:n], [1, -1][:n]  # one overflow each way, whatever the shape
    return [a, b, ints(rng, n), n]


def _ballot_expect(a, s):
    rows = per_warp(a[0], s) > 0
    ballot = np.repeat((rows * (1 << np.arange(4))).sum(axis=1), 4)[: a[4]]
    return {1: ballot, 2: np.repeat(rows.any(axis=1), 4)[: a[4]].astype(np.int64),
            3: np.repeat(rows.all(axis=1), 4)[: a[4]].astype(np.int64)}


def _pairs_expect(a, s):
    pairs = padded(a[0], s.threads).reshape(-1, 2)
    n = a[4]
    return {1: pairs[:, ::-1].ravel()[:n], 2: np.repeat(pairs[:, 0], 2)[:n],
            3: np.stack([pairs[:, 1], pairs[:, 1]], axis=1).ravel()[:n]}


def _block_stats_make(rng, shape):
    n = n_for(rng, shape, spare=shape.bsize + 1)
    return [ints(rng, n), ints(rng, shape.nblocks), ints(rng, shape.nblocks), n]


def _block_stats_expect(a, s):
    rows = per_block(a[0], s, I32_MIN)
    sums = per_block(a[0], s, 0).sum(axis=1)
    return {1: rows.max(axis=1), 2: s32(sums)}


def _digit_walk(x: int) -> int:
    """What control_flow.cu computes, digit by digit from the least significant."""
    if x == 0:
        return -1
    acc = 0
    for d in map(int, reversed(str(x))):
        if d == 7:
            break
        acc = acc * 2 if d == 3 else acc + d
        if acc > 40:
            return 1000 + acc
    return acc


SWITCH_TABLE = np.array([11, 22, 33, 44, 55, 66, 77, 88, 99, 111])


def _template_make(rng, shape):
    n = n_for(rng, shape)
    return [int(ints(rng, 1)[0]), ints(rng, n), ints(rng, n), n]


def _pair_sum_make(rng, shape):
    n = n_for(rng, shape)
    return [ints(rng, n), ints(rng, n), ints(rng, n), n, int(rng.integers(0, 2))]


def _last_block_make(rng, shape):
    n = n_for(rng, shape, spare=shape.bsize + 1)
    return [ints(rng, n), ints(rng, shape.nblocks), ints(rng, 1), n]


def _wide_arith_expect(a, s):
    p = a[0] * a[1] + 0x123456789  # |a*b| <= 2^62: exact in int64
    return {2: words(p), 3: p >> 32, 4: (words(a[0]) + words(a[1])) // 2}


def _automaton_make(rng, shape):
    return [ints(rng, shape.threads), ints(rng, shape.threads), int(rng.choice([30, 90, 110, 184])),
            int(rng.integers(0, 12))]


def _automaton_expect(a, s):
    rule_bits = (a[2] >> np.arange(8)) & 1
    rings = per_block(a[0], s) & 1
    for _ in range(a[3]):
        rings = rule_bits[4 * np.roll(rings, 1, axis=1) + 2 * rings + np.roll(rings, -1, axis=1)]
    return {1: rings.ravel()}


def _broadcast_expect(a, s):
    return {1: np.repeat(per_block(a[0], s)[:, -1], s.bsize)}


def _warp_2d_make(rng, shape):
    w = shape.grid[0] * 2 - int(rng.integers(0, 2))
    h = shape.grid[1] * shape.block[1] - int(rng.integers(0, 2))
    return [ints(rng, w * h), ints(rng, w * h), ints(rng, w * h), w, h]


def _warp_2d_expect(a, s):
    """Blocks are 2 wide: a warp is two consecutive rows of a block's 2-column tile."""
    w, h = a[3], a[4]
    gw, gh = s.grid[0] * 2, s.grid[1] * s.block[1]
    m = np.zeros((gh, gw), dtype=np.int64)
    m[:h, :w] = a[0].reshape(h, w)
    tiles = m.reshape(gh // 2, 2, gw // 2, 2)  # (row pair, row, column pair, column)
    warp = np.broadcast_to(tiles.sum(axis=(1, 3), keepdims=True), tiles.shape).reshape(gh, gw)
    row = np.broadcast_to(tiles.sum(axis=3, keepdims=True), tiles.shape).reshape(gh, gw)
    return {1: s32(warp[:h, :w]).ravel(), 2: s32(row[:h, :w]).ravel()}


def gen(lo: int = I32_MIN, hi: int = I32_MAX, *edges: int) -> Callable:
    """An input generator (rng, n) -> array: ints in [lo, hi] with edge values."""
    return lambda rng, n: ints(rng, n, lo, hi, edges)


I, U = gen(), (lambda rng, n: uints(rng, n))


def grid_stride_n(rng, shape) -> int:
    """Up to three elements per thread, for grid-stride kernels."""
    return int(rng.integers(1, 3 * shape.threads, endpoint=True))


def arrays(*inputs: Callable, outs: int = 0, spare: int = 3, count: Callable | None = None,
           tail: Callable = lambda rng, n: []) -> Callable:
    """make for `k(inputs..., outputs..., n, tail...)`: n-element inputs, `outs` n-element outputs
    pre-filled with noise (so a missed store shows), then n, then tail(rng, n)."""
    def make(rng, shape):
        n = count(rng, shape) if count else n_for(rng, shape, spare)
        return [g(rng, n) for g in inputs] + [ints(rng, n) for _ in range(outs)] + [n, *tail(rng, n)]
    return make


def _low24_signed(x: np.ndarray) -> np.ndarray:
    """The low 24 bits of each value as a signed 24-bit integer (what __mul24 multiplies)."""
    low = np.asarray(x, dtype=np.int64) & 0xFFFFFF
    return np.where(low >= 1 << 23, low - (1 << 24), low)


CASES: tuple[Case, ...] = (
    Case("vec_add.cu", None, ANY_1D + (S(64, 1), S(10, 32)), *_binary(lambda a, b: s32(a + b))),
    Case("vec_ops.cu", "vec_sub", ANY_1D, *_binary(lambda a, b: s32(a - b))),
    Case("vec_ops.cu", "vec_mul", ANY_1D, *_binary(lambda a, b: s32(a * b))),
    Case("vec_ops.cu", "vec_logic", ANY_1D,
         *_binary(lambda a, b: (a & b) ^ ((a ^ U32_MAX) | (b >> 3)), unsigned=True)),
    Case("saxpy.cu", "saxpy", ANY_1D, _saxpy_make, lambda a, s: {3: s32(a[1] * a[2] + a[3])}),
    Case("dot_atomic.cu", "dot", ANY_1D, _dot_make, _dot_expect),
    Case("dot_shared.cu", "dot_shared", ANY_1D, lambda r, s: _dot_make(r, s, grid_stride=False), _dot_expect),
    Case("reduce_sum.cu", None, ANY_1D, _reduce_make,
         lambda a, s: {1: s32(per_block(a[0][: a[2]], s).sum(axis=1))}),
    Case("reduce_max.cu", None, POW2_1D, _reduce_make,
         lambda a, s: {1: per_block(a[0][: a[2]], s, I32_MIN).max(axis=1)}),
    Case("warp_reduce_down.cu", None, WARPS_1D, _warp_sum_make,
         lambda a, s: {1: s32(per_warp(a[0][: a[2]], s).sum(axis=1))}),
    Case("warp_reduce_xor.cu", None, WARPS_1D, arrays(I, outs=2, spare=5),
         lambda a, s: {1: s32(np.repeat(per_warp(a[0], s).sum(axis=1), 4))[: a[3]],
                       2: np.repeat(per_warp(a[0], s).max(axis=1), 4)[: a[3]]}),
    Case("warp_scan.cu", None, WARPS_1D, arrays(I, outs=1, spare=5),
         lambda a, s: {1: s32(np.cumsum(per_warp(a[0], s), axis=1)).ravel()[: a[2]]}),
    Case("block_scan.cu", None, ANY_1D, arrays(I, outs=1),
         lambda a, s: {1: s32(np.cumsum(per_block(a[0], s), axis=1)).ravel()[: a[2]]}),
    Case("exclusive_scan.cu", None, ANY_1D, _exclusive_make, _exclusive_expect),
    Case("scan_two_level.cu", None, WARPS_1D, arrays(I, outs=1, spare=9),
         lambda a, s: {1: s32(np.cumsum(per_block(a[0], s), axis=1)).ravel()[: a[2]]}),
    Case("histogram.cu", None, ANY_1D, _histogram_make,
         lambda a, s: {1: a[1] + np.bincount(a[0][: a[2]] & (a[3] - 1), minlength=a[3])}),
    Case("histogram_shared.cu", None, ANY_1D,
         lambda r, s: (lambda n: [ints(r, n, -300, 1000, (99, 100, 699, 700)), r.integers(0, 9, size=8), n])(
             n_for(r, s)),
         _histogram_shared_expect),
    Case("matmul.cu", None, GRID_2D, _matmul_make, _matmul_expect),
    Case("matmul_tiled.cu", None, (_tiled_shape(2), _tiled_shape(1), _tiled_shape(3)), _tiled_make,
         lambda a, s: {2: s32(a[0].reshape(a[3], a[3]) @ a[1].reshape(a[3], a[3])).ravel()}),
    Case("matvec.cu", "matvec", ANY_1D, _matvec_make, lambda a, s: {2: s32(a[0].reshape(a[3], a[4]) @ a[1])}),
    Case("stencil1d.cu", None, (S(2, 7), S(1, 2), S(1, 3), S(3, 4), S(1, 32), S(4, 5)), arrays(I, outs=1),
         lambda a, s: {1: s32(np.convolve(a[0], np.ones(5, dtype=np.int64))[2: 2 + a[2]])}),
    Case("stencil2d.cu", None, GRID_2D + (S((1, 1), (32, 1)), S((1, 2), (1, 16))), _stencil2d_make,
         _stencil2d_expect),
    Case("collatz.cu", None, ANY_1D,
         arrays(gen(1, 1000, 27, 2, 97, 871), outs=1, tail=lambda r, n: [int(r.choice([60, 200]))]),
         lambda a, s: {1: np.array([_collatz_ref(int(x), a[3]) for x in a[0]])}),
    Case("gcd.cu", "gcd_kernel", ANY_1D, _gcd_make, lambda a, s: {2: np.gcd(a[0], a[1])}),
    Case("branch_chain.cu", None, ANY_1D, _branch_make,
         lambda a, s: {1: s32(np.select([a[0] < -1000, a[0] < 0, a[0] == 0, a[0] < 1000],
                                        [cdiv(-a[0], 1000), a[0] * 3, 7, a[0] + 1000], a[0] ^ 0x5555))}),
    Case("early_return.cu", None, ANY_1D, arrays(gen(-100, 100), I, gen(0, 5)),
         lambda a, s: {1: np.select([a[0] < 0, a[0] % 3 == 0], [-1, a[1]], a[0] // 3),
                       2: np.where(a[0] < 0, a[2], 1)}),
    Case("switch_case.cu", None, ANY_1D, arrays(I, I, outs=1),
         lambda a, s: {2: s32(np.choose(a[0] & 7, [a[0] + a[1], a[0] - a[1], a[0] * a[1], a[0] & a[1],
                                                     a[0] | a[1], a[0] | a[1], a[1] << 2, -a[0]]))}),
    Case("bit_intrinsics.cu", None, ANY_1D, arrays(lambda r, n: uints(r, n, edges=(1, 2, 0x10000)), outs=4),
         lambda a, s: {1: bit_count(a[0]), 2: 32 - bit_length(a[0]), 3: bit_reverse(a[0]),
                       4: np.where(a[0] == 0, 0, bit_length(a[0] & -a[0]))}),
    Case("bit_manual.cu", "bit_manual", ANY_1D, arrays(U, outs=2),
         lambda a, s: {1: bit_reverse(a[0]), 2: bit_count(a[0]) & 1}),
    Case("compare_signedness.cu", None, ANY_1D, _compare_make, _compare_expect),
    Case("divmod_signed.cu", None, ANY_1D, _div_make,
         lambda a, s: {2: s32(cdiv(a[0], a[1])), 3: s32(cmod(a[0], a[1]))}),
    Case("divmod_unsigned.cu", "udivmod", ANY_1D, lambda r, s: _div_make(r, s, unsigned=True),
         lambda a, s: {2: a[0] // a[1], 3: a[0] % a[1]}),
    Case("divmod_const.cu", None, ANY_1D, arrays(gen(I32_MIN, I32_MAX, 7, -7, 16, -16, -3, 3, 10), outs=6),
         lambda a, s: {1: cdiv(a[0], 7), 2: cmod(a[0], 7), 3: cdiv(a[0], -3), 4: cdiv(a[0], 16),
                       5: cmod(a[0], 16), 6: words(a[0]) // 10 + words(a[0]) % 10}),
    Case("grid_stride.cu", None, ANY_1D + (S(3, 29),),
         # 440 elements: 880 words of arrays, the rest for spill frames (nvcc unrolls this loop)
         arrays(I, outs=1, count=lambda r, s: 440 if s == S(3, 29) else grid_stride_n(r, s),
                tail=lambda r, n: [int(v) for v in ints(r, 2)]),
         lambda a, s: {1: s32(a[0] * a[3] + a[4])}),
    Case("block_reverse.cu", None, ANY_1D, arrays(I, outs=1), _block_reverse_expect),
    Case("local_array.cu", None, (S(2, 4), S(1, 1), S(1, 3), S(1, 8), S(3, 5)),
         arrays(lambda r, n: uints(r, n, edges=(0x12345678, 0x11111111, 0xFEDCBA98)), outs=1),
         lambda a, s: {1: np.array([len(set(f"{int(x):08x}")) for x in a[0]])}),
    Case("device_helpers.cu", "helpers", ANY_1D, _helpers_make, _helpers_expect),
    Case("minmax_abs.cu", None, ANY_1D, arrays(I, I, outs=4),
         lambda a, s: {2: np.minimum(a[0], a[1]), 3: np.maximum(a[0], a[1]),
                       4: np.minimum(words(a[0]), words(a[1])), 5: s32(np.abs(a[0]))}),
    Case("prefix_sum_chunked.cu", None, ONE_BLOCK,
         arrays(I, outs=1, count=lambda r, s: int(r.integers(1, 3 * s.bsize, endpoint=True))),
         lambda a, s: {1: s32(np.cumsum(a[0]))}),
    Case("transpose.cu", None,
         (S((2, 2), (4, 2)), S((1, 1), (4, 4)), S((3, 1), (2, 5)), S((1, 2), (8, 3)), S((2, 3), (3, 3)),
          S((1, 1), (8, 4)), S((1, 1), (1, 1))),
         _transpose_make, lambda a, s: {1: a[0].reshape(a[2], a[3]).T.ravel()}),
    Case("compact.cu", None, ANY_1D, _compact_make, _compact_expect),
    Case("bitonic_sort.cu", None, POW2_1D, _bitonic_make, _bitonic_expect),
    Case("atomic_minmax.cu", None, ANY_1D, _atomic_stats_make,
         lambda a, s: {1: np.minimum(a[1], a[0].min(keepdims=True)), 2: np.maximum(a[2], a[0].max(keepdims=True)),
                       3: a[3] | np.bitwise_or.reduce(a[0], keepdims=True),
                       4: a[4] ^ np.bitwise_xor.reduce(a[0], keepdims=True)}),
    Case("atomic_cas.cu", None, ANY_1D,
         lambda r, s: (lambda n: [ints(r, n, I32_MIN + 1), ints(r, 1), n])(n_for(r, s)),
         lambda a, s: {1: s32(a[1] + np.abs(a[0]).sum())}),
    Case("shifts.cu", None, ANY_1D, arrays(I, gen(I32_MIN, I32_MAX, 31, 32, 33), outs=4), _shifts_expect),
    Case("mulhi.cu", None, ANY_1D, arrays(I, I, outs=3),
         lambda a, s: {2: (a[0] * a[1]) >> 32, 3: (words(a[0]).astype(object) * words(a[1]).astype(object)) >> 32,
                       4: s32(a[0] * a[1])}),
    Case("intrinsics_misc.cu", None, ANY_1D, arrays(I, I, outs=5),
         lambda a, s: {2: s32(_low24_signed(a[0]) * _low24_signed(a[1])),
                       3: (words(a[0]) & 0xFFFFFF) * (words(a[1]) & 0xFFFFFF),
                       4: (a[0] + a[1]) >> 1, 5: (a[0] + a[1] + 1) >> 1, 6: (words(a[0]) + words(a[1])) >> 1}),
    Case("shuffle_idx.cu", None, WARPS_1D, arrays(I, outs=2, spare=5),
         lambda a, s: {1: np.repeat(per_warp(a[0], s)[:, 0], 4)[: a[3]],
                       2: np.roll(per_warp(a[0], s), -1, axis=1).ravel()[: a[3]]}),
    Case("powmod.cu", None, ANY_1D, _powmod_make,
         lambda a, s: {2: np.array([pow(int(b), int(e), a[3]) for b, e in zip(a[0], a[1])])}),
    Case("is_prime.cu", None, ANY_1D, arrays(gen(-20, 3000, 2, 3, 4, 2999, 2971, 961), outs=1),
         lambda a, s: {1: np.where(a[0] >= 0, _primes_upto(3000)[np.clip(a[0], 0, None)], False).astype(np.int64)}),
    Case("adjacent_diff.cu", None, ANY_1D, arrays(I, outs=1), lambda a, s: {1: s32(np.diff(a[0], prepend=0))}),
    Case("reverse_global.cu", None, ANY_1D, arrays(I, outs=1), lambda a, s: {1: a[0][::-1]}),
    Case("index_2d.cu", None, GRID_2D + (S((8, 8), (1, 1)), S((4, 2), (4, 8))), _index_2d_make,
         lambda a, s: {0: (np.arange(a[1])[None, :] * 100 + np.arange(a[2])[:, None]
                           - s.grid[0] * s.block[1]).ravel()}),
    Case("sum_squares.cu", None, WARPS_1D,
         lambda r, s: (lambda n: [ints(r, n), ints(r, 1), n])(grid_stride_n(r, s)),
         lambda a, s: {1: s32(a[1] + np.dot(a[0], a[0]))}),
    Case("count_matches.cu", None, ANY_1D,
         lambda r, s: (lambda n: [ints(r, n, -3, 3), int(r.integers(-3, 3)), uints(r, 1, 0, 1000), n])(
             grid_stride_n(r, s)),
         lambda a, s: {2: a[2] + np.count_nonzero(a[0] == a[1])}),
    Case("ternary_select.cu", None, ANY_1D,
         arrays(I, outs=3, tail=lambda r, n: sorted(int(v) for v in r.integers(-(2**30), 2**30, size=2))),
         lambda a, s: {1: np.maximum(a[0], 0), 2: np.sign(a[0]), 3: np.clip(a[0], a[5], a[6])}),
    Case("warp_vote_manual.cu", None, WARPS_1D, arrays(I, outs=2, spare=5), _vote_expect),
    Case("cond_loop.cu", None, ANY_1D, arrays(U, gen(2, 40, 10, 16), outs=1),
         lambda a, s: {2: np.array([_digit_sum(int(x), int(b)) for x, b in zip(a[0], a[1])])}),
    Case("bytes.cu", "brighten", ANY_1D, _bytes_make, lambda a, s: {1: np.clip(a[0] + a[3], 0, 255)}),
    Case("bytes.cu", "widen", ANY_1D, _widen_make, lambda a, s: {1: a[0] * 3}),
    Case("bytes.cu", "narrow", ANY_1D, _narrow_make, lambda a, s: {1: s16(a[0] >> 4)}),
    Case("constant_table.cu", None, ANY_1D, _fir_make,
         lambda a, s: {1: s32(np.convolve(a[0], [1, -4, 6, -4, 1], mode="valid"))}),
    Case("device_ticket.cu", None, ANY_1D, lambda r, s: (lambda n: [ints(r, n), n])(n_for(r, s)),
         lambda a, s: {0: Unordered(np.arange(100, 100 + a[1]), a[1])}),
    Case("ballot.cu", None, WARPS_1D, arrays(I, outs=3, spare=5), _ballot_expect),
    Case("shfl_width.cu", None, WARPS_1D, arrays(I, outs=3, spare=5), _pairs_expect),
    Case("atomic_inc_dec.cu", None, ANY_1D, _counters_make, _counters_expect),
    Case("shared_atomics.cu", None, ANY_1D, _block_stats_make, _block_stats_expect),
    Case("gather_scatter.cu", None, ANY_1D, _gather_make, _gather_expect),
    Case("search_break.cu", None, ANY_1D, _find_key_make, _find_key_expect),
    Case("warp_sync_shared.cu", None, WARPS_1D, arrays(I, outs=1, spare=5),
         lambda a, s: {1: s32(np.roll(per_warp(a[0], s) * 2, 1, axis=1) + 1).ravel()[: a[2]]}),
    Case("countdown.cu", None, ANY_1D, arrays(I, outs=1),
         lambda a, s: {1: s32(np.cumsum(a[0][::-1])[::-1])}),
    Case("wide_compare.cu", None, ANY_1D, _wide_make,
         lambda a, s: {2: np.sign(a[0] + a[1] - np.clip(a[0] + a[1], I32_MIN, I32_MAX))}),
    Case("bytes.cu", "signed_bytes", ANY_1D, arrays(gen(-128, 127), outs=1),
         lambda a, s: {1: a[0] * 2 + (a[0] < 0)}),
    Case("template_kernel.cu", None, ANY_1D, _template_make,
         lambda a, s: {2: s32(a[2] + a[0] * a[1])}),
    Case("control_flow.cu", None, ANY_1D,
         arrays(lambda r, n: uints(r, n, edges=(7, 3333, 170, 1030507, 88888888, 98765)), outs=1),
         lambda a, s: {1: np.array([_digit_walk(int(x)) for x in a[0]])}),
    Case("pointer_select.cu", None, ANY_1D, _pair_sum_make,
         lambda a, s: (lambda src: {2: s32(src + np.append(src[1:], 0))})(a[0] if a[4] else a[1])),
    Case("switch_table.cu", None, ANY_1D, arrays(gen(-3, 12), outs=1),
         lambda a, s: {1: np.where((a[0] >= 0) & (a[0] <= 9), SWITCH_TABLE[np.clip(a[0], 0, 9)], -1)}),
    Case("last_block.cu", None, ANY_1D + (S(9, 3),), _last_block_make,
         lambda a, s: {1: s32(per_block(a[0][: a[3]], s).sum(axis=1)), 2: s32(a[0][: a[3]].sum(keepdims=True))}),
    Case("wide_arith.cu", None, ANY_1D, arrays(I, I, outs=3), _wide_arith_expect),
    Case("wide_divide.cu", None, ANY_1D, arrays(I, I, outs=2),
         lambda a, s: (lambda x: {2: s32(cdiv(x, 1000003)), 3: s32(cmod(x, 1000003))})(a[0] * a[1])),
    Case("odd_even_sort.cu", None, ANY_1D, lambda r, s: (lambda n: [ints(r, n), n])(n_for(r, s, s.bsize + 1)),
         lambda a, s: {0: np.concatenate([np.sort(blk) for blk in np.split(a[0], range(s.bsize, a[1], s.bsize))])}),
    Case("automaton.cu", None, ANY_1D, _automaton_make, _automaton_expect),
    Case("radix_sort.cu", None, ANY_1D,
         lambda r, s: [uints(r, s.threads), int(r.integers(1, 6))],
         lambda a, s: {0: np.concatenate([blk[np.argsort(blk & ((1 << a[1]) - 1), kind="stable")]
                                          for blk in per_block(a[0], s)])}),
    Case("shared_broadcast.cu", None, ANY_1D, lambda r, s: [ints(r, s.threads), ints(r, s.threads)],
         _broadcast_expect),
    Case("warp_2d.cu", None, (S((2, 1), (2, 4)), S((1, 1), (2, 2)), S((3, 2), (2, 6)), S((1, 2), (2, 16))),
         _warp_2d_make, _warp_2d_expect),
    Case("nested_loops.cu", None, (S(2, 4), S(1, 1), S(1, 3), S(1, 8), S(2, 7)), arrays(I, outs=1),
         lambda a, s: {1: s32(np.convolve(a[0], np.arange(1, a[2] + 1))[: a[2]])}),
)

"""Lowering of every integer operation, from zig clang's 32-bit PTX and nvcc's 64-bit PTX, on randomized
operands, against independent Python/NumPy statements of the result."""
import random

import pytest

from compilers import needs
from qgpu_min.host.launch import compile_kernel, launch

M32 = 0xFFFFFFFF


COMPILERS = [pytest.param(c, marks=needs(c)) for c in ("zig", "nvcc")]


def s32(v):
    v &= M32
    return v - (1 << 32) if v >> 31 else v


def tdiv(x, y):
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


def rand_s32(rng, n, small=False):
    out = []
    for _ in range(n):
        k = rng.random()
        if small and k < 0.3:
            out.append(rng.randint(-9, 9))
        elif k < 0.1:
            out.append(rng.choice([-(1 << 31), (1 << 31) - 1, -1, 0, 1]))
        else:
            out.append(rng.randint(-(1 << 31), (1 << 31) - 1))
    return out


def run_ops(src, compiler, a, b, n_ops, signed=True):
    k = compile_kernel(src, compiler=compiler)
    n = len(a)
    r = launch(k, [a, b, [0] * (n_ops * n), n], grid=(n + 31) // 32, block=32)
    return r.arrays["o"].reshape(n_ops, n)


def check(got, want, a, b):
    for j, (g_row, w_row) in enumerate(zip(got, want)):
        bad = [(a[i], b[i], int(g_row[i]), w_row[i]) for i in range(len(a)) if int(g_row[i]) != w_row[i]]
        assert not bad, f"op {j}: (a, b, got, want) {bad[:4]}"


SIGNED = r"""
__global__ void sops(const int *a, const int *b, int *o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int x = a[i], y = b[i];
  o[0 * n + i] = x / y;
  o[1 * n + i] = x % y;
  o[2 * n + i] = x / 7;
  o[3 * n + i] = x % -5;
  o[4 * n + i] = x / -3;
  o[5 * n + i] = __mulhi(x, y);
  o[6 * n + i] = x / 1024;
  o[7 * n + i] = max(x, y) - min(x, y / 3);
  o[8 * n + i] = abs(x) ^ (x < y) ^ ((x >= 0) << 1) ^ ((x <= y) << 2) ^ ((x != y) << 3);
  o[9 * n + i] = (x >> 3) + (y << 5) + (x >> (y & 31));
}
"""


@pytest.mark.parametrize("compiler", COMPILERS)
def test_signed_arithmetic(compiler):
    rng = random.Random(1)
    a = rand_s32(rng, 64)
    b = [y or 1 for y in rand_s32(rng, 64, small=True)]
    a[0], b[0] = -(1 << 31), 3
    want = [[tdiv(x, y) for x, y in zip(a, b)], [x - tdiv(x, y) * y for x, y in zip(a, b)],
            [tdiv(x, 7) for x in a], [x - tdiv(x, -5) * -5 for x in a], [tdiv(x, -3) for x in a],
            [(x * y) >> 32 for x, y in zip(a, b)], [tdiv(x, 1024) for x in a],
            [s32(max(x, y) - min(x, tdiv(y, 3))) for x, y in zip(a, b)],
            [s32(abs(x)) ^ (x < y) ^ ((x >= 0) << 1) ^ ((x <= y) << 2) ^ ((x != y) << 3) for x, y in zip(a, b)],
            [s32((x >> 3) + (y << 5) + (x >> (y & 31))) for x, y in zip(a, b)]]
    check(run_ops(SIGNED, compiler, a, b, 10), want, a, b)


UNSIGNED = r"""
__global__ void uops(const unsigned *a, const unsigned *b, unsigned *o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned x = a[i], y = b[i];
  o[0 * n + i] = x / y;
  o[1 * n + i] = x % y;
  o[2 * n + i] = x / 10u;
  o[3 * n + i] = x % 1000u;
  o[4 * n + i] = x / 0x80000001u;
  o[5 * n + i] = __umulhi(x, y);
  o[6 * n + i] = __popc(x) + (__clz(y) << 8) + (__ffs(x) << 16);
  o[7 * n + i] = __brev(x);
  o[8 * n + i] = (x < y) + ((x >= y) << 1) + (min(x, y) == x ? 4 : 0) + ((x >> (y & 31)) << 3);
  o[9 * n + i] = x * y + (x >> 7);
}
"""


def clz(v):
    return 32 - v.bit_length()


def ffs(v):
    return (v & -v).bit_length()


@pytest.mark.parametrize("compiler", COMPILERS)
def test_unsigned_arithmetic_and_bit_counts(compiler):
    rng = random.Random(2)
    a = [x & M32 for x in rand_s32(rng, 64)]
    b = [(y & M32) or 1 for y in rand_s32(rng, 64, small=True)]
    a[1] = 0
    want = [[x // y for x, y in zip(a, b)], [x % y for x, y in zip(a, b)], [x // 10 for x in a],
            [x % 1000 for x in a], [x // 0x80000001 for x in a], [(x * y) >> 32 for x, y in zip(a, b)],
            [bin(x).count("1") + (clz(y) << 8) + (ffs(x) << 16) for x, y in zip(a, b)],
            [int(f"{x:032b}"[::-1], 2) for x in a],
            [(x < y) + ((x >= y) << 1) + (4 if min(x, y) == x else 0) + (((x >> (y & 31)) << 3) & M32)
             for x, y in zip(a, b)],
            [(x * y + (x >> 7)) & M32 for x, y in zip(a, b)]]
    check(run_ops(UNSIGNED, compiler, a, b, 10), want, a, b)


# PTX semantics the C language leaves undefined, reached through inline PTX
ASM = r"""
__device__ __forceinline__ int shl(int a, int b) { int r; asm("shl.b32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ int shru(int a, int b) { int r; asm("shr.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ int shrs(int a, int b) { int r; asm("shr.s32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ int divs(int a, int b) { int r; asm("div.s32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ int rems(int a, int b) { int r; asm("rem.s32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ int divu(int a, int b) { int r; asm("div.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ int bfes(int a) { int r; asm("bfe.s32 %0, %1, 5, 9;" : "=r"(r) : "r"(a)); return r; }
__device__ __forceinline__ int bfeu(int a) { int r; asm("bfe.u32 %0, %1, 28, 8;" : "=r"(r) : "r"(a)); return r; }
__device__ __forceinline__ int bfi(int a, int b) { int r; asm("bfi.b32 %0, %1, %2, 6, 11;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ int prmt(int a, int b) { int r; asm("prmt.b32 %0, %1, %2, 0x9C40;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ int bfind(int a) { int r; asm("bfind.s32 %0, %1;" : "=r"(r) : "r"(a)); return r; }
__global__ void asmops(const int *a, const int *b, int *o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int x = a[i], y = b[i];
  o[0 * n + i] = shl(x, y);
  o[1 * n + i] = shru(x, y);
  o[2 * n + i] = shrs(x, y);
  o[3 * n + i] = divs(x, y);
  o[4 * n + i] = rems(x, y);
  o[5 * n + i] = divu(x, y);
  o[6 * n + i] = bfes(x) ^ bfeu(y);
  o[7 * n + i] = bfi(x, y);
  o[8 * n + i] = prmt(x, y);
  o[9 * n + i] = bfind(x);
}
"""


def ref_asm(x, y):
    ux, uy = x & M32, y & M32
    sh = uy
    if uy == 0:
        q, r = (-1 if x >= 0 else 1), x
        qu = M32
    else:
        q, r = s32(tdiv(x, y)), x - tdiv(x, y) * y if not (x == -(1 << 31) and y == -1) else 0
        qu = ux // uy
    bfe_s = s32((ux >> 5 & 0x1FF) | (-(ux >> 13 & 1) << 9 & M32))
    bfe_u = uy >> 28
    mask = ((1 << 11) - 1) << 6
    bfi = (uy & ~mask) | ((ux << 6) & mask)
    bytes_ = list(ux.to_bytes(4, "little")) + list(uy.to_bytes(4, "little"))
    out = 0
    for k, sel in enumerate((0x0, 0x4, 0xC, 0x9)):
        v = bytes_[sel & 7]
        if sel & 8:
            v = 0xFF if v >> 7 else 0
        out |= v << (8 * k)
    bf = ux ^ M32 if x < 0 else ux
    return [s32(ux << sh if sh < 32 else 0), s32(ux >> sh if sh < 32 else 0), x >> min(sh, 31),
            s32(q), s32(r), s32(qu), s32(bfe_s ^ bfe_u), s32(bfi), s32(out),
            s32(bf.bit_length() - 1 if bf else M32)]


@pytest.mark.parametrize("compiler", COMPILERS)
def test_ptx_semantics_shifts_ge_32_division_by_zero_and_bitfields(compiler):
    rng = random.Random(3)
    a = rand_s32(rng, 64)
    b = [rng.choice([rng.randint(0, 40), rng.randint(-(1 << 31), (1 << 31) - 1), 0, 32, 33, -1]) for _ in range(64)]
    a[:4], b[:4] = [-(1 << 31), 7, -7, 0], [-1, 0, 0, 0]
    want = list(map(list, zip(*[ref_asm(x, y) for x, y in zip(a, b)])))
    check(run_ops(ASM, compiler, a, b, 10), want, a, b)


SUBWORD = r"""
__global__ void sub(const signed char *c, const unsigned short *h, int *o, short *hs, unsigned char *uc, int n) {
  int i = threadIdx.x;
  if (i >= n) return;
  signed char x = c[i];
  unsigned short y = h[i];
  o[0 * n + i] = x;
  o[1 * n + i] = y;
  o[2 * n + i] = (short)y;
  o[3 * n + i] = (unsigned char)x + (int)(signed char)(y >> 3);
  o[4 * n + i] = (x < 0) + ((short)y < 0) * 2 + ((long long)x * 3 < 0) * 4;
  hs[i] = (short)(x * 300 + y);
  uc[i] = (unsigned char)(y + x);
}
"""


@pytest.mark.parametrize("compiler", COMPILERS)
def test_subword_memory_and_sign_extension(compiler):
    rng = random.Random(4)
    n = 30
    c = [rng.randint(-128, 127) for _ in range(n)]
    h = [rng.randint(0, 65535) for _ in range(n)]
    k = compile_kernel(SUBWORD, compiler=compiler)
    assert [(p.name, p.signed, p.elem_bytes) for p in k.params[:5]] == \
        [("c", True, 1), ("h", False, 2), ("o", True, 4), ("hs", True, 2), ("uc", False, 1)]
    r = launch(k, [c, h, [0] * (5 * n), [0] * n, [0] * n, n], block=n)
    o = r.arrays["o"].reshape(5, n)
    sh = lambda v: ((v & 0xFFFF) ^ 0x8000) - 0x8000
    sc = lambda v: ((v & 0xFF) ^ 0x80) - 0x80
    want = [c, h, [sh(y) for y in h], [(x & 0xFF) + sc(y >> 3) for x, y in zip(c, h)],
            [(x < 0) + (sh(y) < 0) * 2 + (x * 3 < 0) * 4 for x, y in zip(c, h)]]
    check(o, want, c, h)
    assert r.arrays["hs"].tolist() == [sh(x * 300 + y) for x, y in zip(c, h)]
    assert r.arrays["uc"].tolist() == [(y + x) & 0xFF for x, y in zip(c, h)]


WIDE = r"""
__global__ void wide(const int *a, const int *b, int *o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  long long x = a[i], y = b[i];
  unsigned long long u = (unsigned)a[i], v = (unsigned)b[i];
  long long p = x * y;
  o[0 * n + i] = (int)(p >> 32);
  o[1 * n + i] = (int)(p >> (b[i] & 63));
  o[2 * n + i] = (int)((u * v) >> 40);
  o[3 * n + i] = (p > 1000000000LL) + 2 * (p < -5LL) + 4 * (u * v > 0x100000000ULL) + 8 * (x + y > 2147483647LL);
  o[4 * n + i] = (int)((x << (a[i] & 63)) >> 32);
  o[5 * n + i] = (int)(max(p, x * 3) - min(p, y * 5));
  o[6 * n + i] = (int)((p + (x << 33)) >> 33);
  o[7 * n + i] = (int)(llabs(p) >> 31);
  o[8 * n + i] = (int)((u << (b[i] & 63)) >> 31) ^ (int)((x * 1000000007LL) >> 29);
  o[9 * n + i] = (int)(-(p >> 1)) + (int)((unsigned long long)p >> 61);
}
"""


def _w64(v):
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


def ref_wide(x, y):
    u, v = x & M32, y & M32
    p = x * y
    return [s32(p >> 32), s32(p >> (y & 63)), s32(((u * v) & (2 ** 64 - 1)) >> 40),
            (p > 10 ** 9) + 2 * (p < -5) + 4 * (u * v > 2 ** 32) + 8 * (x + y > 2 ** 31 - 1),
            s32(_w64(x << (x & 63)) >> 32), s32(max(p, 3 * x) - min(p, 5 * y)), s32(_w64(p + _w64(x << 33)) >> 33),
            s32(abs(p) >> 31), s32(((u << (y & 63)) & (2 ** 64 - 1)) >> 31) ^ s32(_w64(x * 1000000007) >> 29),
            s32(-(p >> 1) + ((p & (2 ** 64 - 1)) >> 61))]


@pytest.mark.parametrize("compiler", COMPILERS)
def test_64_bit_arithmetic_is_exact(compiler):
    rng = random.Random(6)
    a, b = rand_s32(rng, 64, small=True), rand_s32(rng, 64, small=True)
    want = list(map(list, zip(*[ref_wide(x, y) for x, y in zip(a, b)])))
    check(run_ops(WIDE, compiler, a, b, 10), want, a, b)


FUNNEL_VOTE = r"""
__device__ __forceinline__ unsigned shfl_w(unsigned a, unsigned b, unsigned c) { unsigned r; asm("shf.l.wrap.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
__device__ __forceinline__ unsigned shfr_c(unsigned a, unsigned b, unsigned c) { unsigned r; asm("shf.r.clamp.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
__device__ __forceinline__ unsigned shfr_5(unsigned a, unsigned b) { unsigned r; asm("shf.r.wrap.b32 %0, %1, %2, 5;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__global__ void fv(const unsigned *a, const unsigned *b, unsigned *o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned x = a[i], y = b[i];
  o[0 * n + i] = shfl_w(x, y, y);
  o[1 * n + i] = shfr_c(x, y, y & 63);
  o[2 * n + i] = shfr_5(x, y);
  unsigned m = 0;
  if (x & 1) m = __activemask() | (__ballot_sync(__activemask(), y & 1) << 8);
  o[3 * n + i] = m + (__any_sync(0xffffffff, y & 1) << 16) + (__all_sync(0xffffffff, x & 1) << 17);
}
"""


def ref_funnel_vote(a, b, n):
    out = [[0] * n for _ in range(4)]
    for i in range(n):
        x, y = a[i], b[i]
        pair = (y << 32) | x
        m = y & 31
        out[0][i] = ((pair << m) >> 32) & M32
        c = min(y & 63, 32)
        out[1][i] = (pair >> c) & M32
        out[2][i] = (pair >> 5) & M32
        w = i - i % 4
        lanes = range(w, min(w + 4, n))
        active = [j for j in lanes if a[j] & 1]
        mask = sum(1 << (j - w) for j in active) | (sum(1 << (j - w) for j in active if b[j] & 1) << 8)
        out[3][i] = (mask if x & 1 else 0) + (any(b[j] & 1 for j in lanes) << 16) + (all(a[j] & 1 for j in lanes) << 17)
    return out


@pytest.mark.parametrize("compiler", COMPILERS)
def test_funnel_shifts_and_votes_in_divergent_code(compiler):
    rng = random.Random(7)
    n = 30
    a = [rng.getrandbits(32) for _ in range(n)]
    b = [rng.choice([rng.getrandbits(32), rng.randint(0, 70)]) for _ in range(n)]
    a[4:8] = [1, 3, 5, 7]          # one warp where every lane votes "all"
    check(run_ops(FUNNEL_VOTE, compiler, a, b, 4), ref_funnel_vote(a, b, n), a, b)


WIDE_DIV = r"""
__device__ __forceinline__ long long mulhi64(long long a, long long b) { long long r; asm("mul.hi.s64 %0, %1, %2;" : "=l"(r) : "l"(a), "l"(b)); return r; }
__device__ __forceinline__ unsigned long long umulhi64(unsigned long long a, unsigned long long b) { unsigned long long r; asm("mul.hi.u64 %0, %1, %2;" : "=l"(r) : "l"(a), "l"(b)); return r; }
__global__ void wdiv(const int *a, const int *b, int *o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  long long x = (long long)a[i] * 1000 + b[i], y = (long long)b[i] * (b[i] & 0xFFFF) + 1;
  unsigned long long u = (unsigned long long)(unsigned)a[i] * (unsigned)b[i];
  o[0 * n + i] = (int)(x / 1000003);
  o[1 * n + i] = (int)(x % 1000003);
  o[2 * n + i] = (int)(u / 7777777ull) ^ (int)(u % 10u);
  o[3 * n + i] = (int)((x / y) >> 1) + (int)(x % y);
  o[4 * n + i] = (int)(mulhi64(x, y) >> 3) ^ (int)(umulhi64(u, 0x9E3779B97F4A7C15ull) >> 5);
  o[5 * n + i] = (int)((u / (unsigned long long)(unsigned)(a[i] | 1)) >> 7);
}
"""


def ref_wide_div(x0, y0):
    x, y = x0 * 1000 + y0, y0 * (y0 & 0xFFFF) + 1
    u = (x0 & M32) * (y0 & M32)
    mulhi = ((x * y) >> 64) >> 3
    umulhi = ((u * 0x9E3779B97F4A7C15) >> 64) >> 5
    return [s32(tdiv(x, 1000003)), s32(x - tdiv(x, 1000003) * 1000003), s32(u // 7777777) ^ s32(u % 10),
            s32(s32(tdiv(x, y) >> 1) + s32(x - tdiv(x, y) * y)), s32(mulhi) ^ s32(umulhi),
            s32((u // ((x0 | 1) & M32)) >> 7)]


@pytest.mark.parametrize("compiler", COMPILERS)
def test_64_bit_division_and_mul_hi(compiler):
    rng = random.Random(8)
    a, b = rand_s32(rng, 40, small=True), rand_s32(rng, 40, small=True)
    b = [y if (y * (y & 0xFFFF) + 1) else 3 for y in b]
    want = list(map(list, zip(*[ref_wide_div(x, y) for x, y in zip(a, b)])))
    check(run_ops(WIDE_DIV, compiler, a, b, 6), want, a, b)


LLBITS = r"""
__device__ __forceinline__ unsigned long long bfi64(unsigned long long f, unsigned long long b) { unsigned long long r; asm("bfi.b64 %0, %1, %2, 28, 9;" : "=l"(r) : "l"(f), "l"(b)); return r; }
__global__ void llbits(const int *a, const int *b, int *o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned long long x = ((unsigned long long)(unsigned)a[i] << 32) | (unsigned)b[i];
  o[0 * n + i] = __popcll(x) + (__clzll(x) << 8) + (__ffsll(x) << 16);
  o[1 * n + i] = (int)(__brevll(x) >> 16);
  unsigned long long y = bfi64(x, ~x);
  o[2 * n + i] = (int)(y >> 20) ^ (int)y;
}
"""


def ref_llbits(x0, y0):
    x = ((x0 & M32) << 32) | (y0 & M32)
    clz64 = 64 - x.bit_length()
    ffs64 = (x & -x).bit_length()
    brev = int(f"{x:064b}"[::-1], 2)
    mask = ((1 << 9) - 1) << 28
    y = ((~x & (2 ** 64 - 1)) & ~mask) | ((x << 28) & mask)
    return [bin(x).count("1") + (clz64 << 8) + (ffs64 << 16), s32(brev >> 16), s32((y >> 20) ^ y)]


@pytest.mark.parametrize("compiler", COMPILERS)
def test_64_bit_bit_counts(compiler):
    rng = random.Random(9)
    a, b = rand_s32(rng, 40), rand_s32(rng, 40)
    a[:3], b[:3] = [0, 0, 1], [0, 5, 0]
    want = list(map(list, zip(*[ref_llbits(x, y) for x, y in zip(a, b)])))
    check(run_ops(LLBITS, compiler, a, b, 3), want, a, b)


CONSTREG = r"""
__device__ __forceinline__ int prmt_r(int a, int b, int s) { int r; asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s)); return r; }
__device__ __forceinline__ int bfe_r(int a, int p, int l) { int r; asm("bfe.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(p), "r"(l)); return r; }
__device__ __forceinline__ int sads(int a, int b, int c) { int r; asm("sad.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
__device__ __forceinline__ int sadu(int a, int b, int c) { int r; asm("sad.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
__global__ void creg(const int *a, const int *b, int *o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int x = a[i], y = b[i];
  o[0 * n + i] = prmt_r(x, y, 0x3715);      // the selector reaches prmt in a register set by mov
  o[1 * n + i] = prmt_r(x, y, 0x8B40);
  o[2 * n + i] = bfe_r(x, 7, 13);
  o[3 * n + i] = sads(x, y, x >> 4);
  o[4 * n + i] = sadu(x, y, 12345);
}
"""


def prmt_ref(x, y, sel):
    bytes_ = list((x & M32).to_bytes(4, "little")) + list((y & M32).to_bytes(4, "little"))
    out = 0
    for k in range(4):
        s = sel >> (4 * k) & 15
        v = bytes_[s & 7]
        out |= ((0xFF if v >> 7 else 0) if s & 8 else v) << (8 * k)
    return s32(out)


@pytest.mark.parametrize("compiler", COMPILERS)
def test_constant_controls_in_registers_and_sad(compiler):
    rng = random.Random(11)
    a, b = rand_s32(rng, 40), rand_s32(rng, 40)
    a[:3], b[:3] = [-(1 << 31), (1 << 31) - 1, 0], [(1 << 31) - 1, -(1 << 31), -1]
    want = [[prmt_ref(x, y, 0x3715) for x, y in zip(a, b)], [prmt_ref(x, y, 0x8B40) for x, y in zip(a, b)],
            [(x & M32) >> 7 & 0x1FFF for x in a], [s32(abs(x - y) + (x >> 4)) for x, y in zip(a, b)],
            [s32(abs((x & M32) - (y & M32)) + 12345) for x, y in zip(a, b)]]
    check(run_ops(CONSTREG, compiler, a, b, 5), want, a, b)


RUNTIME_SEL = r"""
__global__ void rsel(const int *a, const int *b, int *o, int n) {
  int i = threadIdx.x, r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a[i]), "r"(a[i]), "r"(b[i]));
  o[i] = r;
}
"""


def test_prmt_with_a_run_time_selector_is_a_clear_error():
    from qgpu_min.cuda.lower_ir import LoweringError
    with pytest.raises(LoweringError, match=r"unsupported instruction `prmt\.b32 .*` at PTX line \d+: the selector %r\d+ "
                                            r"is not a known constant"):
        compile_kernel(RUNTIME_SEL, compiler="zig")

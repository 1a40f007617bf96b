"""Lowering of control flow, shared/local memory, shuffles, barriers, atomics and calls, run on the
interpreter through zig clang's 32-bit and nvcc's 64-bit PTX, against Python/NumPy statements."""
import numpy as np
import pytest

from qgpu_min.cuda.lower_ir import LoweringError
from qgpu_min.host.launch import LaunchError, compile_kernel, launch
from qgpu_min.machine.isa import CapacityError
from test_lowering_ops import COMPILERS

LOOPS = r"""
__global__ void loops(const int *a, int *o, int n) {
  int i = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int x = a[i], s = 0, k = 0;
  for (int j = 0; j < 40; j++) {          // data-dependent trip count, break and continue
    if (j > (x & 31)) break;
    if ((j ^ x) & 1) continue;
    s += j * x;
    k++;
  }
  while (x > 1 && k < 100) { x = (x & 1) ? 3 * x + 1 : x / 2; k++; }   // Collatz steps
  o[i] = s;
  o[n + i] = k;
}
"""


def ref_loops(x0):
    x, s, k = x0, 0, 0
    for j in range(40):
        if j > (x & 31):
            break
        if (j ^ x) & 1:
            continue
        s = (s + j * x) & 0xFFFFFFFF
        k += 1
    s = s - (1 << 32) if s >> 31 else s
    while x > 1 and k < 100:
        x = 3 * x + 1 if x & 1 else x // 2
        k += 1
    return s, k


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("shape", [((1, 1), (13, 1)), ((3, 1), (8, 1)), ((2, 2), (5, 1))])
def test_loops_break_continue_divergent_trip_counts(compiler, shape):
    grid, block = shape
    n = grid[0] * grid[1] * block[0] * block[1] - 1
    rng = np.random.default_rng(5)
    a = rng.integers(-50, 1000, n).tolist()
    k = compile_kernel(LOOPS, compiler=compiler)
    r = launch(k, [a, [0] * (2 * n), n], grid=grid, block=block)
    want = [ref_loops(x) for x in a]
    assert r.arrays["o"][:n].tolist() == [w[0] for w in want]
    assert r.arrays["o"][n:].tolist() == [w[1] for w in want]


REDUCE = r"""
__global__ void reduce(const int *a, int *out, int *partial, int n) {
  __shared__ int buf[32];
  int t = threadIdx.x + threadIdx.y * blockDim.x;
  int nt = blockDim.x * blockDim.y;
  int i = blockIdx.x * nt + t;
  buf[t] = i < n ? a[i] : 0;
  __syncthreads();
  for (int s = 16; s > 0; s >>= 1) {
    if (t < s && t + s < nt) buf[t] += buf[t + s];
    __syncthreads();
  }
  int v = i < n ? a[i] : 0;                       // warp-level sum with shuffles (warpSize = 4)
  for (int d = warpSize / 2; d > 0; d /= 2) v += __shfl_down_sync(0xffffffff, v, d);
  if (t == 0) { atomicAdd(out, buf[0]); partial[blockIdx.x] = buf[0]; }
  if ((t & (warpSize - 1)) == 0) atomicAdd(out + 1, v);
}
"""


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("block", [(32, 1), (4, 3), (7, 1)])
def test_shared_memory_reduction_barriers_shuffles_atomics(compiler, block):
    nt = block[0] * block[1]
    grid = 3
    n = grid * nt - 2
    a = list(range(-5, n - 5))
    k = compile_kernel(REDUCE, compiler=compiler)
    r = launch(k, [a, [0, 0], [0] * grid, n], grid=grid, block=block)
    parts = [sum(a[c * nt:(c + 1) * nt]) for c in range(grid)]
    assert r.arrays["partial"].tolist() == parts
    assert r.arrays["out"].tolist() == [sum(a), sum(a)]


SHFL = r"""
__global__ void shfl(const int *a, int *o) {
  int t = threadIdx.x, v = a[t];
  o[t] = __shfl_sync(0xffffffff, v, (t + 1) & 3);
  o[8 + t] = __shfl_up_sync(0xffffffff, v, 1);
  o[16 + t] = __shfl_xor_sync(0xffffffff, v, 2);
  o[24 + t] = __shfl_down_sync(0xffffffff, v, 1, 2);
}
"""


@pytest.mark.parametrize("compiler", COMPILERS)
def test_shuffle_modes_from_cuda(compiler):
    a = [10, 11, 12, 13, 20, 21, 22, 23]
    r = launch(compile_kernel(SHFL, compiler=compiler), [a, [0] * 32], block=8)
    o = r.arrays["o"].reshape(4, 8).tolist()
    assert o[0] == [11, 12, 13, 10, 21, 22, 23, 20]
    assert o[1] == [10, 10, 11, 12, 20, 20, 21, 22]
    assert o[2] == [12, 13, 10, 11, 22, 23, 20, 21]
    assert o[3] == [11, 11, 13, 13, 21, 21, 23, 23]


LOCAL = r"""
__device__ __noinline__ int weight(int x, int k) { return x * k + (x >> 2); }
__device__ int table[5] = {3, 1, 4, 1, 5};
__global__ void local(const int *a, int *o, int n) {
  int t = threadIdx.x;
  int hist[6];
  for (int j = 0; j < 6; j++) hist[j] = 0;
  for (int j = 0; j < n; j++) hist[(a[j] + t) % 6]++;
  int s = 0;
  for (int j = 0; j < 6; j++) s += weight(hist[j], table[j % 5]);
  switch (a[t] & 3) {
    case 0: s += 100; break;
    case 1: s -= 7; break;
    case 2: s *= 2; break;
    default: s = -s;
  }
  o[t] = s;
}
"""


def ref_local(a, t):
    hist = [0] * 6
    for x in a:
        hist[(x + t) % 6] += 1
    table = [3, 1, 4, 1, 5]
    s = sum(h * table[j % 5] + (h >> 2) for j, h in enumerate(hist))
    return [s + 100, s - 7, s * 2, -s][a[t] & 3]


@pytest.mark.parametrize("compiler", COMPILERS)
def test_local_arrays_globals_calls_switch(compiler):
    a = [5, 0, 3, 17, 2, 9, 1, 4, 11, 6]
    k = compile_kernel(LOCAL, compiler=compiler)
    r = launch(k, [a, [0] * 6, len(a)], block=6)
    assert r.arrays["o"].tolist() == [ref_local(a, t) for t in range(6)]


TWO_D = r"""
__global__ void mm(const int *A, const int *B, int *C, int n) {
  int r = blockIdx.y * blockDim.y + threadIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < n && c < n) {
    int s = 0;
    for (int k = 0; k < n; k++) s += A[r * n + k] * B[k * n + c];
    C[r * n + c] = s;
  }
}
"""


@pytest.mark.parametrize("compiler", COMPILERS)
def test_2d_grid_matmul(compiler):
    n = 6
    rng = np.random.default_rng(7)
    A, B = rng.integers(-100, 100, (n, n)), rng.integers(-100, 100, (n, n))
    k = compile_kernel(TWO_D, compiler=compiler)
    r = launch(k, [A.ravel().tolist(), B.ravel().tolist(), [0] * n * n, n], grid=(2, 3), block=(4, 2))
    assert r.arrays["C"].tolist() == (A @ B).ravel().tolist()


def test_printf_is_rejected_by_name():
    src = '#include <cstdio>\n__global__ void k(int *a) { printf("%d", a[0]); }'
    with pytest.raises(LoweringError, match=r"vprintf.* at PTX line \d+: printf is not supported"):
        compile_kernel(src, compiler="zig")


def test_float_kernel_is_rejected_with_line():
    src = "__global__ void f(float *x) { x[threadIdx.x] = x[threadIdx.x] * 2.5f; }"
    with pytest.raises(LoweringError, match=r"unsupported instruction `mul\.f32 .*` at PTX line \d+"):
        compile_kernel(src, compiler="zig")


def test_launch_errors():
    k = compile_kernel(TWO_D, compiler="zig")
    with pytest.raises(LaunchError, match="takes 4 arguments"):
        launch(k, [[1], [2], [3]])
    with pytest.raises(LaunchError, match=r"A\[1\]: 4294967296 is outside"):
        launch(k, [[1, 1 << 32], [2], [3], 1])
    with pytest.raises(CapacityError, match="over by"):
        launch(k, [[0] * 1000, [0] * 100, [0], 1])
    with pytest.raises(LaunchError, match="backend 'model' takes model, mode, quant, device, check, trace and progress, not colour"):
        launch(k, [[1], [2], [3], 1], backend="model", colour=1)


def test_unsigned_readback_and_scalar_range():
    src = r"""
extern "C" __global__ void inc(unsigned *x, unsigned k) { x[threadIdx.x] += k; }
"""
    k = compile_kernel(src, compiler="zig")
    assert [(p.name, p.kind, p.signed) for p in k.params] == [("x", "ptr", False), ("k", "scalar", False)]
    r = launch(k, [[0xFFFFFFFF, 1, -1], 0xFFFFFFFF], block=3)
    assert r.arrays["x"].tolist() == [0xFFFFFFFE, 0, 0xFFFFFFFE]


USERS = r"""
__device__ int gcd(int a, int b) { while (b) { int t = a % b; a = b; b = t; } return a; }
__global__ void gcds(const int *a, const int *b, int *o, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) o[i] = gcd(a[i], b[i]);
}
__global__ void reverse(int *a, int n) {
  __shared__ int s[32];
  int t = threadIdx.x;
  if (t < n) s[t] = a[t];
  __syncthreads();
  if (t < n) a[t] = s[n - 1 - t];
}
__global__ void upper(char *s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && s[i] >= 'a' && s[i] <= 'z') s[i] -= 32;
}
__global__ void amax(const int *a, int *m, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { atomicMax(m, a[i]); atomicMin(m + 1, a[i]); atomicOr((unsigned*)m + 2, 1u << (a[i] & 31)); }
}
__global__ void sieve(int *p, int n) {
  int t = threadIdx.x + 2;
  for (int k = t; k < n; k += blockDim.x) {
    int prime = 1;
    for (int d = 2; d * d <= k; d++) if (k % d == 0) { prime = 0; break; }
    p[k] = prime;
  }
}
__global__ void transpose(const int *a, int *b, int w, int h) {
  __shared__ int tile[4][5];
  int x = blockIdx.x * 4 + threadIdx.x, y = blockIdx.y * 4 + threadIdx.y;
  if (x < w && y < h) tile[threadIdx.y][threadIdx.x] = a[y * w + x];
  __syncthreads();
  int tx = blockIdx.y * 4 + threadIdx.x, ty = blockIdx.x * 4 + threadIdx.y;
  if (tx < h && ty < w) b[ty * h + tx] = tile[threadIdx.x][threadIdx.y];
}
__global__ void sort4(int *a) {
  __shared__ int s[16];
  int t = threadIdx.x;
  s[t] = a[t];
  __syncthreads();
  for (int k = 2; k <= 16; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      int p = t ^ j;
      if (p > t) {
        int up = (t & k) == 0;
        if ((s[t] > s[p]) == up) { int tmp = s[t]; s[t] = s[p]; s[p] = tmp; }
      }
      __syncthreads();
    }
  a[t] = s[t];
}
__global__ void fib(unsigned *o, int n) {
  int i = threadIdx.x;
  unsigned a = 0, b = 1;
  for (int k = 0; k < i * 7; k++) { unsigned t = a + b; a = b; b = t; }
  if (i < n) o[i] = a;
}
"""


def _fib(k):
    a, b = 0, 1
    for _ in range(k):
        a, b = b, a + b
    return a


@pytest.mark.parametrize("compiler", COMPILERS)
def test_kernels_as_users_write_them(compiler):
    import math
    rng = np.random.default_rng(1)
    K = lambda name: compile_kernel(USERS, kernel=name, compiler=compiler)
    a, b = rng.integers(1, 10000, 40).tolist(), rng.integers(1, 10000, 40).tolist()
    r = launch(K("gcds"), [a, b, [0] * 40, 40], grid=2, block=8)
    assert r.arrays["o"].tolist() == [math.gcd(x, y) for x, y in zip(a, b)]
    a = rng.integers(-9, 9, 21).tolist()
    assert launch(K("reverse"), [a, 21], block=24).arrays["a"].tolist() == a[::-1]
    s = [ord(x) for x in "Hello, World! xyz{}"]
    r = launch(K("upper"), [s, len(s)], grid=3, block=7)
    assert "".join(map(chr, r.arrays["s"])) == "HELLO, WORLD! XYZ{}"
    a = rng.integers(-1000, 1000, 30).tolist()
    r = launch(K("amax"), [a, [-2 ** 31, 2 ** 31 - 1, 0], 30], grid=4, block=8)
    bits = 0
    for x in a:
        bits |= 1 << (x & 31)
    assert r.arrays["m"].tolist() == [max(a), min(a), bits - (1 << 32) if bits >> 31 else bits]
    r = launch(K("sieve"), [[0] * 60, 60], block=13)
    assert r.arrays["p"].tolist()[2:] == [int(all(k % d for d in range(2, int(k ** .5) + 1))) for k in range(2, 60)]
    w, h = 7, 6
    A = rng.integers(0, 100, (h, w))
    r = launch(K("transpose"), [A.ravel().tolist(), [0] * 42, w, h], grid=(2, 2), block=(4, 4))
    assert r.arrays["b"].tolist() == A.T.ravel().tolist()
    a = rng.integers(-50, 50, 16).tolist()
    assert launch(K("sort4"), [a], block=16).arrays["a"].tolist() == sorted(a)
    r = launch(K("fib"), [[0] * 10, 10], block=10)
    assert r.arrays["o"].tolist() == [_fib(7 * i) % 2 ** 32 for i in range(10)]


SPILL = r"""
__global__ void many(const int *a, int *o, int n) {
  int t = threadIdx.x;
  int v[18];
#pragma unroll
  for (int k = 0; k < 18; k++) v[k] = a[(t + k) % n] * (k + 1);
  int s = 0;
#pragma unroll
  for (int k = 0; k < 18; k++) s = s * 3 + (v[k] ^ v[17 - k]);
  o[t] = s;
}
"""


@pytest.mark.parametrize("compiler", COMPILERS)
def test_register_pressure_spills_to_the_thread_frame(compiler):
    a = list(range(3, 40, 3))
    n = len(a)
    k = compile_kernel(SPILL, compiler=compiler)
    assert k.memory.frame_bytes > 0                     # it did spill
    r = launch(k, [a, [0] * 8, n], block=8)
    want = []
    for t in range(8):
        v = [a[(t + j) % n] * (j + 1) for j in range(18)]
        s = 0
        for j in range(18):
            s = (s * 3 + (v[j] ^ v[17 - j])) & 0xFFFFFFFF
        want.append(s - (1 << 32) if s >> 31 else s)
    assert r.arrays["o"].tolist() == want
    with pytest.raises(CapacityError, match=r"thread frames.*over by 1\)"):
        launch(k, [[0] * (1024 - 8 * k.memory.frame_bytes // 4 - 8 + 1), [0] * 8, 4], block=8)  # one word over


DYN = r"""
__global__ void rot(const int *a, int *o, long long *sq, int n) {
  extern __shared__ int s[];
  int t = threadIdx.x;
  s[t] = a[t];
  s[n + t] = a[t] * 2;
  __syncthreads();
  o[t] = s[(t + 1) % n] + s[n + (t + n - 1) % n];
  sq[t] = (long long)a[t] * a[t] * a[t];
}
"""


@pytest.mark.parametrize("compiler", COMPILERS)
def test_extern_shared_memory_and_64_bit_arrays(compiler):
    k = compile_kernel(DYN, compiler=compiler)
    assert [(p.kind, p.elem_bytes) for p in k.params[:3]] == [("ptr", 4), ("ptr", 4), ("ptr", 8)]
    a = [5, -7, 1300, 2, 99999, -100000]
    n = len(a)
    r = launch(k, [a, [0] * n, [0] * n, n], block=n)
    assert r.arrays["o"].tolist() == [a[(t + 1) % n] + 2 * a[(t - 1) % n] for t in range(n)]
    assert r.arrays["sq"].tolist() == [x ** 3 for x in a]


ATOM64 = r"""
#ifdef __clang__
#define ADD64(p, v) __nvvm_atom_add_gen_ll((long long *)(p), (long long)(v))
#define MAX64(p, v) __nvvm_atom_max_gen_ll((p), (v))
#define CAS64(p, c, v) __nvvm_atom_cas_gen_ll((long long *)(p), (long long)(c), (long long)(v))
#else
#define ADD64(p, v) atomicAdd((p), (v))
#define MAX64(p, v) atomicMax((p), (v))
#define CAS64(p, c, v) atomicCAS((p), (c), (v))
#endif
__global__ void atom64(const int *a, unsigned long long *sum, long long *mx, unsigned long long *cas, int *old, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  ADD64(sum, (unsigned long long)(unsigned)a[i] * 3000000000ull);
  MAX64(mx, (long long)a[i] * -5000000000ll);
  old[i] = (int)(CAS64(cas, (unsigned long long)i, (unsigned long long)i + 1) >> 0);
}
"""


@pytest.mark.parametrize("compiler", COMPILERS)
def test_64_bit_atomics_serialize_lanes(compiler):
    k = compile_kernel(ATOM64, compiler=compiler)
    a = [7, -3, 1000, 2 ** 31 - 1, -2 ** 31, 5, 0, 9, 11]
    n = len(a)
    r = launch(k, [a, [0], [-(2 ** 31)], [0], [0] * n, n], grid=3, block=3)
    assert r.arrays["sum"].tolist() == [sum((x & 0xFFFFFFFF) * 3000000000 for x in a) % 2 ** 64]
    w64 = lambda v: (v + 2 ** 63) % 2 ** 64 - 2 ** 63
    assert r.arrays["mx"].tolist() == [max([-(2 ** 31)] + [w64(x * -5000000000) for x in a])]
    assert r.arrays["cas"].tolist() == [n]               # threads in order: i succeeds when cas == i
    assert r.arrays["old"].tolist() == list(range(n))


CALL_LOCAL = r"""
__device__ __noinline__ int pick(const int *a, int n, int k) {
  int buf[8];
  for (int j = 0; j < 8; j++) buf[j] = a[(j * 3 + k) % n];
  int s = 0;
  for (int j = 0; j < 8; j++) s += buf[(j + a[k % n]) & 7] * (j + 1);
  return s;
}
__global__ void cl(const int *a, int *o, int n) {
  int t = threadIdx.x;
  int loc[4];
  for (int j = 0; j < 4; j++) loc[j] = a[(t + j) % n];
  o[t] = pick(a, n, t) + loc[a[t] & 3];
}
"""


@pytest.mark.parametrize("compiler", COMPILERS)
def test_called_function_with_its_own_local_array(compiler):
    a = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    n = len(a)

    def pick(k):
        buf = [a[(j * 3 + k) % n] for j in range(8)]
        return sum(buf[(j + a[k % n]) & 7] * (j + 1) for j in range(8))

    k = compile_kernel(CALL_LOCAL, compiler=compiler)
    r = launch(k, [a, [0] * 6, n], block=6)
    assert r.arrays["o"].tolist() == [pick(t) + a[(t + (a[t] & 3)) % n] for t in range(6)]


def _reconvergence_violations(program):
    """Blocks reachable from a branch before its immediate post-dominator that are laid out after it."""
    blocks = program.blocks
    n = len(blocks)
    succ = []
    for i, b in enumerate(blocks):
        t = b.term
        succ.append({"JMP": [t.taken], "BR": [t.taken, t.not_taken], "BAR": [i + 1], "EXIT": [n]}[t.kind])
    pdom = [set(range(n + 1)) for _ in range(n)] + [{n}]
    changed = True
    while changed:
        changed = False
        for i in reversed(range(n)):
            new = {i} | set.intersection(*(pdom[s] for s in succ[i]))
            if new != pdom[i]:
                pdom[i], changed = new, True
    bad = []
    for i, b in enumerate(blocks):
        if b.term.kind != "BR":
            continue
        strict = pdom[i] - {i}
        ipdom = max(strict, key=lambda p: len(pdom[p]))       # the nearest strict post-dominator
        if ipdom == n:
            continue
        seen, stack = set(), list(succ[i])
        while stack:
            x = stack.pop()
            if x in seen or x == ipdom or x == n:
                continue
            seen.add(x)
            if x > ipdom:
                bad.append((i, x, ipdom))
            stack.extend(succ[x])
    return bad


def test_reconvergence_check_detects_a_join_laid_out_too_early():
    from qgpu_min.machine.isa import Block, Program, Term
    bad = Program([Block(term=Term("BR", 1, 1, 3)), Block(term=Term("JMP", taken=2)), Block(),
                   Block(term=Term("JMP", taken=2))])
    assert _reconvergence_violations(bad) == [(0, 3, 2)]


@pytest.mark.parametrize("compiler", COMPILERS)
def test_layout_puts_every_branch_before_its_reconvergence_point(compiler):
    sources = [(LOOPS, None), (REDUCE, None), (LOCAL, None), (SPILL, None), (CALL_LOCAL, None)] + \
        [(USERS, k) for k in ("gcds", "sieve", "sort4", "transpose", "fib")]
    for src, name in sources:
        program = compile_kernel(src, kernel=name, compiler=compiler).program
        assert not _reconvergence_violations(program), name


def test_ptx_input_gets_types_from_the_mangled_name(tmp_path):
    from qgpu_min.cuda.compiler import compile_to_ptx
    ptx = tmp_path / "k.ptx"
    ptx.write_text(compile_to_ptx(TWO_D, compiler="zig").text)
    k = compile_kernel(ptx)
    assert [(p.name, p.kind) for p in k.params] == [("param_0", "ptr"), ("param_1", "ptr"), ("param_2", "ptr"),
                                                    ("param_3", "scalar")]
    r = launch(k, [[1, 2, 3, 4], [5, 6, 7, 8], [0] * 4, 2], block=(2, 2))
    assert r.arrays["param_2"].tolist() == [19, 22, 43, 50]


BAR_RED = r"""
#ifdef __clang__
#define COUNT(p) __nvvm_bar0_popc(p)
#define ANY(p) __nvvm_bar0_or(p)
#define ALL(p) __nvvm_bar0_and(p)
#else
#define COUNT(p) __syncthreads_count(p)
#define ANY(p) __syncthreads_or(p)
#define ALL(p) __syncthreads_and(p)
#endif
__global__ void votes(const int *a, int *o, int n) {
  int t = threadIdx.x + threadIdx.y * blockDim.x, i = blockIdx.x * blockDim.x * blockDim.y + t;
  if (i >= n) return;                       // whole warps may leave: the rest still agree
  int v = a[i];
  int c = COUNT(v > 10);
  int any = ANY(v < 0);
  int all = ALL(v != 7);
  o[i] = c * 100 + any * 10 + all;
}
"""


@pytest.mark.parametrize("compiler", COMPILERS)
def test_syncthreads_count_and_or(compiler):
    k = compile_kernel(BAR_RED, compiler=compiler)
    a = [11, 12, 7, 0, 50, 3, 2, 1, 99, -1, 5, 5, 20, 7, 8, 9, 30, 31, 32, 1, 1]
    n = len(a)
    r = launch(k, [a, [0] * n, n], grid=3, block=(4, 2))
    want = []
    for c in range(3):
        blk = a[c * 8:(c + 1) * 8]
        want += [sum(x > 10 for x in blk) * 100 + any(x < 0 for x in blk) * 10 + all(x != 7 for x in blk)] * len(blk)
    assert r.arrays["o"].tolist() == want

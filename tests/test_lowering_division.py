"""Division by a variable (lower_arith.divmod_loop): u32 and s32 quotient and remainder through PTX's own
div/rem (so a zero divisor is defined: x / 0 = 0xFFFFFFFF unsigned, -1 or 1 signed, x % 0 = x), on every pair
of boundary values and on random pairs of every pair of bit lengths, lowered for the machine's format and
for the GPU in the weights' format, run on the interpreter, against Python's integers. The loop's step count
follows the quotient's bits (test_steps_follow_the_quotient_bits)."""
from __future__ import annotations

import random

import pytest

from compilers import needs
from qgpu_min.gpu.layout import GpuSpec
from qgpu_min.gpu.program import block_format
from qgpu_min.host.launch import compile_kernel, for_format, launch
from qgpu_min.machine.isa import MACHINE_FORMAT

M32 = 0xFFFFFFFF
SOURCE = r"""
__device__ __forceinline__ unsigned divu(unsigned a, unsigned b) { unsigned r; asm("div.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ unsigned remu(unsigned a, unsigned b) { unsigned r; asm("rem.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ int divs(int a, int b) { int r; asm("div.s32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ int rems(int a, int b) { int r; asm("rem.s32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
__global__ void division(const unsigned *a, const unsigned *b, unsigned *o, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned x = a[i], y = b[i];
  o[i] = divu(x, y);
  o[n + i] = remu(x, y);
  o[2 * n + i] = divs(x, y);
  o[3 * n + i] = rems(x, y);
}
"""
BOUNDARY = sorted({v & M32 for k in (0, 1, 2, 7, 15, 16, 30, 31) for v in (1 << k, (1 << k) - 1, (1 << k) + 1)}
                  | {0, 3, 5, 1000, 0xFFFF, M32, M32 - 1, 0x80000001, 0xFFFFFFF0, 0x7FFFFFFF, 0xAAAAAAAA})
FORMATS = [pytest.param(MACHINE_FORMAT, id="machine"), pytest.param(block_format(GpuSpec()), id="gpu")]
PER_LAUNCH = 160            # 6 words a pair in 1,024 words of memory


def s32(v: int) -> int:
    v &= M32
    return v - (1 << 32) if v >> 31 else v


def want(x: int, y: int) -> list[int]:
    """PTX's div/rem on 32-bit words, as the lowering defines them for a zero divisor."""
    sx, sy = s32(x), s32(y)
    if y == 0:
        return [M32, x, (-1 if sx >= 0 else 1) & M32, x]
    q = abs(sx) // abs(sy) * (1 if (sx < 0) == (sy < 0) else -1)
    return [x // y, x % y, q & M32, (sx - q * sy) & M32]


def pairs() -> list[tuple[int, int]]:
    rng = random.Random(7)
    out = [(x, y) for x in BOUNDARY for y in BOUNDARY]
    for lx in range(33):                # one random pair for every pair of bit lengths
        for ly in range(33):
            out.append((rng.getrandbits(lx) | (1 << lx - 1 if lx else 0), rng.getrandbits(ly) | (1 << ly - 1 if ly else 0)))
    return out


@pytest.mark.parametrize("fmt", FORMATS)
@needs("zig")
def test_division_exact_on_boundary_and_random_pairs(fmt) -> None:
    kernel = for_format(compile_kernel(SOURCE, compiler="zig"), fmt)
    cases = pairs()
    for start in range(0, len(cases), PER_LAUNCH):
        chunk = cases[start:start + PER_LAUNCH]
        a, b = [x for x, _ in chunk], [y for _, y in chunk]
        n = len(chunk)
        got = launch(kernel, [a, b, [0] * (4 * n), n], grid=(n + 31) // 32, block=32).arrays["o"]
        got = got.astype("int64").reshape(4, n) & M32
        bad = [(x, y, [int(v) for v in got[:, i]], want(x, y)) for i, (x, y) in enumerate(chunk)
               if [int(v) for v in got[:, i]] != want(x, y)]
        assert not bad, f"(x, y, got [divu, remu, divs, rems], want) {bad[:4]}"


REM_BY_ARRAY = r"""
__global__ void rem(const unsigned *a, const unsigned *b, unsigned *o) {
  int i = threadIdx.x;
  o[i] = a[i] % b[i];
}
"""
# a parameter divisor: its register stays live through the loop (lower_remat keeps it out of a loop of one
# block, where its copy would take a slot and split each step into two blocks)
REM_BY_PARAM = r"""
__global__ void rem(const unsigned *a, unsigned m, unsigned *o) {
  int i = threadIdx.x;
  o[i] = a[i] % m;
}
"""


@pytest.mark.parametrize("source", [REM_BY_ARRAY, REM_BY_PARAM], ids=["array", "param"])
@needs("zig")
def test_steps_follow_the_quotient_bits(source: str) -> None:
    """A remainder's loop runs one warp step (one block) a quotient bit (bit length of x / y, at least one),
    not one a dividend bit: 1000 % 999 takes fewer steps than 1000 % 3, 2^32-1 % 1 takes 31 more than 5 % 7."""
    kernel = for_format(compile_kernel(source, compiler="zig"), block_format(GpuSpec()))

    def steps(x: int, y: int) -> int:
        r = launch(kernel, [[x], [y] if source is REM_BY_ARRAY else y, [0]], block=1)
        assert int(r.arrays["o"][0]) == x % y
        return r.steps

    assert steps(1000, 3) - steps(1000, 999) == (1000 // 3).bit_length() - 1
    assert steps(M32, 1) - steps(5, 7) == 31

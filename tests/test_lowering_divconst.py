"""Division and remainder by constants in PTX (div/rem .u32 .s32 .u64 .s64 with an immediate divisor),
lowered and run on the interpreter, against Python's integers.

Why PTX written here: clang and nvcc turn constant division into multiplies before the lowering sees it,
so compiled CUDA never reaches the lowering's magic-number path (lower_arith.udiv_const/sdiv_const); a
hand-written or other compiler's .ptx does. Independent oracle: Python's arbitrary-precision // and %,
with C's truncation toward zero for signed operands and the machine's wrap for INT_MIN / -1, shares no
code or method with the lowering (which multiplies by a 2^32-scaled reciprocal)."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from qgpu_min.host.launch import compile_kernel, launch

M32, M64 = (1 << 32) - 1, (1 << 64) - 1
EDGE32 = [1, 2, 3, 5, 6, 7, 9, 10, 11, 12, 13, 25, 60, 100, 125, 127, 128, 129, 255, 256, 257, 641, 1000, 1023, 1025,
          65535, 65536, 65537, 6700417, 0x7FFFFFFE, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xAAAAAAAB, 0xFFFFFFFE, 0xFFFFFFFF]
EDGE32 += [(1 << k) + e for k in range(2, 32) for e in (-1, 1)]
SIGNED_EDGE = [-1, -2, -3, -7, -10, -641, -0x7FFFFFFF, -0x80000000, 0x7FFFFFFF]
LANES = 32
PER_KERNEL = 8        # divisors per kernel: q and r of each, 16 words per thread


def _divisors(signed: bool) -> list[int]:
    rng = random.Random(7 + signed)
    ds = set(EDGE32) | {rng.randrange(1, 1 << rng.choice([4, 8, 16, 24, 32])) for _ in range(60)}
    if signed:
        ds = {d - (1 << 32) if d >> 31 else d for d in ds} | set(SIGNED_EDGE)
        ds |= {-d for d in ds if 0 < d <= 0x7FFFFFFF and rng.random() < 0.3}
    return sorted(ds - {0})


def _dividends(rng: random.Random, ds: list[int]) -> list[int]:
    """Words around the divisors' multiples, the extremes, and random ones: LANES of them (unsigned form)."""
    base = [0, 1, 2, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x80000001]
    near = [(abs(d) * rng.randrange(1, 5) + rng.choice([-1, 0, 1])) & M32 for d in rng.sample(ds, min(12, len(ds)))]
    return (base + near + [rng.getrandbits(32) for _ in range(LANES)])[:LANES]


def _c_divmod(a: int, b: int, bits: int) -> tuple[int, int]:
    """C's truncating division on two's-complement words; MIN / -1 wraps to MIN, remainder 0."""
    mask, top = (1 << bits) - 1, 1 << (bits - 1)
    a, b = (a - (1 << bits) if a & top else a), (b - (1 << bits) if b & top else b)
    q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    return q & mask, (a - q * b) & mask


def _ptx(kind: str, ds: list[int]) -> str:
    """A kernel: thread t loads word (or 64-bit word) t of `in`, and stores x / d and x % d for each divisor
    d (an immediate) to its slice of `out`."""
    wide = kind.endswith("64")
    size, reg, mask = (8, "%rd", M64) if wide else (4, "%r", M32)
    body = []
    for k, d in enumerate(ds):
        imm = str(d) if kind[0] == "s" else f"0x{d & mask:X}"
        q, r = f"{reg}{10 + 2 * k}", f"{reg}{11 + 2 * k}"
        body += [f"\tdiv.{kind} {q}, {reg}6, {imm};", f"\tst.global.u{8 * size} [%r8+{2 * size * k}], {q};",
                 f"\trem.{kind} {r}, {reg}6, {imm};", f"\tst.global.u{8 * size} [%r8+{2 * size * k + size}], {r};"]
    return "\n".join([
        ".version 7.0", ".target sm_75", ".address_size 32", "",
        ".visible .entry k(.param .u32 k_in, .param .u32 k_out)", "{", "\t.reg .b32 %r<40>;", "\t.reg .b64 %rd<30>;",
        "\tld.param.u32 %r1, [k_in];", "\tld.param.u32 %r2, [k_out];", "\tmov.u32 %r3, %tid.x;",
        f"\tshl.b32 %r4, %r3, {size.bit_length() - 1};", "\tadd.s32 %r5, %r1, %r4;",
        f"\tld.global.u{8 * size} {reg}6, [%r5];",
        f"\tmul.lo.s32 %r7, %r3, {2 * size * len(ds)};", "\tadd.s32 %r8, %r2, %r7;", *body, "\tret;", "}", ""])


def _run(tmp_path: Path, text: str, x: list[int], out_words: int, block: int) -> list[int]:
    src = tmp_path / "k.ptx"
    src.write_text(text)
    k = compile_kernel(src)
    r = launch(k, [np.array(x, np.uint32).view(np.int32), np.zeros(out_words, np.int32)], block=(block, 1))
    return [int(v) & M32 for v in r.arrays[k.params[1].name]]


@pytest.mark.parametrize("kind", ["u32", "s32"])
def test_div_rem_by_constants_32(tmp_path, kind):
    ds = _divisors(kind == "s32")
    rng = random.Random(kind)
    for g in range(0, len(ds), PER_KERNEL):
        group = ds[g:g + PER_KERNEL]
        x = _dividends(rng, ds)
        got = _run(tmp_path, _ptx(kind, group), x, LANES * 2 * PER_KERNEL, LANES)
        for t, a in enumerate(x):
            for k, d in enumerate(group):
                if kind == "u32":
                    want = (a // (d & M32), a % (d & M32))
                else:
                    want = _c_divmod(a, d & M32, 32)
                at = t * 2 * len(group) + 2 * k
                found = tuple(got[at:at + 2])
                assert found == want, f"{kind} {a:#x} / {d}: got q,r {found}, want {want}"


@pytest.mark.parametrize("kind", ["u64", "s64"])
def test_div_rem_by_constants_64(tmp_path, kind):
    rng = random.Random(kind)
    ds = [3, 7, 10, 641, 0xFFFFFFFF, 1 << 32, (1 << 32) + 1, 0x7FFFFFFFFFFFFFFF, 1 << 63, M64, 6700417 * 641]
    if kind == "s64":
        ds = [d - (1 << 64) if d >> 63 else d for d in ds] + [-1, -3, -641, -(1 << 40)]
    x = [0, 1, M64, 1 << 63, (1 << 63) - 1, 0xFFFFFFFF, 1 << 32] + [rng.getrandbits(64) for _ in range(5)]
    words = [w for v in x for w in (v & M32, v >> 32)]
    for g in range(0, len(ds), 4):
        group = ds[g:g + 4]
        got = _run(tmp_path, _ptx(kind, group), words, len(x) * 4 * len(group), len(x))
        for t, a in enumerate(x):
            for k, d in enumerate(group):
                want = (a // (d & M64), a % (d & M64)) if kind == "u64" else _c_divmod(a, d & M64, 64)
                at = t * 4 * len(group) + 4 * k
                found = (got[at] | got[at + 1] << 32, got[at + 2] | got[at + 3] << 32)
                assert found == want, f"{kind} {a:#x} / {d}: got q,r {found}, want {want}"

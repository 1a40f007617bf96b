"""The --check replay (qgpu_min.gpu.check): expected tokens from the interpreter, the per-token checker.

Small kernels lowered for the GPU's block format run through the compiled model (one warp of 1-4
threads); the generated tokens must equal expected_tokens exactly and the Checker, reading registers and
memory from the model's state, must pass (atomics included: each lane's record write-back). Then the
checker must catch an altered write-back token and a tampered memory or register row, and expected_tokens
must end in FAULT where an access leaves the GPU's memory (its bound, or the machine's).
"""
from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
import pytest

from compilers import missing
from qgpu_min.circuit.compile import banks, memory_heads
from qgpu_min.cuda.lower import lower
from qgpu_min.cuda.ptx import parse_ptx, select_kernel
from qgpu_min.gpu.check import CheckError, Checker, expected_tokens
from qgpu_min.gpu.encode import encode_block
from qgpu_min.gpu.layout import RECORD_REG, GpuSpec
from qgpu_min.gpu.model import CompiledGpu, compile_gpu
from qgpu_min.gpu.program import block_format, prompt
from qgpu_min.host.launch import LaunchImage, build_image, compile_kernel
from qgpu_min.machine import interp

SPEC = GpuSpec()
COMPILER = next((c for c in ("zig", "nvcc") if missing(c) is None), None)
pytestmark = pytest.mark.skipif(COMPILER is None, reason="no CUDA compiler (zig or nvcc) is available")

VADD = r"""
__global__ void vadd(const int* a, const int* b, int* c, int n) {
  int i = threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}"""
# a at word 0, b at 4, c at 8; n = 3. Sums small (one W1 token) and wide (WA WB W3)
VADD_ARGS = [[0x12345, 7, 300, 4], [0x7FF00000, -3, -310, 9], [0, 0, 0, 0], 3]
VADD_SUMS = (0x7FF12345, 4, (-10) & 0xFFFFFFFF, 0)
# lane i runs the loop i + 1 times: the lanes leave it one by one (XOR: no closed form, so no multiply)
LOOP = r"""
__global__ void xorloop(int* out) {
  int s = 0;
  for (int k = 0; k <= (int)threadIdx.x; k++) s = (s << 1) ^ (k + 1);
  out[threadIdx.x] = s;
}"""
# the branch depends on loaded data; the odd side stores twice, so it stays a branch (not a select)
SPLIT = r"""
__global__ void split(const int* x, int* y) {
  int i = threadIdx.x;
  int v = x[i];
  if (v & 1) { y[i] = v - 1000; y[i + 4] = v; }
  else y[i] = (v >> 1) ^ 5;
}"""
# every lane adds to one word: the atomics run in lane order, each lane's record is the running sum
ATOMIC = r"""
__global__ void acc(const int* x, int* sum, int* old) {
  int i = threadIdx.x;
  old[i] = atomicAdd(&sum[0], x[i]);
}"""
# lane i reads 512 * i words past a[k]
STRIDE = r"""
__global__ void stride(const int* a, int* c, int k) {
  int i = threadIdx.x;
  c[i] = a[(i << 9) + k];
}"""


@functools.cache
def _kernel(src: str):
    """Compiled, then lowered again from its PTX for the GPU's block format."""
    k = compile_kernel(src, compiler=COMPILER)
    module = parse_ptx(k.ptx)
    low = lower(module, select_kernel(module, k.entry or None), block_format(SPEC))
    return replace(k, program=low.program, memory=low.layout)


def _image(src: str, args: list, threads: int) -> LaunchImage:
    return build_image(_kernel(src), args, (threads, 1))


@pytest.fixture(scope="module")
def cg() -> CompiledGpu:
    return compile_gpu(SPEC)


def _drive(cg: CompiledGpu, image: LaunchImage, threads: int, mode: str, on_token, limit: int = 4000) -> list:
    """model.run_launch's loop: prefill the prompt, then feed back the argmax token until HALT or FAULT;
    on_token(i, token, state) sees each generated token with the state after the tokens before it."""
    model, vocab = cg.model(mode), cg.vocab
    state = model.new_state()
    logits = model.prefill(state, [vocab.id(t) for t in prompt(image.program, image.memory, threads, SPEC)])
    generated = []
    while len(generated) < limit:
        t = vocab.tokens[int(np.argmax(logits))]
        on_token(len(generated), t, state)
        generated.append(t)
        if t[0] in ("halt", "fault"):
            break
        logits = model.decode(state, vocab.id(t))
    return generated


def _run_checked(cg: CompiledGpu, src: str, args: list, threads: int, mode: str = "fp32"):
    image = _image(src, args, threads)
    expected = expected_tokens(image.program, image.memory, threads, SPEC)
    checker = Checker(cg, expected)
    generated = _drive(cg, image, threads, mode, checker)
    assert generated == [t for t, _ in expected]
    assert checker.complete
    return image, expected


def _execs(expected: list) -> list[tuple[int, int]]:
    return [(t[1], t[2]) for t, _ in expected if t[0] == "exec"]


# ---- expected_tokens alone ---------------------------------------------------------------------------

def test_expected_tokens_follow_the_interpreter() -> None:
    image = _image(VADD, VADD_ARGS, 4)
    expected = expected_tokens(image.program, image.memory, 4, SPEC)
    ref = interp.run(image.program, image.memory, (1, 1), (4, 1), trace=True)
    assert expected[-1][0] == ("halt",)
    assert list(expected[-1][1].record.memory) == ref.memory
    # one EXEC per active lane per step, in the interpreter's block order
    blocks = [b for b, _ in _execs(expected)]
    assert list(dict.fromkeys(blocks)) == list(dict.fromkeys(b for _, _, b in ref.trace))
    store = next(b for b, blk in enumerate(image.program.blocks) if blk.mem is not None and blk.mem.op == "ST")
    assert [l for b, l in _execs(expected) if b == store] == [0, 1, 2]      # n = 3: lane 3 skips the store
    # every write-back spells its value (one W1 when small), for the register the block writes back
    for info, value in _writebacks(expected):
        assert value == info.value == info.record.regs[info.lane][info.reg]
    assert {t[0] for t, _ in expected} >= {"w1", "wa", "wb", "w3"}


def _writebacks(expected: list) -> list:
    """(info, value spelt by its tokens) of every write-back entry in an expected token list."""
    out, k = [], 0
    while k < len(expected):
        t, info = expected[k]
        if t[0] == "w1":
            assert t[1] == info.entry
            out.append((info, (t[2] - 256 if t[2] >= 128 else t[2]) & 0xFFFFFFFF))
        elif t[0] == "wa":
            (t2, i2), (t3, i3) = expected[k + 1], expected[k + 2]
            assert (t2[0], t3[0]) == ("wb", "w3") and t3[1] == info.entry and i2 is i3 is info
            out.append((info, t[1] | t2[1] << 12 | t3[2] << 24))
            k += 2
        k += 1
    return out


# two warps meet at one barrier per CTA, so each CTA ends at parity 1
BARRIER = r"""
__global__ void swap(int* a) {
  __shared__ int s[8];
  int t = threadIdx.x;
  s[t] = a[blockIdx.x * 6 + t] + blockIdx.x;
  __syncthreads();
  a[blockIdx.x * 6 + t] = s[5 - t];
}"""


def test_expected_tokens_between_ctas() -> None:
    """Between CTAs: one cta token per warp of the block, the last warp first, naming the next CTA; each
    CTA's EXECs start again at barrier parity 0."""
    image = _image(BARRIER, [list(range(18))], 6)
    expected = expected_tokens(image.program, image.memory, (6, 1), SPEC, grid=(3, 1))
    toks = [t for t, _ in expected]
    ctas = [i for i, t in enumerate(toks) if t[0] == "cta"]
    assert [toks[i] for i in ctas] == [("cta", 1, 0, 1), ("cta", 1, 0, 0), ("cta", 2, 0, 1), ("cta", 2, 0, 0)]
    for first in (ctas[1] + 1, ctas[3] + 1):
        assert toks[first] == ("exec", 0, 0, 0, 0)
    parities = [t[4] for t in toks[:ctas[0]] if t[0] == "exec"]
    assert parities[0] == 0 and parities[-1] == 1
    assert [i.cta for t, i in expected if t[0] == "exec"][::-1][0] == 2
    ref = interp.run(image.program, image.memory, (3, 1), (6, 1))
    assert list(expected[-1][1].record.memory) == ref.memory


def test_expected_tokens_end_in_fault_outside_the_memory() -> None:
    # lane 2 reads past word 1024, outside the memory (the machine's and the GPU's)
    image = _image(STRIDE, [list(range(1, 5)), [0] * 4, 0], 4)
    expected = expected_tokens(image.program, image.memory, 4, SPEC)
    assert expected[-1][0] == ("fault",)
    t, info = expected[-2]
    assert t[0] == "exec" and t[2] == 2 and info.lane == 2
    # lanes 0 and 1 ran the faulting block in full, with their write-backs
    step = [(t, i) for t, i in expected if i.step == info.step]
    assert [t[2] for t, _ in step if t[0] == "exec"] == [0, 1, 2]
    assert any(t[0] in ("w1", "w3") and i.lane == 1 for t, i in step)
    # every lane outside: the fault at lane 0
    image = _image(STRIDE, [list(range(1, 5)), [0] * 4, 5000], 4)
    expected = expected_tokens(image.program, image.memory, 4, SPEC)
    assert expected[-1][0] == ("fault",) and expected[-2][0][0] == "exec" and expected[-2][1].lane == 0


# ---- real runs ---------------------------------------------------------------------------------------

def test_vadd_three_of_four_lanes(cg: CompiledGpu) -> None:
    image, expected = _run_checked(cg, VADD, VADD_ARGS, 4)
    assert expected[-1][1].record.memory[8:12] == VADD_SUMS


def test_vadd_bf16(cg: CompiledGpu) -> None:
    _run_checked(cg, VADD, [[7, -2, 5, 9], [100, 3, -5, 1], [0, 0, 0, 0], 4], 4, "bf16")


def test_loop_with_divergence(cg: CompiledGpu) -> None:
    _, expected = _run_checked(cg, LOOP, [[0] * 4], 4)
    assert expected[-1][1].record.memory[:4] == (1, 0, 3, 2)
    lanes_per_step = {}
    for t, info in expected:
        if t[0] == "exec":
            lanes_per_step.setdefault(info.step, []).append(info.lane)
    assert {len(v) for v in lanes_per_step.values()} > {4}     # some steps run fewer lanes


def test_data_dependent_branch(cg: CompiledGpu) -> None:
    image, expected = _run_checked(cg, SPLIT, [[3, 8, 0x12345679], [0] * 8], 3)
    assert expected[-1][1].record.memory[3:10] == (3 - 1000 & 0xFFFFFFFF, 4 ^ 5, 0x12345679 - 1000, 0, 3, 0,
                                                  0x12345679)
    # lane 1 (even) runs the other side of the branch alone
    sides = {}
    for t, info in expected:
        mem = image.program.blocks[t[1]].mem if t[0] == "exec" else None
        if mem is not None and mem.op == "ST":
            sides.setdefault(info.step, []).append(info.lane)
    assert sorted(sides.values()) == [[0, 2], [0, 2], [1]]


def test_atomic_records(cg: CompiledGpu) -> None:
    x = [5, 0x10000, -7, 100]
    image, expected = _run_checked(cg, ATOMIC, [x, [1000], [0] * 4], 4)
    records = [(info.lane, value) for info, value in _writebacks(expected) if info.reg == RECORD_REG]
    assert records == [(0, 1005), (1, 0x10000 + 1005), (2, 0x10000 + 998), (3, 0x10000 + 1098)]
    assert expected[-1][1].record.memory[4:9] == (0x10000 + 1098, 1000, 1005, 0x10000 + 1005, 0x10000 + 998)


def test_fault_run_matches(cg: CompiledGpu) -> None:
    image, expected = _run_checked(cg, STRIDE, [list(range(1, 5)), [0] * 4, 0], 4)
    assert expected[-1][0] == ("fault",)


# ---- the checker catches differences -----------------------------------------------------------------

def _first_difference(cg: CompiledGpu, expected: list, k: int, token) -> CheckError:
    """Feed the expected tokens, token k replaced, to a token-only checker."""
    tokens = [t for t, _ in expected]
    tokens[k] = token
    checker = Checker(cg, expected)
    with pytest.raises(CheckError) as e:
        for i, t in enumerate(tokens):
            checker(i, t, None)      # tokens only
    return e.value


def test_altered_writeback_token_is_named(cg: CompiledGpu) -> None:
    image = _image(VADD, VADD_ARGS, 4)
    expected = expected_tokens(image.program, image.memory, 4, SPEC)
    # the top part of lane 0's sum 0x7ff12345
    k = next(i for i, (t, info) in enumerate(expected) if t[0] == "w3" and info.value == VADD_SUMS[0])
    info = expected[k][1]
    err = _first_difference(cg, expected, k, ("w3", info.entry, 0x12))
    assert err.index == k
    assert (f"generated token {k}: expected W3 e={info.entry} v=127, found W3 e={info.entry} v=18 at step "
            f"{info.step}, CTA 0, warp 0, block B{info.block}, lane 0; write-back entry {info.entry}: r{info.reg} "
            f"expected 0x7ff12345, found 0x12f12345") in str(err)
    # lane 2's sum -10 goes out in one W1 token
    k = next(i for i, (t, info) in enumerate(expected) if t[0] == "w1" and info.value == VADD_SUMS[2])
    info = expected[k][1]
    err = _first_difference(cg, expected, k, ("w1", info.entry, 0x7F))
    assert err.index == k and f"lane 2; write-back entry {info.entry}: r{info.reg} expected 0xfffffff6, " \
                              f"found 0x0000007f" in str(err)
    # a wide token where a W1 was due: only its bits 0-11 are known
    err = _first_difference(cg, expected, k, ("wa", 0x123))
    assert "expected 0xfffffff6, found 0x?????123" in str(err)


def _copy_row(cg: CompiledGpu, op, state, dst: int, src: int) -> None:
    """Overwrite memory row dst with row src in the DeltaNet state, in every read port's heads (heads are
    port-major, a bank each, as circuit.compile.memory_heads lays them out)."""
    layer, head = memory_heads(cg.plan)[id(op)]
    S, bs = state.recurrent[layer], banks(op)
    where = {r: (b, r - bank.start) for b, bank in enumerate(bs) for r in bank}
    for port in range(len(op.read_addrs)):
        (bd, rd), (b_s, r_s) = where[dst], where[src]
        S[head + port * len(bs) + bd, rd] = S[head + port * len(bs) + b_s, r_s]


def _tampered_run(cg: CompiledGpu, image: LaunchImage, expected: list, at: int, op, dst: int, src: int) -> CheckError:
    """Run checked, copying row src over row dst of memory op right after token `at` is checked."""
    checker = Checker(cg, expected)

    def on_token(i: int, t, state) -> None:
        checker(i, t, state)
        if i == at:
            _copy_row(cg, op, state, dst, src)

    with pytest.raises(CheckError) as e:
        _drive(cg, image, 4, "fp32", on_token)
    return e.value


def test_tampered_memory_row_is_named(cg: CompiledGpu) -> None:
    image = _image(VADD, VADD_ARGS, 4)
    expected = expected_tokens(image.program, image.memory, 4, SPEC)
    # after the first EXEC, word 100 (unused by the kernel) gets a[1]'s row: seen at the end of step 1
    err = _tampered_run(cg, image, expected, 0, cg.data_op, 100, 1)
    assert err.index == next(i for i, (t, info) in enumerate(expected) if info.step == 2)
    assert "after step 1 (CTA 0, warp 0, block B0): memory word 100 (address 0x190) expected 0x00000000, " \
           "found 0x00000007" in str(err)


def test_tampered_register_row_is_named(cg: CompiledGpu) -> None:
    image = _image(VADD, VADD_ARGS, 4)
    expected = expected_tokens(image.program, image.memory, 4, SPEC)
    # the first block of lane 0 with two registers live through it (live after it, not written back; which
    # block that is depends on the lowering): overwrite the first one's row with the second's
    def through(info) -> list[int]:
        written = {r for r, _ in encode_block(image.program.blocks[info.block], SPEC.fmt).writeback}
        return [r for r in info.live if r not in written]
    at = next(i for i, (t, info) in enumerate(expected) if t[0] == "exec" and t[2] == 0 and len(through(info)) > 1)
    info = expected[at][1]
    dst, src = through(info)[:2]
    values = info.record.regs[0]
    assert values[dst] != values[src]
    regs = next(op for op in cg.plan.ops if getattr(op, "mem", None) is not None and op.mem.name == "regs")
    err = _tampered_run(cg, image, expected, at, regs, dst, src)      # lane 0's rows are its registers
    assert err.index == next(i for i in range(at + 1, len(expected)) if expected[i][0][0] == "exec")
    assert (f"block B{info.block}, lane 0: register r{dst} expected 0x{values[dst]:08x}, "
            f"found 0x{values[src]:08x}") in str(err)


def _engine_checked(cg: CompiledGpu, image: LaunchImage, checker: Checker, after=None) -> list[int]:
    """The launch on the step engine (gpu.model.run_engine) with the checker as its callback, decoding in
    one call the tokens whose check reads no state; after(i, state) runs after token i's check. Returns the
    indices at which the callback was handed the state."""
    from qgpu_min.gpu.model import run_engine
    handed = []

    def on_token(i: int, t, state) -> None:
        checker(i, t, state)
        if state is not None:
            handed.append(i)
            if after is not None:
                after(i, state)
    on_token.next_state_read = checker.next_state_read
    run_engine(cg, prompt(image.program, image.memory, 4, SPEC), "fp32", on_token=on_token)
    return handed


def test_the_engine_hands_the_checker_the_state_only_where_it_reads_it(cg: CompiledGpu) -> None:
    image = _image(LOOP, [[0] * 4], 4)
    expected = expected_tokens(image.program, image.memory, 4, SPEC)
    checker = Checker(cg, expected)
    handed = _engine_checked(cg, image, checker)
    assert checker.complete
    reads = sorted({checker.next_state_read(i) for i in range(len(expected))})
    assert handed == reads and 0 < len(reads) < len(expected)
    assert {expected[i][0][0] for i in reads} == {"exec", "halt"}


def test_a_tampered_state_is_caught_through_the_engines_chunks(cg: CompiledGpu) -> None:
    image = _image(VADD, VADD_ARGS, 4)
    expected = expected_tokens(image.program, image.memory, 4, SPEC)
    checker = Checker(cg, expected)
    # as test_tampered_memory_row_is_named, but on the engine: word 100 gets a[1]'s row after the first EXEC
    with pytest.raises(CheckError) as e:
        _engine_checked(cg, image, checker, lambda i, state: i == 0 and _copy_row(cg, cg.data_op, state, 100, 1))
    assert e.value.index == next(i for i, (t, info) in enumerate(expected) if info.step == 2)
    assert "memory word 100 (address 0x190) expected 0x00000000, found 0x00000007" in str(e.value)

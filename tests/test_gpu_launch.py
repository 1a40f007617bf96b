"""Kernels launched on the GPU in the weights (--backend circuit), end to end through the model runtime.

Oracle: the reference interpreter on the same kernel and arguments (machine program lowered for the
machine's own format), and NumPy for what each kernel computes. The circuit backend never calls the
interpreter (a test makes it unavailable), and a test that edits one memory row of the model's state
mid-launch sees the result change: the arrays come from the DeltaNet state."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

from qgpu_min.host.launch import compile_kernel, launch
from qgpu_min.machine import interp
from qgpu_min.gpu.layout import GpuSpec
from qgpu_min.gpu.program import rom_image
from qgpu_min.machine.isa import Block, CapacityError, Program

pytestmark = pytest.mark.filterwarnings("ignore")

KERNELS = {
    "vadd": ("""
        __global__ void vadd(const int* a, const int* b, int* c, int n) {
            int i = threadIdx.x;
            if (i < n) c[i] = a[i] + (b[i] << 1) - 7;
        }""", lambda a, b, c, n: {"c": [a[i] + 2 * b[i] - 7 if i < n else 0 for i in range(len(c))]}),
    "loop": ("""
        __global__ void loop(const int* n, int* out) {
            int t = threadIdx.x, s = 0;
            for (int k = 0; k < n[t]; k++) s += k ^ t;       // lanes run different trip counts
            out[t] = s;
        }""", lambda n, out: {"out": [sum(k ^ t for k in range(n[t])) for t in range(len(out))]}),
    "mixed": ("""
        __global__ void mixed(const int* a, int* c, unsigned k) {
            int i = threadIdx.x;
            int x = a[i];
            c[i] = (x < 0 ? -x : x * (int)k) ^ (x >> 3) | (int)((unsigned)x >> 29);
        }""", None),
    "atomics": ("""
        __global__ void atomics(const int* a, int* acc) {
            int i = threadIdx.x;
            atomicAdd(&acc[0], a[i]);
            atomicMax(&acc[1], a[i]);
            atomicMin(&acc[2], a[i]);
            atomicXor(&acc[3], a[i]);
        }""", lambda a, acc: {"acc": [sum(a), max(a + [acc[1]]), min(a + [acc[2]]), int(np.bitwise_xor.reduce(a))]}),
}
ARGS = {
    "vadd": ([[1, 2, 3, 40], [4, 5, -6, 7], [0, 0, 0, 0], 3], 4),
    "loop": ([[3, 0, 5, 2], [0, 0, 0, 0]], 4),
    "mixed": ([[5, -7, 300000, -2147483648], [0, 0, 0, 0], 4000000000], 4),
    "atomics": ([[5, -7, 9, 3], [0, -100, 100, 0]], 4),
}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    d = tmp_path_factory.mktemp("cu")
    out = {}
    for name, (src, _) in KERNELS.items():
        path = d / f"{name}.cu"
        path.write_text(textwrap.dedent(src))
        out[name] = compile_kernel(path)
    return out


@pytest.mark.parametrize("name", list(KERNELS))
def test_circuit_matches_interpreter_and_numpy(kernels, name):
    args, block = ARGS[name]
    ref = launch(kernels[name], args, block=block)
    got = launch(kernels[name], args, block=block, backend="circuit")
    for k in ref.arrays:
        assert got.arrays[k].tolist() == ref.arrays[k].tolist(), k
    expect = KERNELS[name][1]
    if expect is not None:
        for k, v in expect(*[list(a) if isinstance(a, list) else a for a in args]).items():
            assert got.arrays[k].tolist() == v
    assert got.tokens["prompt"] > 0 and got.tokens["generated"] > 0
    assert got.extra["trace"]["generated"][-1] == "HALT"


def test_dot_readme_launch_bf16_and_token_counts():
    k = compile_kernel("examples/dot.cu")
    r = launch(k, [[1, 2, 3], [4, 5, 6], [0], 3], block=3, backend="circuit", mode="bf16")
    assert r.arrays["out"].tolist() == [32]
    assert r.tokens["generated"] <= 47      # measured 46 (qwenGPU: 47; the aim is 12)


def test_results_come_from_the_model_not_the_interpreter(kernels, monkeypatch):
    args, block = ARGS["vadd"]

    def unavailable(*a, **k):
        raise AssertionError("the circuit backend called the interpreter")
    monkeypatch.setattr(interp, "run", unavailable)
    monkeypatch.setattr(interp, "steps", unavailable)
    r = launch(kernels["vadd"], args, block=block, backend="circuit")
    assert r.arrays["c"].tolist() == [2, 5, -16, 0]


def test_a_changed_memory_row_in_the_state_changes_the_result(kernels, monkeypatch):
    """Overwrite the state row of a[0] with the row of a[3] (= 40) after the prompt: c[0] then uses 40."""
    from qgpu_min.circuit.compile import memory_heads
    from qgpu_min.gpu import backend, model

    real = model.run_launch

    def tampering(cg, prompt, mode="fp32", max_generated=100000, on_token=None, load_len=0, full_vocab=False):
        layer, head = memory_heads(cg.plan)[id(cg.data_op)]

        def hook(i, t, state):
            if i == 0:        # before the first EXEC runs: a's words are rows 0..3
                S = state.recurrent[layer]
                S[head, 0] = S[head, 3]
            if on_token is not None:
                on_token(i, t, state)
        return real(cg, prompt, mode, max_generated, hook, load_len, full_vocab)
    monkeypatch.setattr(backend, "run_model", tampering)
    args, block = ARGS["vadd"]
    r = launch(kernels["vadd"], args, block=block, backend="circuit")
    assert r.arrays["a"].tolist()[0] == 40
    assert r.arrays["c"].tolist()[0] == 40 + 8 - 7



def test_memory_rows_decode_the_state_and_refuse_a_broken_code(kernels, monkeypatch):
    """memory_rows (vectorized) against a row-by-row decode of the state a real launch leaves, and an error
    naming the row and field once one channel of a row is off its code."""
    from qgpu_min.circuit.compile import banks, memory_heads
    from qgpu_min.circuit.ir import CircuitError
    from qgpu_min.circuit.run import memory_rows, row_words
    from qgpu_min.gpu import backend, model

    real, seen = model.run_launch, {}

    def keep_state(cg, prompt, mode="fp32", max_generated=100000, on_token=None, load_len=0, full_vocab=False):
        def hook(i, t, state):
            seen.update(cg=cg, state=state)
            if on_token is not None:
                on_token(i, t, state)
        return real(cg, prompt, mode, max_generated, hook, load_len, full_vocab)
    monkeypatch.setattr(backend, "run_model", keep_state)
    args, block = ARGS["vadd"]
    launch(kernels["vadd"], args, block=block, backend="circuit")
    cg, S = seen["cg"], seen["state"].recurrent
    op = cg.data_op
    layer, head = memory_heads(cg.plan)[id(op)]
    bank_rows = banks(op)[0].stop
    got = memory_rows(cg.plan, op, S)
    sizes = [(size, len(op.field_sources(i))) for i, size in enumerate(op.mem.fields)]
    for row in (0, 1, 2, 5, op.mem.rows - 1):
        v = S[layer][head + row // bank_rows, row % bank_rows].astype(np.float64)
        ch, want = 0, []
        for size, n in sizes:
            want.append(int(np.argmax(sum(v[ch + j * size:ch + (j + 1) * size] for j in range(n)))))
            ch += size * n
        assert got[row].tolist() == want
    assert row_words(got)[:4] == [1, 2, 3, 40]
    S[layer][head, 2, int(np.argmax(S[layer][head, 2]))] *= 0.5        # row 2's first active channel
    with pytest.raises(CircuitError, match="row 2 field"):
        memory_rows(cg.plan, op, S)


def _outcome(fn, *args):
    from qgpu_min.circuit.ir import CircuitError
    try:
        return fn(*args).tolist()
    except CircuitError as e:
        return str(e)


def test_the_c_readout_equals_the_numpy_reference_on_launch_states(kernels, monkeypatch):
    """read_rows (the C core's qgpu_read_rows) against read_rows_ref on the state a real launch leaves, for
    the data memory and every lane's registers, and on 300 perturbed copies: noise of every size on random
    channels, a row scaled, a NaN, an infinity, a row all zero or negative. Same fields, or the same error."""
    from qgpu_min._core import ffi, lib
    from qgpu_min.circuit.ir import MemOp
    from qgpu_min.circuit.run import _c_readout, read_rows, read_rows_ref, readout
    from qgpu_min.gpu import backend, model

    real, seen = model.run_launch, {}

    def keep_state(cg, prompt, mode="fp32", max_generated=100000, on_token=None, load_len=0, full_vocab=False):
        run = real(cg, prompt, mode, max_generated, on_token, load_len, full_vocab)
        seen.update(cg=cg)
        return run
    monkeypatch.setattr(backend, "run_model", keep_state)
    monkeypatch.setattr(model, "read_rows", lambda r, recurrent, *a: seen.setdefault("S", recurrent) and
                        read_rows(r, recurrent, *a))
    args, block = ARGS["vadd"]
    launch(kernels["vadd"], args, block=block, backend="circuit")
    cg, S = seen["cg"], seen["S"]
    regs = readout(cg.plan, next(op for op in cg.plan.ops if isinstance(op, MemOp) and op.mem.name == "regs"))
    rng = np.random.default_rng(7)
    lanes = range(block * cg.gc.spec.regs)        # the launch's lanes' registers (the others were never written)
    for r, rows in ((cg.data, range(len(cg.data.bank))), (regs, lanes)):
        layer = S[r.layer]
        want = read_rows_ref(r, S, rows)
        out = np.zeros_like(want)       # the C kernel itself vouches for every row of a clean state
        heads, at = np.ascontiguousarray(r.head + r.bank[rows]), np.ascontiguousarray(r.at[rows])
        assert lib.qgpu_read_rows(ffi.from_buffer("float[]", layer), layer.shape[1], layer.shape[2],
                                  ffi.from_buffer("int64_t[]", heads), ffi.from_buffer("int64_t[]", at), len(rows),
                                  len(r.groups), *_c_readout(r), r.n_fields, 1e-3, ffi.from_buffer("int64_t[]", out)) == -1
        assert out.tolist() == want.tolist() and read_rows(r, S, rows).tolist() == want.tolist()
        assert read_rows(r, S, rows[3:9]).tolist() == want[3:9].tolist()
        for trial in range(150):
            bad = dict(S)
            bad[r.layer] = layer.copy()
            for _ in range(int(rng.integers(1, 4))):
                row = int(rng.choice(rows))
                v = bad[r.layer][r.head + r.bank[row], r.at[row]]
                kind = rng.integers(6)
                if kind == 0:
                    ch = rng.integers(v.size, size=int(rng.integers(1, 4)))
                    v[ch] += np.float32(10.0 ** rng.uniform(-6, 0)) * np.float32(max(v.max(), 1e-3)) * \
                        rng.choice([-1, 1], ch.size).astype(np.float32)
                elif kind == 1:
                    v *= np.float32(rng.uniform(0.1, 3))
                elif kind == 2:
                    v[rng.integers(v.size)] = np.nan
                elif kind == 3:
                    v[rng.integers(v.size)] = rng.choice([np.inf, -np.inf])
                elif kind == 4:
                    v[:] = 0
                else:
                    v[:] = -np.abs(v)
            assert _outcome(read_rows, r, bad, rows) == _outcome(read_rows_ref, r, bad, rows), trial


def test_limits_and_unsupported_are_refused_before_launching(kernels, tmp_path):
    args, _ = ARGS["vadd"]
    with pytest.raises(CapacityError, match="a CTA of 1..32 threads .* the block is 33x1 = 33 threads"):
        launch(kernels["vadd"], args, block=33, backend="circuit")
    with pytest.raises(CapacityError, match="a CTA of 1..32 threads .* the block is 6x6 = 36 threads"):
        launch(kernels["vadd"], args, block=(6, 6), backend="circuit")
    with pytest.raises(CapacityError, match="a grid of 1..64 CTAs; the grid is 13x5 = 65 CTAs"):
        launch(kernels["vadd"], args, grid=(13, 5), block=4, backend="circuit")
    # the ROM holds the machine's 128 blocks, so only a narrower GPU can be over it
    with pytest.raises(CapacityError, match="program needs 5 blocks; the GPU's ROM holds 4 \\(over by 1\\)"):
        rom_image(Program([Block()] * 5), GpuSpec(blocks=4))


def test_memory_fault_is_an_error_naming_the_block(tmp_path):
    src = tmp_path / "oob.cu"
    src.write_text("__global__ void oob(int* a) { a[threadIdx.x * 3000] = 1; }\n")
    with pytest.raises(interp.MemoryFault, match="block B.*lane 1"):
        launch(compile_kernel(src), [[0, 0]], block=2, backend="circuit")


def test_a_kernel_that_never_halts_stops_at_the_step_limit_on_the_gpu(tmp_path):
    """No input makes a GPU launch run unboundedly: the token budget follows the step limit."""
    src = tmp_path / "spin.cu"
    src.write_text("__global__ void spin(volatile int* a) { while (a[0] == 0) a[1] += 1; }\n")
    with pytest.raises(interp.StepLimitError, match="did not halt within the step limit of 8"):
        launch(compile_kernel(src), [[0, 0]], block=1, backend="circuit", step_limit=8)


MULTI_WARP = """
__global__ void rotate_sum(const int* x, int* out, int* total) {
    __shared__ int s[32];
    int t = threadIdx.x, n = blockDim.x;
    s[t] = x[t];
    __syncthreads();                          // every warp's write is seen by every other warp
    int acc = 0;
    for (int k = 0; k <= ((t ^ (t >> 2)) & 3); k++) {   // lanes and warps leave the loop at different trips
        int j = t + k;
        acc += s[j >= n ? j - n : j];
    }
    __syncthreads();
    s[t] = acc;
    __syncthreads();
    out[t] = s[n - 1 - t];
    atomicAdd(total, acc);
}
"""


@pytest.mark.parametrize("threads,mode", [(7, "fp32"), pytest.param(32, "fp32", marks=pytest.mark.slow), (10, "bf16")])
def test_several_warps_with_barriers_are_exact_under_check(tmp_path, threads, mode):
    """Warps of 4 lanes scheduled as the interpreter does (turns end at a barrier or a loop back edge),
    barriers across warps, a partial last warp; checked token by token against the interpreter."""
    src = tmp_path / "rotate_sum.cu"
    src.write_text(MULTI_WARP)
    k = compile_kernel(src)
    rng = np.random.default_rng(threads)
    x = rng.integers(-300, 300, threads).tolist()
    args = [x, [0] * threads, [5]]
    ref = launch(k, args, block=threads)
    got = launch(k, args, block=threads, backend="circuit", mode=mode, check=True)
    acc = [sum(x[(t + j) % threads] for j in range(((t ^ (t >> 2)) & 3) + 1)) for t in range(threads)]
    assert got.arrays["out"].tolist() == ref.arrays["out"].tolist() == acc[::-1]
    assert got.arrays["total"].tolist() == [5 + sum(acc)]
    warps = {name.split()[2] for name in got.extra["trace"]["generated"] if name.startswith("EXEC")}
    assert warps == {f"w={w}" for w in range((threads + 3) // 4)}


GRID = """
__global__ void where(int* out, int* count) {
    int tx = threadIdx.x, ty = threadIdx.y, bx = blockIdx.x, by = blockIdx.y;
    int cta = by * gridDim.x + bx, t = ty * blockDim.x + tx;
    out[cta * (blockDim.x * blockDim.y) + t] = tx | ty << 4 | blockDim.x << 8 | blockDim.y << 12
        | bx << 16 | by << 20 | gridDim.x << 24 | gridDim.y << 28;
    int acc = 0;                               // registers start at 0 in every CTA
    for (int k = 0; k <= (t & 1) + bx; k++) acc = (acc << 1) ^ (k + t);   // no closed form
    atomicAdd(&count[cta], acc);
}
"""


def _where_words(grid: tuple[int, int], block: tuple[int, int]) -> list[int]:
    out = []
    for by in range(grid[1]):
        for bx in range(grid[0]):
            for ty in range(block[1]):
                for tx in range(block[0]):
                    out.append(tx | ty << 4 | block[0] << 8 | block[1] << 12 | bx << 16 | by << 20
                               | grid[0] << 24 | grid[1] << 28)
    return out


def _loop(t: int, bx: int) -> int:
    acc = 0
    for k in range((t & 1) + bx + 1):
        acc = (acc << 1) ^ (k + t)
    return acc


@pytest.mark.parametrize("grid,block,mode", [((2, 2), (2, 3), "fp32"), ((2, 1), (5, 1), "bf16"),
                                             ((1, 3), (3, 1), "fp32")])
def test_grids_of_ctas_and_2d_blocks_are_exact_under_check(tmp_path, grid, block, mode):
    """CTAs one after another (x fastest), each starting from zeroed registers and fresh warp tables (the
    cta tokens the model writes), every special of a 2-D grid and block; checked token by token."""
    src = tmp_path / "where.cu"
    src.write_text(GRID)
    k = compile_kernel(src)
    n, ctas = block[0] * block[1], grid[0] * grid[1]
    args = [[0] * (n * ctas), [0] * ctas]
    got = launch(k, args, grid=grid, block=block, backend="circuit", mode=mode, check=True)
    assert got.arrays["out"].tolist() == [w - (1 << 32) if w >> 31 else w for w in _where_words(grid, block)]
    want = [sum(_loop(t, cx) for t in range(n)) for cy in range(grid[1]) for cx in range(grid[0])]
    assert got.arrays["count"].tolist() == want
    ctas_named = [name for name in got.extra["trace"]["generated"] if name.startswith("CTA")]
    top = (n - 1) // 4
    assert ctas_named == [f"CTA x={c % grid[0]} y={c // grid[0]} w={w}" for c in range(1, ctas)
                          for w in range(top, -1, -1)]


SUBWORD = """
__global__ void narrow(const int* x, unsigned char* b, short* h, int* w) {
    int t = threadIdx.x;
    b[t] = (unsigned char)(x[t] * 3);          // adjacent lanes write bytes of one word
    h[t] = (short)(x[t] - 7);
    w[t] = b[t ^ 1] + ((const signed char*)b)[t];   // bytes another lane wrote, zero- and sign-extended
}
"""


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_byte_and_halfword_stores_and_loads_are_exact_under_check(tmp_path, mode):
    """STB/STH as read-modify-writes of their word (lanes in order, so neighbours' bytes survive), loads
    of bytes through the lowering's rewrite; checked token by token against the interpreter."""
    src = tmp_path / "narrow.cu"
    src.write_text(SUBWORD)
    k = compile_kernel(src)
    x = np.random.default_rng(5).integers(-100000, 100000, 6).astype(np.int32)
    args = [x, np.full(8, 0x55, np.uint8), np.full(6, -3, np.int16), np.zeros(6, np.int32)]
    got = launch(k, [a.copy() for a in args], block=6, backend="circuit", mode=mode, check=True).arrays
    b = [(int(v) * 3) & 0xFF for v in x] + [0x55, 0x55]
    assert got["b"].tolist() == b
    assert got["h"].tolist() == [int(np.int16(np.uint16((int(v) - 7) & 0xFFFF))) for v in x]
    assert got["w"].tolist() == [b[t ^ 1] + (b[t] - 256 if b[t] >= 128 else b[t]) for t in range(6)]


def test_misaligned_halfword_store_faults(tmp_path):
    src = tmp_path / "odd.cu"
    src.write_text("__global__ void odd(char* p) { *(short*)(p + 1 + 2 * threadIdx.x) = 5; }\n")
    with pytest.raises(interp.MemoryFault, match="lane 0"):
        launch(compile_kernel(src), [[0] * 16], block=2, backend="circuit")


INC_DEC = """
__global__ void counters(unsigned* inc, unsigned* dec, const unsigned* bound, unsigned* old) {
    int t = threadIdx.x;
    old[t] = atomicInc(&inc[t], bound[t]);
    old[t + 8] = atomicDec(&dec[t], bound[t]);
    atomicInc(&inc[8], 5u);                      // every lane on one word: wraps at 5
}
"""


def test_atomic_inc_and_dec_wrap_exactly(tmp_path):
    src = tmp_path / "counters.cu"
    src.write_text(INC_DEC)
    k = compile_kernel(src)
    M = 0xFFFFFFFF
    # (old, bound): below, at and above the bound, zero, the largest words
    pairs = [(3, 7), (7, 7), (9, 7), (0, 7), (0, 0), (M, M), (M - 1, M), (5, 0)]
    old, bound = [p[0] for p in pairs], [p[1] for p in pairs]
    args = [old + [4], list(old), bound, [0] * 16]
    got = launch(k, args, block=8, backend="circuit", check=True).arrays
    assert got["inc"].tolist() == [0 if o >= b else o + 1 for o, b in pairs] + [(4 + 8) % 6]
    assert got["dec"].tolist() == [b if o == 0 or o > b else o - 1 for o, b in pairs]
    assert got["old"].tolist() == old + old


CAS = """
__global__ void cas(int* word, int* seen, const int* want) {
    int t = threadIdx.x;
    seen[t] = atomicCAS(&word[t & 1], want[t], t * 10 + 1);   // lanes in order: some swap, some see a changed word
}
"""


def test_atomic_cas_in_lane_order_exact_under_check(tmp_path):
    src = tmp_path / "cas.cu"
    src.write_text(CAS)
    args = [[5, 7], [0] * 6, [5, 7, 1, 31, 11, 32]]
    got = launch(compile_kernel(src), args, block=6, backend="circuit", check=True).arrays
    word, seen = [5, 7], []
    for t, w in enumerate(args[2]):             # the machine's CAS, lane by lane
        seen.append(word[t & 1])
        word[t & 1] = t * 10 + 1 if word[t & 1] == w else word[t & 1]
    assert got["word"].tolist() == word and got["seen"].tolist() == seen

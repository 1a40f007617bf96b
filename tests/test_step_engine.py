"""The step engine (csrc/circuit.c, qgpu_min/model/step_engine.py) against the per-token path it replaces.

Its kernels against their NumPy references (SELL products, the active-column product, the SiLU shortcuts),
then whole launches on the GPU in the weights, fp32 and bf16: the engine's prefill and decode loop, its head's
argmax decided by the factor tables (model/head_bound.py) or by every row, against Model.prefill /
Model.decode with the whole vocabulary's argmax fed back token by token: the same generated tokens and every
state array the same bits. Launches: loops with divergence, atomics, shared memory with barriers across
warps, shuffles, votes, a grid of CTAs. The tables must decide every step of these launches (a bound that
always fell back would be exact and useless), and their decision is the whole head's argmax."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from qgpu_min._core import ffi, lib
from qgpu_min.model import kernels
from qgpu_min.model.kernels_ref import SparseBF16
from qgpu_min.model.step_engine import EngineError, Sell, StepEngine, _set_sell, csc, csc_active_ref

from ccore_fixtures import isa  # noqa: F401  (pytest fixture: each SIMD level the CPU has)

pytestmark = pytest.mark.filterwarnings("ignore")
ROOT = Path(__file__).resolve().parent.parent


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def _random_csr(rng, out: int, n_in: int, density: float) -> SparseBF16:
    dense = rng.standard_normal((out, n_in)).astype(np.float32) * (rng.random((out, n_in)) < density)
    dense[rng.random((out, n_in)) < density / 4] = -0.0                   # -0 weights: zeros, dropped
    bits = (dense.view(np.uint32) >> 16).astype(np.uint16)
    return SparseBF16.from_dense(bits)


def _c_sell(s: Sell):
    c = ffi.new("qgpu_sell *")
    keep: list = []
    _set_sell(c, s, keep)
    return c, keep


@pytest.mark.parametrize("out, n_in, density, dest", [(37, 50, 0.2, "permuted"), (300, 64, 0.05, "permuted"),
                                                      (9, 700, 0.5, "permuted"), (16, 8, 0.0, "permuted"),
                                                      (300, 64, 0.02, "rows"), (64, 40, 0.0, "rows")])
def test_sell_product_equals_the_csr_rows_bit_for_bit(isa, out, n_in, density, dest):
    """dest "rows": each row to its own index, so runs of equal-length rows give slices stored at once
    (contig); "permuted": rows to scattered outputs, lane by lane."""
    rng = np.random.default_rng(out)
    w = _random_csr(rng, out, n_in, density)
    if dest == "rows":           # the first half of the rows one entry each: runs of equal lengths
        bits = np.zeros((out, n_in), np.uint16)
        bits[out // 2:] = _random_csr(rng, out - out // 2, n_in, density).to_dense()
        bits[np.arange(out // 2), rng.integers(n_in, size=out // 2)] = 0x3FC0       # 1.5
        w = SparseBF16.from_dense(bits)
    x = np.append(rng.standard_normal(n_in).astype(np.float32) * 100, np.float32(0))   # x[in]: the padding's +0
    x[: n_in // 5] = 0.0
    x[n_in // 5: n_in // 4] = -0.0
    rows = np.flatnonzero(rng.random(out) < 0.7) if dest == "permuted" else np.arange(out)
    dest = rng.permutation(out)[: rows.size] if dest == "permuted" else rows
    s = Sell.of(w, rows, dest)
    if dest is rows:
        assert s.contig.sum() > 0
    want = np.full(out, np.float32(7.0))
    want[dest] = kernels.sparse_matvec(w, x[:n_in])[rows]
    got = np.full(out, np.float32(7.0))      # rows no lane names are left as they are
    c, keep = _c_sell(s)
    lib.qgpu_sell_matvec(c, ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", got))
    assert np.array_equal(_bits(got), _bits(want))
    assert np.array_equal(_bits(s.matvec(x, np.full(out, np.float32(7.0)))), _bits(want))


def test_active_column_product_equals_the_csr_rows_bit_for_bit():
    rng = np.random.default_rng(5)
    down = _random_csr(rng, 40, 300, 0.1)
    act = rng.standard_normal(300).astype(np.float32)
    act[rng.random(300) < 0.5] = 0.0
    act[rng.random(300) < 0.2] = -0.0
    act[3] = np.inf
    act[4] = np.nan
    want = kernels.sparse_matvec(down, act)
    ptr, rows, vals = csc(down)
    got = np.empty(40, np.float32)
    lib.qgpu_csc_active(300, 40, ffi.from_buffer("int64_t[]", ptr), ffi.from_buffer("int32_t[]", rows),
                        ffi.from_buffer("float[]", vals), ffi.from_buffer("float[]", act),
                        ffi.from_buffer("float[]", got), ffi.new("int32_t[]", 300))
    same = (_bits(got) == _bits(want)) | (np.isnan(got) & np.isnan(want))
    assert same.all()
    ref = csc_active_ref(ptr, rows, vals, act, 40)
    assert (((_bits(ref) == _bits(want)) | (np.isnan(ref) & np.isnan(want)))).all()


def _floats_between(lo: float, hi: float) -> np.ndarray:
    """Every float32 in [lo, hi] (lo < hi, same sign)."""
    a, b = (np.float32(v).view(np.uint32) for v in (lo, hi))
    a, b = min(a, b), max(a, b)
    return np.arange(a, b + 1, dtype=np.uint32).view(np.float32)


def test_silu_shortcuts_give_the_formulas_bits(isa):
    """qgpu_silu skips the exp where the value is known (>= 17, <= -89, +-0): every float around each
    boundary, the far ranges, the specials and random bit patterns give the formula's bits."""
    rng = np.random.default_rng(3)
    x = np.concatenate([_floats_between(16.9, 17.1), _floats_between(-89.1, -88.9), _floats_between(17, 17.02),
                        _floats_between(-104.5, -103.5),
                        np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 3e38, -3e38, 2 ** -149]),
                        rng.integers(0, 2 ** 32, 400_000, dtype=np.uint32).view(np.float32),
                        rng.uniform(-120, 40, 200_000).astype(np.float32)])
    x = x[rng.permutation(x.size)]
    got, want = np.empty_like(x), np.empty_like(x)
    lib.qgpu_silu(ffi.from_buffer("float[]", x), x.size, ffi.from_buffer("float[]", got))
    lib.qgpu_silu_formula(ffi.from_buffer("float[]", x), x.size, ffi.from_buffer("float[]", want))
    same = (_bits(got) == _bits(want)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), x[~same][:5]


# ---- whole launches ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpu():
    from qgpu_min.gpu import backend
    return backend.compiled(backend.SPEC)


SHFL = """
__global__ void shfl_vote(const int* x, int* out, int* votes) {
    int t = threadIdx.x, v = x[t];
    int s = v + __shfl_xor_sync(0xf, v, 1);
    s += __shfl_down_sync(0xf, s, 2);
    out[t] = s;
    votes[t] = __ballot_sync(0xf, v > 2);
}"""
BARRIER = """
__global__ void rev(const int* x, int* y) {
    __shared__ int buf[12];
    int t = threadIdx.x, n = blockDim.x;
    buf[t] = x[blockIdx.x * n + t] * 3 - 1;
    __syncthreads();
    y[blockIdx.x * n + t] = buf[n - 1 - t];
}"""
HIST = """
__global__ void histogram(const int* x, int* hist, int* top) {
    int v = x[threadIdx.x];
    atomicAdd(&hist[v & 3], 1);
    atomicMax(top, v);
}"""
LAUNCHES = {
    "dot": (ROOT / "examples" / "dot.cu", [[1, 2, 3], [4, 5, 6], [0], 3], (1, 1), (3, 1)),
    "hist": (HIST, [[5, 2, 9, 6], [0, 0, 0, 0], [0]], (1, 1), (4, 1)),
    "shfl_vote": (SHFL, [[1, 7, 3, 100000], [0] * 4, [0] * 4], (1, 1), (4, 1)),
    "barrier_grid": (BARRIER, [list(range(-5, 13)), [0] * 18], (2, 1), (9, 1)),
}


def _prompt_ids(gpu, name: str) -> list[int]:
    from qgpu_min.host.launch import compile_kernel, launch
    src, args, grid, block = LAUNCHES[name]
    res = launch(compile_kernel(src), args, grid=grid, block=block, backend="circuit")
    return res.extra["trace"]["prompt_ids"], res.extra["trace"]["generated_ids"]


def _per_token_run(gpu, model, prompt: list[int], limit: int = 5000):
    """Model.prefill / Model.decode, the whole vocabulary's argmax fed back until HALT or FAULT."""
    state = model.new_state()
    logits = model.prefill(state, prompt)
    out = []
    while len(out) < limit:
        out.append(int(np.argmax(logits)))
        if gpu.token_at(out[-1])[0] in ("halt", "fault"):
            break
        logits = model.decode(state, out[-1])
    return out, state


def _same_state(a, b) -> None:
    for i in a.recurrent:
        assert np.array_equal(_bits(a.recurrent[i]), _bits(b.recurrent[i])), f"S of layer {i}"
        assert np.array_equal(_bits(a.conv[i]), _bits(b.conv[i])), f"conv state of layer {i}"
        assert np.array_equal(a.clean[i], b.clean[i]), f"clean flags of layer {i}"
    assert a.zero == b.zero and a.pos == b.pos


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
@pytest.mark.parametrize("name", list(LAUNCHES))
def test_engine_launch_equals_the_per_token_path_bit_for_bit(gpu, name, mode):
    prompt, recorded = _prompt_ids(gpu, name)
    model, engine = gpu.model(mode), gpu.engine(mode)
    want, want_state = _per_token_run(gpu, model, prompt)
    assert [gpu.token_at(i)[0] for i in want][-1] == "halt"
    V = len(gpu.tokens)
    stop = np.where([t[0] in ("halt", "fault") for t in gpu.tokens], -1, 0)
    for rules in (gpu.launch_rules(mode), engine.rules([np.arange(V)], stop)):   # bounded, every row
        state = model.new_state()
        got = [engine.first(state, prompt, rules)]
        got += engine.decode(state, got[0], rules, 5000)
        assert got == want
        _same_state(state, want_state)
    if mode == "fp32":
        assert want == recorded          # the launch itself ran on the engine


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_the_factor_tables_decide_every_step_and_agree_with_every_row(gpu, mode):
    """At every step of real launches the bounded argmax is decided by the tables (no fallback) and is the
    argmax of the whole head's logits; a hidden nudged to a near tie is left to every row."""
    model, engine = gpu.model(mode), gpu.engine(mode)
    rules = gpu.launch_rules(mode)
    for name in ("dot", "shfl_vote"):
        prompt, gen = _prompt_ids(gpu, name)
        state = model.new_state()
        hidden = [model.forward_hidden(state, prompt)[-1]] + [model.forward_hidden(state, [t])[0] for t in gen[:-1]]
        for x, want in zip(hidden, gen):
            got, proved = engine.argmax_proved(x, rules, 0)
            full = model._apply_head(model.weights.lm_head, x)
            assert proved and got == want == int(np.argmax(full))


def _bounded_argmax(head_bits, tokens, x, bf16=False):
    """(argmax, proved) of qgpu_head_bound_argmax over a small head."""
    from qgpu_min.model.head_bound import factor_tables
    from qgpu_min.model.step_engine import c_bound, set_head_rows
    keep: list = []
    ch = kernels.ChunkedBF16.from_dense(head_bits, kernels.chunk_width())
    tables = factor_tables(head_bits, tokens)
    whole = ffi.new("qgpu_head_set *")
    set_head_rows(whole, ch, np.arange(len(tokens)), keep)
    b = c_bound(tables, ch, whole[0], keep)
    work = np.empty(tables.cols.size + 19 * len(tables.kinds) + 1)
    logits, proved = np.empty(len(tokens), np.float32), ffi.new("int *")
    x = np.ascontiguousarray(x, np.float32)
    best = lib.qgpu_head_bound_argmax(b, ffi.from_buffer("float[]", x), int(bf16), ffi.from_buffer("double[]", work),
                                      ffi.from_buffer("float[]", logits), proved)
    return int(best), bool(proved[0]), tables


def _toy_head():
    """Tokens ('a', i < 4, j < 2) as one-hot columns per field, ('b',), and ('c', k < 3, m < 2) with a column
    that depends on k and m together (not decomposable: multiplied exactly). Columns 0-5 a's fields, 6 b's
    kind, 7-12 c's, 13 shared by all."""
    tokens = [("a", i, j) for i in range(4) for j in range(2)] + [("b",)] + [("c", k, m) for k in range(3)
                                                                            for m in range(2)]
    E = np.zeros((len(tokens), 16), np.float32)
    E[:, 13] = 1.0
    for r, t in enumerate(tokens):
        if t[0] == "a":
            E[r, t[1]] = 1.0
            E[r, 4 + t[2]] = 1.0
        elif t[0] == "b":
            E[r, 6] = 2.0
        else:
            E[r, 7 + t[1]] = 1.0
            E[r, 11] = float(t[1] * t[2] + 1)
    return (E.view(np.uint32) >> 16).astype(np.uint16), tokens, E


@pytest.mark.parametrize("bf16", [False, True])
def test_bounded_argmax_proves_a_clear_winner_and_leaves_ties_to_every_row(bf16):
    bits, tokens, E = _toy_head()
    rng = np.random.default_rng(4)
    for _ in range(200):
        x = (rng.standard_normal(16) * 4).astype(np.float32)
        logits = np.float32(E) @ x
        want = int(np.argmax(kernels.round_bf16(logits) if bf16 else logits))
        got, proved, tables = _bounded_argmax(bits, tokens, x, bf16)
        assert got == want
    assert [tables.kinds[k] for k in tables.exact] == ["c"]
    x = np.zeros(16, np.float32)
    x[[1, 2, 4]] = 5.0          # ('a', 1, 0) and ('a', 2, 0) tie: not proved, the first of them wins
    assert _bounded_argmax(bits, tokens, x, bf16)[:2] == (tokens.index(("a", 1, 0)), False)
    x[2] = 4.0                  # a clear winner
    assert _bounded_argmax(bits, tokens, x, bf16)[:2] == (tokens.index(("a", 1, 0)), True)
    x[:] = 0.0
    x[11] = 3.0                 # ('c', 2, 1) wins through the exactly multiplied rows
    assert _bounded_argmax(bits, tokens, x, bf16)[0] == tokens.index(("c", 2, 1))
    x[0] = np.nan               # a non-finite hidden: the caller's dense product
    assert _bounded_argmax(bits, tokens, x, bf16)[0] == -1


def test_engine_and_per_token_path_take_turns_on_one_state(gpu):
    """The engine works on the State's own arrays: tokens alternately through Model.decode and the engine
    leave the state that either alone leaves."""
    prompt, gen = _prompt_ids(gpu, "hist")
    model, engine = gpu.model("fp32"), gpu.engine("fp32")
    rules = gpu.launch_rules("fp32")
    alone, alone_state = _per_token_run(gpu, model, prompt)
    state = model.new_state()
    model.prefill(state, prompt[:50])
    engine.prefill(state, prompt[50:])
    for j, t in enumerate(gen[:-1]):
        if j % 3:
            assert engine.decode(state, t, rules, 1) == [gen[j + 1]]
        else:
            assert int(np.argmax(model.decode(state, t))) == gen[j + 1]
    _same_state(state, alone_state)


def test_engine_refuses_a_state_it_cannot_take_and_bad_rules(gpu):
    model, engine = gpu.model("fp32"), gpu.engine("fp32")
    state = model.new_state()
    idle = next(i for i in range(engine.n) if engine._gdn[i].n_active < state.conv[i].shape[0]
                and not engine._silent[i])
    active = {engine._gdn[idle].active[j] for j in range(engine._gdn[idle].n_active)}
    ch = next(c for c in range(state.conv[idle].shape[0]) if c not in active)
    state.conv[idle][ch, 0] = 1.0          # a channel no projection writes holds a value: not this engine's
    with pytest.raises(EngineError, match=f"layer {idle}"):
        engine.prefill(state, [0])
    V = len(gpu.tokens)
    with pytest.raises(EngineError, match="ascending"):
        engine.rules([np.array([3, 2])], np.zeros(V, np.int32))
    with pytest.raises(EngineError, match="next_set"):
        engine.rules([np.arange(V)], np.ones(V, np.int32))
    assert StepEngine.unsupported(model) is None


def test_a_non_finite_hidden_takes_the_dense_head_as_the_per_token_path_does(gpu):
    """A state holding inf where a read finds it gives a non-finite hidden: the chunked head does not run, the
    dense product's logits choose (both paths alike)."""
    prompt, gen = _prompt_ids(gpu, "dot")
    model, engine = gpu.model("fp32"), gpu.engine("fp32")
    base = model.new_state()
    model.prefill(base, prompt)
    for i in base.recurrent:         # poison every memory row read so far (the ones holding a nonzero)
        S = base.recurrent[i]
        S[S != 0] = np.inf
        base.clean[i][:] = 0
    a, b = copy.deepcopy(base), copy.deepcopy(base)
    rules = gpu.launch_rules("fp32")
    want = [int(np.argmax(model.decode(a, gen[0])))]
    got = engine.decode(b, gen[0], rules, 1)
    assert got == want
    _same_state(a, b)


def test_decode_in_chunks_is_the_same_run(gpu, monkeypatch):
    """A decode call hands back to Python every DECODE_CHUNK tokens and goes on: the same tokens and state."""
    from qgpu_min.model import step_engine
    prompt, _ = _prompt_ids(gpu, "hist")
    model, engine, rules = gpu.model("fp32"), gpu.engine("fp32"), gpu.launch_rules("fp32")
    runs = []
    for chunk in (1 << 16, 3, 1):
        monkeypatch.setattr(step_engine, "DECODE_CHUNK", chunk)
        state = model.new_state()
        first = engine.first(state, prompt, rules)
        runs.append(([first] + engine.decode(state, first, rules, 5000), state))
    assert runs[0][0] == runs[1][0] == runs[2][0]
    _same_state(runs[0][1], runs[1][1])
    _same_state(runs[0][1], runs[2][1])
    monkeypatch.setattr(step_engine, "DECODE_CHUNK", 4)   # a limit inside a chunk and at its end
    for limit in (6, 8):
        state = model.new_state()
        first = engine.first(state, prompt, rules)
        assert [first] + engine.decode(state, first, rules, limit) == runs[0][0][:limit + 1]


# ---- several tokens a call: the batched product, prefill and lockstep decode -------------------------

@pytest.mark.parametrize("nb", [1, 3, 8])
def test_batched_sell_product_gives_each_input_its_own_bits(isa, nb):
    """qgpu_sell_batch over nb transposed inputs: input b's outputs are qgpu_sell_matvec's for it alone (and
    the reference's, Sell.matvec per input), for scattered and consecutive output rows."""
    rng = np.random.default_rng(nb)
    out, n_in = 300, 90
    w = _random_csr(rng, out, n_in, 0.1)
    for rows, dest in ((np.arange(out), np.arange(out)),
                       (np.flatnonzero(rng.random(out) < 0.6), None)):
        dest = rng.permutation(out)[:rows.size] if dest is None else dest
        s = Sell.of(w, rows, dest)
        xs = [np.append(rng.standard_normal(n_in) * 10.0 ** rng.integers(-3, 4), 0.0).astype(np.float32)
              for _ in range(nb)]
        for x in xs:
            x[rng.random(n_in + 1) < 0.3] = rng.choice([0.0, -0.0])
            x[n_in] = 0.0
        c, keep = _c_sell(s)
        ys = [np.full(out, np.float32(7.0)) for _ in range(nb)]   # rows no lane names stay as they are
        cols = np.unique(w.indices).astype(np.int32)
        xt = np.full((n_in + 1) * int(lib.QGPU_BATCH), np.float32(np.nan))   # rows no column reads: never read
        lib.qgpu_transpose_batch(ffi.new("float *[]", [ffi.from_buffer("float[]", x) for x in xs]), nb,
                                 ffi.from_buffer("int32_t[]", cols), cols.size, n_in, ffi.from_buffer("float[]", xt))
        lib.qgpu_sell_batch(c, ffi.from_buffer("float[]", xt), nb,
                            ffi.new("float *[]", [ffi.from_buffer("float[]", y) for y in ys]))
        for x, y in zip(xs, ys):
            want = np.full(out, np.float32(7.0))
            lib.qgpu_sell_matvec(c, ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", want))
            assert np.array_equal(_bits(y), _bits(want))
            assert np.array_equal(_bits(s.matvec(x, np.full(out, np.float32(7.0)))), _bits(want))


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_batched_prefill_is_the_token_by_token_prefill(gpu, mode):
    """Eight prompt tokens a call through each layer (one state, in order) leave the state and the last
    hidden that one token a call leaves, for prompts whose length is not a multiple of the batch."""
    from qgpu_min.model import step_engine
    model, engine = gpu.model(mode), gpu.engine(mode)
    for name in ("dot", "barrier_grid"):
        prompt, gen = _prompt_ids(gpu, name)
        ids = (prompt + gen)[:-3]
        batched = model.new_state()
        x = engine.prefill(batched, ids)
        alone = model.new_state()
        y = engine.prefill(alone, ids, lanes=1)
        assert np.array_equal(_bits(x), _bits(y))
        _same_state(batched, alone)
    for lanes in (0, step_engine.BATCH + 1):
        with pytest.raises(EngineError, match="tokens a call"):
            engine.prefill(model.new_state(), ids, lanes=lanes)


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_lockstep_decode_is_each_launch_alone(gpu, mode):
    """decode_many over launches of different lengths (some stopped by their limit, one taken up again past
    a full group) gives each the tokens and state decode gives it alone."""
    model, engine = gpu.model(mode), gpu.engine(mode)
    rules = gpu.launch_rules(mode)
    names = ["dot", "hist", "shfl_vote", "barrier_grid"] * 3      # 12 launches: more than one group of 8
    limits = [5000, 7, 5000, 5000, 1, 5000, 30, 5000, 5000, 5000, 2, 5000]
    starts, alone = [], []
    for name, limit in zip(names, limits):
        prompt, _ = _prompt_ids(gpu, name)
        st = model.new_state()
        first = engine.first(st, prompt, rules)
        ref = copy.deepcopy(st)
        alone.append((engine.decode(ref, first, rules, limit), ref))
        starts.append((st, first))
    got = engine.decode_many([s for s, _ in starts], [t for _, t in starts], rules, limits)
    for (ids, ref), g, (st, _) in zip(alone, got, starts):
        assert g == ids
        _same_state(st, ref)
    assert {len(g) for g in got} >= {1, 2, 7, 30}
    with pytest.raises(EngineError, match="distinct"):
        engine.decode_many([starts[0][0], starts[0][0]], [1, 1], rules, [3, 3])
    with pytest.raises(EngineError, match="one token and one limit each"):
        engine.decode_many([starts[0][0], starts[1][0]], [1, 1], rules, [3])

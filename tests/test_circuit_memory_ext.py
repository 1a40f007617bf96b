"""Memory extensions: banked memories (more rows than a head holds) and write fields assembled over several
tokens through the DeltaNet short conv (value_taps). Exact in the IR simulator and, compiled, through the
runtime's forward pass in fp32 and bf16; the kernel facts they rest on, against both kernel implementations."""
import numpy as np
import pytest

from qgpu_min.circuit import sim
from qgpu_min.circuit.compile import (A_KEY, A_LOG, A_LOG_RESET, L_VALUE, Z_GATE, BaseShape, banks, emit,
                                      mem_heads, plan)
from qgpu_min.circuit.ir import MAX_ROWS, ROW_ACTIVE, Circuit, CircuitError, Group, MemOp, bit_not
from qgpu_min.circuit.run import circuit_model, embedding_rows, read_groups
from qgpu_min.circuit.sim import group_value, new_state, simulate, word_inputs
from qgpu_min.model import kernels, kernels_ref

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
MODES = ("fp32", "bf16")


def _word(values_of, word: list[Group]) -> np.ndarray:
    bits = values_of(word)
    return (bits << np.arange(bits.shape[1])).sum(axis=1)


def _compiled_words(c: Circuit, inp: dict, words: list[list[Group]], mode: str) -> np.ndarray:
    """[tokens, words]: the words the compiled circuit outputs, all tokens in one sequence."""
    p = plan(c)
    model = circuit_model(emit(p), p.shape, embedding_rows(p, inp), mode)
    n = len(next(iter(inp.values())))
    h = model.forward_hidden(model.new_state(), list(range(n)))
    return np.stack([_word(lambda gs: read_groups(p, h, gs), w) for w in words], axis=1)


def _sim_words(c: Circuit, inp: dict, words: list[list[Group]], state: dict | None = None) -> np.ndarray:
    """[tokens, words] from the IR simulator, one token per call."""
    out = []
    for t in range(len(next(iter(inp.values())))):
        vals, state = simulate(c, {g: np.asarray(v)[t:t + 1] for g, v in inp.items()}, state)
        out.append([_word(lambda gs: np.stack([group_value(vals, g, 1) for g in gs], 1), w)[0] for w in words])
    return np.array(out)


# ---------------------------------------------------------------------------------------------------------
# Banked memories


def _ram(rows: int, ports: int, all_rows: bool) -> tuple[Circuit, Group, list[Group], list[Group], MemOp]:
    c = Circuit("bank")
    wa = c.input("waddr", rows + (2 if all_rows else 1))
    wv = c.input_word("wval")
    ra = [c.input(f"raddr{k}", rows) for k in range(ports)]
    outs = c.access(c.memory("ram", rows, (2,) * 32), wa, wv, ra)
    for w in outs:
        for g in w:
            c.output(g)
    return c, wa, wv, ra, c.ops[-1]


def test_bank_split_and_head_count():
    for rows, ports, every, want in [(128, 1, False, [128]), (129, 2, False, [128, 1]), (64, 1, True, [64]),
                                     (300, 2, True, [64, 64, 64, 64, 44]), (1920, 1, False, [128] * 15)]:
        op = _ram(rows, ports, every)[-1]
        assert [len(b) for b in banks(op)] == want
        assert [b.start for b in banks(op)] == list(np.cumsum([0] + want[:-1]))
        assert mem_heads(op) == ports * len(want)
    # 2048 rows in 16 banks and two ports do not fit 16 heads (planning stops at the heads, before residual
    # dims are laid out); one port fits them, the ballast change riding on that steady port (its 2049-wide
    # write address then needs a wider residual)
    with pytest.raises(CircuitError, match=r"2 read ports x 16 banks = 32 heads exceed"):
        plan(_ram(MAX_ROWS, 2, False)[0])
    assert plan(_ram(MAX_ROWS, 1, False)[0], BaseShape(hidden=8192)).n_layers == 1
    with pytest.raises(CircuitError, match=r"2 read ports x 3 banks"):
        plan(_ram(300, 2, False)[0], BaseShape(heads=5))
    with pytest.raises(CircuitError, match="rows"):
        Circuit("x").memory("m", MAX_ROWS + 1, (2,))


def test_banked_memory_in_ir_up_to_max_rows():
    c, wa, wv, (ra,), op = _ram(MAX_ROWS, 1, True)
    rng = np.random.default_rng(1)
    addrs = np.concatenate([[MAX_ROWS + 1], rng.integers(0, MAX_ROWS, 30), [MAX_ROWS - 1, 0, 128, 127]])
    vals = rng.integers(0, 2**32, len(addrs))
    ram = {}
    state = None
    for t, (a, v) in enumerate(zip(addrs, vals)):
        r = int(rng.choice(list(ram))) if ram and t % 2 else int(a) % MAX_ROWS  # own write or an older row
        inp = {wa: np.array([a]), ra: np.array([r]), **word_inputs(wv, np.array([v]))}
        out, state = simulate(c, inp, state)
        if a == MAX_ROWS + 1:
            ram = dict.fromkeys(range(MAX_ROWS), int(v))
        else:
            ram[int(a)] = int(v)
        got = _word(lambda gs: np.stack([group_value(out, g, 1) for g in gs], 1), op.outputs[0])[0]
        assert got == ram[r], (t, r)


def _banked_sequence(rows: int, all_rows: bool, tokens: int, seed: int) -> None:
    """Random writes and two read ports over a sequence, reads biased to written rows in every bank:
    compiled == IR == a dict."""
    c, wa, wv, ra, op = _ram(rows, 2, all_rows)
    rng = np.random.default_rng(seed)
    hot = np.concatenate([[b.start, b.stop - 1] for b in banks(op)])  # the first and last row of each bank
    WA = np.where(rng.random(tokens) < 0.5, rng.choice(hot, tokens), rng.integers(0, rows + 1, tokens))
    WA[0] = rows + 1 if all_rows else hot[0]
    WV = rng.integers(0, 2**32, tokens)
    ram, R = {}, np.zeros((tokens, 2), np.int64)
    for t in range(tokens):  # reference and read addresses that only hit written rows
        if WA[t] == rows + 1:
            ram = dict.fromkeys(range(rows), int(WV[t]))
        elif WA[t] < rows:
            ram[int(WA[t])] = int(WV[t])
        written = np.array(sorted(ram))
        hot_written = np.intersect1d(written, hot)
        R[t] = [rng.choice(hot_written if len(hot_written) and rng.random() < 0.5 else written) for _ in range(2)]
    inp = {wa: WA, ra[0]: R[:, 0], ra[1]: R[:, 1], **word_inputs(wv, WV)}
    want = _sim_words(c, inp, op.outputs)
    assert all(want[t, k] == _ref_read(WA, WV, rows, t, R[t, k]) for t in range(tokens) for k in range(2))
    banks_read = {int(np.searchsorted([b.stop for b in banks(op)], r, side="right")) for r in R.ravel()}
    assert banks_read == set(range(len(banks(op))))  # every bank is read from
    for mode in MODES:
        got = _compiled_words(c, inp, op.outputs, mode)
        bad = np.nonzero((got != want).any(axis=1))[0]
        assert not bad.size, f"{mode}: token {bad[0]}: {got[bad[0]]} != {want[bad[0]]}"


def _ref_read(WA: np.ndarray, WV: np.ndarray, rows: int, t: int, r: int) -> int:
    """The value of row r after token t's write: the latest write to r or to all rows."""
    for s in range(t, -1, -1):
        if WA[s] == r or WA[s] == rows + 1:
            return int(WV[s])
    raise AssertionError("read of a never-written row")


def test_banked_memory_exact_through_forward_pass():
    _banked_sequence(300, all_rows=False, tokens=40, seed=2)  # banks 128, 128, 44: 6 heads


def test_banked_memory_with_all_rows_writes_exact_through_forward_pass():
    _banked_sequence(200, all_rows=True, tokens=40, seed=3)   # banks 64, 64, 64, 8: 8 heads (scales 1/8, 1/4)


def test_bank_heads_write_and_read_only_their_rows():
    c, wa, wv, ra, op = _ram(300, 2, True)
    p = plan(c)
    lw = emit(p)[0]
    assert lw.heads == 2 * 5  # ports x banks; the ballast change rides on a steady read port, no constant head
    rows_, cols, vals = lw.mats["qkv"].summed()
    nh, hd = p.shape.heads, p.shape.head_dim
    for h, (port, bank) in enumerate((k, b) for k in range(2) for b in banks(op)):
        q = cols[(rows_ >= h * hd) & (rows_ < (h + 1) * hd)]
        assert sorted(q) == sorted(p.dims[id(ra[port])][a] for a in bank)  # query: this bank's rows only
        key = (rows_ >= (nh + h) * hd) & (rows_ < (nh + h + 1) * hd)
        want = {p.dims[id(wa)][a] for a in bank} | {p.dims[id(wa)][301]}  # its rows and "all rows"
        assert set(cols[key]) == want and np.all(vals[key] == A_KEY)


@pytest.mark.parametrize("k", [kernels, kernels_ref])
def test_other_banks_read_exactly_zero_and_ignore_writes(k):
    """A bank head with a zero query outputs exactly 0 (so summing bank heads into one output group is
    exact), and a zero key leaves its state bit for bit unchanged, in both kernel implementations."""
    rng = np.random.default_rng(0)
    H, dk, dv = 3, 128, 128
    S = np.zeros((H, dk, dv), np.float32)
    for h in range(H):  # rows as memories store them: 32 active channels of L_VALUE / 2^j
        for a in rng.choice(dk, 40, replace=False):
            S[h, a, rng.choice(dv, ROW_ACTIVE, replace=False)] = np.float32(L_VALUE / 2 ** rng.integers(0, 4))
    before = S.copy()
    q = k.l2norm(k.silu(np.zeros((H, dk), np.float32)), 1e-6) / np.float32(np.sqrt(dk))
    key = k.l2norm(k.silu(np.zeros((H, dk), np.float32)), 1e-6)
    assert np.all(q == 0) and np.all(key == 0)
    v = np.zeros((H, dv), np.float32)
    v[:, :ROW_ACTIVE] = np.float32(L_VALUE)  # the value every circuit token offers
    g = np.zeros(H, np.float32)  # -exp(A_log) * softplus(dt_bias) underflows to -0: no decay
    o = k.deltanet_step(S, q, key, v, g, np.ones(H, np.float32))
    assert np.array_equal(S, before) and np.all(o == 0)
    z = np.full((H, dv), np.float32(Z_GATE), np.float32)
    w = np.full(dv, np.float32(np.sqrt(ROW_ACTIVE / dv)), np.float32)
    assert np.all(k.gated_rmsnorm(o, z, w, 1e-6) == 0)            # fp32 path
    assert np.all(k.rmsnorm(o, np.ones(dv, np.float32), 1e-6, False) == 0)  # bf16 path's norm
    # the bank that holds the row: an all-rows write over 4^j key channels stores it at scale 1/2^j
    qs = np.float32(1 / np.sqrt(dk))
    for j in range(4):
        x = np.zeros((1, dv), np.float32)
        ch = rng.choice(dv, ROW_ACTIVE, replace=False)
        x[0, ch] = np.float32(np.float32(L_VALUE / 2 ** j) * qs)
        assert np.all(k.rmsnorm(x, np.ones(dv, np.float32), 1e-6, False)[0, ch] == 2.0)


# ---------------------------------------------------------------------------------------------------------
# Writes assembled over several tokens (value_taps)

CHUNK = 11  # tokens t-2, t-1, t carry bits 0-10, 11-21, 22-31 of the word written at t


def _word_over_three_tokens(rows: int, ports: int = 1) -> tuple[Circuit, dict, MemOp]:
    c = Circuit("taps")
    chunk = c.input_word("chunk", CHUNK)
    wa = c.input("waddr", rows + 2)
    ra = [c.input(f"raddr{k}", rows) for k in range(ports)]
    # bit 21 (chunk bit 10 one token back) is stored inverted: a view read from the history
    fields = chunk + chunk[:CHUNK - 1] + [bit_not(chunk[CHUNK - 1])] + chunk[:32 - 2 * CHUNK]
    taps = [2] * CHUNK + [1] * CHUNK + [0] * (32 - 2 * CHUNK)
    outs = c.access(c.memory("ram", rows, (2,) * 32), wa, fields, ra, value_taps=taps)
    for w in outs:
        for g in w:
            c.output(g)
    return c, {"chunk": chunk, "wa": wa, "ra": ra}, c.ops[-1]


def _assembled(X: np.ndarray, t: int) -> int:
    """The word written at token t from the chunks of tokens t-2, t-1, t (bit 21 inverted)."""
    return int(X[t - 2] | ((X[t - 1] ^ (1 << (CHUNK - 1))) << CHUNK) | ((X[t] & 0x3FF) << 2 * CHUNK))


def _seeded_state(c: Circuit, chunk: list[Group], X: np.ndarray, seen: int) -> dict:
    """Simulator state after `seen` tokens that carried chunks X[:seen] and never wrote. The simulator
    cannot run those tokens: the memory cannot be initialised before the history exists, so their reads
    hit never-written rows."""
    state = new_state(c, 1)
    for t in range(seen):
        sim._push_history({id(g): np.array([(X[t] >> i) & 1]) for i, g in enumerate(chunk)}, state)
    return state


def test_write_assembled_over_three_tokens_exact():
    rows, T = 12, 36
    c, io, op = _word_over_three_tokens(rows, ports=2)
    rng = np.random.default_rng(4)
    X = rng.integers(0, 2**CHUNK, T)
    WA = rng.integers(0, rows + 1, T)
    WA[:2] = rows      # no write before the history exists
    WA[2] = rows + 1   # initialise every row at the first token that can
    ram, R = {}, np.zeros((T, 2), np.int64)
    for t in range(2, T):
        if WA[t] == rows + 1:
            ram = dict.fromkeys(range(rows), _assembled(X, t))
        elif WA[t] < rows:
            ram[int(WA[t])] = _assembled(X, t)
        R[t] = [WA[t] if WA[t] < rows else rng.integers(0, rows), rng.integers(0, rows)]  # own write, any row
    inp = {io["wa"]: WA, io["ra"][0]: R[:, 0], io["ra"][1]: R[:, 1], **word_inputs(io["chunk"], X)}
    want = np.array([[_ref_read_taps(WA, X, rows, t, r) for r in R[t]] for t in range(2, T)])
    later = {g: np.asarray(v)[2:] for g, v in inp.items()}
    got_ir = _sim_words(c, later, op.outputs, _seeded_state(c, io["chunk"], X, 2))
    assert np.array_equal(got_ir, want)
    p = plan(c)
    layers, emb = emit(p), embedding_rows(p, inp)
    for mode in MODES:  # the model runs all tokens; tokens 0, 1 read never-written rows and are not decoded
        model = circuit_model(layers, p.shape, emb, mode)
        h = model.forward_hidden(model.new_state(), list(range(T)))[2:]
        got = np.stack([_word(lambda gs: read_groups(p, h, gs), w) for w in op.outputs], axis=1)
        bad = np.nonzero((got != want).any(axis=1))[0]
        assert not bad.size, f"{mode}: token {bad[0] + 2}: {got[bad[0]]} != {want[bad[0]]}"


def _ref_read_taps(WA: np.ndarray, X: np.ndarray, rows: int, t: int, r: int) -> int:
    for s in range(t, 1, -1):
        if WA[s] == r or WA[s] == rows + 1:
            return _assembled(X, s)
    raise AssertionError("read of a never-written row")


def test_conv_tap_reads_the_value_d_tokens_back_exactly():
    """The conv fact the taps use: weight 1 at lag d, 0 elsewhere, returns exactly the input d tokens back
    (zero before the sequence start) in both kernel implementations."""
    x = np.array([[L_VALUE, 0.0, -3.5], [0.0, L_VALUE, 7.0], [L_VALUE, L_VALUE, 1e-30], [0.0, 0.0, 2.0],
                  [L_VALUE, 0.0, 5.0]], np.float32)
    for k in (kernels, kernels_ref):
        for d in range(4):
            w = np.zeros((3, 4), np.float32)
            w[:, 3 - d] = 1.0
            y = k.conv_prefill(np.zeros((3, 3), np.float32), x, w)
            want = np.concatenate([np.zeros((d, 3), np.float32), x[:len(x) - d]])
            assert np.array_equal(y, want), (k.__name__, d)


def test_conv_taps_are_emitted_per_value_channel():
    c, io, op = _word_over_three_tokens(12)
    p = plan(c)
    conv = emit(p)[0].vecs["conv"]
    nh, hd = p.shape.heads, p.shape.head_dim
    val0 = 2 * nh * hd
    for i, d in enumerate(op.value_taps):
        for e in range(2):
            assert conv[val0 + 2 * i + e].tolist() == [1.0 if j == 3 - d else 0.0 for j in range(4)]
    assert np.all(conv[:val0, 3] == 1) and np.all(conv[:val0, :3] == 0)  # queries and keys: this token
    assert np.all(conv[val0 + 64:, 3] == 1) and np.all(conv[val0 + 64:, :3] == 0)  # other channels too


def test_write_without_history_raises_only_if_it_writes():
    c = Circuit("early")
    wa, v = c.input("waddr", 4 + 1), c.input("v", 2)
    mem = c.memory("m", 4, (2, 2))
    c.access(mem, wa, [v, v], [], value_taps=[0, 2])
    step = {wa: np.array([4, 4]), v: np.array([0, 1])}  # no write: fine before the history exists
    _, state = simulate(c, step)
    with pytest.raises(CircuitError, match="from 2 tokens back, before the sequence start"):
        simulate(c, {wa: np.array([4, 1]), v: np.array([1, 1])}, state)  # token 1, case 1 writes
    _, state = simulate(c, step)
    _, state = simulate(c, step, state)
    _, state = simulate(c, {wa: np.array([0, 3]), v: np.array([1, 0])}, state)  # token 2: history exists
    assert state[id(mem)][[0, 1], [0, 3]].tolist() == [[1, 0], [0, 1]]


def test_taps_must_fit_the_conv_kernel():
    c, io, op = _word_over_three_tokens(4)
    with pytest.raises(CircuitError, match="conv kernel of 2"):
        plan(c, BaseShape(conv_kernel=2))


# ---------------------------------------------------------------------------------------------------------
# Reset: a bit that empties a memory (the heads' decay), after which an all-rows write initialises it again


def _resettable_ram(rows: int) -> tuple[Circuit, Group, Group, list[Group], Group, MemOp]:
    c = Circuit("reset")
    wa = c.input("waddr", rows + 2)
    wv = c.input_word("wval")
    ra = c.input("raddr", rows)
    reset = c.input("reset", 2)
    (out,) = c.access(c.memory("ram", rows, (2,) * 32), wa, wv, [ra], reset=reset)
    for g in out:
        c.output(g)
    return c, wa, wv, ra, reset, c.ops[-1]


def test_all_rows_write_over_written_rows_is_refused_without_a_reset():
    """What the model does exactly: an all-rows write on empty rows, or on rows that all still hold one
    earlier all-rows write (equal rows, which the delta rule replaces)."""
    c, wa, wv, ra, reset, op = _resettable_ram(20)

    def token(a: int, v: int, r: int, rs: int = 0, state=None):
        return simulate(c, {wa: np.array([a]), ra: np.array([r]), reset: np.array([rs]),
                            **word_inputs(wv, np.array([v]))}, state)[1]
    state = token(21, 5, 0)
    state = token(21, 5, 3, state=state)            # the same all-rows write again: a no-op, allowed
    state = token(21, 8, 3, state=state)            # another value over equal rows: allowed
    state = token(7, 9, 7, state=state)
    with pytest.raises(CircuitError, match="writes 20 rows at once over rows that are not empty"):
        token(21, 6, 0, state=state)
    with pytest.raises(CircuitError, match="writes 20 rows at once over rows that are not empty"):
        token(21, 8, 0, state=state)                # row 7 no longer holds the all-rows value
    state = token(21, 6, 7, rs=1, state=state)      # reset first: allowed
    with pytest.raises(CircuitError, match="reads row 3, never written"):
        token(20, 0, 3, rs=1, state=state)          # a reset alone leaves every row empty


@pytest.mark.parametrize("rows", [40, 300])
def test_reset_then_all_rows_write_exact_through_forward_pass(rows):
    """Random single-row writes, resets with an all-rows write, reads of written rows: the compiled heads
    (every bank decays to exactly 0 on a reset token, exactly 1 elsewhere) == IR == a dict, fp32 and bf16."""
    c, wa, wv, ra, reset, op = _resettable_ram(rows)
    rng = np.random.default_rng(rows)
    tokens = 48
    RS = (rng.random(tokens) < 0.15).astype(np.int64)
    RS[0] = 1
    WA = np.where(RS == 1, rows + 1, np.where(rng.random(tokens) < 0.7, rng.integers(0, rows, tokens), rows))
    WV = rng.integers(0, 2**32, tokens)
    ram, R = {}, np.zeros(tokens, np.int64)
    for t in range(tokens):
        if RS[t]:
            ram = dict.fromkeys(range(rows), int(WV[t]))
        elif WA[t] < rows:
            ram[int(WA[t])] = int(WV[t])
        R[t] = rng.choice(sorted(ram))
    want = np.array([ram_value for ram_value in _reset_reference(WA, WV, RS, R, rows)])
    inp = {wa: WA, ra: R, reset: RS, **word_inputs(wv, WV)}
    assert (_sim_words(c, inp, op.outputs)[:, 0] == want).all()
    for mode in MODES:
        got = _compiled_words(c, inp, op.outputs, mode)[:, 0]
        bad = np.nonzero(got != want)[0]
        assert not bad.size, f"{mode}: token {bad[0]}: {got[bad[0]]} != {want[bad[0]]}"


def _reset_reference(WA, WV, RS, R, rows: int) -> list[int]:
    """Row R[t] after token t: the latest single write to it or the latest reset's all-rows write."""
    out = []
    for t in range(len(WA)):
        s = next(s for s in range(t, -1, -1) if RS[s] or WA[s] == R[t])
        out.append(int(WV[s]))
    return out


def test_reset_heads_get_the_decay_weights():
    c, wa, wv, ra, reset, op = _resettable_ram(300)
    p = plan(c)
    lw = emit(p)[0]
    n = mem_heads(op)
    rows_, cols, vals = lw.mats["a"].summed()
    assert sorted(rows_) == list(range(n)) and set(cols) == {p.dims[id(reset)][1]}
    assert (lw.vecs["A_log"][:n] == A_LOG_RESET).all() and (lw.vecs["A_log"][n:] == A_LOG).all()

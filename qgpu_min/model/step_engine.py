"""The step engine of a circuit-only model: decode (and prefill) of a Model whose every layer is a CSR DeltaNet
with a CSR MLP, in one C call per launch (csrc/circuit.c states what it skips and why that keeps the bits;
docs/step_engine.md).

    engine = StepEngine(model)                         # EngineError where it does not apply (unsupported says why)
    rules = engine.rules(sets, next_set, tokens)       # the head's token sets; with tokens, set 0 (the whole
                                                       # vocabulary) through the factor tables (head_bound.py)
    engine.prefill(state, ids)                         # the prompt, no head
    ids = engine.decode(state, token, rules, limit)    # feed token and each argmax back until a stop token

It computes what Model.decode computes, bit for bit: the same kernels on the same values, skipping only work
whose result is known (tests/test_step_engine.py runs both over real GPU launches, fp32 and bf16). A set's
logits are each its full-head bits, so the argmax over a set is the full one whenever that lies in it; the
GPU's launches use one set, the whole vocabulary, whose argmax the factor tables prove without computing every
row. The state's arrays are the Model's own (State), so the two paths can take turns on one state.
"""
from __future__ import annotations

import threading
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import numpy as np

from qgpu_min._core import ffi, lib

from . import kernels
from .bf16 import bf16_to_f32
from .kernels_ref import SparseBF16
from .forward import Model, State
from .head_bound import HeadTables, factor_tables

LANES = int(lib.QGPU_SELL_LANES)
BATCH = int(lib.QGPU_BATCH)     # tokens a batched call takes through a layer together
DECODE_CHUNK = 1 << 16     # tokens a decode call generates at most before Python takes the next chunk


class EngineError(Exception):
    """The engine cannot take this model or state (the per-token path still can)."""


# ---- the engine's sparse forms (NumPy; the C core only reads them) ----------------------------------------

@dataclass
class Sell:
    """A CSR matrix's rows `rows` in slices of LANES (qgpu_sell): longest rows first, each slice padded to
    its longest row with weight +0 at column `pad` (where the input holds +0); dest: each lane's output
    index (-1 for the padding lanes); contig: per slice, 1 when its lanes' outputs are consecutive rows."""
    start: np.ndarray    # int32 [slices + 1], in steps
    cols: np.ndarray     # uint16 [LANES * steps]
    vals: np.ndarray     # uint16 [LANES * steps]: bf16 bits
    dest: np.ndarray     # int32 [LANES * slices]
    contig: np.ndarray   # uint8 [slices]

    @property
    def slices(self) -> int:
        return int(self.start.shape[0]) - 1

    @classmethod
    def of(cls, w: SparseBF16, rows: np.ndarray, dest: np.ndarray | None = None, pad: int | None = None) -> "Sell":
        rows = np.asarray(rows, np.int64)
        dest = rows if dest is None else np.asarray(dest, np.int64)
        pad = w.shape[1] if pad is None else pad
        if pad >= 1 << 16:
            raise EngineError(f"a SELL matrix takes at most {(1 << 16) - 1} columns, not {w.shape[1]}")
        lengths = (w.indptr[rows + 1] - w.indptr[rows]).astype(np.int64)
        order = np.argsort(-lengths, kind="stable")
        rows, dest, lengths = rows[order], dest[order], lengths[order]
        n_slices = -(-rows.shape[0] // LANES)
        lane_rows = np.full(n_slices * LANES, -1, np.int64)
        lane_rows[:rows.shape[0]] = rows
        lane_len = np.zeros(n_slices * LANES, np.int64)
        lane_len[:rows.shape[0]] = lengths
        steps = lane_len.reshape(n_slices, LANES).max(axis=1) if n_slices else np.zeros(0, np.int64)
        start = np.zeros(n_slices + 1, np.int64)
        np.cumsum(steps, out=start[1:])
        total = int(start[-1])
        cols = np.full(total * LANES, pad, np.uint16)
        vals = np.zeros(total * LANES, np.uint16)
        if total:
            # entry e of the lane at (slice s, lane r) sits at (start[s] + e) * LANES + r
            lane = np.repeat(np.arange(n_slices * LANES), lane_len)
            first = np.repeat(w.indptr[np.maximum(lane_rows, 0)], lane_len)
            e = np.arange(lane.shape[0]) - np.repeat(np.cumsum(lane_len) - lane_len, lane_len)
            at = (start[lane // LANES] + e) * LANES + lane % LANES
            cols[at] = w.indices[first + e]
            vals[at] = w.values[first + e]
        lane_dest = np.full(n_slices * LANES, -1, np.int64)
        lane_dest[:rows.shape[0]] = dest
        by_slice = lane_dest.reshape(n_slices, LANES)
        contig = ((by_slice >= 0).all(axis=1) & (np.diff(by_slice, axis=1) == 1).all(axis=1)).astype(np.uint8)
        return cls(start.astype(np.int32), cols, vals, lane_dest.astype(np.int32), contig)

    def matvec(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The NumPy reference of qgpu_sell_matvec: y[dest] = each lane's sum in step order from +0 (x has the
        padding's +0 at its end)."""
        for s in range(self.slices):
            acc = np.zeros(LANES, np.float32)
            for k in range(int(self.start[s]), int(self.start[s + 1])):
                w = bf16_to_f32(self.vals[k * LANES:(k + 1) * LANES])
                acc = acc + w * x[self.cols[k * LANES:(k + 1) * LANES]]
            for r in range(LANES):
                if self.dest[s * LANES + r] >= 0:
                    y[self.dest[s * LANES + r]] = acc[r]
        return y


def chunk_rows(w: kernels.ChunkedBF16, ids: np.ndarray) -> tuple:
    """(ptr, cols, values, small) of the rows `ids` of a chunked matrix, each row's chunks as they are (so
    each row's product keeps its bits)."""
    if ids.size == w.shape[0] and np.array_equal(ids, np.arange(w.shape[0])):   # every row: the arrays as they are
        return w.ptr, w.cols, w.values, w.small
    counts = w.ptr[ids + 1] - w.ptr[ids]
    ptr = np.zeros(ids.size + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    take = np.repeat(w.ptr[ids] - ptr[:-1], counts) + np.arange(int(ptr[-1]))
    lanes = (take[:, None] * w.width + np.arange(w.width)).reshape(-1)
    return (ptr, np.ascontiguousarray(w.cols[take]), np.ascontiguousarray(w.values[lanes]),
            None if w.small is None else np.ascontiguousarray(w.small[lanes]))


def nonzero_rows(w: SparseBF16) -> np.ndarray:
    return np.flatnonzero(np.diff(w.indptr) > 0).astype(np.int64)


def used_columns(*ws: SparseBF16) -> np.ndarray:
    """The columns any of the matrices has an entry in, ascending (what a batched product reads)."""
    return np.unique(np.concatenate([w.indices for w in ws] + [np.zeros(0, np.int64)])).astype(np.int64)


def csc(w: SparseBF16) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """w [d, m] by column: (ptr [m + 1], rows, f32 values); each column's entries in row order."""
    rows = np.repeat(np.arange(w.shape[0], dtype=np.int64), np.diff(w.indptr))
    order = np.argsort(w.indices, kind="stable")
    ptr = np.zeros(w.shape[1] + 1, np.int64)
    np.cumsum(np.bincount(w.indices, minlength=w.shape[1]), out=ptr[1:])
    return ptr, rows[order].astype(np.int32), bf16_to_f32(w.values[order])


def csc_active_ref(ptr: np.ndarray, rows: np.ndarray, vals: np.ndarray, act: np.ndarray, d: int) -> np.ndarray:
    """The NumPy reference of qgpu_csc_active."""
    y = np.zeros(d, np.float32)
    for j in np.flatnonzero(act.view(np.uint32) & np.uint32(0x7FFFFFFF)):
        for e in range(int(ptr[j]), int(ptr[j + 1])):
            y[rows[e]] = y[rows[e]] + vals[e] * act[j]
    return y


# ---- C descriptions ------------------------------------------------------------------------------------

def c_bound(t: HeadTables, head: kernels.ChunkedBF16, whole, keep: list):
    """The qgpu_head_bound of factor tables t over the chunked head (whole: its qgpu_head_set)."""
    b = ffi.new("qgpu_head_bound *")
    K = len(t.kinds)
    f = t.factors
    # the rounding of the chunked fp32 sum: at most (terms + a lane tree's adds) roundings of u = 2^-24 each,
    # taken twice over; the double sums' own error is far below
    rel = (t.terms.astype(np.float64) + 16.0) * 2.0 ** -23 + 2.0 ** -40
    vals_at = np.cumsum([0] + [x.values.size for x in f])[:-1]
    cols_at = np.cumsum([0] + [x.cols.size for x in f])[:-1]
    w_at = np.cumsum([0] + [x.weights.size for x in f])[:-1]
    decomposed = np.ones(K, np.int32)
    decomposed[t.exact] = 0
    radix_at = np.cumsum([0] + [len(r) for r in t.radix])[:-1]
    lookup_at = np.cumsum([0] + [x.size for x in t.lookup])[:-1]
    arrays = {
        "cols": ("int32_t[]", t.cols.astype(np.int32)), "base": ("double[]", t.base.ravel()),
        "absmax": ("double[]", t.absmax.ravel()), "rel": ("double[]", rel),
        "f_kind": ("int32_t[]", np.array([x.kind for x in f], np.int32)),
        "f_field": ("int32_t[]", np.array([x.field for x in f], np.int32)),
        "f_bit": ("int32_t[]", np.array([x.bit for x in f], np.int32)),
        "f_n": ("int32_t[]", np.array([x.values.size for x in f], np.int32)),
        "f_m": ("int32_t[]", np.array([x.cols.size for x in f], np.int32)),
        "f_vals": ("int64_t[]", vals_at.astype(np.int64)), "f_cols": ("int64_t[]", cols_at.astype(np.int64)),
        "f_w": ("int64_t[]", w_at.astype(np.int64)),
        "vals": ("int64_t[]", np.concatenate([x.values for x in f] + [np.zeros(1, np.int64)])),
        "fcols": ("int32_t[]", np.concatenate([x.cols for x in f] + [np.zeros(1, np.int64)]).astype(np.int32)),
        "w": ("double[]", np.concatenate([x.weights.ravel() for x in f] + [np.zeros(1)])),
        "k_decomposed": ("int32_t[]", decomposed), "k_nfields": ("int32_t[]", np.array([len(r) for r in t.radix], np.int32)),
        "k_radix_at": ("int64_t[]", radix_at.astype(np.int64)),
        "k_radix": ("int64_t[]", np.array([v for r in t.radix for v in r] + [0], np.int64)),
        "k_lookup": ("int64_t[]", lookup_at.astype(np.int64)),
        "lookup": ("int64_t[]", np.concatenate(t.lookup + [np.zeros(1, np.int64)])),
    }
    for name, (ctype, a) in arrays.items():
        a = np.ascontiguousarray(a)
        buf = ffi.from_buffer(ctype, a)
        keep.extend((a, buf))
        setattr(b, name, buf)
    b.n_cols, b.n_kinds, b.n_factors = t.cols.size, K, len(f)
    b.whole = whole
    set_head_rows(b.exact, head, np.flatnonzero(np.isin([t.kinds.index(k) for k in t.token_kinds], t.exact)), keep)
    return b


def set_head_rows(c, head: kernels.ChunkedBF16, ids: np.ndarray, keep: list) -> None:
    """Describe the rows `ids` (ascending) of a chunked head to C as the qgpu_head_set c."""
    ids = np.ascontiguousarray(ids, np.int64)
    ptr, cols, values, small = chunk_rows(head, ids)
    bufs = [ffi.from_buffer("int64_t[]", ptr), ffi.from_buffer("int32_t[]", cols), ffi.from_buffer("uint16_t[]", values),
            ffi.NULL if small is None else ffi.from_buffer("int8_t[]", small), ffi.from_buffer("int64_t[]", ids)]
    keep.extend((ptr, cols, values, small, ids, bufs))
    c.rows, c.n_in, c.width = ids.size, head.shape[1], head.width
    c.ptr, c.cols, c.w, c.w8, c.ids = bufs


def _set_sell(c, s: Sell, keep: list) -> None:
    bufs = [ffi.from_buffer("int32_t[]", s.start), ffi.from_buffer("uint16_t[]", s.cols),
            ffi.from_buffer("uint16_t[]", s.vals), ffi.from_buffer("int32_t[]", s.dest),
            ffi.from_buffer("uint8_t[]", np.append(s.contig, np.uint8(0)))]
    c.slices = s.slices
    c.start, c.cols, c.vals, c.dest, c.contig = bufs
    keep.extend((s, *bufs))


def _ints(a, keep: list):
    buf = ffi.from_buffer("int32_t[]", np.ascontiguousarray(a, np.int32))
    keep.append(buf)
    return buf


def _mlp_layer(step: kernels.SparseMlpStep, keep: list):
    mlp = step.mlp
    L = ffi.new("qgpu_cmlp *")
    L.d, L.m, L.w, L.eps, L.bf16 = step.d, step.m, step.layer.w, step.eps, step.bf16
    _set_sell(L.gate, Sell.of(mlp.gate, np.arange(step.m)), keep)
    _set_sell(L.up, Sell.of(mlp.up, np.arange(step.m)), keep)
    ptr, rows, vals = csc(mlp.down)
    keep.extend((ptr, rows, vals))
    L.down_ptr, L.down_rows, L.down_vals = (ffi.from_buffer("int64_t[]", ptr), ffi.from_buffer("int32_t[]", rows),
                                            ffi.from_buffer("float[]", vals))
    keep.extend((L.down_ptr, L.down_rows, L.down_vals))
    u_cols = used_columns(mlp.gate, mlp.up)
    L.n_u_cols, L.u_cols = u_cols.size, _ints(u_cols, keep)
    return L


def _gdn_layer(step: kernels.GdnStep, w: dict, keep: list):
    src = step.layer
    L = ffi.new("qgpu_cgdn *")
    for name in ("d", "nk", "dk", "nv", "dv", "k", "in_norm", "eps", "bf16", "conv_w", "a_log", "dt_bias", "q_div",
                 "norm_w"):
        setattr(L, name, getattr(src, name))
    dk, dv, nk = step.dk, step.dv, step.nk
    active = nonzero_rows(w["qkv"])
    read = np.unique(w["out"].indices // dv).astype(np.int64)
    z_rows = nonzero_rows(w["z"])
    z_rows = z_rows[np.isin(z_rows // dv, read)]
    qk = np.unique(active[active < 2 * nk * dk] // dk)
    out_rows = nonzero_rows(w["out"])
    for name, rows, m in (("qkv", active, w["qkv"]), ("z", z_rows, w["z"]), ("b", nonzero_rows(w["b"]), w["b"]),
                          ("a", nonzero_rows(w["a"]), w["a"]), ("out", out_rows, w["out"])):
        _set_sell(getattr(L, name), Sell.of(m, rows), keep)
    breaks = np.flatnonzero(np.diff(active) != 1) + 1
    runs = np.stack([active[np.r_[0, breaks]], active[np.r_[breaks - 1, active.size - 1]] + 1], 1) if active.size \
        else np.zeros((0, 2), np.int64)
    for count, name, idx in (("n_active", "active", active), ("n_runs", "runs", runs.reshape(-1)),
                             ("n_qk_heads", "qk_heads", qk), ("n_read", "read_heads", read),
                             ("n_out_rows", "out_rows", out_rows)):
        setattr(L, count, len(idx) // (2 if name == "runs" else 1))
        setattr(L, name, _ints(idx, keep))
    u_cols, t_cols = used_columns(w["qkv"], w["z"], w["b"], w["a"]), used_columns(w["out"])
    L.n_u_cols, L.u_cols, L.n_t_cols, L.t_cols = u_cols.size, _ints(u_cols, keep), t_cols.size, _ints(t_cols, keep)
    return L


class StepEngine:
    """See the module docstring. One engine per Model (mode); calls on different states may run at once on
    several threads (each takes a workspace from the pool)."""

    def __init__(self, model: Model) -> None:
        why = self.unsupported(model)
        if why:
            raise EngineError(f"the step engine does not apply: {why}")
        self.model = model
        cfg, weights = model.config, model.weights
        n = self.n = len(cfg.layer_types)
        self.d = cfg.hidden_size
        self._keep: list = []
        self._gdn = [_gdn_layer(model._gdn_steps[i], weights.layers[i], self._keep) for i in range(n)]
        self._mlp = [_mlp_layer(model._mlp_steps[i], self._keep) for i in range(n)]
        self._keep.extend((model._gdn_steps, model._mlp_steps))   # their buffers back the layer structs
        self._silent = np.asarray([i in model.silent_mixers for i in range(n)], np.int32)
        self._pool: list = []           # free workspaces: one per call in flight (launches on several threads)
        self._final = kernels.check_activation("StepEngine", "final_norm", weights.final_norm, (self.d,))
        self._embed = weights.embed
        if not (isinstance(self._embed, np.ndarray) and self._embed.dtype == np.uint16
                and self._embed.flags.c_contiguous):
            raise EngineError("the step engine needs the embedding as contiguous bf16 bits")
        self._lock = threading.Lock()    # guards the pool only: calls on different states run concurrently

    @staticmethod
    def unsupported(model: Model) -> str | None:
        """Why the engine cannot run this model (None: it can)."""
        cfg = model.config
        if model.device != "cpu":
            return f"device {model.device}"
        if any(kind != "linear_attention" for kind in cfg.layer_types):
            return "a layer is not a DeltaNet layer"
        if model._decode_layers is None:
            return "a layer is not all CSR"
        if model.weights.head_q8 is not None or model.chunked_head() is None:
            return "the LM head is not chunk-sparse bf16"
        if model.text_skip is not None:
            return "the model skips layers on text"
        return None

    def workspace(self) -> list[np.ndarray]:
        """Per-layer workspaces: each mixer's own (it keeps its idle channels' constants), and one MLP
        workspace that every layer's MLP shares (an MLP step writes all of it before reading it)."""
        mlp = np.zeros(max(int(lib.qgpu_cmlp_ws(m)) for m in self._mlp) + 1, np.float32)
        ws = []
        for g in self._gdn:
            a = np.zeros(int(lib.qgpu_cgdn_ws(g)) + 1, np.float32)     # zeroed, as qgpu_cgdn_ws_init takes it
            if not lib.qgpu_cgdn_ws_init(g, ffi.from_buffer("float[]", a)):
                raise MemoryError("step engine: workspace")
            ws.extend((a, mlp))
        return ws

    # ---- the protocol's token sets ----------------------------------------------------------------------

    def rules(self, sets: list[np.ndarray], next_set: np.ndarray, tokens: list[tuple] | None = None,
              tables: HeadTables | None = None) -> "Rules":
        """The head's token sets (ascending ids each) and, for every token id, the set read after it
        (-1: a stop token, never fed). With `tokens` (the vocabulary as tuples, model/head_bound.py) set 0
        must be the whole vocabulary, and its argmax comes from the head's factor tables: `tables` when
        given (factor_tables of this head and these tokens, made before), else derived here."""
        return Rules(self, sets, next_set, tokens, tables)

    # ---- running ------------------------------------------------------------------------------------------

    def bind(self, state: State):
        """The C view of a state's arrays (kept on the state while its arrays stay the same)."""
        arrays = (*state.conv.values(), *state.recurrent.values(), *state.clean.values())
        b = state.engine_binding
        if b is not None and b.engine is self and len(b.arrays) == len(arrays) \
                and all(x is y for x, y in zip(b.arrays, arrays)):
            return b.bound
        n = self.n
        conv = [state.conv[i] for i in range(n)]
        S = [state.recurrent[i] for i in range(n)]
        clean = [self.model._clean_flags(state, i) for i in range(n)]
        for i in range(n):
            self.model._gdn_steps[i].check_state(conv[i], S[i], clean[i])
            if not lib.qgpu_cgdn_state_ok(self._gdn[i], ffi.from_buffer("float[]", conv[i])):
                raise EngineError(f"layer {i}'s conv state is not +0 on a channel no projection writes")
        zero = np.zeros(n, np.int32)
        c = ffi.new("qgpu_circuit_state *")
        keep = [ffi.new("float *[]", [ffi.from_buffer("float[]", a) for a in conv]),
                ffi.new("float *[]", [ffi.from_buffer("float[]", a) for a in S]),
                ffi.new("int32_t *[]", [ffi.from_buffer("int32_t[]", a) for a in clean]),
                ffi.from_buffer("int32_t[]", zero)]
        c.conv, c.S, c.clean, c.zero = keep
        bound = (c, zero, keep)
        state.engine_binding = kernels.DecodeBinding(
            (*state.conv.values(), *state.recurrent.values(), *state.clean.values()), None, None, None)
        state.engine_binding.engine, state.engine_binding.bound = self, bound
        return bound

    def _circuit(self, rules: "Rules | None"):
        """The qgpu_circuit of this engine (and rules), built once and kept on the engine or the rules (read-only
        in C, so calls on several threads share it)."""
        holder = self if rules is None else rules
        built = getattr(holder, "_c_circuit", None)
        if built is None:
            built = holder._c_circuit = self._new_circuit(rules)
        return built

    def _new_circuit(self, rules: "Rules | None"):
        c = ffi.new("qgpu_circuit *")
        c.n, c.d = self.n, self.d
        keep = [ffi.new("qgpu_cgdn *[]", self._gdn), ffi.new("qgpu_cmlp *[]", self._mlp),
                ffi.from_buffer("int32_t[]", self._silent), ffi.from_buffer("uint16_t[]", self._embed),
                ffi.from_buffer("float[]", self._final)]
        c.gdn, c.mlp, c.silent, c.embed, c.final_norm = keep
        c.eps, c.bf16 = float(self.model.config.rms_norm_eps), int(self.model.bf16)
        if rules is not None:
            c.n_sets, c.sets, c.next_set = len(rules.sets), rules.c_sets, rules.c_next
            c.bound = rules.bound if rules.bound is not None else ffi.NULL
        return c, keep

    @contextmanager
    def _workspaces(self, lanes: int):
        """`lanes` workspaces of the pool (made when it has too few), as (arrays, pointer array) pairs; they go
        back to the pool afterwards. Calls on several threads each take their own."""
        with self._lock:
            taken = [self._pool.pop() for _ in range(min(lanes, len(self._pool)))]
        try:
            while len(taken) < lanes:
                arrays = self.workspace()
                taken.append((arrays, ffi.new("float *[]", [ffi.from_buffer("float[]", a) for a in arrays])))
            yield taken
        finally:
            with self._lock:
                self._pool.extend(taken)

    @contextmanager
    def _bound(self, state: State):
        """The state's C view (bind) for one call, its zero set handed in and the layers the call wrote
        taken out of it afterwards. One state is used by one thread at a time."""
        c, zero, _ = self.bind(state)
        zero[:] = [i in state.zero for i in range(self.n)]
        try:
            yield c
        finally:
            state.zero.difference_update(np.flatnonzero(zero == 0).tolist())

    def _run(self, state: State, fn, lanes: int = 1) -> object:
        """fn(circuit state, workspace pointers) with `lanes` workspaces (one: its pointer array; several: an
        array of theirs, for the batched calls). Different states may run at once on several threads."""
        with self._workspaces(lanes) as taken, self._bound(state) as c:
            return fn(c, taken[0][1] if lanes == 1 else ffi.new("float **[]", [w[1] for w in taken]))

    def prefill(self, state: State, token_ids, lanes: int = BATCH) -> np.ndarray:
        """Feed the tokens through every layer (no head); returns the final-normed hidden of the last, f32 [d].
        Up to `lanes` (<= BATCH) tokens go through each layer together (qgpu_circuit_prefill_batch: the same
        bits as one token a call, lanes=1)."""
        if not 1 <= lanes <= BATCH:
            raise EngineError(f"prefill takes 1 to {BATCH} tokens a call, not {lanes}")
        ids = np.ascontiguousarray(self.model._check_ids(token_ids), np.int64)
        circuit, keep = self._circuit(None)
        lanes = min(lanes, ids.size)
        if lanes <= 1:
            scratch = np.empty(3 * self.d, np.float32)
            self._run(state, lambda c, ws: lib.qgpu_circuit_prefill(
                circuit, c, ffi.from_buffer("int64_t[]", ids), ids.size, ws, ffi.from_buffer("float[]", scratch)))
            x = scratch[2 * self.d:]
        else:
            scratch = np.empty((2 * lanes + 1) * self.d + int(lib.qgpu_circuit_xt(circuit)), np.float32)
            self._run(state, lambda c, ws: lib.qgpu_circuit_prefill_batch(
                circuit, c, ffi.from_buffer("int64_t[]", ids), ids.size, ws, lanes,
                ffi.from_buffer("float[]", scratch)), lanes)
            x = scratch[2 * lanes * self.d:(2 * lanes + 1) * self.d]
        state.pos += int(ids.shape[0])
        return x.copy()

    def first(self, state: State, token_ids, rules: "Rules") -> int:
        """Prefill the tokens; the argmax of the head over the set rules name after the last of them."""
        x = self.prefill(state, token_ids)
        ids = np.asarray(token_ids)
        return self.argmax(x, rules, int(rules.next_set[int(ids[-1])]))

    def argmax(self, x: np.ndarray, rules: "Rules", set_index: int) -> int:
        """The token of set `set_index` whose logit for the final-normed hidden x is the largest (the first
        such, as np.argmax), each logit its full-head bits."""
        return self.argmax_proved(x, rules, set_index)[0]

    def argmax_proved(self, x: np.ndarray, rules: "Rules", set_index: int) -> tuple[int, bool]:
        """argmax, and whether the head's factor tables decided it (else every logit of the set was computed)."""
        if set_index < 0:
            raise EngineError("no token may follow a stop token")
        x = kernels.check_activation("StepEngine", "x", x, (self.d,))
        logits = np.empty(rules.max_rows, np.float32)
        if rules.bound is not None and set_index == 0:
            work, proved = np.empty(rules.work, np.float64), ffi.new("int *")
            best = lib.qgpu_head_bound_argmax(rules.bound, ffi.from_buffer("float[]", x), int(self.model.bf16),
                                              ffi.from_buffer("double[]", work), ffi.from_buffer("float[]", logits),
                                              proved)
        else:
            best = lib.qgpu_head_argmax(rules.c_sets + set_index, ffi.from_buffer("float[]", x), int(self.model.bf16),
                                        ffi.from_buffer("float[]", logits))
            proved = None
        if best < 0:   # a non-finite hidden: the dense product's logits, as the head gives them
            ids = rules.sets[set_index]
            return int(ids[int(np.argmax(self.model._apply_head(self.model._head(ids), x)))]), False
        return int(best), bool(proved is not None and proved[0])

    def _dense_next(self, state: State, x: np.ndarray, rules: "Rules", prev: int) -> int:
        """After a step whose final hidden x was not finite (its layers ran: the state has the token), the
        argmax as the head gives it there: the dense product's (argmax)."""
        state.pos += 1
        return self.argmax(x.copy(), rules, int(rules.next_set[prev]))

    def decode(self, state: State, token: int, rules: "Rules", max_tokens: int) -> list[int]:
        """Feed `token`, then each argmax of the head over the set rules name after the token just fed,
        until a stop token or max_tokens generated tokens; returns the generated ids (the last one not fed,
        as Model's decode loop does not feed HALT)."""
        self.model._check_ids([token])
        circuit, keep = self._circuit(rules)
        out = np.empty(max(1, min(max_tokens, DECODE_CHUNK)), np.int64)
        scratch = np.empty(3 * self.d + rules.max_rows + 2 + 2 * rules.work, np.float32)
        generated: list[int] = []
        while len(generated) < max_tokens:
            want = min(max_tokens - len(generated), DECODE_CHUNK)
            n = self._run(state, lambda c, ws: lib.qgpu_circuit_decode(
                circuit, c, token, ws, ffi.from_buffer("float[]", scratch), ffi.from_buffer("int64_t[]", out), want))
            fed = n if n >= 0 else -n - 1     # tokens generated; as many were fed (the first one `token`)
            generated.extend(out[:fed].tolist())
            state.pos += fed
            if n >= 0:
                if n < want or rules.next_set[generated[-1]] < 0:
                    break                     # a stop token
                token = generated[-1]         # the chunk is full: go on from its last token
                continue
            generated.append(self._dense_next(state, scratch[2 * self.d:3 * self.d], rules,
                                              generated[-1] if generated else token))
            token = generated[-1]
            if rules.next_set[token] < 0:
                break
        return generated

    def decode_many(self, states: list[State], tokens: list[int], rules: "Rules",
                    max_tokens: list[int]) -> list[list[int]]:
        """decode for several states at once, in lockstep: each step takes the sequences still going through
        the layers together (qgpu_circuit_decode_batch; the products read each weight once for all of them).
        Sequence j's ids are exactly decode(states[j], tokens[j], rules, max_tokens[j])'s. The states must be
        distinct objects."""
        if len({id(s) for s in states}) != len(states) or not len(tokens) == len(max_tokens) == len(states):
            raise EngineError("decode_many takes distinct states, one token and one limit each")
        self.model._check_ids(list(tokens))
        generated: list[list[int]] = [[] for _ in states]
        going = [j for j in range(len(states)) if max_tokens[j] > 0]
        circuit, keep = self._circuit(rules)
        scratch = np.empty(int(lib.qgpu_circuit_decode_batch_scratch(circuit)) + 2, np.float32)
        while going:
            group = going[:BATCH]
            want = [min(max_tokens[j] - len(generated[j]), DECODE_CHUNK) for j in group]
            outs = [np.empty(max(1, w), np.int64) for w in want]
            count = np.zeros(len(group), np.int64)
            first = [generated[j][-1] if generated[j] else tokens[j] for j in group]
            with ExitStack() as held:
                bound = [held.enter_context(self._bound(states[j])) for j in group]
                taken = held.enter_context(self._workspaces(len(group)))
                lib.qgpu_circuit_decode_batch(
                    circuit, ffi.new("qgpu_circuit_state *[]", bound), len(group), ffi.new("int64_t[]", first),
                    ffi.new("float **[]", [w[1] for w in taken]), ffi.from_buffer("float[]", scratch),
                    ffi.new("int64_t *[]", [ffi.from_buffer("int64_t[]", o) for o in outs]),
                    ffi.new("int64_t[]", want), ffi.from_buffer("int64_t[]", count))
            later = []
            for k, j in enumerate(group):
                n = int(count[k])
                fed = n if n >= 0 else -n - 1
                generated[j].extend(outs[k][:fed].tolist())
                states[j].pos += fed
                if n < 0:
                    generated[j].append(self._dense_next(states[j], scratch[(2 * BATCH + k) * self.d:
                                                                            (2 * BATCH + k + 1) * self.d], rules,
                                                         generated[j][-1] if generated[j] else first[k]))
                last = generated[j][-1] if generated[j] else None
                if last is not None and rules.next_set[last] >= 0 and len(generated[j]) < max_tokens[j]:
                    later.append(j)
            going = later + going[BATCH:]
        return generated


class Rules:
    """The head's token sets for one engine, in C form (see StepEngine.rules)."""

    def __init__(self, engine: StepEngine, sets: list[np.ndarray], next_set: np.ndarray,
                 tokens: list[tuple] | None = None, tables: HeadTables | None = None) -> None:
        V = engine._embed.shape[0]
        self.engine = engine
        next_set = np.ascontiguousarray(next_set, np.int32)
        if next_set.shape != (V,) or next_set.max(initial=-1) >= len(sets):
            raise EngineError(f"next_set must name one of {len(sets)} sets for each of {V} tokens")
        self.sets = [np.ascontiguousarray(s, np.int64) for s in sets]
        for s in self.sets:
            if s.ndim != 1 or not s.size or (np.diff(s) <= 0).any() or s[0] < 0 or s[-1] >= V:
                raise EngineError("each token set must be non-empty ascending ids in the vocabulary")
        self.next_set = next_set
        self.max_rows = max(s.size for s in self.sets)
        head = engine.model.chunked_head()
        self._keep = [next_set]
        self.c_sets = ffi.new("qgpu_head_set[]", len(self.sets))
        for c, ids in zip(self.c_sets, self.sets):
            set_head_rows(c, head, ids, self._keep)
        self.c_next = ffi.from_buffer("int32_t[]", next_set)
        self.bound = None
        if tokens is not None:
            if len(tokens) != V or not np.array_equal(self.sets[0], np.arange(V)):
                raise EngineError("a bounded head needs set 0 to be the whole vocabulary, one tuple per token")
            self.tables = factor_tables(engine.model.weights.lm_head, tokens) if tables is None else tables
            self.bound = c_bound(self.tables, head, self.c_sets[0], self._keep)
            self.max_rows = max(self.max_rows, V)

    @property
    def work(self) -> int:
        """Doubles of the bounded argmax's workspace (qgpu_head_bound_work)."""
        return int(lib.qgpu_head_bound_work(self.bound)) if self.bound is not None else 0

"""The GPU compiled into Qwen3.5 layers (the circuit-only model) and a launch run through it.

The model's own forward pass (qgpu_min.model.forward) runs every token; the next token is the argmax of
its logits over the GPU vocabulary (the tied embedding). The host feeds back exactly that token and
stops at HALT or FAULT; the launch's words are then decoded from the data memory's rows in the DeltaNet
state (circuit.run.read_rows). Nothing here computes a result.
"""
from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from .._core import ffi, lib
from ..circuit.compile import BaseShape, Plan, check_exact_weights, emit, plan
from ..circuit.ir import MemOp
from ..circuit.margin import static_check
from ..circuit.run import Readout, circuit_model, embedding_rows, read_rows, readout, row_words
from ..model import kernels
from ..model.forward import Model, State
from ..model.head_bound import factor_tables, tables_arrays, tables_from_arrays
from ..model.kernels_ref import ChunkedBF16
from ..model.step_engine import Rules, StepEngine
from . import kept_state
from .core import GpuCircuit, build
from .layout import GpuSpec
from .program import GpuLaunchError
from .vocab import Token, Vocab, all_tokens, token_name

if TYPE_CHECKING:
    from .merged import MergedGpu


@dataclass
class EmbedCsr:
    """The embedding rows as the cache stores them (CSR, f32 values): made dense only when asked for, and their
    bf16 bits (what the runtime model reads) made straight from them when every value is a bf16 value."""
    shape: tuple[int, int]
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray

    def dense(self) -> np.ndarray:
        out = np.zeros(self.shape, np.float32)
        out[np.repeat(np.arange(self.shape[0]), np.diff(self.indptr)), self.indices] = self.values
        return out

    def bits(self) -> np.ndarray | None:
        """bf16 bits [V, hidden], or None when a value is not exactly a bf16 value (then round the dense rows).
        Scattered by the C core (qgpu_csr_bf16_bits; bits_ref is its NumPy reference)."""
        v = np.ascontiguousarray(self.values, np.float32)
        if np.any(v.view(np.uint32) & np.uint32(0xFFFF)) or np.any(~np.isfinite(v)):
            return None
        indptr = np.ascontiguousarray(self.indptr, np.int64)
        indices = np.ascontiguousarray(self.indices, np.int32)
        if indptr.shape != (self.shape[0] + 1,) or indptr[0] != 0 or np.any(np.diff(indptr) < 0) \
                or indptr[-1] != v.size or indices.shape != v.shape \
                or (v.size and (indices.min() < 0 or indices.max() >= self.shape[1])):
            raise ValueError(f"EmbedCsr: the CSR arrays do not fit the shape {self.shape}")
        out = np.zeros(self.shape, np.uint16)
        lib.qgpu_csr_bf16_bits(self.shape[0], self.shape[1], ffi.from_buffer("int64_t[]", indptr),
                               ffi.from_buffer("int32_t[]", indices), ffi.from_buffer("float[]", v),
                               ffi.from_buffer("uint16_t[]", out))
        return out

    def bits_ref(self) -> np.ndarray | None:
        """The NumPy reference of bits."""
        v = np.ascontiguousarray(self.values, np.float32)
        b = v.view(np.uint32)
        if np.any(b & np.uint32(0xFFFF)) or np.any(~np.isfinite(v)):
            return None
        out = np.zeros(self.shape, np.uint16)
        out[np.repeat(np.arange(self.shape[0]), np.diff(self.indptr)), self.indices] = (b >> 16).astype(np.uint16)
        return out


@dataclass
class CompiledGpu:
    """The circuit-only GPU: its emitted layers and embedding, and the data memory's readout (all a launch
    needs). The circuit, its plan and the vocabulary's input fields are built on first use only (--check,
    reports): a warm start from the cache (gpu/cache.py) skips them, and keeps the embedding in the cache's
    sparse form until its dense rows are asked for (`embed`)."""
    spec: GpuSpec
    shape: BaseShape
    layers: list
    embed_source: np.ndarray | EmbedCsr   # f32 [V, hidden], one row per token of the vocabulary, or its CSR
    data: Readout              # where the data memory's rows are in the state
    built: tuple | None = None                    # (GpuCircuit, Plan) when already at hand
    models: dict = field(default_factory=dict)   # mode -> Model
    loaded: OrderedDict = field(default_factory=OrderedDict)   # programs loaded before (load_state)
    engines: dict = field(default_factory=dict)  # mode -> StepEngine (of models[mode])
    rules: dict = field(default_factory=dict)    # mode -> the engine's Rules (the whole vocabulary, bounded)
    # derived(name, make) -> arrays: what is derived from the embedding at first use (the chunked head, the
    # head's factor tables), kept by the cache beside its entry (gpu/cache.DerivedStore); None: made every time
    derived: Callable[[str, Callable[[], dict]], dict] | None = None

    @property
    def store(self) -> Callable[[str, Callable[[], dict]], dict] | None:
        """`derived` while it describes this object's embedding (a copy given other rows must not take what
        was derived from the cache's), else None."""
        d = self.derived
        return d if d is not None and getattr(d, "source", None) is self.embed_source else None

    @property
    def embed(self) -> np.ndarray:
        """The embedding rows, f32 [V, hidden]."""
        if isinstance(self.embed_source, EmbedCsr):
            self.embed_source = self.embed_source.dense()
        return self.embed_source

    def model(self, mode: str = "fp32") -> Model:
        if mode not in self.models:
            src = self.embed_source
            bits = src.bits() if isinstance(src, EmbedCsr) else None
            model = circuit_model(self.layers, self.shape, self.embed if bits is None else None, mode, bits,
                                  head_now=self.store is None)
            if self.store is not None:        # the chunked head (the same in every mode) kept beside the entry
                width = kernels.chunk_width()
                arrays = self.store(f"head.w{width}", lambda: _head_arrays(model))
                if arrays:
                    model.use_chunked_head(ChunkedBF16.from_arrays(arrays, model.weights.lm_head))
            self.models[mode] = model
        return self.models[mode]

    def engine(self, mode: str = "fp32") -> StepEngine:
        """The model's step engine (the decode loop in C; model/step_engine.py), rebuilt if the model is
        another (a copy of this object with its own models)."""
        model = self.model(mode)
        if mode not in self.engines or self.engines[mode].model is not model:
            self.engines[mode] = StepEngine(model)
        return self.engines[mode]

    def launch_rules(self, mode: str) -> Rules:
        """The engine's head for launches: the argmax over the whole vocabulary, from the head's factor tables
        where they prove it (model/head_bound.py); a launch ends after HALT or FAULT."""
        engine = self.engine(mode)
        if mode not in self.rules or self.rules[mode].engine is not engine:
            stop = np.array([t[0] in ("halt", "fault") for t in self.tokens])
            tables = None
            if self.store is not None:        # the head's factor tables (every mode's), kept beside the entry
                head = engine.model.weights.lm_head
                tables = tables_from_arrays(self.store("head_tables", lambda: tables_arrays(
                    factor_tables(head, self.tokens))))
            self.rules[mode] = engine.rules([np.arange(len(self.tokens))], np.where(stop, -1, 0), self.tokens,
                                            tables)
        return self.rules[mode]

    @cached_property
    def tokens(self) -> list[Token]:
        return all_tokens(self.spec)

    @cached_property
    def ids(self) -> dict[Token, int]:
        return {t: i for i, t in enumerate(self.tokens)}

    def _built(self) -> tuple[GpuCircuit, Plan]:
        if self.built is None:
            gc = build(self.spec)
            self.built = (gc, plan(gc.circuit, self.shape))
        return self.built

    @property
    def gc(self) -> GpuCircuit:
        return self._built()[0]

    @property
    def plan(self) -> Plan:
        return self._built()[1]

    @cached_property
    def vocab(self) -> Vocab:
        return Vocab(self.gc)

    @property
    def data_op(self) -> MemOp:
        return data_memory_op(self.gc, self.plan)

    def token_id(self, t: Token) -> int:
        try:
            return self.ids[t]
        except KeyError:
            raise ValueError(f"no GPU token {t!r}") from None

    def token_at(self, i: int) -> Token | None:
        return self.tokens[i]


def _head_arrays(model: Model) -> dict:
    """The model's chunked head as arrays ({} when its head is not chunk-sparse)."""
    head = model.chunked_head()
    return {} if head is None else head.arrays()


def compile_gpu(spec: GpuSpec = GpuSpec(), shape: BaseShape = BaseShape()) -> CompiledGpu:
    """Build, plan, check and emit the GPU; the embedding rows of its whole vocabulary."""
    gc = build(spec)
    vocab = Vocab(gc)
    p = plan(gc.circuit, shape)
    report = static_check(p)
    if not report.ok:
        raise GpuLaunchError(f"the GPU circuit fails its static check: {report.problems[:3]}")
    layers = emit(p, gc.out_code)
    check_exact_weights(layers)
    return compiled_from(gc, p, layers, embedding_rows(p, vocab.table))


def data_memory_op(gc: GpuCircuit, p: Plan) -> MemOp:
    """The memory op of the GPU's data memory in plan p (where launches' words live)."""
    return next(op for op in p.ops if isinstance(op, MemOp) and op.mem is gc.data_memory)


def compiled_from(gc: GpuCircuit, p: Plan, layers: list, embed: np.ndarray) -> CompiledGpu:
    """A CompiledGpu of emitted layers, with the circuit and plan they came from."""
    return CompiledGpu(gc.spec, p.shape, layers, embed, readout(p, data_memory_op(gc, p)), (gc, p))


def current_cta(generated: list[Token]) -> tuple[int, int]:
    """The CTA (x, y) the model was running at the end of `generated`: the last cta token's (else the first)."""
    return next((t[1:3] for t in reversed(generated) if t[0] == "cta"), (0, 0))


class TooManyTokens(GpuLaunchError):
    """The model kept generating past the token limit; block, lane and warp of its last EXEC, and its CTA."""

    def __init__(self, message: str, block: int, lane: int, warp: int, cta: tuple[int, int] = (0, 0)) -> None:
        super().__init__(message)
        self.block, self.lane, self.warp, self.cta = block, lane, warp, cta


@dataclass
class ModelRun:
    prompt: list[Token]
    generated: list[Token]
    memory: list[int]          # the data memory's words, decoded from the state
    reused: int = 0            # prompt tokens not fed: a state saved after them was taken up (load_state)


LOADED_KEPT = 4    # programs whose loaded state a compiled GPU keeps (as its nonzero words: ~1 MB each)
_LOADED_LOCK = threading.Lock()


def load_state(cg: CompiledGpu | MergedGpu, model: Model, mode: str, load: list[int], feed=None):
    """A new sequence that has been fed `load` (a program's load part: program.prompt_parts). The model's
    state after it is kept (the last LOADED_KEPT programs per GPU) and a copy of it is taken up when the same
    ids come again: the sequence goes on from exactly the state feeding them would give, so the launch that
    follows is the same launch, token for token (tests). Returns (state, tokens taken up from a kept state)."""
    key = (mode, tuple(load))
    with _LOADED_LOCK:       # launches on several threads share the kept states
        kept = cg.loaded.get(key)
        if kept is not None:
            cg.loaded.move_to_end(key)
    if kept is not None:
        return _take_up(model, kept), len(load)
    state, reused, arrays = _from_disk(cg, model, mode, load, feed)
    if state is None:
        state = model.new_state()
        (feed or model.prefill)(state, load)
    if arrays is None:
        arrays = kept_state.state_arrays(state) if kept_state.keepable(state) else copy.deepcopy(state)
    with _LOADED_LOCK:
        cg.loaded[key] = arrays
        while len(cg.loaded) > LOADED_KEPT:
            cg.loaded.popitem(last=False)
    return state, reused


def _take_up(model: Model, kept) -> State:
    """A new state equal to a kept one: kept as its nonzero words (kept_state.state_arrays: ~1% of a loaded
    state's tens of MB), or, for a state with attention caches, as a whole copy."""
    return kept_state.state_from_arrays(model, kept) if isinstance(kept, dict) else copy.deepcopy(kept)


def _from_disk(cg: CompiledGpu | MergedGpu, model: Model, mode: str, load: list[int],
               feed) -> tuple[State | None, int, dict | None]:
    """(state, tokens not fed, its kept_state arrays): the loaded state from the file beside the cache entry
    (gpu/kept_state.py), or fed now and written there; (None, 0, None) where cg has no cache entry or the
    state cannot be kept."""
    store = getattr(cg, "store", None)
    if store is None or not kept_state.enabled():
        return None, 0, None
    fed: list[State] = []

    def make() -> dict:
        state = model.new_state()
        (feed or model.prefill)(state, load)
        fed.append(state)
        return kept_state.state_arrays(state) if kept_state.keepable(state) else {}
    arrays = store(kept_state.name(mode, load), make)
    if fed:
        if hasattr(store, "prune"):          # the cache's store: keep the newest load states only
            store.prune(kept_state.PREFIX, kept_state.KEPT_FILES)
        return fed[0], 0, arrays or None
    try:
        return (kept_state.state_from_arrays(model, arrays), len(load), arrays) if arrays else (None, 0, None)
    except (ValueError, KeyError, IndexError):
        return None, 0, None


def _on_engine(cg: CompiledGpu | MergedGpu, mode: str) -> bool:
    """Whether launches on cg run on the step engine: the circuit-only model, where the engine applies."""
    return isinstance(cg, CompiledGpu) and StepEngine.unsupported(cg.model(mode)) is None


def run_launch(cg: CompiledGpu | MergedGpu, prompt: list[Token], mode: str = "fp32", max_generated: int = 100000,
               on_token=None, load_len: int = 0, full_vocab: bool = False) -> ModelRun:
    """Prefill the prompt, then decode: each step feeds back the argmax token. on_token(i, token, state) is
    called for every generated token as it is chosen (the state is after the tokens before it). load_len: the
    prompt's first tokens are a program's load part (program.prompt_parts), whose state is kept and taken up
    again. In a merged checkpoint a launch is a sequence of GPU tokens, so the argmax is over the GPU's rows
    of the LM head (a ninth of Qwen's vocabulary: the head's cost drops by as much) unless `full_vocab`,
    where it is over the whole vocabulary and a text token that wins is an error (--check asks for this);
    the circuit-only model has only GPU tokens, and runs on its step engine (run_engine) wherever that applies
    (StepEngine.unsupported: e.g. a head whose rows are not chunk-sparse at this SIMD level's chunk width
    runs token by token here)."""
    if _on_engine(cg, mode):
        return run_engine(cg, prompt, mode, max_generated, on_token, load_len, full_vocab)
    model = cg.model(mode)
    subset = None if full_vocab else getattr(cg, "launch_ids", None)
    state, reused, logits = _start(cg, model, mode, prompt, load_len, subset)
    generated: list[Token] = []
    while True:
        _take(cg, logits, subset, generated)
        if on_token is not None:   # before the protocol's checks: --check names a wrong token more precisely
            on_token(len(generated) - 1, generated[-1], state)
        if not _goes_on(generated, max_generated):
            break
        logits = model.decode(state, cg.token_id(generated[-1]), token_subset=subset)
    return _result(cg, prompt, generated, state, reused)


def run_engine(cg: CompiledGpu, prompt: list[Token], mode: str = "fp32", max_generated: int = 100000,
               on_token=None, load_len: int = 0, full_vocab: bool = False) -> ModelRun:
    """run_launch on the step engine: the prompt and the whole decode loop in C, each argmax over the whole
    vocabulary (full_vocab changes nothing here: that is always so). The same tokens and state as
    Model.decode's loop, bit for bit (tests/test_step_engine.py). With on_token the loop goes one token per
    call, so the callback sees the state after each; where on_token has next_state_read(i) (the next token
    whose call reads the state, None: none does), it gets None for the state before that token, and the
    tokens up to it are decoded in one call."""
    engine, rules = cg.engine(mode), cg.launch_rules(mode)
    state, reused, generated = _engine_start(cg, mode, prompt, load_len)
    next_read = getattr(on_token, "next_state_read", lambda i: i)
    seen = 0                                       # tokens handed to on_token so far
    while True:
        if on_token is not None:
            for i in range(seen, len(generated)):  # the state is after tokens 0..len-2: only the last may read it
                on_token(i, generated[i], state if i == len(generated) - 1 else None)
            seen = len(generated)
        if not _goes_on(generated, max_generated):
            break
        want = max_generated - len(generated)
        j = next_read(len(generated)) if on_token is not None else None
        if j is not None:                          # up to the next token whose call reads the state
            want = min(want, max(1, j - len(generated) + 1))
        generated += [cg.token_at(i) for i in engine.decode(state, cg.token_id(generated[-1]), rules, want)]
        if on_token is None and not _goes_on(generated, max_generated):
            break
    return _result(cg, prompt, generated, state, reused)


def run_launches(cg: CompiledGpu | MergedGpu, prompts: list[list[Token]], mode: str = "fp32",
                 max_generated: int = 100000, load_lens: list[int] | None = None) -> list[ModelRun]:
    """Several independent launches: on the circuit-only model on the step engine, in one group per thread of
    the core (kernels.threads()), each group decoded in lockstep (_engine_batch); through a merged checkpoint
    decoded together, every step feeding each unfinished launch's token through one
    Model.decode_batch (one pass over the weights for the whole batch). Launch j's tokens and memory are
    exactly run_launch's for prompts[j] alone (the engine's steps and decode_batch's rows are decode's, bit
    for bit)."""
    if _on_engine(cg, mode):
        return _engine_batch(cg, prompts, mode, max_generated, load_lens or [0] * len(prompts))
    model = cg.model(mode)
    subset = getattr(cg, "launch_ids", None)
    load_lens = load_lens or [0] * len(prompts)
    starts = [_start(cg, model, mode, p, n, subset) for p, n in zip(prompts, load_lens)]
    states = [st for st, _, _ in starts]
    generated: list[list[Token]] = [[] for _ in prompts]
    active, logits = list(range(len(prompts))), [lg for _, _, lg in starts]
    while active:
        going = []
        for row, j in enumerate(active):
            with _named_in_batch(j, len(prompts)):
                _take(cg, logits[row], subset, generated[j])
                if _goes_on(generated[j], max_generated):
                    going.append(j)
        active = going
        if active:
            logits = model.decode_batch([states[j] for j in active], [cg.token_id(generated[j][-1]) for j in active],
                                        token_subset=subset)
    return [_result(cg, p, g, st, r) for p, g, st, (_, r, _) in zip(prompts, generated, states, starts)]


def _engine_batch(cg: CompiledGpu, prompts: list[list[Token]], mode: str, max_generated: int,
                  load_lens: list[int]) -> list[ModelRun]:
    """The launches in as many groups as the core has threads (kernels.threads()), each group decoded in
    lockstep on one thread (_engine_group)."""
    cg.engine(mode), cg.launch_rules(mode)           # built once, before the threads share them
    workers = max(1, min(len(prompts), kernels.threads()))
    groups = [list(range(k, len(prompts), workers)) for k in range(workers)]

    def one(js: list[int]) -> dict[int, ModelRun]:
        return _engine_group(cg, prompts, js, mode, max_generated, load_lens)
    if workers == 1:
        runs = one(groups[0])
    else:
        with ThreadPoolExecutor(workers) as pool:
            runs = {j: r for part in pool.map(one, groups) for j, r in part.items()}
    return [runs[j] for j in range(len(prompts))]


def _engine_group(cg: CompiledGpu, prompts: list[list[Token]], js: list[int], mode: str, max_generated: int,
                  load_lens: list[int]) -> dict[int, ModelRun]:
    """run_engine for the launches js together: each prefilled alone, then decoded in lockstep
    (StepEngine.decode_many: one pass over each layer's weights per step for all of them). Launch j's tokens
    and state are run_engine's for it alone."""
    engine, rules = cg.engine(mode), cg.launch_rules(mode)
    states, reused, generated = {}, {}, {}

    def goes_on(j: int) -> bool:
        with _named_in_batch(j, len(prompts)):
            return _goes_on(generated[j], max_generated)
    for j in js:
        states[j], reused[j], generated[j] = _engine_start(cg, mode, prompts[j], load_lens[j])
    going = [j for j in js if goes_on(j)]
    while going:
        new = engine.decode_many([states[j] for j in going], [cg.token_id(generated[j][-1]) for j in going], rules,
                                 [max_generated - len(generated[j]) for j in going])
        for j, ids in zip(going, new):
            generated[j] += [cg.token_at(i) for i in ids]
        going = [j for j in going if goes_on(j)]
    return {j: _result(cg, prompts[j], generated[j], states[j], reused[j]) for j in js}


def _engine_start(cg: CompiledGpu, mode: str, prompt: list[Token], load_len: int):
    """A launch on the engine after its prompt (the load part taken up when kept): (state, prompt tokens
    taken up, [its first generated token])."""
    engine, model = cg.engine(mode), cg.model(mode)
    ids = [cg.token_id(t) for t in prompt]
    state, reused = load_state(cg, model, mode, ids[:load_len], engine.prefill) if load_len \
        else (model.new_state(), 0)
    return state, reused, [cg.token_at(engine.first(state, ids[load_len:], cg.launch_rules(mode)))]


@contextmanager
def _named_in_batch(j: int, n: int):
    """A GpuLaunchError raised inside says which launch of the batch it is about (it keeps its type)."""
    try:
        yield
    except GpuLaunchError as e:
        e.in_batch = f"launch {j} of {n}: "
        e.args = (f"{e.in_batch}{e}",)
        raise


def _result(cg, prompt: list[Token], generated: list[Token], state: State, reused: int) -> ModelRun:
    """A finished launch: its tokens and the data memory read from its state."""
    return ModelRun(prompt, generated, row_words(read_rows(cg.data, state.recurrent)), reused)


def _start(cg, model: Model, mode: str, prompt: list[Token], load_len: int, subset):
    """A launch's state after its prompt (the load part taken up when kept), the prompt tokens taken up, and
    the logits that choose its first generated token."""
    ids = [cg.token_id(t) for t in prompt]
    state, reused = load_state(cg, model, mode, ids[:load_len]) if load_len else (model.new_state(), 0)
    return state, reused, model.prefill(state, ids[load_len:], token_subset=subset)


def _take(cg, logits: np.ndarray, subset, generated: list[Token]) -> None:
    """Append the GPU token the logits choose (argmax) to `generated`; a text token is an error."""
    best = int(np.argmax(logits)) if subset is None else int(subset[np.argmax(logits)])
    t = cg.token_at(best)
    if t is None:
        raise GpuLaunchError(f"generated token {len(generated)} is the text token id {best}, which the protocol "
                             f"does not allow during a launch")
    generated.append(t)


def _goes_on(generated: list[Token], max_generated: int) -> bool:
    """Whether the launch goes on after its last token; a token the protocol does not allow there, or too many
    tokens, is an error."""
    t = generated[-1]
    if t[0] in ("halt", "fault"):
        return False
    if t[0] not in ("exec", "wa", "wb", "w3", "w1", "cta"):
        raise GpuLaunchError(f"generated token {len(generated) - 1} is {token_name(t)}, which the protocol does "
                             f"not allow during a launch (tokens so far: "
                             f"{' '.join(token_name(x) for x in generated[-8:])})")
    if len(generated) >= max_generated:
        last = next((x for x in reversed(generated) if x[0] == "exec"), ("exec", 0, 0, 0, 0))
        raise TooManyTokens(f"the launch did not halt within {max_generated} generated tokens", last[1], last[2],
                            last[3], current_cta(generated))
    return True

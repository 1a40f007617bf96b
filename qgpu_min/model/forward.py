"""The Qwen3.5 text forward pass (reference §3): decode one token, or prefill many at once.

Every layer is pre-norm residual: h += Mixer(RMSNorm(h)); h += MLP(RMSNorm(h)), the mixer a Gated DeltaNet
or gated full attention as `layer_types` says. Prefill multiplies all prompt tokens' activations at once
(projections of one input in one fused dispatch) and runs only the conv and delta-rule recurrences token by
token, inside one C call per layer (`conv_prefill`, `deltanet_prefill`); decode is the same code with one
token. Every kernel gives the same bits as its single-product, single-token form, so the fast paths change no
result (tests/test_model_perf_paths.py).

Modes. "fp32": activations float32 throughout, bf16 weights widened exactly. "bf16": emulates torch bf16
inference (HF `modeling_qwen3_5.py`): every value torch would hold as a bf16 tensor is rounded to bf16
(round-to-nearest-even) at the point torch rounds it; fp32 islands stay fp32. The rounding points, marked
`r(...)` below, are:
  - each linear layer's output (fp32 accumulation, one rounding, done by the product itself: bf16_y; the
    products are also told that their input holds bf16 values, bf16_x, and run on AMX tiles where the CPU
    has them, an fp32 summation order of their own);
  - RMSNorm (input, post-attention, final, q_norm, k_norm): math in fp32, weight (1 + w) applied in fp32,
    one rounding at the end;
  - residual adds;
  - DeltaNet: conv1d output, then SiLU output; beta = sigmoid(b); the delta-rule output (state and math
    fp32; g = -exp(A_log) * softplus(a + dt_bias) fp32); gated norm: normalised value, then w * value, then
    * silu(z) (silu in fp32);
  - attention: RoPE cos/sin, each RoPE product and their sum; scores q.k, scaled scores, softmax
    probabilities (softmax in fp32), probabilities @ V (eager attention), sigmoid(gate), output * gate;
  - MLP: silu(gate), silu(gate) * up;
  - logits.
  F32-stored vectors (A_log, linear_attn.norm.weight) are rounded to bf16 at load, as torch's bf16 load
  casts every parameter.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from . import kernels
from .bf16 import bf16_to_f32, round_bf16
from .config import TextConfig, load_config, parse_config
from .errors import CheckpointError, ModelInputError
from .modes import DEVICES, MODES
from .text_skip import TextSkip, rows_pass_unchanged, state_allows, text_skip
from .weights import Weights, check_quant, load_weights, quantize_weights, weights_from_arrays

if TYPE_CHECKING:  # the tokenizers library is imported only when a tokenizer is loaded
    from .tokenizer import Tokenizer

TokenIds = Sequence[int] | np.ndarray  # 1-D, checked by Model._check_ids

ATTENTION_BLOCK = 256  # prefill queries attended at a time
SETTLE_BLOCK = 256     # deferred text tokens run through a built GPU's layers at a time (Model.settle)
F32_VECTORS = ("A_log", "gdn_norm")  # stored F32 in the published checkpoint
# An LM head with at most this fraction of nonzero SIMD chunks is multiplied chunk-sparse (Model.chunked_head):
# a circuit model's embedding has ~16% (20 of 128 chunks of 16 per row); a trained one ~100%.
HEAD_CHUNK_DENSITY = 0.5


def sparse_chunks(w, width: int) -> kernels.ChunkedBF16 | None:
    """Head rows w (bf16 bits) as their nonzero chunks of `width` columns, when at most HEAD_CHUNK_DENSITY of
    their chunks hold a nonzero, else None (a probe of 64 rows decides, so a dense head is read only there)."""
    if not (isinstance(w, np.ndarray) and w.dtype == np.uint16 and w.flags.c_contiguous):
        return None
    probe = w[np.linspace(0, w.shape[0] - 1, min(64, w.shape[0])).astype(np.int64)]
    if kernels.ChunkedBF16.from_dense(np.ascontiguousarray(probe), width).chunks \
            > HEAD_CHUNK_DENSITY * probe.shape[0] * -(-w.shape[1] // width):
        return None
    return kernels.ChunkedBF16.from_dense(w, width)


def _cuda_products():
    from .cuda import CudaProducts  # loaded on first use: it may build a library with nvcc
    return CudaProducts()


def check_device(device: str) -> None:
    if device not in DEVICES:
        raise ModelInputError(f"device must be one of {', '.join(DEVICES)}, not {device!r}")


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ModelInputError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")


def _identity(x: np.ndarray) -> np.ndarray:
    return x


@dataclass
class State:
    """Per-sequence state. recurrent[layer]: DeltaNet S f32 (H, dk, dv); conv[layer]: f32 (conv_dim, K-1),
    oldest input first; keys/values[layer]: f32 (kv heads, capacity, head_dim), the first `pos` positions
    valid (keys after q/k norm and RoPE); pos: tokens consumed so far.

    Two records let decode skip work exactly (see docs/model.md, "Decode fast paths"); code that writes
    recurrent/conv arrays itself must drop the layer from both. zero: DeltaNet layers whose recurrent and
    conv state are known to be +0 everywhere (new states); clean[layer]: int32 [H], 1 where that head's S is
    known finite with no -0 (kernels.deltanet_step_sparse keeps it up to date). binding: C pointers to these
    arrays for Model's one-call decode, rebuilt when an array is not the one it points into (None in a copy);
    engine_binding: the same for the step engine (model/step_engine.py).
    deferred: ids of text tokens that skipped a built checkpoint's GPU layers, 0..deferred_layers-1
    (model/text_skip.py), and still owe them their run: those layers' arrays do not include them yet
    (Model.settle runs them)."""
    recurrent: dict[int, np.ndarray]
    conv: dict[int, np.ndarray]
    keys: dict[int, np.ndarray] = field(default_factory=dict)
    values: dict[int, np.ndarray] = field(default_factory=dict)
    pos: int = 0
    zero: set[int] = field(default_factory=set)
    clean: dict[int, np.ndarray] = field(default_factory=dict)
    binding: kernels.DecodeBinding | None = field(default=None, repr=False, compare=False)
    engine_binding: kernels.DecodeBinding | None = field(default=None, repr=False, compare=False)
    deferred: list[int] = field(default_factory=list)
    deferred_layers: int = 0


class Model:
    """A loaded Qwen3.5 text model; see docs/model.md."""

    def __init__(self, config: TextConfig, weights: Weights, mode: str = "fp32", tokenizer: Tokenizer | None = None,
                 path: Path | None = None, device: str = "cpu") -> None:
        check_mode(mode)
        check_device(device)
        if mode == "bf16":  # torch casts every parameter to bf16, the F32-stored ones too (copies: the
            # caller's Weights stay as they are)
            weights = replace(weights, layers=[{**layer, **{n: round_bf16(layer[n]) for n in F32_VECTORS
                                                            if n in layer}} for layer in weights.layers])
        self.config, self.weights, self.mode, self.tokenizer, self.path = config, weights, mode, tokenizer, path
        self.r = kernels.round_bf16 if mode == "bf16" else _identity  # bf16.round_bf16's bits, in C
        self.bf16 = mode == "bf16"  # the layers' products: bf16 in, bf16 out (the head's: see _apply_head)
        # the layers' dense products: the C core's, or the optional CUDA path's (model/cuda.py)
        self.device = device
        self.products = kernels if device == "cpu" else _cuda_products()
        rot = config.rotary_dim
        self._inv_freq = (np.float32(1) / np.power(np.float32(config.rope_theta),
                                                   np.arange(0, rot, 2, dtype=np.float32) / np.float32(rot)))
        self.text_skip: TextSkip | None = None     # set by skip_gpu_layers_on_text
        self._subset_cache: tuple | None = None    # ((ids' bytes, chunk width), their head rows, sparse_chunks of them)
        self._head_chunks: dict[int, kernels.ChunkedBF16 | None] = {}  # SIMD level's chunk width -> chunked LM head
        self.silent_mixers = frozenset(i for i, kind in enumerate(config.layer_types)
                                       if kind == "linear_attention" and self._silent_deltanet(weights.layers[i]))
        # decode's fused steps (one C call each) for the MLPs and the DeltaNet mixers: those whose projections
        # are all CSR (circuit layers: the MLP's active units only) and, when the products run on this CPU,
        # those whose projections are all dense (the model's own layers, bf16 or Q8)
        fused = ("csr", "dense") if device == "cpu" else ("csr",)
        self._mlp_steps = {i: self._mlp_step(w) for i, w in enumerate(weights.layers)
                           if kernels.step_weights([w["gate"], w["up"], w["down"]]) in fused}
        self._gdn_steps = {
            i: kernels.GdnStep(w, config.rms_norm_eps, mode == "bf16", config.linear_num_key_heads,
                               config.linear_key_head_dim)
            for i, w in enumerate(weights.layers)
            if config.layer_types[i] == "linear_attention"
            and kernels.step_weights([w["qkv"], w["z"], w["b"], w["a"]]) in fused
            and kernels.step_weights([w["out"]]) in fused}
        # every layer a CSR DeltaNet (the circuit-only model): a decode token is one C call for all of them
        n = len(config.layer_types)
        self._decode_layers = kernels.DecodeLayers(
            [self._gdn_steps[i] for i in range(n)], [self._mlp_steps[i] for i in range(n)],
            [i in self.silent_mixers for i in range(n)]) \
            if n and all(i in self._gdn_steps and i in self._mlp_steps for i in range(n)) else None

    def _mlp_step(self, w: dict) -> kernels.MlpStep:
        eps, bf16 = self.config.rms_norm_eps, self.mode == "bf16"
        if isinstance(w["gate"], kernels.SparseBF16):
            return kernels.SparseMlpStep(kernels.SparseMlp.from_weights(w["gate"], w["up"], w["down"]),
                                         w["post_norm"], eps, bf16)
        return kernels.MlpStep(w["gate"], w["up"], w["down"], w["post_norm"], eps, bf16)

    def _silent_deltanet(self, w: dict) -> bool:
        """Whether this DeltaNet layer's mixer provably outputs exactly +0 and keeps a +0 state at +0, for
        any input, so a state in State.zero can skip it. in_proj_qkv, in_proj_b/a and out_proj are CSR
        with no nonzero (so their products are exactly +0 even for inf/NaN inputs, CSR dropping zeros):
        the conv sees +0 with a +0 state (its state stays +0), q, k, v are +-0, beta = 0.5, and
        g = -exp(A_log) * softplus(dt_bias) must be finite so the decay keeps S at +0 (delta is +-0, and
        +0 + -0 = +0); the output is out_proj's +0. Decided from the weights, once."""
        if not all(isinstance(w.get(n), kernels.SparseBF16) and w[n].nnz == 0 for n in ("qkv", "b", "a", "out")):
            return False
        g = kernels.deltanet_gate(np.zeros(w["A_log"].shape, np.float32), w["A_log"], w["dt_bias"])
        return bool(np.isfinite(g).all() and np.isfinite(kernels.exp(g)).all())

    # ---- state -------------------------------------------------------------------------------------------

    def new_state(self) -> State:
        cfg = self.config
        lin = cfg.layers_of("linear_attention")
        return State(
            recurrent={i: np.zeros((cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                                    cfg.linear_value_head_dim), np.float32) for i in lin},
            conv={i: np.zeros((cfg.conv_dim, cfg.linear_conv_kernel_dim - 1), np.float32) for i in lin},
            zero=set(lin), clean={i: np.ones(cfg.linear_num_value_heads, np.int32) for i in lin})

    # ---- public entry points -------------------------------------------------------------------------------

    def embed(self, token_ids: TokenIds) -> np.ndarray:
        """Token embeddings f32 (T, hidden) (no scaling: h0 = E[token])."""
        ids = self._check_ids(token_ids)
        return bf16_to_f32(self.weights.embed[ids])

    def forward_hidden(self, state: State, token_ids: TokenIds, layer_outputs: list | None = None) -> np.ndarray:
        """Run the tokens through every layer, advancing `state`; returns the final-norm output f32
        (T, hidden), what the LM head sees. A list passed as layer_outputs receives the residual stream
        f32 (T, hidden) after each layer, in layer order. A built checkpoint's text tokens may skip its GPU
        layers, with the same results (skip_gpu_layers_on_text; settle() before reading those layers' state)."""
        ids = self._check_ids(token_ids)
        return self._hidden([state], self.embed(ids), ids, layer_outputs)

    def _hidden(self, states: Sequence[State], h: np.ndarray, ids: np.ndarray,
                layer_outputs: list | None = None) -> np.ndarray:
        """h (T, hidden), the embeddings of ids, through every layer and the final norm: the T tokens of one
        sequence, or one token of each of T sequences (decode_batch); each state advances by its tokens."""
        first = self._skipped_layers(states, h, ids) if layer_outputs is None else 0
        if first:          # text tokens past a built checkpoint's GPU: run there later (Model.settle)
            for state, rows in self._per_state(states, h.shape[0]):
                state.deferred.extend(ids[rows].tolist())
                state.deferred_layers = first
        else:
            for state in states:
                self.settle(state)
        if not first and len(states) == 1 and h.shape[0] == 1 and self._decode_layers is not None \
                and layer_outputs is None:
            h = self._decode_all(states[0], h)
        else:
            with np.errstate(over="ignore"):  # exp overflowing to inf is how sigmoid/silu reach exactly 0
                for i in range(first, len(self.config.layer_types)):
                    h = self._layer(states, i, self.config.layer_types[i], h)
                    if layer_outputs is not None:
                        layer_outputs.append(h)
        for state, rows in self._per_state(states, h.shape[0]):
            state.pos += rows.stop - rows.start
        return self.r(kernels.rmsnorm(h, self.weights.final_norm, self.config.rms_norm_eps, plus_one=True))

    def logits(self, hidden: np.ndarray, token_subset: TokenIds | None = None) -> np.ndarray:
        """LM-head logits for hidden f32 (hidden,) or (T, hidden): [V] / [T, V], or only the ids of
        `token_subset`, in its order."""
        return self._apply_head(self._head(token_subset), hidden)

    def prefill(self, state: State, token_ids: TokenIds, all_logits: bool = False,
                token_subset: TokenIds | None = None) -> np.ndarray:
        """Feed prompt tokens; logits [V] of the last token, or [T, V] with all_logits (columns restricted to
        token_subset when given)."""
        head = self._head(token_subset)  # checked before the state changes
        hidden = self.forward_hidden(state, token_ids)
        return self._apply_head(head, hidden if all_logits else hidden[-1])

    def decode(self, state: State, token_id: int, token_subset: TokenIds | None = None) -> np.ndarray:
        """Feed one token; its logits [V] (or [len(token_subset)])."""
        head = self._head(token_subset)
        return self._apply_head(head, self.forward_hidden(state, [token_id])[0])

    def decode_batch(self, states: Sequence[State], token_ids: TokenIds,
                     token_subset: TokenIds | None = None) -> np.ndarray:
        """One token for each of several independent sequences: logits [B, V] (or [B, len(token_subset)]),
        row j bit-identical to decode(states[j], token_ids[j]). Each projection multiplies the B tokens in
        one pass over its weights (what a decode step spends its time reading); the recurrences and
        attention run per sequence, each on its own state."""
        ids = self._check_ids(token_ids)
        if len(states) != len(ids):
            raise ModelInputError(f"decode_batch: {len(states)} states for {len(ids)} tokens")
        if len({id(s) for s in states}) != len(states):
            raise ModelInputError("decode_batch: the same state appears twice (each sequence needs its own)")
        head = self._head(token_subset)
        hidden = self._hidden(states, self.embed(ids), ids)
        if len(states) == 1:    # decode's own head product (chunk-sparse for a circuit's head)
            return self._apply_head(head, hidden[0])[None]
        return self._apply_head(head, hidden)

    def skip_gpu_layers_on_text(self, layers: int, silent_ids: TokenIds) -> None:
        """Let the tokens of silent_ids skip layers 0..layers-1, a built checkpoint's GPU, where that is bit for
        bit what running them gives (model/text_skip.py); the skipped work runs later, when a token that
        cannot skip comes or settle() is called. Only for ids the build claimed silent (its manifest says)."""
        self.text_skip = text_skip(self.config.layer_types, self.config.vocab_size, layers, silent_ids)

    def settle(self, state: State) -> None:
        """Run the state's deferred text tokens through the GPU layers they skipped, so its arrays are what
        running every token everywhere gives; checks that their residual passed through unchanged, as the
        skip assumed (a checkpoint whose GPU is not silent on them, despite its manifest, is an error)."""
        if not state.deferred:
            return
        ids = np.asarray(state.deferred, np.int64)
        state.deferred = []
        for start in range(0, ids.size, SETTLE_BLOCK):   # prefill in blocks: the same bits as one batch
            block = ids[start:start + SETTLE_BLOCK]
            h0 = self.embed(block)
            h = h0
            with np.errstate(over="ignore"):
                for i in range(state.deferred_layers):
                    h = self._layer([state], i, "linear_attention", h)
            changed = np.flatnonzero((h.view(np.uint32) != h0.view(np.uint32)).any(axis=1))
            if changed.size:
                raise CheckpointError(f"text token {int(block[changed[0]])} changed the residual in the GPU's "
                                      "layers, although the build claimed it silent: the skip of those layers was "
                                      "not exact (rebuild the checkpoint, or load it without the text skip)")

    def _skipped_layers(self, states: Sequence[State], h: np.ndarray, ids: np.ndarray) -> int:
        """How many leading layers these tokens skip: the built GPU's, when every token and state allows it
        (model/text_skip.py), else 0."""
        skip = self.text_skip
        if skip is None or not skip.silent[ids].all() or not rows_pass_unchanged(h):
            return 0
        return skip.layers if all(state_allows(state, skip.layers) for state in states) else 0

    def chunked_head(self) -> kernels.ChunkedBF16 | None:
        """The full LM head as its nonzero chunks at the current SIMD level's width, when at most
        HEAD_CHUNK_DENSITY of its chunks hold a nonzero (a circuit model's embedding rows), else None.
        Built once per width."""
        width = kernels.chunk_width()
        if width not in self._head_chunks:
            self._head_chunks[width] = sparse_chunks(self.weights.lm_head, width)
        return self._head_chunks[width]

    def use_chunked_head(self, head: kernels.ChunkedBF16) -> None:
        """Take `head` as chunked_head's result at its width: one made before from this very head (e.g. kept
        in a cache; the caller vouches for its chunks), over this model's LM head array, else ValueError."""
        if head.dense is not self.weights.lm_head:
            raise ValueError("the chunked head is not over this model's LM head")
        self._head_chunks[head.width] = head

    def _apply_head(self, w, hidden: np.ndarray) -> np.ndarray:
        # fp32 products (no bf16_x) in both modes: the chunked head must equal the dense one bit for bit, and
        # AMX's order has no chunked twin; a decode step multiplies one token, where AMX gains nothing.
        if hidden.ndim == 1:
            chunked = self.chunked_head() if w is self.weights.lm_head else self._subset_chunks(w)
            if chunked is not None:  # the dense product's bits, without its all-zero chunks
                return self.r(kernels.chunked_matvec(chunked, hidden))
            return self.r(kernels.matvec_bf16(w, hidden))
        return self.r(kernels.matmul_bf16(w, hidden))

    # ---- checks ----------------------------------------------------------------------------------------------

    def _check_ids(self, token_ids) -> np.ndarray:
        ids = np.asarray(token_ids)
        if ids.ndim != 1 or ids.size == 0:
            raise ModelInputError(f"token_ids must be a non-empty 1-D list of ints, got shape {ids.shape}")
        if not np.issubdtype(ids.dtype, np.integer):
            raise ModelInputError(f"token_ids must be integers, got dtype {ids.dtype}")
        bad = ids[(ids < 0) | (ids >= self.config.vocab_size)]
        if bad.size:
            raise ModelInputError(f"token id {int(bad[0])} is outside the vocabulary [0, {self.config.vocab_size})")
        return ids.astype(np.int64)

    def _subset_chunks(self, rows: np.ndarray) -> kernels.ChunkedBF16 | None:
        """The chunked form of the current token subset's head rows, if they are mostly zero (a merged
        checkpoint's GPU rows, which a launch asks for at every step), else None."""
        cache = self._subset_cache
        return cache[2] if cache is not None and cache[1] is rows else None

    def _head(self, token_subset) -> np.ndarray | kernels.QuantQ8:
        """The LM-head rows to multiply: all of them (Q8 in a quantized model), or those of token_subset
        (checked; always the exact rows)."""
        if token_subset is None:
            return self.weights.lm_head if self.weights.head_q8 is None else self.weights.head_q8
        ids = self._check_ids(token_subset)
        width = kernels.chunk_width()
        key = (ids.tobytes(), width)     # the chunks' width is the SIMD level's, as for chunked_head
        if self._subset_cache is None or self._subset_cache[0] != key:
            # gathered once and reused: a launch asks for the same subset at every step
            rows = np.ascontiguousarray(self.weights.lm_head[ids])
            self._subset_cache = (key, rows, sparse_chunks(rows, width))
        return self._subset_cache[1]

    # ---- layers ----------------------------------------------------------------------------------------------

    def _linear(self, w, x: np.ndarray, states: Sequence[State]) -> np.ndarray:
        """r(x @ W.T) for x (T, in); the matrix-vector kernel when T == 1. In bf16 mode the products are told
        that x holds bf16 values (AMX tiles where the CPU has them) and round their results themselves. The
        T > 1 tokens of one sequence (a prompt) are a prompt product (kernels.matmul_bf16's prompt: fp32 x on
        AMX tiles as three bf16 parts where the CPU has them); one token of each of T sequences
        (decode_batch) keeps each row the bits decode gives it."""
        if x.shape[0] == 1:
            return self.products.matvec_bf16(w, x[0], self.bf16, self.bf16)[None]
        return self.products.matmul_bf16(w, x, self.bf16, self.bf16, len(states) == 1)

    def _linears(self, ws: list, x: np.ndarray, states: Sequence[State]) -> list[np.ndarray]:
        """[_linear(w, x, states) for w in ws], bit for bit, in one parallel dispatch (projections of one
        input)."""
        if x.shape[0] == 1:
            return [y[None] for y in self.products.matvec_bf16_multi(ws, x[0], self.bf16, self.bf16)]
        return self.products.matmul_bf16_multi(ws, x, self.bf16, self.bf16, len(states) == 1)

    def _norm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return self.r(kernels.rmsnorm(x, w, self.config.rms_norm_eps, plus_one=True))

    def _layer(self, states: Sequence[State], i: int, kind: str, h: np.ndarray) -> np.ndarray:
        """Layer i on h (T, hidden): the T tokens of one sequence (one state), or one token of each of T
        sequences (T states, decode_batch)."""
        w = self.weights.layers[i]
        silent = i in self.silent_mixers and all(i in s.zero for s in states)
        step = self._mlp_steps.get(i) if h.shape[0] == 1 else None
        if step is not None:  # decode through the fused MLP step: one C call
            if not silent:
                h = self._mixer(states, i, kind, w, h)
            return step(h[0], add_zero=silent)[None]  # add_zero: the silent mixer's exact +0
        # a silent mixer's exact +0 output (h + 0 turns a -0 into +0)
        h = self.r(h + np.float32(0)) if silent else self._mixer(states, i, kind, w, h)
        u = self._norm(h, w["post_norm"])
        # a CSR MLP (prefill): only its active units (SparseMlp: the units down_proj reads, each product's
        # entries in their order), the same bits as the full width
        sparse = getattr(self._mlp_steps.get(i), "mlp", None)
        gate, up, down = (sparse.gate, sparse.up, sparse.down) if sparse else (w["gate"], w["up"], w["down"])
        gate, up = self._linears([gate, up], u, states)
        act = self.r(self.r(kernels.silu(gate)) * up)
        return self.r(h + self._linear(down, act, states))

    def _decode_all(self, state: State, h: np.ndarray) -> np.ndarray:
        """One token through every layer in one C call (kernels.DecodeLayers): what _layer does layer by
        layer, the silent mixers' skip and State.zero included."""
        n = self._decode_layers.n
        arrays = (*(state.conv[i] for i in range(n)), *(state.recurrent[i] for i in range(n)),
                  *(self._clean_flags(state, i) for i in range(n)))
        b = state.binding
        if b is None or len(b.arrays) != len(arrays) or any(x is not y for x, y in zip(b.arrays, arrays)):
            b = state.binding = self._decode_layers.bind(list(arrays[:n]), list(arrays[n:2 * n]),
                                                         list(arrays[2 * n:]))
        zero = np.fromiter((i in state.zero for i in range(n)), np.int32, n)
        out = self._decode_layers(h[0], b, zero)
        state.zero.difference_update(np.flatnonzero(zero == 0).tolist())
        return out[None]

    def _mixer(self, states: Sequence[State], i: int, kind: str, w: dict, h: np.ndarray) -> np.ndarray:
        """h + Mixer(RMSNorm(h)), rounded: the first half of a layer."""
        if kind == "linear_attention":
            for state in states:
                state.zero.discard(i)
            step = self._gdn_steps.get(i) if h.shape[0] == 1 else None
            if step is not None:  # one C call, the sparse-key step inside (see _delta_rule)
                state = states[0]
                return step(h[0], state.conv[i], state.recurrent[i], self._clean_flags(state, i))[None]
        u = self._norm(h, w["in_norm"])
        if kind == "linear_attention":
            return self.r(h + self._deltanet(states, i, w, u))
        return self.r(h + self._attention(states, i, w, u))

    @staticmethod
    def _per_state(states: Sequence[State], rows: int) -> list[tuple[State, slice]]:
        """Which rows of a layer's input belong to which sequence: all of them to the one state, or row j to
        states[j] (decode_batch)."""
        if len(states) == 1:
            return [(states[0], slice(0, rows))]
        return [(state, slice(j, j + 1)) for j, state in enumerate(states)]

    def _deltanet(self, states: Sequence[State], i: int, w: dict, u: np.ndarray) -> np.ndarray:
        cfg, r, T = self.config, self.r, u.shape[0]
        nv, dv = cfg.linear_num_value_heads, cfg.linear_value_head_dim
        mixed, z, b, a = self._linears([w["qkv"], w["z"], w["b"], w["a"]], u, states)  # mixed (T, conv_dim): [q|k|v]
        z = z.reshape(T, nv, dv)
        # causal conv: a recurrence over each sequence's tokens through its conv_state, in one call
        o = np.concatenate([r(self._delta_rule(state, i, w, r(kernels.conv_prefill(state.conv[i], mixed[rows],
                                                                                   w["conv"])), b[rows], a[rows]))
                            for state, rows in self._per_state(states, T)])
        if self.mode == "bf16":  # HF Qwen3_5RMSNormGated: round the normalised value, then w * it, then the gate
            n = r(kernels.rmsnorm(o, np.ones(dv, np.float32), cfg.rms_norm_eps, plus_one=False))
            o = r(r(w["gdn_norm"] * n) * kernels.silu(z))
        else:
            o = kernels.gated_rmsnorm(o, z, w["gdn_norm"], cfg.rms_norm_eps)
        return self._linear(w["out"], o.reshape(T, nv * dv), states)

    def _clean_flags(self, state: State, i: int) -> np.ndarray:
        """Layer i's flags for the sparse-key path (kernels.deltanet_step_sparse); none yet: unknown (0),
        scanned when it matters."""
        clean = state.clean.get(i)
        if clean is None:
            clean = state.clean[i] = np.zeros(self.config.linear_num_value_heads, np.int32)
        return clean

    def _delta_rule(self, state: State, i: int, w: dict, conv: np.ndarray, b: np.ndarray,
                    a: np.ndarray) -> np.ndarray:
        """The conv's SiLU, the gates, l2norm and the delta rule over T tokens, from the rounded conv output
        (T, conv_dim) and the projections b, a (T, nv): o (T, nv, dv), not rounded."""
        cfg, r, T = self.config, self.r, conv.shape[0]
        nk, nv, dk, dv = (cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                          cfg.linear_value_head_dim)
        c = r(kernels.silu(conv))
        q = c[:, :cfg.key_dim].reshape(T, nk, dk)
        k = c[:, cfg.key_dim:2 * cfg.key_dim].reshape(T, nk, dk)
        v = np.ascontiguousarray(c[:, 2 * cfg.key_dim:].reshape(T, nv, dv))
        beta = r(kernels.sigmoid(b))
        g = kernels.deltanet_gate(a, w["A_log"], w["dt_bias"])
        q = kernels.l2norm(q, 1e-6, divisor=np.float32(np.sqrt(dk)))  # divided, as HF's recurrent rule does
        k = kernels.l2norm(k, 1e-6)
        if nv > nk:  # each key head serves nv/nk consecutive value heads (HF repeat_interleave)
            q, k = np.repeat(q, nv // nk, axis=1), np.repeat(k, nv // nk, axis=1)
        q, k = np.ascontiguousarray(q, np.float32), np.ascontiguousarray(k, np.float32)
        clean = self._clean_flags(state, i)
        if T == 1:  # decode: only the state rows of nonzero keys/queries, where that is exact
            return kernels.deltanet_step_sparse(state.recurrent[i], q[0], k[0], v[0], g[0], beta[0], clean)[None]
        return kernels.deltanet_prefill(state.recurrent[i], q, k, v, g, beta, clean)  # (T, nv, dv), in order

    def _rope(self, x: np.ndarray, pos0: int) -> np.ndarray:
        """NeoX-style rotary embedding on the first rotary_dim dims of each head; x (T, heads, head_dim)."""
        r, rot = self.r, self.config.rotary_dim
        angles = np.arange(pos0, pos0 + x.shape[0], dtype=np.float32)[:, None] * self._inv_freq[None]
        cos = r(np.concatenate([np.cos(angles)] * 2, axis=1))[:, None, :]  # (T, 1, rot)
        sin = r(np.concatenate([np.sin(angles)] * 2, axis=1))[:, None, :]
        xr = x[..., :rot]
        rotated = np.concatenate([-xr[..., rot // 2:], xr[..., :rot // 2]], axis=-1)
        out = x.copy()
        out[..., :rot] = r(r(xr * cos) + r(rotated * sin))
        return out

    def _append_kv(self, state: State, i: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Store this step's k, v (T, kv heads, head_dim); returns the valid cache (kv heads, pos+T, hd)."""
        end = state.pos + k.shape[0]
        keys = state.keys.get(i)
        if keys is None or keys.shape[1] < end:  # grow by doubling
            cap = max(64, 2 * end)
            new_k = np.zeros((k.shape[1], cap, k.shape[2]), np.float32)
            new_v = np.zeros_like(new_k)
            if keys is not None:
                new_k[:, :state.pos] = keys[:, :state.pos]
                new_v[:, :state.pos] = state.values[i][:, :state.pos]
            state.keys[i], state.values[i] = new_k, new_v
        state.keys[i][:, state.pos:end] = k.transpose(1, 0, 2)
        state.values[i][:, state.pos:end] = v.transpose(1, 0, 2)
        return state.keys[i][:, :end], state.values[i][:, :end]

    def _attend(self, q: np.ndarray, keys: np.ndarray, values: np.ndarray, pos0: int) -> np.ndarray:
        """Causal softmax attention of queries q (T, nq, hd) at positions pos0.. over the cache (nkv, S, hd);
        query head h reads kv head h // (nq / nkv). Returns (T, nq * hd)."""
        r, (T, nq, hd), (nkv, S, _) = self.r, q.shape, keys.shape
        group = nq // nkv
        qh = q.transpose(1, 0, 2).reshape(nkv, group * T, hd)
        scores = r(r(qh @ keys.transpose(0, 2, 1)) * np.float32(hd ** -0.5)).reshape(nkv, group, T, S)
        visible = np.arange(S)[None, :] <= (pos0 + np.arange(T))[:, None]  # (T, S)
        scores = np.where(visible, scores, -np.inf)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = r(scores / scores.sum(axis=-1, keepdims=True))
        out = r(probs.reshape(nkv, group * T, S) @ values)  # (nkv, group*T, hd)
        return out.reshape(nq, T, hd).transpose(1, 0, 2).reshape(T, nq * hd)

    def _attention(self, states: Sequence[State], i: int, w: dict, u: np.ndarray) -> np.ndarray:
        cfg, r, T = self.config, self.r, u.shape[0]
        nq, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        qg, k, v = self._linears([w["q"], w["k"], w["v"]], u, states)
        if cfg.attn_output_gate:  # rows interleaved per head: [query (hd) | gate (hd)]
            qg = qg.reshape(T, nq, 2 * hd)
            q, gate = qg[..., :hd], qg[..., hd:].reshape(T, nq * hd)
        else:
            q, gate = qg.reshape(T, nq, hd), None
        k, v = k.reshape(T, nkv, hd), v.reshape(T, nkv, hd)
        q, k = self._norm(q, w["q_norm"]), self._norm(k, w["k_norm"])
        outs = []
        for state, rows in self._per_state(states, T):
            qs, ks = self._rope(q[rows], state.pos), self._rope(k[rows], state.pos)
            keys, values = self._append_kv(state, i, ks, v[rows])  # (nkv, S, hd)
            # queries in blocks, so a long prompt's score matrix stays small
            outs += [self._attend(qs[t:t + ATTENTION_BLOCK], keys, values, state.pos + t)
                     for t in range(0, qs.shape[0], ATTENTION_BLOCK)]
        out = np.concatenate(outs)
        if gate is not None:
            out = r(out * r(kernels.sigmoid(gate)))
        return self._linear(w["o"], np.ascontiguousarray(out), states)


def model_from_tensors(config: dict | TextConfig, tensors: dict[str, np.ndarray], mode: str = "fp32",
                       tokenizer: Tokenizer | None = None, sparse: bool = True) -> Model:
    """A model from in-memory tensors (names and storage as in a checkpoint: BF16 as uint16 bits, F32 as
    float32) and a config (config.json's parsed dict, or a TextConfig); checked like a checkpoint. For
    running compiled layers without writing files."""
    check_mode(mode)
    cfg = config if isinstance(config, TextConfig) else parse_config(config)
    return Model(cfg, weights_from_arrays(cfg, tensors, sparse), mode, tokenizer=tokenizer)


def load_model(path: str | Path, mode: str = "fp32", sparse: bool = True, quant: str | None = None,
               keep_layers: Collection[int] = (), progress: Callable[[int, int], None] | None = None,
               device: str = "cpu") -> Model:
    """Load a Qwen3.5 checkpoint directory: config, weights (memory-mapped, checked before use), and the
    tokenizer when tokenizer.json is present (else model.tokenizer is None). quant="int8": the dense
    matrices of the layers outside keep_layers and the LM head quantized to Q8 at load
    (weights.quantize_weights; progress(done, total) per layer). device="cuda": the layers' dense products on
    an NVIDIA GPU (model/cuda.py; needs nvcc and a GPU, and takes no quant)."""
    from .tokenizer import load_tokenizer

    check_mode(mode)
    check_quant(quant)
    check_device(device)
    if quant is not None and device != "cpu":
        raise ModelInputError(f"quant={quant!r} runs on the CPU only; it cannot be combined with device={device!r}")
    path = Path(path)
    config = load_config(path)
    weights = load_weights(path, config, sparse=sparse)
    if quant is not None:
        weights = quantize_weights(weights, keep_layers, progress)
    return Model(config, weights, mode, tokenizer=load_tokenizer(path), path=path, device=device)

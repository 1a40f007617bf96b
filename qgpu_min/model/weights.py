"""The text model's tensors: what a checkpoint must hold for a config, checked before anything is mapped.

Big matrices stay memory-mapped as bf16 bits (uint16, never copied; mostly-zero ones, like compiled circuit
layers, are turned into CSR); small vectors (norm weights, gates' parameters, conv taps) are widened to
float32 once at load.
"""
from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from . import kernels
from .bf16 import bf16_to_f32
from .config import TextConfig
from .errors import CheckpointError
from .modes import QUANTS
from .safetensors_io import NUMPY_DTYPES, MappedFiles, read_checkpoint_headers

SKIPPED_PREFIXES = ("model.visual.", "mtp.")  # vision tower and multi-token-prediction head: not text
MATRIX = "matrix"  # stored BF16, kept mapped, multiplied by the bf16 kernels
VECTOR = "vector"  # BF16 or F32 as stored (Qwen3.5 keeps A_log and the DeltaNet norm in F32), widened to f32

# Sampling this many rows tells a dense matrix from a mostly-zero one without reading it whole; only a
# matrix whose sample is at most SPARSE_PROBE_DENSITY nonzero is scanned whole by kernels.maybe_sparse.
SPARSE_PROBE_ROWS = 16
SPARSE_PROBE_DENSITY = 0.1


@dataclass(frozen=True)
class Expected:
    shape: tuple[int, ...]
    kind: str  # MATRIX or VECTOR


def expected_tensors(cfg: TextConfig) -> dict[str, Expected]:
    """Full tensor name -> expected shape and kind, for every text tensor the config implies."""
    H, I, p = cfg.hidden_size, cfg.intermediate_size, cfg.tensor_prefix
    nv, K = cfg.linear_num_value_heads, cfg.linear_conv_kernel_dim
    nq, nkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    q_rows = nq * hd * (2 if cfg.attn_output_gate else 1)  # query and gate interleaved per head
    per_type = {
        "linear_attention": {
            "linear_attn.in_proj_qkv.weight": Expected((cfg.conv_dim, H), MATRIX),
            "linear_attn.in_proj_z.weight": Expected((cfg.value_dim, H), MATRIX),
            "linear_attn.in_proj_b.weight": Expected((nv, H), MATRIX),
            "linear_attn.in_proj_a.weight": Expected((nv, H), MATRIX),
            "linear_attn.conv1d.weight": Expected((cfg.conv_dim, 1, K), VECTOR),
            "linear_attn.dt_bias": Expected((nv,), VECTOR),
            "linear_attn.A_log": Expected((nv,), VECTOR),
            "linear_attn.norm.weight": Expected((cfg.linear_value_head_dim,), VECTOR),
            "linear_attn.out_proj.weight": Expected((H, cfg.value_dim), MATRIX),
        },
        "full_attention": {
            "self_attn.q_proj.weight": Expected((q_rows, H), MATRIX),
            "self_attn.k_proj.weight": Expected((nkv * hd, H), MATRIX),
            "self_attn.v_proj.weight": Expected((nkv * hd, H), MATRIX),
            "self_attn.o_proj.weight": Expected((H, nq * hd), MATRIX),
            "self_attn.q_norm.weight": Expected((hd,), VECTOR),
            "self_attn.k_norm.weight": Expected((hd,), VECTOR),
        },
    }
    common = {
        "input_layernorm.weight": Expected((H,), VECTOR),
        "post_attention_layernorm.weight": Expected((H,), VECTOR),
        "mlp.gate_proj.weight": Expected((I, H), MATRIX),
        "mlp.up_proj.weight": Expected((I, H), MATRIX),
        "mlp.down_proj.weight": Expected((H, I), MATRIX),
    }
    out = {f"{p}embed_tokens.weight": Expected((cfg.vocab_size, H), MATRIX),
           f"{p}norm.weight": Expected((H,), VECTOR)}
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = Expected((cfg.vocab_size, H), MATRIX)
    for i, kind in enumerate(cfg.layer_types):
        for suffix, e in {**per_type[kind], **common}.items():
            out[f"{p}layers.{i}.{suffix}"] = e
    return out


def is_text_tensor(name: str, cfg: TextConfig) -> bool:
    if name.startswith(SKIPPED_PREFIXES):
        return False
    return name.startswith(cfg.tensor_prefix) or name == "lm_head.weight"


def check_tensors(found: dict[str, tuple[str, tuple[int, ...]]], cfg: TextConfig) -> None:
    """found: name -> (safetensors dtype, shape). Every expected tensor present with its shape and an allowed
    dtype, nothing unexpected; one error listing every problem."""
    expected = expected_tensors(cfg)
    problems = []
    for name, e in expected.items():
        if name not in found:
            problems.append(f"missing tensor {name} (expected shape {list(e.shape)})")
            continue
        dtype, shape = found[name]
        if shape != e.shape:
            problems.append(f"tensor {name}: expected shape {list(e.shape)}, found {list(shape)}")
        allowed = ("BF16",) if e.kind == MATRIX else ("BF16", "F32")
        if dtype not in allowed:
            problems.append(f"tensor {name}: expected dtype {' or '.join(allowed)}, found {dtype}")
    for name in sorted(set(found) - set(expected)):
        problems.append(f"unexpected tensor {name} (the config has {cfg.num_hidden_layers} layers: "
                        f"{', '.join(sorted(set(cfg.layer_types)))})")
    if problems:
        shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
        raise CheckpointError("checkpoint does not match its config:\n  " + "\n  ".join(shown))


def _is_mostly_zero(w: np.ndarray) -> bool:
    rows = w[np.linspace(0, w.shape[0] - 1, min(SPARSE_PROBE_ROWS, w.shape[0])).astype(np.int64)]
    return np.count_nonzero(rows & np.uint16(0x7FFF)) <= SPARSE_PROBE_DENSITY * rows.size


@dataclass
class Weights:
    """embed/lm_head: uint16 [V, H] (the same array when tied); final_norm f32; layers[i]: short name ->
    array (matrices: uint16 bits, kernels.SparseBF16, or kernels.QuantQ8 after quantize_weights; vectors:
    f32). head_q8: the LM head as Q8 when quantized (the full-vocabulary logits read it; a token subset's
    logits, like a launch's, still read lm_head's exact rows)."""
    embed: np.ndarray
    lm_head: np.ndarray
    final_norm: np.ndarray
    layers: list[dict[str, object]]
    files: MappedFiles | None  # keeps the memory maps of a loaded checkpoint open
    head_q8: kernels.QuantQ8 | None = None


# checkpoint suffix -> short name used by the forward pass
SHORT_NAMES = {
    "input_layernorm.weight": "in_norm", "post_attention_layernorm.weight": "post_norm",
    "mlp.gate_proj.weight": "gate", "mlp.up_proj.weight": "up", "mlp.down_proj.weight": "down",
    "linear_attn.in_proj_qkv.weight": "qkv", "linear_attn.in_proj_z.weight": "z",
    "linear_attn.in_proj_b.weight": "b", "linear_attn.in_proj_a.weight": "a",
    "linear_attn.conv1d.weight": "conv", "linear_attn.dt_bias": "dt_bias", "linear_attn.A_log": "A_log",
    "linear_attn.norm.weight": "gdn_norm", "linear_attn.out_proj.weight": "out",
    "self_attn.q_proj.weight": "q", "self_attn.k_proj.weight": "k", "self_attn.v_proj.weight": "v",
    "self_attn.o_proj.weight": "o", "self_attn.q_norm.weight": "q_norm", "self_attn.k_norm.weight": "k_norm",
}


def _vector(a: np.ndarray) -> np.ndarray:
    return bf16_to_f32(a) if a.dtype == np.uint16 else np.array(a, dtype=np.float32)


def build_weights(cfg: TextConfig, arrays: dict[str, np.ndarray], sparse: bool = True,
                  files: MappedFiles | None = None) -> Weights:
    """Weights from checked arrays (full tensor name -> stored array, BF16 as uint16 bits). Matrices are
    kept as they are (no copy); `sparse`: mostly-zero matrices become CSR (exact: zeros add nothing)."""
    expected = expected_tensors(cfg)

    def get(name: str) -> object:
        a = arrays[name]
        if expected[name].kind == VECTOR:
            return _vector(a)
        if sparse and _is_mostly_zero(a):
            m = kernels.maybe_sparse(a)
            if files is not None and m is not a:
                files.release(a)           # the dense pages are no longer needed in memory
            return m
        return a

    p = cfg.tensor_prefix
    layers = []
    for i in range(cfg.num_hidden_layers):
        prefix = f"{p}layers.{i}."
        layer = {short: get(prefix + suffix) for suffix, short in SHORT_NAMES.items() if prefix + suffix in arrays}
        if "conv" in layer:
            layer["conv"] = np.ascontiguousarray(layer["conv"][:, 0, :])  # [C, 1, K] -> [C, K]
        layers.append(layer)
    embed = arrays[f"{p}embed_tokens.weight"]
    lm_head = embed if cfg.tie_word_embeddings else arrays["lm_head.weight"]
    return Weights(embed=embed, lm_head=lm_head, final_norm=_vector(arrays[f"{p}norm.weight"]), layers=layers,
                   files=files)


def _without_tied_copy(arrays: dict[str, np.ndarray], dtypes: dict[str, str], cfg: TextConfig) -> dict:
    """A tied checkpoint may also store lm_head.weight (transformers writes one when it saves an explicit
    state dict). Equal to the embedding, bit for bit, it is dropped; different, it is an error naming both."""
    head, embed = "lm_head.weight", f"{cfg.tensor_prefix}embed_tokens.weight"
    if not cfg.tie_word_embeddings or head not in arrays or embed not in arrays:
        return arrays
    a, b = arrays[head], arrays[embed]
    if dtypes[head] != dtypes[embed] or a.shape != b.shape or not np.array_equal(a, b):
        raise CheckpointError(f"config.json ties the LM head to the embedding (tie_word_embeddings true), but the "
                              f"checkpoint's {head} ({dtypes[head]} {list(a.shape)}) differs from {embed} "
                              f"({dtypes[embed]} {list(b.shape)}); set tie_word_embeddings false to use it")
    return {n: x for n, x in arrays.items() if n != head}


def load_weights(model_dir: str | Path, cfg: TextConfig, sparse: bool = True) -> Weights:
    """Check every header against the config, then map the tensors (vision and MTP tensors skipped)."""
    found = read_checkpoint_headers(model_dir, keep=lambda n: is_text_tensor(n, cfg))
    files = MappedFiles()
    arrays = _without_tied_copy({n: files.array(i) for n, i in found.items()}, {n: i.dtype for n, i in found.items()},
                                cfg)
    check_tensors({n: (found[n].dtype, found[n].shape) for n in arrays}, cfg)
    return build_weights(cfg, arrays, sparse, files)


def weights_from_arrays(cfg: TextConfig, tensors: dict[str, np.ndarray], sparse: bool = True) -> Weights:
    """Weights from in-memory tensors named as in a checkpoint (BF16 as uint16 bits, F32 as float32),
    checked exactly like a checkpoint's; names outside the text model (vision, MTP) are ignored."""
    text = {n: a for n, a in tensors.items() if is_text_tensor(n, cfg)}
    dtype_names = {v: k for k, v in NUMPY_DTYPES.items()}
    for name, a in text.items():
        if not isinstance(a, np.ndarray):
            raise CheckpointError(f"tensor {name}: expected a NumPy array, got {type(a).__name__}")
    dtypes = {n: dtype_names.get(a.dtype, str(a.dtype)) for n, a in text.items()}
    text = _without_tied_copy(text, dtypes, cfg)
    check_tensors({n: (dtypes[n], a.shape) for n, a in text.items()}, cfg)
    return build_weights(cfg, {n: np.ascontiguousarray(a) for n, a in text.items()}, sparse)


def check_quant(quant: str | None) -> None:
    if quant is not None and quant not in QUANTS:
        raise CheckpointError(f"quant must be one of {', '.join(QUANTS)} (or none), not {quant!r}")


def quantize_weights(w: Weights, keep_layers: Collection[int] = (),
                     progress: Callable[[int, int], None] | None = None) -> Weights:
    """The same model with every dense matrix of the layers outside keep_layers, and the LM head, as Q8
    (kernels.quantize_q8): about half the bytes per decoded token. CSR matrices (circuit layers), vectors,
    the embedding (one row read per token), a matrix whose width is not a multiple of kernels.Q8_BLOCK, and
    every matrix of keep_layers stay as they are, bit for bit, so a merged checkpoint's GPU layers (pass them
    as keep_layers) and its launch logits stay exact.
    progress(done, total) is called after each layer."""
    def q8(a: object) -> object:
        if not (isinstance(a, np.ndarray) and a.dtype == np.uint16 and a.ndim == 2) or a.shape[1] % kernels.Q8_BLOCK:
            return a
        quantized = kernels.quantize_q8(a)
        if w.files is not None:
            w.files.release(a)  # not read whole again (the embedding's rows, read one per token, map back in)
        return quantized

    keep = set(keep_layers)
    layers = []
    for i, layer in enumerate(w.layers):
        layers.append(layer if i in keep else {name: q8(a) for name, a in layer.items()})
        if progress:
            progress(i + 1, len(w.layers) + 1)
    head = q8(w.lm_head)
    if progress:
        progress(len(w.layers) + 1, len(w.layers) + 1)
    return replace(w, layers=layers, head_q8=head if isinstance(head, kernels.QuantQ8) else None)

"""Write a merged checkpoint: compiled circuit layers prepended to a base Qwen3.5 checkpoint.

The result is an ordinary checkpoint in the published format: circuit layers are `linear_attention`
decoder layers 0..n-1 with every tensor the base's layers have (BF16, A_log and the gated-norm weight F32),
the base layers follow renumbered, the circuit tokens' rows are appended to `embed_tokens` (tied LM head),
and `text_config` gets the new `layer_types`, `num_hidden_layers` and `vocab_size`. Written to a temporary
directory, then renamed, so an interrupted build leaves nothing half-written under the target name.
"""
from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qgpu_min.files import read_json
from qgpu_min.model.bf16 import f32_to_bf16
from qgpu_min.model.config import load_config
from qgpu_min.model.safetensors_io import MappedFiles, read_checkpoint_headers, write_checkpoint_weights

from .compile import BaseShape, LayerWeights, OutputCode, add_mute, check_exact_weights, emit, plan
from .ir import Circuit, CircuitError
from .margin import static_check, text_pre_max
from .placement import choose_dims, in_plan_order, place_layer, place_rows
from .tokens import CircuitTokens, leaked_rows, normalised_text_rows, text_gates, token_rows

SILENT = -90.0    # a pre-activation at or below this: SiLU gives exactly 0 (fp32 and bf16)

SIDE_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja",
              "vocab.json", "merges.txt")


def _bf16(x: np.ndarray) -> np.ndarray:
    return f32_to_bf16(np.ascontiguousarray(x, np.float32))


def _check_token_rows(token_rows: np.ndarray, shape: BaseShape) -> None:
    if token_rows.ndim != 2 or token_rows.shape[1] != shape.hidden:
        raise CircuitError(f"circuit token rows must be [N, {shape.hidden}], got {list(token_rows.shape)}")


DENSE_ROWS = 512    # rows of a sparse matrix made dense at a time while it is written
# a circuit layer's matrices (LayerWeights.mats) by their tensor names in the published checkpoint
MATRIX_NAMES = {"gate": "mlp.gate_proj.weight", "up": "mlp.up_proj.weight", "down": "mlp.down_proj.weight",
                "qkv": "linear_attn.in_proj_qkv.weight", "z": "linear_attn.in_proj_z.weight",
                "b": "linear_attn.in_proj_b.weight", "a": "linear_attn.in_proj_a.weight",
                "out": "linear_attn.out_proj.weight"}


def _dense_blocks(coo) -> Callable[[], Iterator[np.ndarray]]:
    """A sparse matrix as its dense bf16 bits, a block of rows at a time (write_safetensors takes such a
    callable): the file holds the GPU's layers dense, as the format requires, but memory never holds them so
    (41 layers at 2B shapes are 4.8 GB dense)."""
    rows, cols, vals = coo.summed()                 # sorted by row, then column
    bits = f32_to_bf16(vals.astype(np.float32))
    n, m = coo.shape

    def blocks() -> Iterator[np.ndarray]:
        for r0 in range(0, n, DENSE_ROWS):
            r1 = min(n, r0 + DENSE_ROWS)
            lo, hi = np.searchsorted(rows, [r0, r1])
            block = np.zeros((r1 - r0, m), np.uint16)
            block[rows[lo:hi] - r0, cols[lo:hi]] = bits[lo:hi]
            yield block
    return blocks


def layer_tensors(lw: LayerWeights, shape: BaseShape, prefix: str) -> dict:
    """name -> (dtype, shape, data) for one circuit layer, in the published dtypes: the matrices dense, given
    as callables yielding row blocks (safetensors_io.TensorData), the vectors as arrays."""
    H, nh, hd = shape.hidden, shape.heads, shape.head_dim
    out = {}
    for short, coo in lw.mats.items():
        out[prefix + MATRIX_NAMES[short]] = ("BF16", coo.shape, _dense_blocks(coo))
    v = lw.vecs
    out[prefix + "input_layernorm.weight"] = ("BF16", (H,), _bf16(v["in_norm"]))
    out[prefix + "post_attention_layernorm.weight"] = ("BF16", (H,), _bf16(v["post_norm"]))
    out[prefix + "linear_attn.conv1d.weight"] = ("BF16", (3 * nh * hd, 1, shape.conv_kernel),
                                                 _bf16(v["conv"][:, None, :]))
    out[prefix + "linear_attn.dt_bias"] = ("BF16", (nh,), _bf16(v["dt_bias"]))
    out[prefix + "linear_attn.A_log"] = ("F32", (nh,), np.ascontiguousarray(v["A_log"], np.float32))
    out[prefix + "linear_attn.norm.weight"] = ("F32", (hd,), np.ascontiguousarray(v["gdn_norm"], np.float32))
    return out


def write_merged(base_dir: str | Path, out_dir: str | Path, layers: list[LayerWeights], shape: BaseShape,
                 token_rows: np.ndarray) -> Path:
    """Prepend `layers` to the checkpoint in base_dir, append `token_rows` to its vocabulary; write out_dir."""
    base_dir, out_dir = Path(base_dir), Path(out_dir)
    load_config(base_dir)     # checked first: a bad config is a CheckpointError naming the file
    raw = read_json(base_dir / "config.json")
    text = raw["text_config"] if "text_config" in raw else raw
    prefix = "model.language_model." if "text_config" in raw else "model."
    if text["hidden_size"] != shape.hidden or text["intermediate_size"] != shape.intermediate:
        raise CircuitError(f"base {base_dir}: hidden/intermediate {text['hidden_size']}/{text['intermediate_size']} "
                           f"!= the circuit's {shape.hidden}/{shape.intermediate}")
    if not (raw.get("tie_word_embeddings", text.get("tie_word_embeddings", True))):
        raise CircuitError("the circuit's output code needs tied embeddings (tie_word_embeddings true)")
    _check_token_rows(token_rows, shape)
    n = len(layers)
    base_types = list(text["layer_types"])
    vocab = int(text["vocab_size"])
    infos = read_checkpoint_headers(base_dir)
    files = MappedFiles()
    tensors: dict = {}
    for i, lw in enumerate(layers):
        tensors.update(layer_tensors(lw, shape, f"{prefix}layers.{i}."))
    for name, info in infos.items():
        data = files.array(info)
        if name == f"{prefix}embed_tokens.weight":
            if info.shape[0] != vocab:
                raise CircuitError(f"embed_tokens has {info.shape[0]} rows, config vocab_size {vocab}")
            data = np.concatenate([np.asarray(data), _bf16(token_rows)])
            tensors[name] = (info.dtype, data.shape, data)
            continue
        if name.startswith(f"{prefix}layers."):
            rest = name[len(f"{prefix}layers."):]
            idx, tail = rest.split(".", 1)
            name = f"{prefix}layers.{int(idx) + n}.{tail}"
        tensors[name] = (info.dtype, info.shape, data)
    text["layer_types"] = ["linear_attention"] * n + base_types
    text["num_hidden_layers"] = len(text["layer_types"])
    text["vocab_size"] = vocab + len(token_rows)
    side_files = [base_dir / f for f in SIDE_FILES if (base_dir / f).exists()]
    return _write_checkpoint_dir(out_dir, tensors, raw, side_files)


@dataclass
class Built:
    """A merged checkpoint: where it is, its circuit tokens (ids base_vocab + i), and what the build measured."""

    path: Path
    tokens: CircuitTokens
    base_vocab: int
    n_layers: int
    tau: float            # smallest text-gate margin over the sublayers
    text_max_pre: float   # highest pre-activation any silenced text token reaches in a circuit layer (<= -90)
    layer_units: list
    layer_heads: list
    dims: np.ndarray | None = None   # dims[j]: the base dim the plan's residual dim j went to (placement)
    leaky_ids: np.ndarray | None = None  # text token ids the gates do not silence (max_leaks > 0 only)
    checked_ids: np.ndarray | None = None  # the embedding rows the gates were found for and checked on


def build_merged(circuit: Circuit, toks: CircuitTokens, out_code: OutputCode, base_dir: str | Path,
                 out_dir: str | Path, keep: list | None = None, text_ids: np.ndarray | None = None,
                 max_leaks: int = 0) -> Built:
    """Compile `circuit` for the base checkpoint's shapes (static margin check, exact weights, a text gate
    per sublayer from the base's embedding matrix, checked on every text row) and write the merged
    checkpoint with the circuit tokens appended to the vocabulary. `keep`: groups the plan holds to the end
    (default: the output code's input groups, as the demo circuits need; the GPU plans with none).
    The gates silence every embedding row when they can. Else only `text_ids`, the rows text can produce
    (padding rows past the tokenizer need no gate; Built.checked_ids says which rows were), and up to
    `max_leaks` of those may stay unsilenced where no exact gate exists (Built.leaky_ids, never claimed
    silent)."""
    cfg = load_config(base_dir)
    shape = BaseShape.from_config(cfg)
    p = plan(circuit, shape, keep=[ig for _, ig in out_code.pairs] if keep is None else keep)
    report = static_check(p)
    if not report.ok:
        raise CircuitError("static margin check failed:\n  " + "\n  ".join(report.problems[:10]))
    layers = emit(p, out_code)
    check_exact_weights(layers)
    infos = read_checkpoint_headers(base_dir, keep=lambda n: n.endswith("embed_tokens.weight"))
    every = normalised_text_rows(MappedFiles().array(next(iter(infos.values()))), shape.eps)
    reachable = np.arange(len(every)) if text_ids is None else np.asarray(text_ids, np.int64)
    perm = choose_dims(p, every[reachable])
    every = in_plan_order(every, perm)        # gates are found and checked in the plan's numbering
    try:                                      # silent on every row if it can be: padding ids too
        ids, text = np.arange(len(every)), every
        gates = text_gates(p, text)
    except CircuitError:
        if text_ids is None and not max_leaks:
            raise
        ids, text = reachable, every[reachable]
        gates = text_gates(p, text, max_leaks)
    add_mute(layers, gates, shape)
    # the check decides: a row some gate leaves out, or one the gates' bf16 weights do not keep at or below
    # -90 after all (a tiny margin), is not silent
    top = text_pre_max(layers, text, shape.qk_rows)
    leaks = np.union1d(leaked_rows(gates), np.flatnonzero(top > SILENT))
    if len(leaks) > max_leaks:
        raise CircuitError(f"{len(leaks)} text tokens would not be silent (highest pre-activation "
                           f"{top.max():.1f} > {SILENT}), more than the {max_leaks} allowed")
    worst = float(np.delete(top, leaks).max(initial=-np.inf))
    placed = [place_layer(lw, perm) for lw in layers]
    path = write_merged(base_dir, out_dir, placed, shape, place_rows(token_rows(p, toks), perm))
    return Built(path, toks, cfg.vocab_size, len(layers), min(g.tau for g in gates.values()), worst,
                 [lw.units for lw in layers], [lw.heads for lw in layers], perm, ids[leaks], ids)


def write_circuit_only(out_dir: str | Path, layers: list[LayerWeights], shape: BaseShape,
                       token_rows: np.ndarray) -> Path:
    """A checkpoint holding only the circuit: its layers, one no-op full-attention layer (transformers'
    Qwen3.5 cache needs one; zero o_proj and down_proj make it an exact identity), and a vocabulary of the
    circuit tokens alone (flat `Qwen3_5ForCausalLM` config, tensors under `model.`)."""
    out_dir = Path(out_dir)
    _check_token_rows(token_rows, shape)
    H, I, n = shape.hidden, shape.intermediate, len(layers)
    heads, kv, hd = 8, 2, 256  # the published attention shapes; the layer is all zeros anyway
    tensors: dict = {}
    for i, lw in enumerate(layers):
        tensors.update(layer_tensors(lw, shape, f"model.layers.{i}."))
    q = f"model.layers.{n}."
    zeros = {"self_attn.q_proj.weight": (2 * heads * hd, H), "self_attn.k_proj.weight": (kv * hd, H),
             "self_attn.v_proj.weight": (kv * hd, H), "self_attn.o_proj.weight": (H, heads * hd),
             "self_attn.q_norm.weight": (hd,), "self_attn.k_norm.weight": (hd,), "input_layernorm.weight": (H,),
             "post_attention_layernorm.weight": (H,), "mlp.gate_proj.weight": (I, H), "mlp.up_proj.weight": (I, H),
             "mlp.down_proj.weight": (H, I)}
    for name, shp in zeros.items():
        tensors[q + name] = ("BF16", shp, np.zeros(shp, np.uint16))
    rows = _bf16(token_rows)
    tensors["model.embed_tokens.weight"] = ("BF16", rows.shape, rows)
    tensors["model.norm.weight"] = ("BF16", (H,), np.zeros(H, np.uint16))
    config = {
        "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "hidden_size": H,
        "intermediate_size": I, "layer_types": ["linear_attention"] * n + ["full_attention"],
        "num_hidden_layers": n + 1, "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
        "linear_num_key_heads": shape.heads, "linear_num_value_heads": shape.heads,
        "linear_key_head_dim": shape.head_dim, "linear_value_head_dim": shape.head_dim,
        "linear_conv_kernel_dim": shape.conv_kernel, "vocab_size": len(rows), "rms_norm_eps": shape.eps,
        "hidden_act": "silu", "attention_bias": False, "attn_output_gate": True, "tie_word_embeddings": True,
        "full_attention_interval": n + 1, "max_position_embeddings": 262144, "dtype": "bfloat16",
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                            "mrope_interleaved": True, "mrope_section": [11, 11, 10]},
    }
    return _write_checkpoint_dir(out_dir, tensors, config, [])


def _write_checkpoint_dir(out_dir: Path, tensors: dict, config: dict, side_files: list[Path]) -> Path:
    """Write weights, config.json and copies of `side_files` into `<out_dir>.tmp`, then rename it to out_dir:
    an interrupted build leaves nothing half-written under the target name."""
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        write_checkpoint_weights(tmp, tensors)
        (tmp / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        for f in side_files:
            shutil.copy2(f, tmp / f.name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return out_dir

"""Run compiled circuit layers through the model runtime (`qgpu_min.model.forward.Model`).

`circuit_model` builds an in-memory model whose layers are exactly the compiled ones and whose
"vocabulary" is a table of embedding rows (one per test case, or one per circuit token), so the very
forward pass that serves the merged checkpoint executes the circuit. Rows of an MLP-only circuit are
independent, so a batch of cases runs as one prefill.
"""
from __future__ import annotations

import numpy as np

from qgpu_min.model.bf16 import f32_to_bf16
from qgpu_min.model.config import TextConfig
from qgpu_min.model.forward import Model
from qgpu_min.model.weights import Weights

from .compile import BaseShape, LayerWeights, Plan, ballast_at, banks, memory_heads, runtime_layer
from .ir import CircuitError, Group, MemOp
from .sim import group_value


def text_config(shape: BaseShape, n_layers: int, vocab: int) -> TextConfig:
    return TextConfig(
        hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        layer_types=("linear_attention",) * n_layers, num_attention_heads=8, num_key_value_heads=2,
        head_dim=256, linear_num_key_heads=shape.heads, linear_num_value_heads=shape.heads,
        linear_key_head_dim=shape.head_dim, linear_value_head_dim=shape.head_dim,
        linear_conv_kernel_dim=shape.conv_kernel, vocab_size=vocab, rms_norm_eps=shape.eps, rope_theta=1e7,
        partial_rotary_factor=0.25, attn_output_gate=True, tie_word_embeddings=True, eos_token_ids=(),
        tensor_prefix="model.language_model.")


def embedding_rows(p: Plan, inputs: dict) -> np.ndarray:
    """Circuit-token residual rows f32 [N, hidden] for {input group: element indices [N]}."""
    n = len(np.asarray(next(iter(inputs.values()))))
    rows = np.zeros((n, p.shape.hidden), np.float32)
    rows[:, list(p.const_dims)] = 1.0
    rows[:, list(p.ballast_dims)] = np.asarray(ballast_at(p, -1), np.float32)
    for g in p.circuit.inputs:
        if g not in inputs:
            raise CircuitError(f"no value for circuit input {g.name}")
        v = np.asarray(inputs[g], np.int64)
        if id(g) in p.dims:
            rows[np.arange(n), np.asarray(p.dims[id(g)])[v]] = 1.0
    return rows


def circuit_model(layers: list[LayerWeights], shape: BaseShape, embed: np.ndarray, mode: str = "fp32") -> Model:
    bits = f32_to_bf16(np.ascontiguousarray(embed, np.float32))
    w = Weights(embed=bits, lm_head=bits, final_norm=np.zeros(shape.hidden, np.float32),
                layers=[runtime_layer(lw) for lw in layers], files=None)
    model = Model(text_config(shape, len(layers), embed.shape[0]), w, mode)
    model.chunked_head()  # built now rather than inside the first decode step
    return model


def read_groups(p: Plan, hidden: np.ndarray, groups: list[Group], tol: float = 1e-3) -> np.ndarray:
    """Decode groups from final hidden rows [N, hidden]: element indices [N, len(groups)].

    Raises unless every group has one element within tol (relative) of the common active value and
    every other element within tol of 0: the compiled circuit must be exact, not merely argmax-right."""
    scale = np.float32(1) / np.sqrt(np.mean(hidden.astype(np.float64) ** 2, axis=1))  # undo the final norm
    out = np.zeros((hidden.shape[0], len(groups)), np.int64)
    for j, g in enumerate(groups):
        if g.base is not None:
            root = read_groups(p, hidden, [g.root], tol)[:, 0]
            out[:, j] = group_value({id(g.root): root}, g, hidden.shape[0])
            continue
        vals = hidden[:, p.dims[id(g)]] * scale[:, None]
        idx = vals.argmax(axis=1)
        active = vals[np.arange(len(idx)), idx]
        rest = vals.copy()
        rest[np.arange(len(idx)), idx] = 0
        bad = (np.abs(active - 1) > tol) | (np.abs(rest).max(axis=1) > tol)
        if bad.any():
            i = int(np.argmax(bad))
            raise CircuitError(f"group {g.name} is not exact on case {i}: {vals[i].tolist()}")
        out[:, j] = idx
    return out


def memory_rows(p: Plan, op: MemOp, recurrent: dict, rows: range | None = None, tol: float = 1e-3) -> np.ndarray:
    """The element of every field of the memory's rows [rows, fields], read straight from the compiled
    model's DeltaNet state (recurrent[layer]: (heads, key channels, value channels)), port 0's heads.

    A row's value channels hold its fields' active elements at one common positive value (the row's
    scale) and zeros elsewhere; a field with several sources sums its channel blocks. Raises unless every
    row is exactly such a code (within tol, relative): a state that is not is not a result."""
    layer, head = memory_heads(p)[id(op)]
    S = recurrent[layer]
    want = np.asarray(list(range(op.mem.rows) if rows is None else rows), np.int64)
    out = np.zeros((len(want), len(op.mem.fields)), np.int64)
    blocks, ch = [], 0                 # per field: the first channel of each of its sources' blocks
    for i, size in enumerate(op.mem.fields):
        blocks.append(list(range(ch, ch + size * len(op.field_sources(i)), size)))
        ch += size * len(op.field_sources(i))
    for bank_i, bank in enumerate(banks(op)):
        here = np.nonzero((want >= bank.start) & (want < bank.stop))[0]
        if not len(here):
            continue
        v = S[head + bank_i, want[here] - bank.start].astype(np.float64)      # [rows, value channels]
        scale = v.max(axis=1)
        for i, size in enumerate(op.mem.fields):
            f = sum(v[:, c0:c0 + size] for c0 in blocks[i])
            e = f.argmax(axis=1)
            top = f[np.arange(len(e)), e]
            rest = f.copy()
            rest[np.arange(len(e)), e] = 0
            safe = np.where(scale > 0, scale, 1.0)
            bad = (scale <= 0) | (np.abs(top / safe - 1) > tol) | (np.abs(rest).max(axis=1) > tol * scale)
            if bad.any():
                k = int(np.argmax(bad))
                raise CircuitError(f"memory {op.mem.name} row {int(want[here[k]])} field {i} is not an exact code in "
                                   f"the state: {(f[k] / scale[k] if scale[k] > 0 else f[k]).tolist()}")
            out[here, i] = e
    return out

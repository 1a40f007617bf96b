"""Run compiled circuit layers through the model runtime (`qgpu_min.model.forward.Model`).

`circuit_model` builds an in-memory model whose layers are exactly the compiled ones and whose
"vocabulary" is a table of embedding rows (one per test case, or one per circuit token), so the very
forward pass that serves the merged checkpoint executes the circuit. Rows of an MLP-only circuit are
independent, so a batch of cases runs as one prefill.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qgpu_min._core import ffi, lib
from qgpu_min.model import kernels
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


def circuit_model(layers: list[LayerWeights], shape: BaseShape, embed: np.ndarray | None, mode: str = "fp32",
                  bits: np.ndarray | None = None, head_now: bool = True) -> Model:
    """The runtime Model of emitted layers and the embedding rows f32 [V, hidden] (or, given `bits`, their
    bf16 bits already: embed may then be None). head_now: its chunked LM head built now (else on first use,
    or handed to it: Model.use_chunked_head)."""
    if bits is None:  # f32_to_bf16's bits (the same rounding, in C: the GPU's embedding is 61 M values)
        bits = (kernels.round_bf16(np.ascontiguousarray(embed, np.float32)).view(np.uint32) >> 16).astype(np.uint16)
    w = Weights(embed=bits, lm_head=bits, final_norm=np.zeros(shape.hidden, np.float32),
                layers=[runtime_layer(lw) for lw in layers], files=None)
    model = Model(text_config(shape, len(layers), bits.shape[0]), w, mode)
    if head_now:
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


def _field_channels(op: MemOp) -> list[tuple[list[int], np.ndarray]]:
    """The memory's fields grouped by shape: (field indices, channels [fields, sources, size]) per group of
    fields with the same size and source count; a field's sources are its consecutive channel blocks."""
    groups: dict[tuple[int, int], tuple[list[int], list[np.ndarray]]] = {}
    ch = 0
    for i, size in enumerate(op.mem.fields):
        n = len(op.field_sources(i))
        idx, chans = groups.setdefault((size, n), ([], []))
        idx.append(i)
        chans.append(ch + np.arange(n * size).reshape(n, size))
        ch += n * size
    return [(idx, np.stack(chans)) for idx, chans in groups.values()]


def _row_places(op: MemOp) -> tuple[np.ndarray, np.ndarray]:
    """Per row of the memory: its bank (head offset from the op's first head) and its row within the bank."""
    bank = np.concatenate([np.full(len(b), i) for i, b in enumerate(banks(op))]).astype(np.int64)
    return bank, np.concatenate([np.arange(len(b)) for b in banks(op)]).astype(np.int64)


@dataclass(frozen=True)
class Readout:
    """Where a memory's rows sit in a compiled model's DeltaNet state, all that decoding them needs: the
    layer, the first head of port 0, each row's bank (head offset) and row within it, and the fields'
    channels grouped by shape (_field_channels). Plain arrays, so the GPU cache stores it and a warm start
    decodes results without planning the circuit."""
    name: str
    layer: int
    head: int
    bank: np.ndarray                                     # [rows]
    at: np.ndarray                                       # [rows]
    groups: tuple[tuple[tuple[int, ...], np.ndarray], ...]   # (field indices, channels [fields, sources, size])
    n_fields: int
    _c: tuple | None = field(default=None, init=False, repr=False, compare=False)   # _c_readout's arrays

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        out = {f"{prefix}.name": np.array(self.name), f"{prefix}.place": np.array([self.layer, self.head, self.n_fields]),
               f"{prefix}.bank": self.bank, f"{prefix}.at": self.at, f"{prefix}.groups": np.array(len(self.groups))}
        for k, (idx, chans) in enumerate(self.groups):
            out[f"{prefix}.g{k}.idx"], out[f"{prefix}.g{k}.chans"] = np.array(idx, np.int64), chans
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], prefix: str) -> Readout:
        layer, head, n_fields = (int(x) for x in arrays[f"{prefix}.place"])
        groups = tuple((tuple(int(i) for i in arrays[f"{prefix}.g{k}.idx"]), arrays[f"{prefix}.g{k}.chans"])
                       for k in range(int(arrays[f"{prefix}.groups"])))
        return cls(str(arrays[f"{prefix}.name"]), layer, head, arrays[f"{prefix}.bank"], arrays[f"{prefix}.at"],
                   groups, n_fields)


def readout(p: Plan, op: MemOp) -> Readout:
    layer, head = memory_heads(p)[id(op)]
    bank, at = _row_places(op)
    groups = tuple((tuple(idx), chans) for idx, chans in _field_channels(op))
    return Readout(op.mem.name, layer, head, bank, at, groups, len(op.mem.fields))


def memory_rows(p: Plan, op: MemOp, recurrent: dict, rows: range | None = None, tol: float = 1e-3) -> np.ndarray:
    """read_rows of the memory op's readout in plan p."""
    return read_rows(readout(p, op), recurrent, rows, tol)


def read_rows(r: Readout, recurrent: dict, rows: range | None = None, tol: float = 1e-3) -> np.ndarray:
    """The element of every field of the memory's rows [rows, fields], read straight from the compiled
    model's DeltaNet state (recurrent[layer]: (heads, key channels, value channels)), port 0's heads.

    A row's value channels hold its fields' active elements at one common positive value (the row's
    scale) and zeros elsewhere; a field with several sources sums its channel blocks. Raises unless every
    row is exactly such a code (within tol, relative): a state that is not is not a result.

    The C core's qgpu_read_rows reads them (only the rows asked for, no temporaries); where it cannot vouch
    for a row (not a code, a NaN), read_rows_ref decides and says which row and field."""
    want = np.arange(len(r.bank)) if rows is None else np.asarray(list(rows), np.int64)
    S = recurrent[r.layer]
    if S.dtype == np.float32 and S.ndim == 3 and S.flags.c_contiguous and want.size:
        c = _c_readout(r)
        heads, at = np.ascontiguousarray(r.head + r.bank[want]), np.ascontiguousarray(r.at[want])
        out = np.zeros((want.size, r.n_fields), np.int64)
        bad = lib.qgpu_read_rows(ffi.from_buffer("float[]", S), S.shape[1], S.shape[2],
                                 ffi.from_buffer("int64_t[]", heads), ffi.from_buffer("int64_t[]", at), want.size,
                                 len(r.groups), *c, r.n_fields, tol, ffi.from_buffer("int64_t[]", out))
        if bad < 0:
            return out
    return read_rows_ref(r, recurrent, want, tol)


def _c_readout(r: Readout) -> tuple:
    """The readout's field groups as qgpu_read_rows takes them (made once per readout)."""
    if r._c is None:
        arrays = (np.array([len(idx) for idx, _ in r.groups], np.int64),
                  np.array([chans.shape[1] for _, chans in r.groups], np.int64),
                  np.array([chans.shape[2] for _, chans in r.groups], np.int64),
                  np.concatenate([np.asarray(idx, np.int64) for idx, _ in r.groups] + [np.zeros(1, np.int64)]),
                  np.concatenate([np.asarray(ch, np.int64).ravel() for _, ch in r.groups] + [np.zeros(1, np.int64)]))
        object.__setattr__(r, "_c", (arrays, tuple(ffi.from_buffer("int64_t[]", a) for a in arrays)))
    return r._c[1]


def read_rows_ref(r: Readout, recurrent: dict, rows: np.ndarray | range | None = None,
                  tol: float = 1e-3) -> np.ndarray:
    """The NumPy reference of read_rows (and of qgpu_read_rows)."""
    want = np.arange(len(r.bank)) if rows is None else np.asarray(list(rows), np.int64)
    v = recurrent[r.layer][r.head + r.bank[want], r.at[want]].astype(np.float64)   # [rows, value channels]
    scale = v.max(axis=1)
    safe = np.where(scale > 0, scale, 1.0)[:, None]
    out = np.zeros((len(want), r.n_fields), np.int64)
    bad = np.zeros(out.shape, bool)
    sums = {}
    for idx, chans in r.groups:
        idx = list(idx)
        f = v[:, chans].sum(axis=2)                                                 # [rows, fields, size]
        e = f.argmax(axis=2)
        top = np.take_along_axis(f, e[..., None], axis=2)[..., 0]
        rest = np.abs(f)
        np.put_along_axis(rest, e[..., None], 0, axis=2)
        rest = rest.max(axis=2)
        bad[:, idx] = (scale[:, None] <= 0) | (np.abs(top / safe - 1) > tol) | (rest > tol * safe)
        out[:, idx] = e
        sums.update({i: f[:, j] for j, i in enumerate(idx)})
    if bad.any():
        k = int(np.argmax(bad.any(axis=1)))                                         # the first bad row, its first field
        i = int(np.argmax(bad[k]))
        f = sums[i][k]
        raise CircuitError(f"memory {r.name} row {int(want[k])} field {i} is not an exact code in the state: "
                           f"{(f / scale[k] if scale[k] > 0 else f).tolist()}")
    return out


def row_words(rows: np.ndarray) -> list[int]:
    """Memory rows of one-bit fields [rows, bits], LSB first (memory_rows of a word memory), as unsigned words."""
    return row_word_array(rows).tolist()


def row_word_array(rows: np.ndarray) -> np.ndarray:
    """row_words as an int64 array."""
    rows = np.asarray(rows, np.int64)
    return (rows << np.arange(rows.shape[1], dtype=np.int64)).sum(axis=1)
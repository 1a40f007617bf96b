"""A program's loaded state on disk: the circuit-only model's state after a load part (gpu/model.load_state),
kept beside the cache entry, so a new process launching a program it launched before feeds only the launch
part (the dot launch: 42 of its 305 prompt tokens).

The file holds the state the model's own prefill of those ids gave, bit for bit: each DeltaNet layer's
recurrent and conv state as the positions and bits of its nonzero words (a load leaves ~1% of them nonzero;
-0.0 is a nonzero word here, so it comes back as -0.0), the layers still all-zero (State.zero), the clean
flags and the position. The name carries a hash of the mode and the ids; the cache checks digest, format and
key like every derived file (gpu/cache.DerivedStore) and makes a damaged one again. Only states without
attention caches or deferred text are kept (the circuit-only model has neither). QGPU_KEEP_LOADS=0 turns
the files off (tools/bench_gpu.py does, to time whole prompts).
"""
from __future__ import annotations

import hashlib
import os

import numpy as np

from ..model.forward import Model, State

PREFIX = "load."
KEPT_FILES = 32     # load states kept per cache entry, the newest (older ones are removed)
ENV_VAR = "QGPU_KEEP_LOADS"


def enabled() -> bool:
    return os.environ.get(ENV_VAR, "1") != "0"


def name(mode: str, ids: list[int]) -> str:
    digest = hashlib.sha256(f"{mode}|".encode() + np.asarray(ids, np.int64).tobytes()).hexdigest()[:32]
    return f"{PREFIX}{mode}.{digest}"


def keepable(state: State) -> bool:
    return not (state.keys or state.values or state.deferred or state.deferred_layers)


def _sparse(prefix: str, a: np.ndarray) -> dict[str, np.ndarray]:
    bits = np.ascontiguousarray(a, np.float32).reshape(-1).view(np.uint32)
    where = np.flatnonzero(bits)
    return {f"{prefix}.at": where.astype(np.int64), f"{prefix}.bits": bits[where]}


def state_arrays(state: State) -> dict[str, np.ndarray]:
    """The state as arrays (see the module docstring); only for a keepable state."""
    layers = sorted(state.recurrent)
    out = {"layers": np.array(layers, np.int64), "pos": np.array(state.pos, np.int64),
           "zero": np.array(sorted(state.zero), np.int64),
           "clean": np.array([state.clean[i] for i in layers], np.int32).reshape(len(layers), -1)}
    for i in layers:
        out.update(_sparse(f"r{i}", state.recurrent[i]))
        out.update(_sparse(f"c{i}", state.conv[i]))
    return out


def _fill(a: np.ndarray, arrays: dict[str, np.ndarray], prefix: str) -> None:
    at, bits = arrays[f"{prefix}.at"], arrays[f"{prefix}.bits"]
    if at.shape != bits.shape or (at.size and (at.min() < 0 or at.max() >= a.size)):
        raise ValueError(f"kept state {prefix} does not fit its layer")
    a.reshape(-1).view(np.uint32)[at] = bits


def state_from_arrays(model: Model, arrays: dict[str, np.ndarray]) -> State:
    """A new state of `model` holding what state_arrays wrote; ValueError when the arrays do not fit it."""
    state = model.new_state()
    layers = [int(i) for i in arrays["layers"]]
    if layers != sorted(state.recurrent) or arrays["clean"].shape != (len(layers), len(state.clean[layers[0]])):
        raise ValueError("the kept state is of another model")
    for k, i in enumerate(layers):
        _fill(state.recurrent[i], arrays, f"r{i}")
        _fill(state.conv[i], arrays, f"c{i}")
        state.clean[i] = arrays["clean"][k].astype(np.int32).copy()
    state.zero = {int(i) for i in arrays["zero"]}
    state.pos = int(arrays["pos"])
    return state

"""When text tokens may skip a merged checkpoint's GPU layers, bit for bit (Model.skip_gpu_layers_on_text).

A checkpoint built by `qgpu-min build` runs its GPU in decoder layers 0..n-1, all Gated DeltaNet, in front of
the base's. The build gates every GPU unit and every query/key channel so that a text token it claims silent
reaches pre-activations <= -90 there, where SiLU is exactly -0 (checked on every such embedding row with the
rounded weights): each GPU sublayer then adds +-0 to that token's residual, and its zero key writes nothing
into the GPU's memory while its zero query reads +-0 from it. What running those layers on the token still
does is shift its projections into each layer's conv window. So Model defers that work: the token goes
straight to layer n with its embedding, its id is appended to State.deferred, and before any other token
touches the GPU layers (or a caller reads their state: Model.settle) the deferred ids run through them in one
batch. Their input there is their embedding either way, so the GPU layers' state ends exactly as running them
at the time would have left it; and settling checks that their residual came out unchanged.

A block of tokens skips only when, for every token: the build claimed its id silent; its embedding row is
finite and holds no -0 (h + +-0 == h needs that); and, for each state, every GPU layer's recurrent state is
known finite (the layer is in State.zero, or every head is `clean`) and its conv window is finite, so the
+-0 query and the gated channels' zero taps give +-0 (deferred text tokens keep all of that true: they write
only +-0 and shift in finite projections, so the check is made once, on the state before the first one).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .errors import ModelInputError

if TYPE_CHECKING:
    from .forward import State


@dataclass(frozen=True)
class TextSkip:
    """Layers 0..layers-1 are a built checkpoint's GPU; silent[id] says the build claimed that token silent."""
    layers: int
    silent: np.ndarray   # bool [vocab_size]


def text_skip(layer_types: list[str], vocab_size: int, layers: int, silent_ids) -> TextSkip:
    """The checked rule for a model with these layer types and vocabulary; bad input is a ModelInputError."""
    if not 0 < layers < len(layer_types):
        raise ModelInputError(f"the GPU's layers must be 1..{len(layer_types) - 1} of the {len(layer_types)} "
                              f"layers (the base's follow them), not {layers}")
    if any(kind != "linear_attention" for kind in layer_types[:layers]):
        raise ModelInputError(f"layers 0..{layers - 1} are not all linear attention: not a built GPU")
    ids = np.asarray(silent_ids)
    if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
        raise ModelInputError("the silent token ids must be a 1-D list of ints")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ModelInputError(f"a silent token id is outside the vocabulary [0, {vocab_size})")
    silent = np.zeros(vocab_size, bool)
    silent[ids.astype(np.int64)] = True
    silent.flags.writeable = False
    return TextSkip(layers, silent)


def rows_pass_unchanged(h: np.ndarray) -> bool:
    """Whether adding +-0 leaves every value of h as it is: all finite, no -0."""
    return bool(np.isfinite(h).all() and not (np.signbit(h) & (h == 0)).any())


def state_allows(state: State, layers: int) -> bool:
    """Whether the GPU layers' state lets a silent token through unchanged (module docstring): checked on the
    state before its first deferred token, which deferred tokens keep true."""
    if state.deferred:
        return state.deferred_layers == layers
    for i in range(layers):
        if i in state.zero:
            continue
        clean = state.clean.get(i)
        if clean is None or not clean.all() or not np.isfinite(state.conv[i]).all():
            return False
    return True

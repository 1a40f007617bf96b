"""The Qwen3.5 text configuration, read from the checkpoint's config.json.

Two layouts are accepted: the published nested one (`Qwen3_5ForConditionalGeneration`, text fields under
`text_config`, tensors under `model.language_model.`) and the flat text-only one that transformers writes
for `Qwen3_5ForCausalLM` (`model_type` "qwen3_5_text", tensors under `model.`).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..files import read_json
from .errors import CheckpointError

LAYER_TYPES = ("linear_attention", "full_attention")
# Far above Qwen3.5's sizes (its largest, the vocabulary, is 248,320) and small enough that products of two
# sizes stay far inside the C core's 64-bit index arithmetic: a config beyond them is refused at once.
MAX_SIZE = 1 << 24
MAX_LAYERS = 4096


@dataclass(frozen=True)
class TextConfig:
    hidden_size: int
    intermediate_size: int
    layer_types: tuple[str, ...]
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    partial_rotary_factor: float
    attn_output_gate: bool
    tie_word_embeddings: bool
    eos_token_ids: tuple[int, ...]
    tensor_prefix: str  # "model.language_model." (nested config) or "model." (flat text config)

    @property
    def num_hidden_layers(self) -> int:
        return len(self.layer_types)

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim

    def layers_of(self, kind: str) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == kind]


def _int(d: dict, key: str, where: str, default: Any = None, limit: int = MAX_SIZE) -> int:
    value = d.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CheckpointError(f"config.json: {where}{key} must be a positive integer, found {value!r:.80}")
    if value > limit:
        raise CheckpointError(f"config.json: {where}{key} is {value}, more than this runtime's limit of {limit}")
    return value


def _positive_number(value: Any, key: str, where: str) -> float:
    number = float("nan")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:       # an integer beyond float's range
            pass
    if not 0 < number < math.inf:   # NaN fails too (json reads NaN and Infinity)
        raise CheckpointError(f"config.json: {where}{key} must be a positive finite number, found {value!r:.80}")
    return number


def _flag(d: dict, key: str, where: str, default: bool) -> bool:
    value = d.get(key, default)
    if not isinstance(value, bool):
        raise CheckpointError(f"config.json: {where}{key} must be true or false, found {value!r:.80}")
    return value


def _token_ids(value: Any, key: str, where: str, vocab_size: int) -> tuple[int, ...]:
    """eos_token_id: one id or a list of ids, each a token of the vocabulary (absent: none)."""
    ids = [] if value is None else value if isinstance(value, list) else [value]
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size:
            raise CheckpointError(f"config.json: {where}{key} must be a token id in 0..{vocab_size - 1} or a list "
                                  f"of them, found {value!r:.80}")
    return tuple(ids)


def _machine_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_state_fits(cfg: "TextConfig", where: str = "", memory: int | None = None) -> None:
    """The recurrent and convolution state of one sequence is allocated from the config alone (no tensor
    bounds it: a small file can describe a state of many GiB), so a config whose state exceeds the machine's
    memory is refused before anything is allocated, with the size it asks for."""
    memory = _machine_bytes() if memory is None else memory
    per_layer = 4 * (cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim
                     + cfg.conv_dim * (cfg.linear_conv_kernel_dim - 1))
    need = per_layer * len(cfg.layers_of("linear_attention"))
    if memory is not None and need > memory:
        raise CheckpointError(f"config.json: {where}the linear-attention state of one sequence needs {need} bytes "
                              f"({need / 2**30:.1f} GiB), more than this machine's memory ({memory / 2**30:.1f} GiB)")


def _rope(text: dict, where: str) -> tuple[float, float]:
    """(rope_theta, partial_rotary_factor) from `rope_parameters`, or from older top-level fields."""
    params = text.get("rope_parameters") or text.get("rope_scaling") or {}
    if not isinstance(params, dict):
        raise CheckpointError(f"config.json: {where}rope_parameters must be an object, found {params!r}")
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        raise CheckpointError(f"config.json: {where}rope_parameters.rope_type {rope_type!r} is not supported "
                              "(only 'default' RoPE, as in Qwen3.5)")
    theta = params.get("rope_theta", text.get("rope_theta"))
    factor = params.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))
    return (_positive_number(theta, "rope_theta", where),
            _positive_number(factor, "partial_rotary_factor", where))


def _layer_types(text: dict, where: str) -> tuple[str, ...]:
    """The explicit `layer_types` list wins; without it HF derives the pattern from full_attention_interval."""
    n = _int(text, "num_hidden_layers", where, limit=MAX_LAYERS)
    types = text.get("layer_types")
    if types is None:
        interval = _int(text, "full_attention_interval", where, 4)
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
    if not isinstance(types, list):
        raise CheckpointError(f"config.json: {where}layer_types must be a list, found {types!r}")
    for i, t in enumerate(types):
        if t not in LAYER_TYPES:
            raise CheckpointError(f"config.json: {where}layer_types[{i}] is {t!r}; known layer types are "
                                  f"{', '.join(LAYER_TYPES)}")
    if len(types) != n:
        raise CheckpointError(f"config.json: {where}layer_types has {len(types)} entries but "
                              f"num_hidden_layers is {n}")
    return tuple(types)


def parse_config(raw: dict) -> TextConfig:
    """Build a TextConfig from the parsed config.json (nested or flat)."""
    if not isinstance(raw, dict):
        raise CheckpointError("config.json: the top level must be a JSON object")
    if "text_config" in raw:
        text, where, prefix = raw["text_config"], "text_config.", "model.language_model."
        if not isinstance(text, dict):
            raise CheckpointError("config.json: text_config must be an object")
    else:
        text, where, prefix = raw, "", "model."
    model_type = text.get("model_type", "qwen3_5_text")
    if model_type not in ("qwen3_5_text", "qwen3_5"):
        raise CheckpointError(f"config.json: {where}model_type is {model_type!r}, expected 'qwen3_5_text' "
                              "(or 'qwen3_5')")
    if text.get("attention_bias", False):
        raise CheckpointError(f"config.json: {where}attention_bias is true; Qwen3.5 has no biases and this "
                              "runtime does not support them")
    act = text.get("hidden_act", "silu")
    if act != "silu":
        raise CheckpointError(f"config.json: {where}hidden_act {act!r} is not supported (only 'silu')")
    theta, factor = _rope(text, where)
    vocab_size = _int(text, "vocab_size", where)
    eos_ids = _token_ids(text.get("eos_token_id", raw.get("eos_token_id")), "eos_token_id", where, vocab_size)
    tie = _flag(raw, "tie_word_embeddings", "", _flag(text, "tie_word_embeddings", where, True))
    eps = _positive_number(text.get("rms_norm_eps", 1e-6), "rms_norm_eps", where)
    cfg = TextConfig(
        hidden_size=_int(text, "hidden_size", where),
        intermediate_size=_int(text, "intermediate_size", where),
        layer_types=_layer_types(text, where),
        num_attention_heads=_int(text, "num_attention_heads", where),
        num_key_value_heads=_int(text, "num_key_value_heads", where),
        head_dim=_int(text, "head_dim", where),
        linear_num_key_heads=_int(text, "linear_num_key_heads", where),
        linear_num_value_heads=_int(text, "linear_num_value_heads", where),
        linear_key_head_dim=_int(text, "linear_key_head_dim", where),
        linear_value_head_dim=_int(text, "linear_value_head_dim", where),
        linear_conv_kernel_dim=_int(text, "linear_conv_kernel_dim", where),
        vocab_size=vocab_size,
        rms_norm_eps=eps,
        rope_theta=theta,
        partial_rotary_factor=factor,
        attn_output_gate=_flag(text, "attn_output_gate", where, True),
        tie_word_embeddings=tie,
        eos_token_ids=eos_ids,
        tensor_prefix=prefix,
    )
    if cfg.num_attention_heads % cfg.num_key_value_heads:
        raise CheckpointError(f"config.json: {where}num_attention_heads ({cfg.num_attention_heads}) must be a "
                              f"multiple of num_key_value_heads ({cfg.num_key_value_heads})")
    if cfg.linear_num_value_heads % cfg.linear_num_key_heads:
        raise CheckpointError(f"config.json: {where}linear_num_value_heads ({cfg.linear_num_value_heads}) must "
                              f"be a multiple of linear_num_key_heads ({cfg.linear_num_key_heads})")
    if cfg.rotary_dim % 2 or cfg.rotary_dim > cfg.head_dim:
        raise CheckpointError(f"config.json: {where}head_dim {cfg.head_dim} x partial_rotary_factor "
                              f"{cfg.partial_rotary_factor} must give an even rotary size <= head_dim")
    check_state_fits(cfg, where)
    return cfg


def load_config(model_dir: str | Path) -> TextConfig:
    """Read and validate `<model_dir>/config.json`."""
    path = Path(model_dir) / "config.json"
    try:
        raw = read_json(path)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: not found (is {model_dir} a Qwen3.5 checkpoint directory?)") from None
    except ValueError as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    except OSError as e:  # a folder, no permission
        raise CheckpointError(f"{path}: cannot be read ({e})") from None
    try:
        return parse_config(raw)
    except CheckpointError as e:        # the messages say "config.json: ..."; name the file the user has
        raise CheckpointError(str(e).replace("config.json", str(path), 1)) from None

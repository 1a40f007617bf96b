"""The checkpoint's generation_config.json: its stop ids and sampling defaults, read and checked in one place.

Every field is optional; a field of the wrong type or out of range is an error naming the file and the field
(an ignored bad value would silently change what the model generates)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..files import read_json
from .errors import CheckpointError

NAME = "generation_config.json"


@dataclass(frozen=True)
class GenerationConfig:
    eos_token_ids: tuple[int, ...] = ()
    sampling: dict | None = None  # the given ones of temperature, top_p, top_k
    suppress_tokens: tuple[int, ...] = ()   # ids text generation never picks (a merged model's GPU tokens)


def _number(gen: dict, key: str, ok, what: str, path: Path):
    value = gen.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
        raise CheckpointError(f"{path}: {key} must be {what}, found {value!r:.80}")
    return value


def read_generation_config(model_dir: str | Path) -> GenerationConfig | None:
    """The checked contents of `<model_dir>/generation_config.json`, or None when there is none."""
    path = Path(model_dir) / NAME
    if not path.exists():
        return None
    try:
        gen = read_json(path)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: cannot be read as JSON ({e})") from None
    if not isinstance(gen, dict):
        raise CheckpointError(f"{path}: the top level must be a JSON object")
    eos = gen.get("eos_token_id")
    ids = [] if eos is None else eos if isinstance(eos, list) else [eos]
    if not all(type(t) is int and t >= 0 for t in ids):
        raise CheckpointError(f"{path}: eos_token_id must be a token id or a list of them, found {eos!r:.80}")
    suppress = gen.get("suppress_tokens") or []
    if not isinstance(suppress, list) or not all(type(t) is int and t >= 0 for t in suppress):
        raise CheckpointError(f"{path}: suppress_tokens must be a list of token ids, found {suppress!r:.80}")
    sampling = {
        "temperature": _number(gen, "temperature", lambda v: 0 < v < math.inf, "a positive number", path),
        "top_p": _number(gen, "top_p", lambda v: 0 < v <= 1, "a number in (0, 1]", path),
        "top_k": _number(gen, "top_k", lambda v: isinstance(v, int) and v >= 0, "an integer >= 0", path),
    }
    return GenerationConfig(tuple(ids), {k: v for k, v in sampling.items() if v is not None}, tuple(suppress))

"""Text generation: greedy or sampled (temperature, top-k, top-p, seed), stop tokens, streaming."""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .chat_format import chat_prompt
from .errors import ModelInputError
from .forward import Model

# Qwen3.5's recommended non-thinking sampling, used when the checkpoint has no generation_config.json
DEFAULT_SAMPLING = {"temperature": 0.7, "top_p": 0.8, "top_k": 20}


@dataclass(frozen=True)
class Sampling:
    greedy: bool = False
    temperature: float = 0.7
    top_p: float = 0.8
    top_k: int = 20  # 0: no top-k cut
    seed: int | None = None

    def check(self) -> None:
        if not self.greedy:
            if not self.temperature > 0:
                raise ModelInputError(f"temperature must be > 0 (or use greedy), got {self.temperature}")
            if not 0 < self.top_p <= 1:
                raise ModelInputError(f"top_p must be in (0, 1], got {self.top_p}")
            if self.top_k < 0:
                raise ModelInputError(f"top_k must be >= 0, got {self.top_k}")


def default_sampling(model: Model) -> dict:
    """temperature/top_p/top_k from the checkpoint's generation_config.json, else Qwen's recommendation."""
    out = dict(DEFAULT_SAMPLING)
    path = model.path / "generation_config.json" if model.path else None
    if path and path.exists():
        try:
            gen = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return out
        out.update({k: gen[k] for k in DEFAULT_SAMPLING if isinstance(gen.get(k), (int, float))})
    return out


def pick_token(logits: np.ndarray, sampling: Sampling, rng: np.random.Generator) -> int:
    """Greedy: the argmax (lowest id on ties). Else softmax(logits / T), cut to the top_k most likely and to
    the smallest set whose probability reaches top_p, then draw."""
    if sampling.greedy:
        return int(np.argmax(logits))
    z = logits.astype(np.float64) / sampling.temperature
    order = np.argsort(-z, kind="stable")
    if sampling.top_k:
        order = order[:sampling.top_k]
    p = np.exp(z[order] - z[order[0]])
    p /= p.sum()
    # the first index where the running sum reaches top_p (clamped: the float sum may end just below 1)
    keep = min(int(np.searchsorted(np.cumsum(p), sampling.top_p)) + 1, len(p))
    p = p[:keep] / p[:keep].sum()
    return int(order[rng.choice(keep, p=p)])


def generate_ids(model: Model, prompt_ids: list[int], max_new_tokens: int = 256,
                 sampling: Sampling = Sampling(), stop_ids: tuple[int, ...] | None = None) -> Iterator[int]:
    """Yield generated token ids one at a time; a stop token is yielded, then generation ends. Ids the
    tokenizer cannot decode (the padded rows above its vocabulary) are never chosen."""
    sampling.check()
    if max_new_tokens < 0:
        raise ModelInputError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    tok = model.tokenizer
    if stop_ids is None:
        stop_ids = tok.stop_ids if tok else model.config.eos_token_ids
    rng = np.random.default_rng(sampling.seed)
    limit = tok.vocab_size if tok else model.config.vocab_size
    state = model.new_state()
    if max_new_tokens == 0:
        return
    logits = model.prefill(state, prompt_ids)
    for n in range(max_new_tokens):
        if limit < logits.shape[0]:
            logits[limit:] = -np.inf
        token = pick_token(logits, sampling, rng)
        yield token
        if token in stop_ids or n + 1 == max_new_tokens:
            return
        logits = model.decode(state, token)


def stream_text(model: Model, ids: Iterator[int], stop_ids: tuple[int, ...] = ()) -> Iterator[str]:
    """Text pieces as ids arrive (stop tokens not shown). A piece is held back while the decoded text ends in
    an incomplete UTF-8 sequence."""
    got: list[int] = []
    shown = 0
    for token in ids:
        if token in stop_ids:
            break
        got.append(token)
        text = model.tokenizer.decode(got)
        if not text.endswith("\ufffd") and len(text) > shown:
            yield text[shown:]
            shown = len(text)
    text = model.tokenizer.decode(got)
    if len(text) > shown:
        yield text[shown:]


def prompt_ids(model: Model, prompt: str, raw: bool = False, enable_thinking: bool = False) -> list[int]:
    """Token ids for a prompt: wrapped in the chat format unless raw."""
    if model.tokenizer is None:
        raise ModelInputError(f"{model.path}: no tokenizer.json, so text prompts cannot be encoded")
    text = prompt if raw else chat_prompt(prompt, enable_thinking=enable_thinking)
    ids = model.tokenizer.encode(text)
    if not ids:
        raise ModelInputError("the prompt encodes to no tokens")
    return ids


def result(model: Model, prompt_ids: list[int], token_ids: list[int]) -> dict:
    """{"prompt_ids", "token_ids" (a final stop token included), "text" (without it)}."""
    stops = model.tokenizer.stop_ids
    shown = token_ids[:-1] if token_ids and token_ids[-1] in stops else token_ids
    return {"prompt_ids": list(prompt_ids), "token_ids": list(token_ids), "text": model.tokenizer.decode(shown)}


def generate(model: Model, prompt: str, max_new_tokens: int = 256, sampling: Sampling = Sampling(),
             raw: bool = False) -> dict:
    """Generate a whole answer for a prompt (chat-formatted unless raw); returns `result(...)`."""
    ids = prompt_ids(model, prompt, raw)
    return result(model, ids, list(generate_ids(model, ids, max_new_tokens, sampling)))

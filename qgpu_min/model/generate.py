"""Text generation: greedy or sampled (temperature, top-k, top-p, seed), stop tokens, streaming."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .chat_format import chat_prompt
from .errors import ModelInputError
from .forward import Model, State
from .generation_config import read_generation_config

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
    gen = read_generation_config(model.path) if model.path else None
    return {**DEFAULT_SAMPLING, **(gen.sampling if gen else {})}


def candidates(logits: np.ndarray, sampling: Sampling) -> tuple[np.ndarray, np.ndarray]:
    """The ids a sampled draw can pick and their probabilities: softmax(logits / T), cut to the top_k most
    likely, then to the smallest set of most likely ids whose probability reaches top_p, renormalised.

    Sorting a 248k vocabulary costs ~50 ms a token, so the nucleus is searched among the m most likely
    (partitioned, then sorted), m growing until their mass reaches top_p: the set a full sort gives."""
    z = logits.astype(np.float64) / sampling.temperature
    w = np.exp(z - z.max())
    pool = np.arange(z.size)
    if 0 < sampling.top_k < z.size:
        pool = np.argpartition(-z, sampling.top_k - 1)[:sampling.top_k]
    total = w[pool].sum()
    if sampling.top_p >= 1:
        return pool, w[pool] / total
    m = min(pool.size, 64)
    while True:
        top = pool if m == pool.size else pool[np.argpartition(-z[pool], m - 1)[:m]]
        order = top[np.lexsort((top, -z[top]))]  # most likely first, lower id first on ties
        cum = np.cumsum(w[order]) / total
        if cum[-1] >= sampling.top_p or m == pool.size:
            break
        m = min(pool.size, 8 * m)
    # the first index where the running sum reaches top_p (clamped: the float sum may end just below it)
    keep = min(int(np.searchsorted(cum, sampling.top_p)) + 1, order.size)
    p = w[order[:keep]]
    return order[:keep], p / p.sum()


def pick_token(logits: np.ndarray, sampling: Sampling, rng: np.random.Generator) -> int:
    """Greedy: the argmax (lowest id on ties). Else a draw from `candidates`."""
    if sampling.greedy:
        return int(np.argmax(logits))
    ids, p = candidates(logits, sampling)
    return int(ids[rng.choice(ids.size, p=p)])


def generate_ids(model: Model, prompt_ids: list[int], max_new_tokens: int = 256,
                 sampling: Sampling = Sampling(), stop_ids: tuple[int, ...] | None = None,
                 state: State | None = None) -> Iterator[int]:
    """Yield generated token ids one at a time; a stop token is yielded, then generation ends. Ids the
    tokenizer cannot decode (the padded rows above its vocabulary) and the ids generation_config.json
    suppresses (a built checkpoint's GPU tokens) are never chosen. `state`: continue
    that sequence (a conversation's earlier turns) instead of a new one; the last yielded token is not fed
    into it, so the next call's prompt should start with it."""
    stop_ids, never = _generation_rules(model, max_new_tokens, sampling, stop_ids)
    rng = np.random.default_rng(sampling.seed)
    state = model.new_state() if state is None else state
    if max_new_tokens == 0:
        return
    logits = model.prefill(state, prompt_ids)
    for n in range(max_new_tokens):
        logits[never] = -np.inf
        token = pick_token(logits, sampling, rng)
        yield token
        if token in stop_ids or n + 1 == max_new_tokens:
            return
        logits = model.decode(state, token)


def _generation_rules(model: Model, max_new_tokens: int, sampling: Sampling,
                      stop_ids: tuple[int, ...] | None) -> tuple[tuple[int, ...], np.ndarray]:
    """The arguments checked; the stop ids (the tokenizer's unless given) and the ids never to choose."""
    sampling.check()
    if max_new_tokens < 0:
        raise ModelInputError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    tok = model.tokenizer
    if stop_ids is None:
        stop_ids = tok.stop_ids if tok else model.config.eos_token_ids
    gen = read_generation_config(model.path) if model.path else None
    never = ~tok.known_ids(model.config.vocab_size) if tok else np.zeros(model.config.vocab_size, bool)
    suppressed = np.array(gen.suppress_tokens if gen else (), np.int64)
    never[suppressed[suppressed < model.config.vocab_size]] = True
    return stop_ids, np.flatnonzero(never)


def generate_many(model: Model, prompts: list[list[int]], max_new_tokens: int = 256,
                  sampling: Sampling = Sampling(), stop_ids: tuple[int, ...] | None = None) -> list[list[int]]:
    """Several independent prompts generated together: each decode step feeds every unfinished sequence's
    token through one Model.decode_batch (one pass over the weights for all of them). Sequence j's ids are
    exactly what generate_ids gives for prompts[j] alone (its own random stream, seeded with sampling.seed)."""
    stop_ids, never = _generation_rules(model, max_new_tokens, sampling, stop_ids)
    if not prompts:
        return []
    out: list[list[int]] = [[] for _ in prompts]
    if max_new_tokens == 0:
        return out
    rngs = [np.random.default_rng(sampling.seed) for _ in prompts]
    states = [model.new_state() for _ in prompts]
    logits = np.stack([model.prefill(state, ids) for state, ids in zip(states, prompts)])
    active = list(range(len(prompts)))
    while active:
        fed = []
        for row, j in enumerate(active):
            logits[row, never] = -np.inf
            token = pick_token(logits[row], sampling, rngs[j])
            out[j].append(token)
            if token not in stop_ids and len(out[j]) < max_new_tokens:
                fed.append(j)
        active = fed
        if active:
            logits = model.decode_batch([states[j] for j in active], [out[j][-1] for j in active])
    return out


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

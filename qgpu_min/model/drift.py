"""How far a merged checkpoint's next-token distribution is from its base's, over a text.

Both models read the same token ids, chunk by chunk (their states carry on between chunks), and at every
position the base's distribution P over its vocabulary is compared with the distribution Q text generation
samples from the merged model: its whole vocabulary but the ids its generation_config.json suppresses (a
built checkpoint suppresses the GPU's tokens). Reported: KL(P || Q) in nats, whether the two argmaxes agree,
the largest logit difference over the base vocabulary, and the mass the merged model puts on tokens the
base lacks when nothing is suppressed (what sampling that ignores suppress_tokens would see). All in
float64 from the models' float32 logits.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .errors import ModelInputError
from .forward import Model

CHUNK = 256  # positions per step: [CHUNK, V] logits of both models, about 0.5 GB at Qwen's 248k vocabulary


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float64)   # one memory order: the same sums for equal rows
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def position_drift(base_logits: np.ndarray, merged_logits: np.ndarray, suppressed: np.ndarray | None = None
                   ) -> dict[str, np.ndarray]:
    """Per position ([T, V_base] and [T, V_merged] logits, V_merged >= V_base; `suppressed`: merged ids
    generation never samples): kl, top1_agree, max_logit_diff (over the base vocabulary), extra_mass (the
    unsuppressed merged distribution's mass on ids >= V_base)."""
    v = base_logits.shape[1]
    if merged_logits.shape[0] != base_logits.shape[0] or merged_logits.shape[1] < v:
        raise ModelInputError(f"merged logits {merged_logits.shape} do not extend base logits {base_logits.shape}")
    extra = np.exp(_log_softmax(merged_logits)[:, v:]).sum(axis=1) if merged_logits.shape[1] > v else \
        np.zeros(len(base_logits))
    kept = np.ones(merged_logits.shape[1], bool)
    if suppressed is not None:
        kept[suppressed] = False
    cols = np.flatnonzero(kept)           # Q lives on these columns only (summed in the same order as P's)
    lq_kept = _log_softmax(merged_logits[:, cols])
    lq = np.full((len(base_logits), v), -np.inf)
    base_cols = cols < v
    lq[:, cols[base_cols]] = lq_kept[:, base_cols]
    lp = _log_softmax(base_logits)
    p = np.exp(lp)
    with np.errstate(invalid="ignore"):      # p = 0 where q = 0 contributes 0, not nan
        terms = np.where(p > 0, p * (lp - lq), 0.0)
    return {
        "kl": np.maximum(terms.sum(axis=1), 0.0),   # >= 0 up to rounding
        "top1_agree": base_logits.argmax(axis=1) == cols[lq_kept.argmax(axis=1)],
        "max_logit_diff": np.abs(merged_logits[:, :v].astype(np.float64) - base_logits).max(axis=1),
        "extra_mass": extra,
    }


def drift(base: Model, merged: Model, ids: list[int], chunk: int = CHUNK, suppressed: np.ndarray | None = None,
          progress: Callable[[int, int], None] | None = None, leaky: list[int] | None = None) -> dict:
    """The summary over every position of `ids` (see the module docstring); progress(done, total). `leaky`: the
    token ids a build could not make exactly silent (its manifest's text_gate.leaky_token_ids); the summary then
    says where the text first reads one and how far the positions before it drift (exactly 0 when the other
    rows are silent, as the build claims)."""
    if len(ids) < 1:
        raise ModelInputError("the drift text has no tokens")
    if merged.config.vocab_size < base.config.vocab_size:
        raise ModelInputError(f"the merged model's vocabulary ({merged.config.vocab_size}) is smaller than the "
                              f"base's ({base.config.vocab_size}): not a model built on this base")
    sb, sm = base.new_state(), merged.new_state()
    parts: list[dict] = []
    for start in range(0, len(ids), chunk):
        piece = ids[start:start + chunk]
        parts.append(position_drift(base.prefill(sb, piece, all_logits=True),
                                    merged.prefill(sm, piece, all_logits=True), suppressed))
        if progress is not None:
            progress(min(start + chunk, len(ids)), len(ids))
    d = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    kl = d["kl"]
    return {
        "positions": len(ids),
        "kl": {"mean": float(kl.mean()), "max": float(kl.max()), "p50": float(np.percentile(kl, 50)),
               "p99": float(np.percentile(kl, 99)), "zero_positions": int((kl == 0).sum())},
        "top1_agreement": float(d["top1_agree"].mean()),
        "max_logit_diff": float(d["max_logit_diff"].max()),
        "suppressed_tokens": 0 if suppressed is None else len(suppressed),
        "unsuppressed_extra_mass": {"mean": float(d["extra_mass"].mean()), "max": float(d["extra_mass"].max())},
        "worst_position": int(kl.argmax()),
        **({"leaky": leak_summary(ids, kl, leaky)} if leaky else {}),
    }


def leak_summary(ids: list[int], kl: np.ndarray, leaky: list[int]) -> dict:
    """Where the text reads a leaky token, and the KL before the first such position and from it on."""
    at = np.isin(np.asarray(ids, np.int64), np.asarray(leaky, np.int64))
    first = int(at.argmax()) if at.any() else len(ids)
    before, after = kl[:first], kl[first:]
    return {"ids": len(leaky), "positions": int(at.sum()), "first_position": first if at.any() else None,
            "kl_max_before_first": float(before.max()) if len(before) else 0.0,
            "kl_mean_from_first": float(after.mean()) if len(after) else 0.0}

"""model/drift.py: KL(base || merged as generation samples it), top-1 agreement, logit differences, and the
mass on tokens the base lacks, checked against direct computations on small logits and on real models."""
from __future__ import annotations

import math

import numpy as np
import pytest

from qgpu_min.model.drift import drift, position_drift
from qgpu_min.model.errors import ModelInputError
from qgpu_min.model.forward import load_model
from qgpu_min.model.synthetic import write_synthetic_checkpoint


def _kl(p_logits, q_logits) -> float:
    """KL from the definition, in Python floats."""
    zp = sum(math.exp(x) for x in p_logits)
    zq = sum(math.exp(x) for x in q_logits)
    return sum(math.exp(a) / zp * (a - math.log(zp) - (b - math.log(zq))) for a, b in zip(p_logits, q_logits))


def test_position_drift_against_the_definition():
    rng = np.random.default_rng(1)
    base = rng.standard_normal((5, 6)).astype(np.float32)
    merged = np.concatenate([base + rng.standard_normal((5, 6)).astype(np.float32) * 0.3,
                             rng.standard_normal((5, 3)).astype(np.float32)], axis=1)
    d = position_drift(base, merged, suppressed=np.array([6, 7, 8]))
    for t in range(5):
        assert d["kl"][t] == pytest.approx(_kl(base[t].tolist(), merged[t, :6].tolist()), rel=1e-9, abs=1e-15)
        full = np.exp(merged[t].astype(np.float64))
        assert d["extra_mass"][t] == pytest.approx(full[6:].sum() / full.sum(), rel=1e-9)
    assert list(d["top1_agree"]) == list(base.argmax(1) == merged[:, :6].argmax(1))
    assert d["max_logit_diff"] == pytest.approx(np.abs(merged[:, :6] - base).max(1))
    # nothing suppressed: Q includes the extra tokens, so KL grows by -log(1 - their mass)
    free = position_drift(base, merged)
    assert free["kl"] == pytest.approx(d["kl"] - np.log1p(-d["extra_mass"]), rel=1e-9)


def test_identical_logits_give_exactly_zero_with_the_extra_tokens_suppressed():
    rng = np.random.default_rng(2)
    base = rng.standard_normal((7, 50)).astype(np.float32) * 4
    merged = np.concatenate([base, np.full((7, 20), 30, np.float32)], axis=1)   # extra tokens dominate
    d = position_drift(base, merged, suppressed=np.arange(50, 70))
    assert np.all(d["kl"] == 0) and d["top1_agree"].all() and np.all(d["max_logit_diff"] == 0)
    assert np.all(d["extra_mass"] > 0.99)
    assert not position_drift(base, merged)["top1_agree"].any()
    with pytest.raises(ModelInputError, match="do not extend base logits"):
        position_drift(base, merged[:, :10])


def test_a_model_against_itself_and_against_another(tmp_path):
    a = load_model(write_synthetic_checkpoint(tmp_path / "a", "tiny", seed=0))
    b = load_model(write_synthetic_checkpoint(tmp_path / "b", "tiny", seed=1))
    ids = list(range(1, 40)) * 3
    same = drift(a, a, ids, chunk=16)
    assert same["positions"] == len(ids) and same["kl"]["max"] == 0 and same["top1_agreement"] == 1
    other = drift(a, b, ids, chunk=16)
    assert other["kl"]["mean"] > 0.01 and other["max_logit_diff"] > 0
    # chunking does not change the answer: the states carry on between chunks
    assert drift(a, b, ids, chunk=7)["kl"]["mean"] == pytest.approx(other["kl"]["mean"], rel=1e-6)
    with pytest.raises(ModelInputError, match="no tokens"):
        drift(a, b, [])


def test_leak_summary_splits_the_text_at_its_first_leaky_token(tmp_path):
    from qgpu_min.model.drift import leak_summary
    kl = np.array([0.0, 0.0, 0.5, 0.0, 0.25])
    s = leak_summary([5, 6, 9, 6, 9], kl, leaky=[9, 100])
    assert s == {"ids": 2, "positions": 2, "first_position": 2, "kl_max_before_first": 0.0,
                 "kl_mean_from_first": 0.25}
    none = leak_summary([5, 6], kl[:2], leaky=[9])
    assert none["positions"] == 0 and none["first_position"] is None and none["kl_mean_from_first"] == 0.0
    # drift() reports it only when the build named leaky ids
    a = load_model(write_synthetic_checkpoint(tmp_path / "a", "tiny", seed=0))
    ids = list(range(1, 30))
    assert "leaky" not in drift(a, a, ids)
    assert drift(a, a, ids, leaky=[7])["leaky"] == {"ids": 1, "positions": 1, "first_position": 6,
                                                  "kl_max_before_first": 0.0, "kl_mean_from_first": 0.0}


def test_drift_command_reads_the_manifests_leaky_ids_or_refuses_them(tmp_path):
    from qgpu_min.gpu.merged import manifest_leaky_ids
    from qgpu_min.model.errors import CheckpointError
    assert manifest_leaky_ids({"text_gate": {"exact": True, "leaky_token_ids": []}}, tmp_path) == []
    assert manifest_leaky_ids({"text_gate": {"leaky_token_ids": [3, 9]}}, tmp_path) == [3, 9]
    assert manifest_leaky_ids({}, tmp_path) == []
    for bad in ("3", [1.5], [True], {"a": 1}):
        with pytest.raises(CheckpointError, match="leaky_token_ids"):
            manifest_leaky_ids({"text_gate": {"leaky_token_ids": bad}}, tmp_path)

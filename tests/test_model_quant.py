"""--quant int8: a model's dense matrices and LM head quantized to Q8 at load (weights.quantize_weights)."""
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from qgpu_min.cli import main
from qgpu_min.model import kernels as K
from qgpu_min.model.drift import drift
from qgpu_min.model.errors import CheckpointError
from qgpu_min.model.forward import load_model
from qgpu_min.model.synthetic import write_synthetic_checkpoint

IDS = [5, 77, 300, 12, 9, 401, 33, 250, 1, 64, 128, 7, 99, 310, 2, 45]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return write_synthetic_checkpoint(tmp_path_factory.mktemp("quant") / "tiny", "tiny", layers=4)


def test_dense_matrices_and_the_head_are_q8_and_kept_layers_are_untouched(ckpt):
    plain = load_model(ckpt)
    q = load_model(ckpt, quant="int8", keep_layers=[1])
    assert isinstance(q.weights.head_q8, K.QuantQ8) and q.weights.lm_head is q.weights.embed
    for i, (a, b) in enumerate(zip(plain.weights.layers, q.weights.layers)):
        for name, w in a.items():
            matrix = isinstance(w, np.ndarray) and w.dtype == np.uint16
            if i == 1 or not matrix:
                assert np.array_equal(np.asarray(b[name]), np.asarray(w))   # the same bits
            else:
                assert isinstance(b[name], K.QuantQ8) and b[name].shape == w.shape


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_prefill_and_decode_agree_and_drift_is_small(ckpt, mode):
    plain, q = load_model(ckpt, mode), load_model(ckpt, mode, quant="int8")
    s1, s2 = q.new_state(), q.new_state()
    prefilled = q.prefill(s1, IDS, all_logits=True)
    stepped = np.stack([q.decode(s2, t) for t in IDS])
    # the Q8 products of prefill and decode are the same bits (test_kernels_q8); attention over several
    # positions sums in another order in prefill, at full precision too
    assert np.array_equal(prefilled[0], stepped[0]) and np.allclose(prefilled, stepped, rtol=1e-4, atol=1e-4)
    summary = drift(plain, q, IDS)
    assert 0 < summary["kl"]["mean"] < 0.01 and summary["top1_agreement"] >= 0.8


def test_a_token_subsets_logits_read_the_exact_rows(ckpt):
    """A launch asks for its tokens' logits only: those come from the bf16 head rows, not the Q8 head."""
    plain, q = load_model(ckpt), load_model(ckpt, quant="int8", keep_layers=range(4))
    subset = [3, 40, 41, 500]
    hp, hq = plain.forward_hidden(plain.new_state(), IDS), q.forward_hidden(q.new_state(), IDS)
    assert np.array_equal(hp, hq)                     # every layer kept: the same hidden state
    assert np.array_equal(q.logits(hq[-1], subset), plain.logits(hp[-1], subset))
    assert not np.array_equal(q.logits(hq[-1]), plain.logits(hp[-1]))   # the whole vocabulary: the Q8 head


def test_an_unknown_quant_is_refused_before_loading(tmp_path):
    with pytest.raises(CheckpointError, match="quant must be one of int8"):
        load_model(tmp_path, quant="int4")


def test_generate_and_drift_take_quant_and_run_refuses_it_off_the_model_backend(ckpt):
    r = CliRunner().invoke(main, ["generate", "--model", str(ckpt), "--quant", "int8", "--raw", "hello",
                                  "--greedy", "--max-new-tokens", "4", "--json"])
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.stdout)["token_ids"]) == 4
    r = CliRunner().invoke(main, ["drift", "--base", str(ckpt), "--model", str(ckpt), "--quant", "int8",
                                  "--limit", "40", "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["quant"] == "int8" and summary["positions"] == 40 and summary["kl"]["mean"] > 0
    r = CliRunner().invoke(main, ["drift", "--base", str(ckpt), "--model", str(ckpt), "--limit", "4"])
    assert r.exit_code == 1 and "not a checkpoint built by `qgpu-min build`" in r.output
    root = Path(__file__).resolve().parent.parent
    r = CliRunner().invoke(main, ["run", str(root / "examples" / "dot.cu"), "--arg", "[1]", "--arg", "[2]",
                                  "--arg", "zeros(1)", "--arg", "1", "--backend", "circuit", "--quant", "int8"])
    assert r.exit_code == 2 and "--quant applies to --backend model" in r.output

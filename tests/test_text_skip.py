"""Text tokens skip a merged checkpoint's circuit layers (model/text_skip.py), bit for bit: the demo circuit
(RAM and ALU, real compiled circuit layers with text gates) in front of a synthetic base with Qwen3.5-2B shapes,
run once with the skip and once with every layer, compared on logits and on every state array."""
import numpy as np
import pytest

from qgpu_min.circuit import demos
from qgpu_min.gpu.merged import manifest_silent_ids
from qgpu_min.model.errors import CheckpointError, ModelInputError
from qgpu_min.model.forward import load_model
from qgpu_min.model.text_skip import rows_pass_unchanged, text_skip

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
TEXT_VOCAB = 512


@pytest.fixture(scope="module")
def built(demo_built):
    return demo_built[1]   # conftest.py: the demo circuit in front of a base of TEXT_VOCAB text tokens


@pytest.fixture(scope="module", params=["fp32", "bf16"])
def pair(request, built):
    """(every layer, with the skip) in one mode."""
    full, skip = load_model(built.path, request.param), load_model(built.path, request.param)
    skip.skip_gpu_layers_on_text(built.n_layers, np.arange(TEXT_VOCAB))
    return full, skip


def _ids(built, names):
    return [built.base_vocab + built.tokens.index(n) for n in names]


def _same_state(a, b, layers) -> bool:
    return all(np.array_equal(a.recurrent[i].view(np.uint32), b.recurrent[i].view(np.uint32))
               and np.array_equal(a.conv[i].view(np.uint32), b.conv[i].view(np.uint32)) for i in layers)


def test_text_then_a_launch_gives_the_same_bits_with_and_without_the_skip(built, pair):
    full, skip = pair
    rng = np.random.default_rng(1)
    text = rng.integers(0, TEXT_VOCAB, 40).tolist()
    sf, ss = full.new_state(), skip.new_state()
    assert np.array_equal(skip.prefill(ss, text, all_logits=True), full.prefill(sf, text, all_logits=True))
    for t in rng.integers(0, TEXT_VOCAB, 4).tolist():
        assert np.array_equal(skip.decode(ss, t), full.decode(sf, t))
    # the skip happened: the circuit layers were never run, their work is owed
    assert ss.deferred[:40] == text and len(ss.deferred) == 44
    assert set(range(built.n_layers)) <= ss.zero and not _same_state(ss, sf, range(built.n_layers))
    # circuit tokens after the text settle it first: the same state and the same answer as every layer gives
    prompt = _ids(built, ["BEGIN"] + demos.word_tokens(0xDEADBEEF, 0) + demos.word_tokens(5, 4) + ["ALU_add"])
    assert np.array_equal(skip.prefill(ss, prompt), full.prefill(sf, prompt))
    assert ss.deferred == [] and _same_state(ss, sf, range(len(full.config.layer_types) - 1))
    assert ss.pos == sf.pos == 44 + len(prompt)


def test_memory_written_before_text_is_read_after_it(built, pair):
    skip = pair[1]
    states = []
    for m in pair:
        st = m.new_state()
        m.prefill(st, _ids(built, ["BEGIN"] + demos.word_tokens(0xABCD, 0) + ["WRITE_2"]))
        m.prefill(st, list(range(100, 160)))
        for t in (7, 8, 9):
            m.decode(st, t)
        states.append(st)
    sf, ss = states
    assert len(ss.deferred) == 63 and not sf.deferred
    skip.settle(ss)
    assert _same_state(ss, sf, range(built.n_layers))
    nxt = [demos.run_tokens(m, st, _ids(built, ["READ_2"])) for m, st in zip(pair, states)]
    assert nxt[0] == nxt[1] and built.tokens.names[nxt[0] - built.base_vocab] == "OUT0_205"


def test_settling_in_blocks_gives_the_bits_of_one_batch(built, pair, monkeypatch):
    from qgpu_min.model import forward
    skip = pair[1]
    text = np.random.default_rng(3).integers(0, TEXT_VOCAB, 23).tolist()
    states = []
    for block in (256, 5):
        monkeypatch.setattr(forward, "SETTLE_BLOCK", block)
        st = skip.new_state()
        skip.prefill(st, text)
        skip.settle(st)
        states.append(st)
    assert _same_state(*states, range(built.n_layers))


def test_decode_batch_skips_only_when_every_token_can(built, pair):
    full, skip = pair
    circuit = _ids(built, ["BEGIN"])[0]
    for tokens in ([3, 4, 5], [3, circuit, 5]):
        sf = [full.new_state() for _ in tokens]
        ss = [skip.new_state() for _ in tokens]
        assert np.array_equal(skip.decode_batch(ss, tokens), full.decode_batch(sf, tokens))
        assert [s.deferred for s in ss] == ([[3], [4], [5]] if circuit not in tokens else [[], [], []])
        for s in ss:
            skip.settle(s)
        assert all(_same_state(a, b, range(built.n_layers)) for a, b in zip(ss, sf))


def test_what_blocks_the_skip(built, pair):
    _, skip = pair
    circuit = _ids(built, ["BEGIN"])[0]
    st = skip.new_state()
    skip.prefill(st, [1, 2, circuit])            # a circuit token in the block: every layer, for every token
    assert st.deferred == []
    st = skip.new_state()
    st.zero.discard(0)
    st.clean[0][:] = 0                           # a GPU layer's state not known finite: no skip
    skip.prefill(st, [1, 2])
    assert st.deferred == []
    silent_but_7 = [i for i in range(TEXT_VOCAB) if i != 7]
    other = load_model(built.path, skip.mode)
    other.skip_gpu_layers_on_text(built.n_layers, silent_but_7)
    st = other.new_state()
    other.prefill(st, [6])
    other.prefill(st, [7])                       # not claimed silent (a leaky id): settles, then every layer
    assert st.deferred == []
    assert rows_pass_unchanged(np.array([[1.0, 0.0, -2.0]], np.float32))
    for bad in (-0.0, np.inf, np.nan):           # h + +-0 would not give these back
        assert not rows_pass_unchanged(np.array([[1.0, bad]], np.float32))


def test_deferred_tokens_settle_after_the_skip_is_switched_off(built, pair):
    full, _ = pair
    m = load_model(built.path, full.mode)
    m.skip_gpu_layers_on_text(built.n_layers, np.arange(TEXT_VOCAB))
    ss, sf = m.new_state(), full.new_state()
    m.prefill(ss, [4, 5, 6])
    full.prefill(sf, [4, 5, 6])
    m.text_skip = None                                  # the owed work is the state's: it still gets done
    prompt = _ids(built, ["BEGIN"] + demos.word_tokens(7, 0) + ["WRITE_1"])
    assert np.array_equal(m.prefill(ss, prompt), full.prefill(sf, prompt))
    assert ss.deferred == [] and _same_state(ss, sf, range(built.n_layers))


def test_a_false_claim_of_silence_is_caught_when_settling(built):
    m = load_model(built.path, "fp32")
    begin = _ids(built, ["BEGIN"])[0]
    m.skip_gpu_layers_on_text(built.n_layers, [begin])   # a circuit token is not silent
    st = m.new_state()
    m.prefill(st, [begin])
    with pytest.raises(CheckpointError, match=f"text token {begin} changed the residual"):
        m.prefill(st, [_ids(built, ["ALU_add"])[0]])


def test_the_skip_rule_is_checked(built):
    m = load_model(built.path, "fp32")
    n = len(m.config.layer_types)
    for layers, ids, msg in [(0, [1], "must be 1"), (n, [1], "must be 1"),
                             (2, [m.config.vocab_size], "outside the vocabulary"), (2, [[1]], "1-D"),
                             (2, [1.5], "ints")]:
        with pytest.raises(ModelInputError, match=msg):
            m.skip_gpu_layers_on_text(layers, ids)
    assert m.text_skip is None
    with pytest.raises(ModelInputError, match="not all linear attention"):
        text_skip(["linear_attention", "full_attention", "linear_attention"], 10, 2, [1])


def test_a_checkpoint_without_a_build_manifest_skips_nothing(built):
    from qgpu_min.gpu.merged import load_checkpoint
    assert load_checkpoint(built.path, "fp32").text_skip is None    # the demo is merged, but not by `build`


def test_the_manifest_says_which_ids_are_silent(tmp_path):
    manifest = {"tokens": {"base_vocab": 10},
                "text_gate": {"unchecked_ids": [8, 9, 12], "leaky_token_ids": [3],
                              "max_text_pre_activation": -95.0}}
    assert manifest_silent_ids(manifest, tmp_path).tolist() == [0, 1, 2, 4, 5, 6, 7]
    manifest["text_gate"]["max_text_pre_activation"] = -80.0     # not silent: nothing skips
    assert manifest_silent_ids(manifest, tmp_path).size == 0
    del manifest["text_gate"]["unchecked_ids"]
    with pytest.raises(CheckpointError, match="not a valid build manifest"):
        manifest_silent_ids(manifest, tmp_path)

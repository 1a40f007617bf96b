"""End-to-end demos: RAM and ALU compiled in front of a synthetic checkpoint with Qwen3.5-2B shapes
(hidden 2048, MLP 6144, 16x128 DeltaNet heads; two base layers, one of them full attention), run token by
token through the runtime with greedy argmax over the whole vocabulary; and exact silence on text."""
import json

import numpy as np
import pytest

from qgpu_min.circuit import demos
from qgpu_min.model.forward import load_model

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
MASK = 0xFFFFFFFF


@pytest.fixture(scope="module")
def built(demo_built):
    return demo_built   # conftest.py: shared with tests/test_text_skip.py


@pytest.fixture(scope="module", params=["fp32", "bf16"])
def model(request, built):
    return request.param, load_model(built[1].path, request.param)


def _s32(x):
    return x - (1 << 32) if x >> 31 else x


ALU_CASES = [
    ("add", 0xFFFFFFFF, 1, 0), ("sub", 0, 1, MASK), ("sub", 0xDEADBEEF, 0x12345678, (0xDEADBEEF - 0x12345678) & MASK),
    ("xor", 0xF0F0F0F0, 0xFF00FF00, 0x0FF00FF0), ("sra", 0x80000010, 4, 0xF8000001), ("shl", 1, 31, 0x80000000),
    ("shr", 0x80000000, 40, 0), ("slt", 0x80000000, 0, 1), ("sltu", 0x80000000, 0, 0), ("eq", 77, 77, 1),
    ("min", 5, 0xFFFFFFFB, 0xFFFFFFFB), ("maxu", 5, 0xFFFFFFFB, 0xFFFFFFFB), ("or", 0x1200, 0x34, 0x1234),
]


def test_alu_demo_exact(built, model):
    _, b = built
    _, m = model
    for op, x, y, want in ALU_CASES:
        prompt = ["BEGIN"] + demos.word_tokens(x, 0) + demos.word_tokens(y, 4) + [f"ALU_{op}"]
        assert demos.generate(m, b, prompt) == demos.expected_output(want), (op, hex(x), hex(y))


def test_ram_demo_exact(built, model):
    _, b = built
    _, m = model
    words = {3: 0xCAFEBABE, 9: 0x00000001, 15: 0x80000000}
    prompt = ["BEGIN"]
    for addr, w in words.items():
        prompt += demos.word_tokens(w, 0) + [f"WRITE_{addr}"]
    prompt += demos.word_tokens(0x12345678, 0) + ["WRITE_9"]  # overwrite
    words[9] = 0x12345678
    for addr, w in [(3, words[3]), (9, words[9]), (15, words[15]), (0, 0)]:
        assert demos.generate(m, b, prompt + [f"READ_{addr}"]) == demos.expected_output(w), addr


def test_merged_checkpoint_format(built):
    base, b = built
    cfg = json.loads((b.path / "config.json").read_text())["text_config"]
    assert cfg["layer_types"] == ["linear_attention"] * b.n_layers + ["linear_attention", "full_attention"]
    assert cfg["num_hidden_layers"] == b.n_layers + 2
    assert cfg["vocab_size"] == 512 + len(b.tokens.names)
    assert b.tau > 0 and b.text_max_pre <= -90


def test_text_logits_equal_the_base_model(built, model):
    base, b = built
    mode, m = model
    ref = load_model(base, mode)
    ids = list(np.random.default_rng(0).integers(0, 512, 200))
    want = ref.prefill(ref.new_state(), ids, all_logits=True).astype(np.float64)
    state = m.new_state()
    got = m.prefill(state, ids, all_logits=True)[:, :512].astype(np.float64)

    def log_softmax(x):
        x = x - x.max(1, keepdims=True)
        return x - np.log(np.exp(x).sum(1, keepdims=True))
    p, q = log_softmax(want), log_softmax(got)
    kl = float((np.exp(p) * (p - q)).sum(1).max())
    assert kl <= 1e-9
    assert np.array_equal(want, got)  # in fact bit-identical
    assert all(not state.recurrent[i].any() for i in range(b.n_layers))


def test_text_tokens_do_not_touch_circuit_memory(built, model):
    _, b = built
    _, m = model
    state = m.new_state()
    names = ["BEGIN"] + demos.word_tokens(0xABCD, 0) + ["WRITE_2"]
    m.prefill(state, [b.base_vocab + b.tokens.index(n) for n in names])
    before = {i: state.recurrent[i].copy() for i in range(b.n_layers)}
    m.prefill(state, list(range(100, 160)))
    assert all(np.array_equal(before[i], state.recurrent[i]) for i in range(b.n_layers))
    nxt = demos.run_tokens(m, state, [b.base_vocab + b.tokens.index("READ_2")])
    assert b.tokens.names[nxt - b.base_vocab] == "OUT0_205"  # 0xABCD & 255, after the text


def test_output_code_wins_by_a_wide_margin(built, model):
    """The intended token beats every other circuit token by whole logits and every text token by far."""
    _, b = built
    _, m = model
    names = ["BEGIN"] + demos.word_tokens(0xDEADBEEF, 0) + demos.word_tokens(5, 4) + ["ALU_add"]
    logits = m.prefill(m.new_state(), [b.base_vocab + b.tokens.index(n) for n in names])
    order = np.argsort(logits)[::-1]
    assert b.tokens.names[order[0] - b.base_vocab] == "OUT0_244"  # 0xDEADBEEF + 5 = ...f4
    assert logits[order[0]] - logits[order[1]] > 10
    assert logits[order[0]] - logits[:b.base_vocab].max() > 100


def test_circuit_only_checkpoint(tmp_path):
    """The same circuit without any base layers: a vocabulary of circuit tokens and one no-op
    full-attention layer; loads in the runtime and runs the demo exactly."""
    from qgpu_min.circuit.compile import emit, plan
    from qgpu_min.circuit.merge import Built, write_circuit_only
    from qgpu_min.circuit.tokens import token_rows

    d = demos.demo_circuit()
    p = plan(d.circuit, keep=[ig for _, ig in d.out_code.pairs])
    layers = emit(p, d.out_code)
    path = write_circuit_only(tmp_path / "conly", layers, p.shape, token_rows(p, d.tokens))
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["layer_types"][-1] == "full_attention" and cfg["vocab_size"] == len(d.tokens.names)
    built = Built(path, d.tokens, 0, len(layers), 0.0, 0.0, [], [])
    m = load_model(path, "fp32")
    prompt = ["BEGIN"] + demos.word_tokens(0x80000000, 0) + demos.word_tokens(1, 4) + ["ALU_sra", "WRITE_5", "READ_5"]
    assert demos.generate(m, built, prompt[:-2]) == demos.expected_output(0xC0000000)
    assert demos.generate(m, built, prompt) == demos.expected_output(0x80000000)

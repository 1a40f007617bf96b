"""Tokenizer, chat format, sampling, generation and the `qgpu-min generate` command."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from qgpu_min.cli import main
from qgpu_min.model import load_model
from qgpu_min.model.chat_format import chat_prompt, format_chat
from qgpu_min.model.errors import ModelInputError
from qgpu_min.model.generate import (Sampling, candidates, generate, generate_ids, pick_token, result,
                                     stream_text)
from qgpu_min.model.synthetic import ADDED_TOKENS, write_synthetic_checkpoint


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_synthetic_checkpoint(tmp_path_factory.mktemp("tiny"), seed=2)


@pytest.fixture(scope="module")
def model(tiny):
    return load_model(tiny)


# ---- tokenizer and chat format ---------------------------------------------------------------------------------

def test_tokenizer_special_tokens_and_round_trip(model):
    tok = model.tokenizer
    start, end, eot = (tok.token_id(t) for t in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"))
    assert [tok.token_id(t) for t in ADDED_TOKENS] == list(range(eot, eot + 33))  # contiguous, as published
    assert tok.vocab_size == eot + 33 <= model.config.vocab_size
    assert set(tok.stop_ids) == {end, eot}
    text = "Hello, world! 12 + 30 = 42 café 東京 🙂\n  indented"
    ids = tok.encode(f"<|im_start|>user\n{text}<|im_end|>")
    assert ids[0] == start and ids[-1] == end
    assert tok.decode(ids[1:-1]) == "user\n" + text
    assert tok.encode("12") == [tok.token_id("1"), tok.token_id("2")]  # Qwen splits digits one by one


def test_chat_format_is_chatml_with_empty_think_block():
    assert chat_prompt("Hi") == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert format_chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                       enable_thinking=True) == ("<|im_start|>system\nBe brief.<|im_end|>\n"
                                                 "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n")
    assert format_chat([{"role": "user", "content": "x"}], add_generation_prompt=False) == \
        "<|im_start|>user\nx<|im_end|>\n"
    with pytest.raises(ModelInputError, match="role 'robot'"):
        format_chat([{"role": "robot", "content": "x"}])


# ---- sampling ----------------------------------------------------------------------------------------------------

def test_pick_token_rules():
    rng = np.random.default_rng(0)
    logits = np.array([0.0, 3.0, 2.9, -1.0, 3.0], np.float32)
    assert pick_token(logits, Sampling(greedy=True), rng) == 1  # lowest id among equal maxima
    draws = {pick_token(logits, Sampling(top_k=2, top_p=1.0, temperature=1.0), rng) for _ in range(200)}
    assert draws == {1, 4}
    draws = {pick_token(logits, Sampling(top_k=0, top_p=1e-6, temperature=1.0), rng) for _ in range(50)}
    assert draws == {1}
    draws = {pick_token(logits, Sampling(top_k=0, top_p=1.0, temperature=5.0), rng) for _ in range(400)}
    assert draws == {0, 1, 2, 3, 4}
    for bad in (Sampling(temperature=0), Sampling(top_p=0), Sampling(top_p=1.5), Sampling(top_k=-1)):
        with pytest.raises(ModelInputError):
            bad.check()


@pytest.mark.parametrize("top_k, top_p, temperature", [(20, 0.8, 0.7), (0, 0.9, 1.0), (0, 0.999, 2.0),
                                                        (5, 1.0, 1.0), (0, 1.0, 0.5), (300, 0.5, 1.0)])
def test_candidates_equal_a_full_sort(top_k, top_p, temperature):
    z = np.random.default_rng(top_k).standard_normal(5000).astype(np.float32) * 3
    ids, p = candidates(z, Sampling(top_k=top_k, top_p=top_p, temperature=temperature))
    # brute force: sort everything
    order = np.argsort(-z.astype(np.float64), kind="stable")[:top_k or None]
    w = np.exp((z[order] - z[order[0]]) / np.float64(temperature))
    w /= w.sum()
    keep = len(w) if top_p >= 1 else min(int(np.searchsorted(np.cumsum(w), top_p)) + 1, len(w))  # 1: no cut
    assert sorted(ids.tolist()) == sorted(order[:keep].tolist())
    want = dict(zip(order[:keep].tolist(), w[:keep] / w[:keep].sum()))
    assert np.allclose(p, [want[i] for i in ids.tolist()], rtol=1e-9)


def test_greedy_generation_is_the_argmax_chain(model):
    prompt = model.tokenizer.encode(chat_prompt("Tell me a story"))
    got = list(generate_ids(model, prompt, 6, Sampling(greedy=True), stop_ids=()))
    state = model.new_state()
    logits = model.prefill(state, prompt)
    expect = []
    for _ in range(6):
        expect.append(int(np.argmax(logits[:model.tokenizer.vocab_size])))
        logits = model.decode(state, expect[-1])
    assert got == expect


def test_generation_continues_a_conversation_state(model):
    tok, greedy = model.tokenizer, Sampling(greedy=True)
    turn1 = tok.encode(chat_prompt("Hi"))
    state = model.new_state()
    out1 = list(generate_ids(model, turn1, 4, greedy, stop_ids=(), state=state))
    assert state.pos == len(turn1) + len(out1) - 1  # the last token is not fed yet
    turn2 = [out1[-1]] + tok.encode("<|im_end|>\n" + chat_prompt("More"))
    out2 = list(generate_ids(model, turn2, 4, greedy, stop_ids=(), state=state))
    fresh = list(generate_ids(model, turn1 + out1 + turn2[1:], 4, greedy, stop_ids=()))
    assert out2 == fresh


def test_sampling_is_reproducible_by_seed_and_never_picks_padding(model):
    prompt = model.tokenizer.encode("The sea")
    s = Sampling(temperature=1.5, top_p=1.0, top_k=0, seed=11)
    a = list(generate_ids(model, prompt, 12, s, stop_ids=()))
    assert a == list(generate_ids(model, prompt, 12, s, stop_ids=()))
    assert a != list(generate_ids(model, prompt, 12, Sampling(temperature=1.5, top_p=1.0, top_k=0, seed=12),
                                  stop_ids=()))
    assert max(a) < model.tokenizer.vocab_size


def test_stop_token_ends_generation_and_is_not_in_the_text(model):
    prompt = model.tokenizer.encode("Hello")
    first = next(generate_ids(model, prompt, 5, Sampling(greedy=True), stop_ids=()))
    out = list(generate_ids(model, prompt, 5, Sampling(greedy=True), stop_ids=(first,)))
    assert out == [first]
    end = model.tokenizer.token_id("<|im_end|>")
    r = result(model, prompt, [model.tokenizer.token_id("a"), end])
    assert r["token_ids"][-1] == end and r["text"] == "a"
    assert list(generate_ids(model, prompt, 0)) == []


def test_streaming_holds_back_partial_characters(model):
    text = "東京 café 🙂 ok"
    ids = model.tokenizer.encode(text)
    assert len(ids) > len(text.split())  # multi-byte characters are split across byte-level tokens
    pieces = list(stream_text(model, iter(ids)))
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)
    end = model.tokenizer.token_id("<|im_end|>")
    assert "".join(stream_text(model, iter(ids + [end, 5]), stop_ids=(end,))) == text


def test_generate_whole_answer(model):
    r = generate(model, "hi", max_new_tokens=4, sampling=Sampling(greedy=True))
    assert r["prompt_ids"] == model.tokenizer.encode(chat_prompt("hi"))
    assert 1 <= len(r["token_ids"]) <= 4 and isinstance(r["text"], str)


# ---- command line --------------------------------------------------------------------------------------------------

def test_cli_generate_json(tiny, model):
    res = CliRunner().invoke(main, ["generate", "--model", str(tiny), "What is 2+2?", "--json", "--greedy",
                                    "--max-new-tokens", "5"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert set(out) == {"prompt_ids", "token_ids", "text"}
    assert out["prompt_ids"] == model.tokenizer.encode(chat_prompt("What is 2+2?"))
    assert out["token_ids"] == list(generate_ids(model, out["prompt_ids"], 5, Sampling(greedy=True)))


def test_cli_generate_raw_seeded_and_streamed(tiny, model):
    args = ["generate", "--model", str(tiny), "Once upon", "--raw", "--seed", "3", "--max-new-tokens", "6"]
    a = CliRunner().invoke(main, args + ["--json"])
    b = CliRunner().invoke(main, args + ["--json"])
    assert a.exit_code == 0 and a.output == b.output
    out = json.loads(a.output)
    assert out["prompt_ids"] == model.tokenizer.encode("Once upon")
    streamed = CliRunner().invoke(main, args)
    assert streamed.exit_code == 0 and streamed.output == out["text"] + "\n"


def test_cli_errors_are_clear(tmp_path, tiny):
    res = CliRunner().invoke(main, ["generate", "--model", str(tmp_path), "hi"])
    assert res.exit_code != 0 and "config.json: not found" in res.output
    res = CliRunner().invoke(main, ["generate", "--model", str(tiny), "hi", "--top-p", "2"])
    assert res.exit_code != 0 and "top_p must be in (0, 1], got 2.0" in res.output


def test_suppressed_tokens_are_never_generated(tmp_path):
    """generation_config.json's suppress_tokens (a built checkpoint lists its GPU tokens there) are never
    picked, greedy or sampled."""
    import json

    from qgpu_min.model.forward import load_model
    from qgpu_min.model.generate import Sampling, generate_ids
    from qgpu_min.model.synthetic import write_synthetic_checkpoint
    d = write_synthetic_checkpoint(tmp_path / "m", "tiny", seed=3)
    prompt = [5, 6, 7]
    free = list(generate_ids(load_model(d), prompt, 12, Sampling(greedy=True), stop_ids=()))
    gen = json.loads((d / "generation_config.json").read_text())
    gen["suppress_tokens"] = sorted(set(free))
    (d / "generation_config.json").write_text(json.dumps(gen))
    m = load_model(d)
    for sampling in (Sampling(greedy=True), Sampling(seed=1, top_k=0, top_p=1.0)):
        got = list(generate_ids(m, prompt, 12, sampling, stop_ids=()))
        assert len(got) == 12 and not set(got) & set(free), (sampling, got, free)

"""Several sequences decoded together (Model.decode_batch, generate.generate_many): row j is bit for bit what
the sequence gives alone."""
import numpy as np
import pytest

from qgpu_min.model.errors import ModelInputError
from qgpu_min.model.forward import load_model
from qgpu_min.model.generate import Sampling, generate_ids, generate_many
from qgpu_min.model.synthetic import write_synthetic_checkpoint


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    # both mixers (linear_attention and full_attention layers), so per-sequence attention caches are covered
    return write_synthetic_checkpoint(tmp_path_factory.mktemp("batch") / "tiny", "tiny", layers=4)


def _prompts(seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 500, n).tolist() for n in (3, 7, 1, 12, 5)]


@pytest.mark.parametrize("mode, quant", [("fp32", None), ("bf16", None), ("fp32", "int8")])
def test_a_batch_step_equals_each_sequence_decoded_alone(ckpt, mode, quant):
    model = load_model(ckpt, mode, quant=quant)
    prompts = _prompts(1)
    alone, together = [model.new_state() for _ in prompts], [model.new_state() for _ in prompts]
    tokens = [int(model.prefill(s, p).argmax()) for s, p in zip(alone, prompts)]
    for s, p in zip(together, prompts):
        model.prefill(s, p)
    for _ in range(5):
        single = np.stack([model.decode(s, t) for s, t in zip(alone, tokens)])
        batch = model.decode_batch(together, tokens)
        assert np.array_equal(single, batch)
        subset = model.decode_batch(together[1:3], [5, 6], token_subset=[9, 3, 400])
        assert np.array_equal(subset, np.stack([model.decode(s, t, token_subset=[9, 3, 400])
                                                for s, t in zip(alone[1:3], [5, 6])]))
        tokens = [int(x) for x in single.argmax(axis=1)]
    assert [s.pos for s in together] == [s.pos for s in alone]


@pytest.mark.parametrize("sampling", [Sampling(greedy=True), Sampling(seed=3, temperature=1.0, top_p=0.95, top_k=0)])
def test_generate_many_gives_each_prompt_what_it_gets_alone(ckpt, sampling):
    model = load_model(ckpt)
    prompts = _prompts(2)
    stops = tuple(range(0, 500, 11))            # sequences stop at different steps
    many = generate_many(model, prompts, 12, sampling, stop_ids=stops)
    assert many == [list(generate_ids(model, p, 12, sampling, stop_ids=stops)) for p in prompts]
    assert len({len(x) for x in many}) > 1
    assert generate_many(model, prompts, 0, sampling) == [[] for _ in prompts] and generate_many(model, [], 4) == []


def test_bad_batches_are_refused_before_any_state_changes(ckpt):
    model = load_model(ckpt)
    a, b = model.new_state(), model.new_state()
    with pytest.raises(ModelInputError, match="2 states for 1 tokens"):
        model.decode_batch([a, b], [3])
    with pytest.raises(ModelInputError, match="the same state appears twice"):
        model.decode_batch([a, a], [3, 4])
    with pytest.raises(ModelInputError, match="outside the vocabulary"):
        model.decode_batch([a, b], [3, 10**6])
    assert a.pos == b.pos == 0


def test_generate_command_takes_several_prompts(ckpt):
    import json

    from click.testing import CliRunner

    from qgpu_min.cli import main
    args = ["generate", "--model", str(ckpt), "--raw", "--greedy", "--max-new-tokens", "5", "--json"]
    r = CliRunner().invoke(main, [*args, "hello", "a b c"])
    assert r.exit_code == 0, r.output
    both = json.loads(r.stdout)
    alone = [json.loads(CliRunner().invoke(main, [*args, p]).stdout) for p in ("hello", "a b c")]
    assert both == alone and len(both[0]["token_ids"]) == 5

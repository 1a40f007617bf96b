"""A program loaded once, launched many times (gpu/program.prompt_parts, gpu/model.load_state): the prompt's
load part (init, clears, the ROM words no argument changes) is the same for every launch of a kernel with as
many warps; the model's state after it is kept and taken up again, and the launch that follows is the same
launch token for token, with the same state bit for bit, as one fed its whole prompt."""
from __future__ import annotations

import dataclasses
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

from qgpu_min.gpu import kept_state
from qgpu_min.gpu.backend import compiled
from qgpu_min.gpu.cache import DerivedStore
from qgpu_min.gpu.layout import GpuSpec
from qgpu_min.gpu.model import run_launch
from qgpu_min.gpu.program import block_format, prompt, prompt_parts
from qgpu_min.host.launch import build_image, compile_kernel, for_format, launch

SPEC = GpuSpec()
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def dot():
    return for_format(compile_kernel(str(EXAMPLES / "dot.cu")), block_format(SPEC))


def _image(k, a, b):
    return build_image(k, [np.array(a), np.array(b), np.zeros(1, np.int32), len(a)], (3, 1))


def test_the_load_part_is_the_same_for_every_binding(dot):
    parts = [prompt_parts(im.program, im.memory, (3, 1), SPEC)
             for im in (_image(dot, [1, 2, 3], [4, 5, 6]), _image(dot, [7, -8, 9], [0, 1, 2]),
                        _image(dot, [1, 2, 3, 4, 5], [1, 1, 1, 1, 1]))]
    assert parts[0][0] == parts[1][0] == parts[2][0]
    assert parts[0][1] != parts[1][1] != parts[2][1]
    load, run = parts[0]
    im = _image(dot, [1, 2, 3], [4, 5, 6])
    assert load + run == prompt(im.program, im.memory, (3, 1), SPEC)
    assert len(load) > 4 * len([t for t in run if t[0] == "rom"])          # most of the ROM is in the load part
    cleared = {t[1]: i for i, t in enumerate(load + run) if t[0] == "clear"}
    for i, t in enumerate(load + run):                                     # a clear comes before its block's words
        if t[0] == "rom" and t[2] in cleared:
            assert cleared[t[2]] < i


def _final(cg, toks, mode, load_len):
    """(generated tokens, memory, the DeltaNet state at HALT) of a launch."""
    seen = {}

    def keep(i, t, state):
        seen["state"] = {k: v.copy() for k, v in state.recurrent.items()}
    run = run_launch(cg, toks, mode, on_token=keep, load_len=load_len)
    return run, seen["state"]


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_a_launch_from_a_kept_load_is_the_same_launch(dot, mode):
    # no store: the loads kept in memory only (the files beside the cache entry: the tests below)
    cg = dataclasses.replace(compiled(), models=compiled().models, loaded=OrderedDict(), derived=None)
    first = _image(dot, [1, 2, 3], [4, 5, 6])
    load, run = prompt_parts(first.program, first.memory, (3, 1), SPEC)
    r1, _ = _final(cg, load + run, mode, len(load))
    assert r1.reused == 0 and r1.memory[first.arrays[2].base // 4] == 32
    second = _image(dot, [7, -8, 9], [3, 1, 2])
    load2, run2 = prompt_parts(second.program, second.memory, (3, 1), SPEC)
    kept, kept_state = _final(cg, load2 + run2, mode, len(load2))
    fresh_cg = dataclasses.replace(cg, loaded=OrderedDict())
    whole, whole_state = _final(fresh_cg, load2 + run2, mode, 0)
    assert kept.reused == len(load2) and whole.reused == 0
    assert kept.generated == whole.generated and kept.memory == whole.memory
    assert kept.memory[second.arrays[2].base // 4] == 7 * 3 - 8 + 9 * 2
    assert all(np.array_equal(kept_state[k], whole_state[k]) for k in whole_state)


def test_launches_report_the_reused_prompt_and_stay_exact_under_check(dot):
    args = [np.array([2, 3, 4]), np.array([5, 6, 7]), np.zeros(1, np.int32), 3]
    first = launch(dot, [a.copy() if isinstance(a, np.ndarray) else a for a in args], block=(3, 1), backend="circuit",
                   check=True)
    again = launch(dot, args, block=(3, 1), backend="circuit", check=True)
    assert first.arrays["out"][0] == again.arrays["out"][0] == 2 * 5 + 3 * 6 + 4 * 7
    assert again.extra["prompt_reused"] > 200 and again.tokens == first.tokens


def _on_disk(tmp_path) -> "object":
    """The compiled GPU as a new process would find it: nothing loaded in memory, its derived files in tmp_path
    (the model itself shared, so that only the load states go there)."""
    cg = compiled()
    return dataclasses.replace(cg, models=cg.models, engines=cg.engines, rules=cg.rules, loaded=OrderedDict(),
                               derived=DerivedStore(tmp_path, cg.derived.key, cg.embed_source))


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_a_load_kept_on_disk_is_taken_up_by_the_next_process(dot, mode, tmp_path):
    im = _image(dot, [1, 2, 3], [4, 5, 6])
    load, run = prompt_parts(im.program, im.memory, (3, 1), SPEC)
    first, first_state = _final(_on_disk(tmp_path), load + run, mode, len(load))
    (written,) = [p for p in tmp_path.iterdir() if ".load." in p.name]
    assert first.reused == 0 and kept_state.name(mode, [compiled().token_id(t) for t in load]) in written.name
    again, again_state = _final(_on_disk(tmp_path), load + run, mode, len(load))   # another "process"
    assert again.reused == len(load) and again.generated == first.generated and again.memory == first.memory
    assert all(np.array_equal(again_state[k].view(np.uint32), first_state[k].view(np.uint32)) for k in first_state)
    written.write_bytes(written.read_bytes()[:100])                  # damaged: fed again, written again
    third, _ = _final(_on_disk(tmp_path), load + run, mode, len(load))
    assert third.reused == 0 and third.generated == first.generated
    assert _final(_on_disk(tmp_path), load + run, mode, len(load))[0].reused == len(load)


def test_a_kept_state_comes_back_bit_for_bit(tmp_path):
    model = compiled().model("fp32")
    state = model.new_state()
    rng = np.random.default_rng(5)
    layers = sorted(state.recurrent)
    for i in layers[:3]:
        a = state.recurrent[i].reshape(-1)
        a[rng.choice(a.size, 40, replace=False)] = rng.standard_normal(40).astype(np.float32)
        a[7] = -0.0
        state.conv[i].reshape(-1)[rng.choice(state.conv[i].size, 5, replace=False)] = 3.5
        state.clean[i][1] = 0
    state.zero = set(layers[3:])
    state.pos = 17
    back = kept_state.state_from_arrays(model, kept_state.state_arrays(state))
    for i in layers:
        assert np.array_equal(back.recurrent[i].view(np.uint32), state.recurrent[i].view(np.uint32))
        assert np.array_equal(back.conv[i].view(np.uint32), state.conv[i].view(np.uint32))
        assert np.array_equal(back.clean[i], state.clean[i])
    assert back.zero == state.zero and back.pos == 17
    assert np.signbit(back.recurrent[layers[0]].reshape(-1)[7])
    bad = kept_state.state_arrays(state)
    bad[f"r{layers[0]}.at"] = bad[f"r{layers[0]}.at"] + state.recurrent[layers[0]].size
    with pytest.raises(ValueError, match="does not fit"):
        kept_state.state_from_arrays(model, bad)


def test_only_the_newest_load_states_stay(tmp_path):
    store = DerivedStore(tmp_path, "k" * 8)
    for j in range(kept_state.KEPT_FILES + 5):
        store(f"{kept_state.PREFIX}fp32.{j:04d}", lambda: {"x": np.zeros(1)})
        store.prune(kept_state.PREFIX, kept_state.KEPT_FILES)
    store("head.w32", lambda: {"x": np.zeros(1)})
    names = sorted(p.name for p in tmp_path.iterdir())
    kept = [n for n in names if kept_state.PREFIX in n]
    assert len(kept) == kept_state.KEPT_FILES and kept[0].endswith("fp32.0005.npz") and "kkkkkkkk.head.w32.npz" in names


def test_the_switch_turns_the_files_off(dot, tmp_path, monkeypatch):
    monkeypatch.setenv(kept_state.ENV_VAR, "0")
    im = _image(dot, [1, 2, 3], [4, 5, 6])
    load, run = prompt_parts(im.program, im.memory, (3, 1), SPEC)
    for _ in range(2):
        assert _final(_on_disk(tmp_path), load + run, "fp32", len(load))[0].reused == 0
    assert not [p for p in tmp_path.iterdir() if ".load." in p.name]

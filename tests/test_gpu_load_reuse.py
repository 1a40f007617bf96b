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

from qgpu_min.gpu.backend import compiled
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
    cg = dataclasses.replace(compiled(), models=compiled().models, loaded=OrderedDict())
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

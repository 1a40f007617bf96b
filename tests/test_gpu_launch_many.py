"""Launches decoded together (gpu.model.run_launches, host launch_many): each launch of a batch generates
exactly the tokens and memory it generates alone."""
from pathlib import Path

import pytest

from qgpu_min.gpu.backend import SPEC, compiled
from qgpu_min.gpu.model import TooManyTokens, run_launch, run_launches
from qgpu_min.gpu.program import prompt_parts
from qgpu_min.host.backend import load_backend
from qgpu_min.host.launch import _for_backend, build_image, compile_kernel, launch, launch_many

ROOT = Path(__file__).resolve().parent.parent
# different lengths and scalars (so different bound programs and run lengths)
DOT_SETS = [[[1, 2, 3], [4, 5, 6], [0], 3], [[7, -8], [1, 1], [0], 2], [[2, 2, 2, 2], [3, 3, 3, -3], [0], 4]]


@pytest.fixture(scope="module")
def dot_prompts():
    k = _for_backend(compile_kernel(ROOT / "examples" / "dot.cu"), "circuit", load_backend("circuit"))
    prompts, loads = [], []
    for args in DOT_SETS:
        image = build_image(k, args, (4, 1))
        load, rest = prompt_parts(image.program, image.memory, (4, 1), SPEC, (1, 1))
        prompts.append(load + rest)
        loads.append(len(load))
    return prompts, loads


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_each_launch_of_a_batch_is_the_launch_alone(dot_prompts, mode):
    prompts, loads = dot_prompts
    cg = compiled()
    together = run_launches(cg, prompts, mode, load_lens=loads)
    alone = [run_launch(cg, p, mode, load_len=n) for p, n in zip(prompts, loads)]
    assert [r.generated for r in together] == [r.generated for r in alone]
    assert [r.memory for r in together] == [r.memory for r in alone]
    assert len({len(r.generated) for r in together}) == 3     # they finish at different steps


def test_a_launch_over_the_token_limit_is_named_in_its_batch(dot_prompts):
    prompts, loads = dot_prompts
    with pytest.raises(TooManyTokens, match=r"launch 0 of 2: the launch did not halt within 30 generated tokens"):
        run_launches(compiled(), prompts[:2], "fp32", max_generated=30, load_lens=loads[:2])


def test_launch_many_on_a_backend_without_a_batch_form_runs_them_one_by_one():
    k = compile_kernel(ROOT / "examples" / "dot.cu")
    results = launch_many(k, DOT_SETS, block=(4, 1))
    assert [r.arrays["out"].tolist() for r in results] == [[32], [-1], [12]]
    assert [r.arrays["out"].tolist() for r in results] == \
        [launch(k, a, block=(4, 1)).arrays["out"].tolist() for a in DOT_SETS]
    assert launch_many(k, []) == []


def test_circuit_batches_run_on_threads_with_each_launch_as_alone(dot_prompts, monkeypatch):
    """The circuit backend's batch form: the step engine runs launches on the core's threads (2 here, whatever
    the machine has), and launch_many on it gives each launch's own result."""
    from qgpu_min.gpu import model as gpu_model
    from qgpu_min.model import kernels
    prompts, loads = dot_prompts
    cg = compiled()
    monkeypatch.setattr(kernels, "threads", lambda: 1)
    one = run_launches(cg, prompts * 2, "fp32", load_lens=loads * 2)
    used = []
    real_pool = gpu_model.ThreadPoolExecutor
    monkeypatch.setattr(gpu_model, "ThreadPoolExecutor", lambda n: used.append(n) or real_pool(n))
    monkeypatch.setattr(kernels, "threads", lambda: 2)
    two = run_launches(cg, prompts * 2, "fp32", load_lens=loads * 2)
    assert used == [2]
    assert [r.generated for r in two] == [r.generated for r in one]
    assert [r.memory for r in two] == [r.memory for r in one]
    k = compile_kernel(ROOT / "examples" / "dot.cu")
    assert [r.arrays["out"].tolist() for r in launch_many(k, DOT_SETS, block=(4, 1), backend="circuit")] == \
        [[32], [-1], [12]]


def test_a_circuit_batch_decodes_its_launches_in_lockstep(dot_prompts, monkeypatch):
    """On one thread the batch's launches go through StepEngine.decode_many together (one pass per step for
    all of them), and each still gives what it gives alone."""
    from qgpu_min.model import kernels
    from qgpu_min.model.step_engine import StepEngine
    prompts, loads = dot_prompts
    cg = compiled()
    sizes = []
    real = StepEngine.decode_many
    monkeypatch.setattr(StepEngine, "decode_many", lambda self, states, *a: sizes.append(len(states)) or
                        real(self, states, *a))
    monkeypatch.setattr(kernels, "threads", lambda: 1)
    together = run_launches(cg, prompts, "bf16", load_lens=loads)
    assert sizes and sizes[0] == 3
    alone = [run_launch(cg, p, "bf16", load_len=n) for p, n in zip(prompts, loads)]
    assert [r.generated for r in together] == [r.generated for r in alone]
    assert [r.memory for r in together] == [r.memory for r in alone]

"""The order of a launch's prompt words does not matter to the GPU in the weights (tools/prompt_order_check.py):
the legacy order (before the load/launch split) and random orders of the clears and of the words leave the
model in exactly the state today's order does, so the same launch follows. And the check can fail: a clear
fed right after a word's pay tokens takes their bits through its conv taps, and the state differs."""
from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parent.parent / "tools" / "prompt_order_check.py"
spec = importlib.util.spec_from_file_location("prompt_order_check", TOOL)
order = importlib.util.module_from_spec(spec)
spec.loader.exec_module(order)


@pytest.fixture(scope="module")
def launch():
    name, program, memory, block, grid = next(order.launches("histogram-g1x1-b4x1"))
    load, run = order.prompt_parts(program, memory, block, order.SPEC, grid)
    return name, load + run, order.legacy_prompt(program, memory, block, grid)


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_legacy_and_shuffled_orders_leave_the_same_state(launch, mode):
    name, today, legacy = launch
    cg = order.compiled(order.SPEC)
    assert legacy != today      # the orders differ, so their equal states mean something
    assert order.compare(cg, mode, today, legacy) is None
    rng = random.Random(name)
    for _ in range(2):
        shuffled = order.shuffled_prompt(today, rng)
        assert sorted(shuffled) == sorted(today) and shuffled != today
        assert order.compare(cg, mode, today, shuffled) is None


def test_a_clear_after_a_word_changes_the_state(launch):
    _, today, _ = launch
    i = next(j for j, t in enumerate(today) if t[0] == "clear")
    moved = today[:i] + today[i + 1:]
    k = next(j for j, t in enumerate(moved) if t[0] == "rom")
    moved = moved[:k + 1] + [today[i]] + moved[k + 1:]
    assert order.compare(order.compiled(order.SPEC), "fp32", today, moved) is not None

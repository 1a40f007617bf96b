"""`qgpu-min compile K.cu --tokens` (gpu/token_budget.py): a launch's prompt and generated tokens by block.
The totals are the tokens the launch really costs on the GPU in the weights (a circuit launch's counts), and
every token has one owner (blocks, memory image, control add up to the totals)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from qgpu_min.cli import main
from qgpu_min.gpu.backend import SPEC
from qgpu_min.gpu.check import expected_tokens
from qgpu_min.gpu.program import block_format, prompt_parts
from qgpu_min.gpu.token_budget import token_budget
from qgpu_min.host.launch import build_image, compile_kernel, for_format, launch
from test_step_engine import BARRIER   # a barrier across warps in a grid of CTAs

ROOT = Path(__file__).resolve().parent.parent
LAUNCHES = [(ROOT / "examples" / "dot.cu", [[1, 2, 3], [4, 5, 6], [0], 3], (1, 1), (3, 1)),
            (BARRIER, [list(range(-5, 13)), [0] * 18], (2, 1), (9, 1))]


@pytest.mark.parametrize("src, args, grid, block", LAUNCHES)
def test_every_token_has_one_owner_and_the_totals_are_the_launchs(src, args, grid, block):
    k = for_format(compile_kernel(src), block_format(SPEC))
    image = build_image(k, args, block)
    b = token_budget(image.program, image.memory, block, grid, SPEC)
    load, run = prompt_parts(image.program, image.memory, block, SPEC, grid)
    gen = expected_tokens(image.program, image.memory, block, SPEC, None, grid)
    assert b["prompt"] == {"load": len(load), "launch": len(run), "total": len(load) + len(run)}
    assert b["generated"]["total"] == len(gen)
    for part in ("load", "launch"):
        assert sum(r[part] for r in b["blocks"]) + b["memory"][part] + b["control"][part] == b["prompt"][part]
    assert sum(r["exec"] + r["write_back"] for r in b["blocks"]) + b["control"]["generated"] == len(gen)
    assert b["memory"]["load"] == 0 and b["memory"]["launch"] == 4 * sum(1 for w in image.memory if w)
    got = launch(compile_kernel(src), args, grid=grid, block=block, backend="circuit")
    assert got.tokens == {"prompt": b["prompt"]["total"], "generated": b["generated"]["total"]}


def test_the_cli_prints_and_refuses():
    runner = CliRunner()
    dot = str(ROOT / "examples" / "dot.cu")
    args = ["--arg", "[1,2,3]", "--arg", "[4,5,6]", "--arg", "zeros(1)", "--arg", "3"]
    r = runner.invoke(main, ["compile", dot, "--tokens", *args])
    assert r.exit_code == 0 and "total: prompt 305 (load 263, launch 42), generated 46" in r.output, r.output
    r = runner.invoke(main, ["compile", dot, "--tokens", "--json", *args])
    out = json.loads(r.output)
    assert out["block"] == [3, 1] and out["prompt"]["total"] == 305 and out["generated"]["total"] == 46
    r = runner.invoke(main, ["compile", dot, *args])
    assert r.exit_code == 2 and "go with --tokens" in r.output
    r = runner.invoke(main, ["compile", dot, "--tokens", "--ptx", *args])
    assert r.exit_code == 2 and "not with --ptx or -o" in r.output
    r = runner.invoke(main, ["compile", dot, "--tokens", "--arg", "1"])
    assert r.exit_code == 2 and "takes 4 arguments" in r.output
    r = runner.invoke(main, ["compile", dot, "--tokens", "--block", "99", *args])
    assert r.exit_code == 1 and "error:" in r.output

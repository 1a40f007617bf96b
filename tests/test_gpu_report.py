"""`qgpu-min circuit-report --gpu`: the GPU in the weights, measured from its build, plan and emitted layers."""
import json
import re

from click.testing import CliRunner

from qgpu_min.circuit.compile import BaseShape
from qgpu_min.cli import main
from qgpu_min.gpu.layout import GpuSpec
from qgpu_min.gpu.vocab import all_tokens

MAX_LAYERS = 45      # the budget for the GPU's depth (the bound)


def test_gpu_report_json():
    res = CliRunner().invoke(main, ["circuit-report", "--gpu", "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.output)
    for key in ("layers", "units_per_layer", "peak_dims", "heads_per_layer", "vocab", "rom_blocks", "memory_words"):
        assert key in r, key
    shape, spec = BaseShape(), GpuSpec()
    assert 0 < r["layers"] <= MAX_LAYERS
    assert 0 < r["peak_dims"] <= shape.hidden == 2048
    assert len(r["units_per_layer"]) == len(r["heads_per_layer"]) == len(r["layer_map"]) == r["layers"]
    assert all(0 <= u <= shape.intermediate for u in r["units_per_layer"])
    assert all(0 <= h <= shape.heads for h in r["heads_per_layer"])
    assert sum(r["units_per_layer"]) == r["total_units"] >= r["total_gate_units"] > 0
    assert r["vocab"] == len(all_tokens(spec)) == sum(r["vocab_by_kind"].values())
    assert (r["rom_blocks"], r["memory_words"], r["lanes"]) == (spec.blocks, spec.mem_words, spec.lanes)
    # the layer map names every memory of the circuit, each at one layer
    mems = [m for layer in r["layer_map"] for m, _ in layer["memories"]]
    for name in ("ctx", "regs", "data", "lanes", "next"):
        assert mems.count(name) == 1, name
    assert any(m.startswith("rom.") for m in mems)


def test_gpu_report_table():
    res = CliRunner().invoke(main, ["circuit-report", "--gpu"])
    assert res.exit_code == 0, res.output
    m = re.search(r"GPU in the weights: (\d+) layers, peak (\d+) of 2048 residual dims", res.output)
    assert m and int(m.group(1)) <= MAX_LAYERS and int(m.group(2)) <= 2048, res.output
    assert re.search(r"^\s+\d+\s+\d+\s+\d+\s+\d+\s+data \d+\b", res.output, re.M), res.output
    assert "vocabulary:" in res.output


def test_json_needs_gpu():
    res = CliRunner().invoke(main, ["circuit-report", "--json"])
    assert res.exit_code == 2 and "--gpu" in res.output

"""Placing the GPU's residual dims in a base (circuit/placement.py): any permutation is exact (a launch through
permuted weights writes the same tokens and leaves the same result), and the chosen one puts the dims the
GPU leaves free where the base's text embeddings are one-signed, which is what makes a text gate exist."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from qgpu_min.circuit.compile import free_dims
from qgpu_min.circuit.ir import CircuitError
from qgpu_min.circuit.placement import choose_dims, free_counts, in_plan_order, one_signed, place_layer, place_rows
from qgpu_min.circuit.tokens import find_text_gate, text_gates
from qgpu_min.gpu.backend import compiled
from qgpu_min.gpu.layout import GpuSpec
from qgpu_min.gpu.model import run_launch
from qgpu_min.gpu.program import block_format, prompt
from qgpu_min.host.launch import build_image, compile_kernel, for_format

DOT = Path(__file__).resolve().parent.parent / "examples" / "dot.cu"


@pytest.fixture(scope="module")
def gpu():
    cg = compiled()
    cg.plan     # built once here (the cache's warm start skips it)
    return cg


def test_one_signed_scores():
    rows = np.array([[1.0, -1.0, 2.0], [3.0, 1.0, -2.0], [0.5, -1.0, 0.0]], np.float32)
    assert np.allclose(one_signed(rows), [1.0, 1 / 3, 0.0])


def test_a_launch_through_permuted_weights_is_the_same_launch(gpu):
    """A random permutation of the residual dims: every generated token and the result are unchanged."""
    perm = np.random.default_rng(7).permutation(gpu.shape.hidden)
    placed = dataclasses.replace(gpu, layers=[place_layer(lw, perm) for lw in gpu.layers],
                                 embed_source=place_rows(gpu.embed, perm), models={})
    k = for_format(compile_kernel(str(DOT)), block_format(GpuSpec()))
    image = build_image(k, [np.array([1, 2, 3]), np.array([4, 5, 6]), np.zeros(1, np.int32), 3], (3, 1))
    toks = prompt(image.program, image.memory, (3, 1), GpuSpec(), (1, 1))
    want = run_launch(gpu, toks)
    got = run_launch(placed, toks)
    assert got.generated == want.generated and got.memory == want.memory
    assert placed.layers[0].mats["gate"].shape == gpu.layers[0].mats["gate"].shape


def _text_with_one_signed_dims(hidden: int, dims: list[int], n: int = 600) -> np.ndarray:
    """Isotropic rows (no half-space on any handful of dims) except `dims`, where every row is positive."""
    rng = np.random.default_rng(1)
    rows = rng.standard_normal((n, hidden)).astype(np.float32)
    rows[:, dims] = np.abs(rows[:, dims]) + 0.5
    return rows


def test_placement_moves_the_most_free_dims_to_the_one_signed_ones(gpu):
    p = gpu.plan
    counts = free_counts(p)
    busiest = [int(d) for d in np.argsort(counts, kind="stable")[:3]]          # plan dims the GPU uses most
    text = _text_with_one_signed_dims(p.shape.hidden, busiest)
    perm = choose_dims(p, text)
    assert sorted(perm.tolist()) == list(range(p.shape.hidden))
    most_free = np.argsort(-counts, kind="stable")[:3]
    assert sorted(perm[most_free].tolist()) == sorted(busiest)                  # they take the one-signed dims
    assert counts[most_free].min() == 2 * p.n_layers                           # free in every sublayer


def _tightest_free_dims(p) -> list[int]:
    """The free dims of the sublayer that leaves the fewest (where a gate is hardest to find)."""
    return min(free_dims(p).values(), key=len)


def test_placement_makes_a_text_gate_exist_where_the_plan_order_has_none(gpu):
    p = gpu.plan
    busiest = [int(d) for d in np.argsort(free_counts(p), kind="stable")[:3]]
    text = _text_with_one_signed_dims(p.shape.hidden, busiest)
    free = _tightest_free_dims(p)
    assert len(free) < 64                                           # few dims there: a gate is not a given
    with pytest.raises(CircuitError, match="no text gate"):        # the plan's own numbering: those dims are busy
        find_text_gate(text, free, p.shape.hidden)
    assert find_text_gate(in_plan_order(text, choose_dims(p, text)), free, p.shape.hidden).tau > 0


def test_placement_gives_every_sublayer_one_shared_gate(gpu):
    """One search on the dims free at every sublayer (the tightest sublayer has only those) serves them all."""
    p = gpu.plan
    text = _text_with_one_signed_dims(p.shape.hidden, [int(d) for d in np.argsort(free_counts(p), kind="stable")[:3]])
    gates = text_gates(p, in_plan_order(text, choose_dims(p, text)))
    assert len(gates) == 2 * p.n_layers and len({id(g) for g in gates.values()}) == 1
    assert next(iter(gates.values())).tau > 0
    assert set(np.flatnonzero(next(iter(gates.values())).lam)) <= set(np.flatnonzero(free_counts(p) == 2 * p.n_layers))


def test_find_text_gate_on_one_one_signed_dim():
    text = _text_with_one_signed_dims(64, [10])
    assert find_text_gate(text, [10, 20, 30], 64).tau > 0
    with pytest.raises(CircuitError, match="no text gate"):
        find_text_gate(text, [20, 30, 40], 64)


def test_a_fallback_gate_names_the_rows_it_leaves_unsilenced():
    text = _text_with_one_signed_dims(64, [10])
    text[[3, 77]] = np.where(np.arange(64) == 10, -5.0, text[[3, 77]])      # two rows break the one-signed dim
    with pytest.raises(CircuitError, match="no text gate"):
        find_text_gate(text, [10], 64)
    with pytest.raises(CircuitError, match="2 rows would leak, more than the 1 allowed"):
        find_text_gate(text, [10], 64, max_leaks=1)
    gate = find_text_gate(text, [10], 64, max_leaks=2)
    assert gate.leaks.tolist() == [3, 77] and gate.tau > 0
    silent = np.delete(text, gate.leaks, axis=0)
    assert (silent @ gate.lam).max() <= -gate.tau and (text[gate.leaks] @ gate.lam).min() > -0.05
    assert gate.max_abs[10] == np.abs(silent[:, 10]).max()                  # bounds over the silenced rows only


def test_text_pre_max_is_each_rows_highest_pre_activation_and_the_check_names_the_row():
    from qgpu_min.circuit.compile import Coo, LayerWeights
    from qgpu_min.circuit.margin import text_gate_check, text_pre_max
    gate = Coo((3, 4))
    gate.add_many(np.array([0, 1, 2]), np.array([0, 1, 2]), np.array([-100.0, 2.0, -95.0], np.float32))
    qkv = Coo((6, 4))
    qkv.add_many(np.array([0, 5]), np.array([3, 3]), np.array([-92.0, 500.0], np.float32))    # row 5: a value row
    layers = [LayerWeights({"gate": gate, "qkv": qkv}, {}, 3, 1)]
    text = np.array([[1, -50, 1, 1], [1, -46, 1, 1], [0.5, -60, 2, 0.5]], np.float32)
    top = text_pre_max(layers, text, qk_rows=4)
    assert top.tolist() == [-92.0, -92.0, -46.0]          # row 2: its key, -92 * 0.5, is its highest
    with pytest.raises(CircuitError, match="text row 2 reaches pre-activation -46.0 > -90.0"):
        text_gate_check(layers, text, qk_rows=4)
    assert text_gate_check(layers, text[:2], qk_rows=4) == -92.0

"""Fuzzing the GPU cache's reader: a byte-damaged entry file is either refused (reported, removed, to be rebuilt)
or, when it still reads, gives back exactly the layers, embedding and data readout that were written: an accepted entry
is never a different GPU."""
from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

from fuzzing import budgets, fuzz_settings, mutate_bytes
from qgpu_min.circuit.compile import BaseShape, Coo, LayerWeights
from qgpu_min.circuit.run import Readout
from qgpu_min.gpu.cache import _try_load, entry_arrays, write_entry
from qgpu_min.gpu.layout import GpuSpec

KEY = "f" * 64


def _small_entry() -> tuple[list[LayerWeights], np.ndarray]:
    rng = np.random.default_rng(3)
    layers = []
    for units in (3, 5):
        m = Coo((units, 6))
        m.add_many(rng.integers(0, units, 9), rng.integers(0, 6, 9), rng.integers(-4, 5, 9).astype(np.float32))
        layers.append(LayerWeights({"gate": m}, {"in_norm": rng.standard_normal(6).astype(np.float32)}, units, 1))
    embed = np.where(rng.random((7, 6)) < 0.3, rng.integers(-3, 4, (7, 6)), 0).astype(np.float32)
    return layers, embed


DATA = Readout("data", 1, 2, np.array([0, 0, 1]), np.array([0, 1, 0]), (((0, 1), np.arange(8).reshape(2, 1, 4)),), 2)


def _load(path):
    return _try_load(path, KEY, GpuSpec(), BaseShape())


def _dense(m: Coo) -> np.ndarray:
    s = m.to_sparse(exact=False)
    out = np.zeros(s.shape, np.float32)
    for r in range(s.shape[0]):
        out[r, s.indices[s.indptr[r]:s.indptr[r + 1]]] = s.values[s.indptr[r]:s.indptr[r + 1]].view(np.uint16)
    return out


@budgets(150, 3000)
def test_damaged_cache_entries(tmp_path, capsys, budget):
    layers, embed = _small_entry()
    path = tmp_path / f"{KEY}.npz"
    write_entry(path, entry_arrays(KEY, layers, embed, DATA))
    good = path.read_bytes()
    assert _load(path) is not None

    @fuzz_settings(budget)
    @given(st.data())
    def check(data):
        damaged = mutate_bytes(good, data.draw)
        path.write_bytes(damaged)
        loaded = _load(path)
        if loaded is None:
            assert not path.exists(), "a refused entry is removed so that it is rebuilt"
            assert "is unusable" in capsys.readouterr().err
            return
        got_layers, got_embed, got_data = loaded.layers, loaded.embed, loaded.data
        assert np.array_equal(got_embed, embed)
        assert all(np.array_equal(a, b) for a, b in zip(got_data.arrays("d").values(), DATA.arrays("d").values()))
        for got, want in zip(got_layers, layers, strict=True):
            assert (got.units, got.heads) == (want.units, want.heads)
            assert np.array_equal(_dense(got.mats["gate"]), _dense(want.mats["gate"]))
            assert np.array_equal(got.vecs["in_norm"], want.vecs["in_norm"])

    check()

"""The compiled-GPU cache (qgpu_min/gpu/cache.py): first use compiles and writes one entry, later uses load it
without emitting, and the loaded model's logits are bit-identical to a fresh compile_gpu's (fp32, bf16).
Corrupt, truncated, tampered and stale entries are detected and rebuilt; the key is stable across builds
and changes with any unit weight."""
from __future__ import annotations

import dataclasses
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from qgpu_min.circuit.compile import BaseShape, runtime_layer
from qgpu_min.circuit.ir import CONST, Circuit, Gate, Unit, view
from qgpu_min.gpu import cache
from qgpu_min.gpu.core import build
from qgpu_min.gpu.layout import GpuSpec
from qgpu_min.gpu.model import CompiledGpu, compile_gpu

TOKENS = [("init", 0), ("pay", 5), ("pay", 1234), ("pay", 4095), ("pay", 0), ("go",)]


@pytest.fixture(scope="module")
def fresh() -> CompiledGpu:
    return compile_gpu()


@pytest.fixture(scope="module")
def cold(tmp_path_factory) -> tuple[Path, CompiledGpu, list[str]]:
    """A first use in an empty cache folder: (folder, result, progress messages)."""
    d = tmp_path_factory.mktemp("gpu-cache")
    msgs: list[str] = []
    return d, cache.load_or_compile(cache_dir=d, progress=msgs.append), msgs


def _entry(d: Path) -> Path:
    """The folder's one entry (<key>.npz; the files derived from it are <key>.<name>.npz), no temporary file."""
    files = sorted(d.iterdir())
    assert not [f for f in files if f.suffix == ".tmp"], files
    entries = [f for f in files if f.suffixes == [".npz"]]
    assert len(entries) == 1, files
    return entries[0]


def _logits(cg: CompiledGpu, mode: str) -> np.ndarray:
    model = cg.model(mode)
    return model.prefill(model.new_state(), [cg.token_id(t) for t in TOKENS], all_logits=True)


def _no_emit(*_args, **_kw):
    raise AssertionError("emitted although the cache holds this circuit")


def test_first_use_compiles_and_writes_one_entry(cold):
    d, cg, msgs = cold
    path = _entry(d)                                   # no temporary file left behind
    assert path.stem == cache.definition_key(cg.spec, cg.shape)
    assert msgs[0].startswith("compiling the GPU") and msgs[-1] == f"cached at {path}"
    cache.read_entry(path, path.stem)                  # whole and valid


def test_second_use_loads_without_building_planning_or_emitting(cold, fresh, monkeypatch):
    d, _, _ = cold
    for step in ("emit", "build", "plan"):
        monkeypatch.setattr(cache, step, _no_emit)
    msgs: list[str] = []
    warm = cache.load_or_compile(cache_dir=d, progress=msgs.append)
    assert msgs == [] and warm.built is None
    assert np.array_equal(warm.embed, fresh.embed) and warm.embed.dtype == np.float32
    assert len(warm.layers) == len(fresh.layers)
    for lw_w, lw_f in zip(warm.layers, fresh.layers):
        assert (lw_w.units, lw_w.heads) == (lw_f.units, lw_f.heads)
        rw, rf = runtime_layer(lw_w), runtime_layer(lw_f)
        assert list(rw) == list(rf)
        for name in rf:
            a, b = rw[name], rf[name]
            if isinstance(b, np.ndarray):
                assert a.dtype == b.dtype and np.array_equal(a, b), name
            else:
                assert a.shape == b.shape and all(np.array_equal(getattr(a, f), getattr(b, f)) and
                                                  getattr(a, f).dtype == getattr(b, f).dtype
                                                  for f in ("indptr", "indices", "values")), name
    for mode in ("fp32", "bf16"):
        got, want = _logits(warm, mode), _logits(fresh, mode)
        assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True), mode
    # the launch path sees the same tokens and reads the data memory from the same places
    assert warm.tokens == fresh.tokens and all(warm.token_id(t) == fresh.vocab.id(t) for t in fresh.vocab.tokens)
    assert warm.built is None and warm.data.arrays("d").keys() == fresh.data.arrays("d").keys()
    assert all(np.array_equal(a, b) for a, b in zip(warm.data.arrays("d").values(), fresh.data.arrays("d").values()))
    monkeypatch.undo()
    assert warm.data_op.mem.name == fresh.data_op.mem.name and warm.built is not None   # built when asked for


def test_definition_key_follows_the_spec_shape_and_sources(tmp_path):
    spec, shape = GpuSpec(), BaseShape()
    key = cache.definition_key(spec, shape)
    assert len(key) == 64 and key == cache.definition_key(GpuSpec(), BaseShape())
    assert cache.definition_key(dataclasses.replace(spec, warps=4), shape) != key
    assert cache.definition_key(spec, dataclasses.replace(shape, intermediate=4096)) != key
    installed = Path(cache.__file__).resolve().parent.parent
    for sub in cache.DEFINING_PACKAGES:                 # a copy of the sources that define the GPU
        shutil.copytree(installed / sub, tmp_path / sub, ignore=shutil.ignore_patterns("__pycache__"))
    assert cache.definition_key(spec, shape, package=tmp_path) == key
    vocab = tmp_path / "gpu" / "vocab.py"
    vocab.write_text(vocab.read_text() + "\n# a comment is a change too\n")
    assert cache.definition_key(spec, shape, package=tmp_path) != key


# ---- bad entries ------------------------------------------------------------------------------------------


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 16):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _rewrite(path: Path, change) -> None:
    """Re-save the entry's arrays after change(arrays): a file that reads fine but holds other contents."""
    arrays = dict(cache.load_arrays(path))
    change(arrays)
    path.unlink()
    cache.write_entry(path, arrays)


def _tamper(path: Path) -> None:  # one weight changed, the old digest kept
    def change(a):
        name = next(n for n in sorted(a) if n.endswith(".values") and a[n].size)
        a[name] = a[name].copy()
        a[name][0] ^= 1
    _rewrite(path, change)


def _stale(path: Path) -> None:  # a whole, valid entry for another circuit under this name
    def change(a):
        a["meta.key"] = np.array("0" * 64)
        a["meta.digest"] = np.array(cache._payload_digest(a))
    _rewrite(path, change)


def _old_format(path: Path) -> None:
    def change(a):
        a["meta.format"] = np.array(cache.FORMAT_VERSION - 1, np.int64)
        a["meta.digest"] = np.array(cache._payload_digest(a))
    _rewrite(path, change)


BREAKAGES = {"flip": (_flip, "unreadable"), "truncate": (_truncate, "unreadable"), "empty": (_empty, "unreadable"),
             "tamper": (_tamper, "payload hash mismatch"), "stale": (_stale, "stale"),
             "old format": (_old_format, "format")}


@pytest.mark.parametrize("kind", list(BREAKAGES))
def test_bad_entry_is_detected(cold, tmp_path, kind):
    src = _entry(cold[0])
    path = tmp_path / src.name
    shutil.copyfile(src, path)
    cache.read_entry(path, path.stem)  # the copy itself is fine
    breakage, reason = BREAKAGES[kind]
    breakage(path)
    with pytest.raises(cache.BadEntry, match=reason):
        cache.read_entry(path, path.stem)


@pytest.mark.parametrize("kind", ["flip", "truncate", "stale"])
def test_bad_entry_is_rebuilt(cold, fresh, tmp_path, monkeypatch, capsys, kind):
    src = _entry(cold[0])
    path = tmp_path / src.name
    shutil.copyfile(src, path)
    BREAKAGES[kind][0](path)
    calls = []

    def emitted(gc, vocab, p):  # fresh's weights stand in for a second real emission (tested above)
        calls.append(1)
        return fresh.layers, fresh.embed
    monkeypatch.setattr(cache, "_emit_checked", emitted)
    cg = cache.load_or_compile(cache_dir=tmp_path)
    err = capsys.readouterr().err
    assert calls == [1] and err.count("\n") == 1 and f"GPU cache entry {path} is unusable" in err
    assert _entry(tmp_path) == path
    cache.read_entry(path, path.stem)                 # rewritten whole
    assert np.array_equal(cg.embed, fresh.embed)


# ---- writing ----------------------------------------------------------------------------------------------


def test_failed_write_leaves_nothing(cold, tmp_path, monkeypatch):
    arrays = cache.load_arrays(_entry(cold[0]))

    def broken(f, **kw):
        f.write(b"PK partial")
        raise OSError("disk full")
    monkeypatch.setattr(np, "savez", broken)
    with pytest.raises(OSError, match="disk full"):
        cache.write_entry(tmp_path / "x.npz", arrays)
    assert list(tmp_path.iterdir()) == []


def test_unwritable_cache_only_warns(fresh, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cache, "_emit_checked", lambda gc, vocab, p: (fresh.layers, fresh.embed))
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cg = cache.load_or_compile(cache_dir=blocker / "gpu")
    assert "could not write the GPU cache entry" in capsys.readouterr().err
    assert np.array_equal(cg.embed, fresh.embed)


def test_concurrent_writers_and_readers(cold, tmp_path):
    """Writers racing on one entry while a reader polls it: the reader only ever sees no entry or a whole
    one, and the entry left is whole."""
    src = _entry(cold[0])
    arrays = cache.load_arrays(src)
    path = tmp_path / src.name
    errors: list[BaseException] = []
    done = threading.Event()

    def write():
        try:
            for _ in range(2):
                cache.write_entry(path, arrays)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def read():
        while not done.is_set():
            if path.exists():
                try:
                    cache.read_entry(path, src.stem)
                except BaseException as e:  # noqa: BLE001
                    errors.append(e)
    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write) for _ in range(2)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    reader.join()
    assert errors == []
    assert _entry(tmp_path) == path
    cache.read_entry(path, src.stem)


# ---- the key ----------------------------------------------------------------------------------------------


def test_key_is_stable_across_builds_and_sensitive_to_weights():
    shape = BaseShape()
    a, b = build(GpuSpec()), build(GpuSpec())
    key = cache.circuit_key(a, shape)
    assert len(key) == 64 and key == cache.circuit_key(b, shape) == cache.circuit_key(a, shape)
    gate = next(op for op in b.circuit.ops if isinstance(op, Gate) and op.units and op.units[0].terms)
    u = gate.units[0]
    g, e, w = u.terms[0]
    gate.units[0] = dataclasses.replace(u, terms=((g, e, w + 1),) + u.terms[1:])
    assert cache.circuit_key(b, shape) != key
    gate.units[0] = u
    assert cache.circuit_key(b, shape) == key
    assert cache.circuit_key(b, dataclasses.replace(shape, intermediate=4096)) != key
    assert cache.circuit_key(b.circuit, shape) != key  # the GPU's output code and vocabulary inputs count


def _small(weight: int = 1, theta: int = 0, view_name: str = "v", tap: int = 0) -> Circuit:
    c = Circuit("small")
    x = c.input("x", 3)
    v = view(x, (2, 1, 0), view_name)
    y = c.gate("y", 2, 0, [Unit(((v, 0, weight), (CONST, 0, 1)), theta, ((1, 1), (0, -1)))])
    mem = c.memory("m", 2, (2,))
    out = c.access(mem, c.input("wa", 3), [y], [c.input("ra", 2)], value_taps=[tap])
    c.output(out[0][0])
    return c


def test_key_of_a_small_circuit():
    shape = BaseShape()
    base = cache.circuit_key(_small(), shape)
    assert base == cache.circuit_key(_small(), shape)
    assert base == cache.circuit_key(_small(view_name="renamed view"), shape)  # view names are labels only
    assert base != cache.circuit_key(_small(weight=2), shape)
    assert base != cache.circuit_key(_small(theta=1), shape)
    assert base != cache.circuit_key(_small(tap=1), shape)          # memory ops are hashed field by field
    c = _small()
    c.ops[-1].mystery = object()                                     # not a field: not part of the definition
    assert cache.circuit_key(c, shape) == base
    with pytest.raises(TypeError, match="cannot hash a object"):
        cache._Canon().value((1, object()))


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("QGPU_CACHE_DIR", str(tmp_path / "q"))
    assert cache.default_cache_dir() == tmp_path / "q"
    monkeypatch.delenv("QGPU_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.default_cache_dir() == tmp_path / "xdg" / "qgpu-min" / "gpu"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    assert cache.default_cache_dir() == Path.home() / ".cache" / "qgpu-min" / "gpu"


# ---- files derived from an entry (the chunked head, the head's factor tables) --------------------------------


def _launch_ids(cg: CompiledGpu, mode: str) -> list[int]:
    """vadd of 3 lanes on cg's step engine (the whole vocabulary's argmax each step): its generated ids."""
    from qgpu_min.gpu.model import run_engine
    from qgpu_min.gpu.program import block_format, prompt
    from qgpu_min.host.launch import build_image, compile_kernel
    src = "__global__ void vadd(const int* a, int* c) { c[threadIdx.x] = a[threadIdx.x] + 5; }"
    image = build_image(compile_kernel(src, fmt=block_format(cg.spec)), [[1, -2, 300], [0, 0, 0]], (3, 1))
    run = run_engine(cg, prompt(image.program, image.memory, 3, cg.spec), mode)
    return [cg.token_id(t) for t in run.generated]


def test_derived_files_are_written_once_and_read_back_the_same(cold, tmp_path, monkeypatch):
    """The first engine run next to an entry writes the chunked head and the factor tables beside it; a second
    process's load reads them (neither is derived again) and its launch is the same, token for token."""
    from qgpu_min.model import forward, step_engine
    from qgpu_min.gpu import model as gpu_model
    shutil.copyfile(_entry(cold[0]), tmp_path / _entry(cold[0]).name)
    first = cache.load_or_compile(cache_dir=tmp_path)
    want = {m: _launch_ids(first, m) for m in ("fp32", "bf16")}
    names = sorted(p.name.split(".", 1)[1] for p in tmp_path.iterdir() if p.suffixes != [".npz"])
    assert names == ["head.w%d.npz" % forward.kernels.chunk_width(), "head_tables.npz"], names
    for module, fn in ((forward, "sparse_chunks"), (gpu_model, "factor_tables"), (step_engine, "factor_tables")):
        monkeypatch.setattr(module, fn, _no_emit)
    second = cache.load_or_compile(cache_dir=tmp_path)
    assert {m: _launch_ids(second, m) for m in ("fp32", "bf16")} == want


@pytest.mark.parametrize("kind", ["flip", "truncate", "tamper", "stale"])
def test_a_bad_derived_file_is_made_again(cold, tmp_path, capsys, kind):
    shutil.copyfile(_entry(cold[0]), tmp_path / _entry(cold[0]).name)
    first = cache.load_or_compile(cache_dir=tmp_path)
    want = _launch_ids(first, "fp32")
    path = next(p for p in tmp_path.iterdir() if p.name.endswith(".head_tables.npz"))
    {"flip": _flip, "truncate": _truncate, "tamper": _tamper_derived, "stale": _stale_derived}[kind](path)
    key = _entry(tmp_path).stem
    with pytest.raises(cache.BadEntry):
        cache.read_derived(path, key, "head_tables")
    capsys.readouterr()
    assert _launch_ids(cache.load_or_compile(cache_dir=tmp_path), "fp32") == want
    assert f"GPU cache file {path} is unusable" in capsys.readouterr().err
    cache.read_derived(path, key, "head_tables")       # made again, whole


def _resave(path: Path, change) -> None:
    with np.load(path, allow_pickle=False) as z:
        arrays = {n: z[n] for n in z.files}
    change(arrays)
    path.unlink()
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def _tamper_derived(path: Path) -> None:   # one table weight changed, the old digest kept
    def change(a):
        name = next(n for n in sorted(a) if n.endswith(".weights") and a[n].size)
        a[name] = a[name].copy()
        a[name].flat[0] += 1.0
    _resave(path, change)


def _stale_derived(path: Path) -> None:    # whole and valid, for another entry
    def change(a):
        a["meta.key"] = np.array("0" * 64)
        a["meta.digest"] = np.array(cache._payload_digest(a))
    _resave(path, change)


def test_embedding_bits_from_the_csr_equal_the_reference():
    from qgpu_min.gpu.model import EmbedCsr
    rng = np.random.default_rng(3)
    dense = np.where(rng.random((40, 70)) < 0.2, rng.integers(-3, 50, (40, 70)), 0).astype(np.float32)
    dense[5, 7] = -0.0
    dense[9] = 0
    rows, cols = np.nonzero((dense != 0) | np.signbit(dense))
    indptr = np.zeros(41, np.int64)
    np.cumsum(np.bincount(rows, minlength=40), out=indptr[1:])
    e = EmbedCsr((40, 70), indptr, cols.astype(np.int32), dense[rows, cols])
    assert np.array_equal(e.bits(), e.bits_ref()) and e.bits()[5, 7] == 0x8000
    assert EmbedCsr((40, 70), indptr, cols.astype(np.int32), dense[rows, cols] + 0.001).bits() is None
    with pytest.raises(ValueError, match="do not fit the shape"):
        EmbedCsr((40, 60), indptr, cols.astype(np.int32), dense[rows, cols]).bits()


def test_entries_of_other_definitions_are_pruned(tmp_path):
    keys = [f"{i:064x}" for i in range(5)]
    for i, k in enumerate(keys):                          # older keys first
        for name in (f"{k}.npz", f"{k}.head.w32.npz", f"{k}.load.fp32.ab.npz"):
            (tmp_path / name).write_bytes(b"x")
            os.utime(tmp_path / name, ns=(i * 10**9, i * 10**9))
    (tmp_path / "notes.txt").write_text("not an entry")
    cache.prune_other_entries(tmp_path, keys[1], keep=3)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["notes.txt"] + [f"{k}{suffix}" for k in (keys[1], keys[3], keys[4])
                                            for suffix in (".npz", ".head.w32.npz", ".load.fp32.ab.npz")])

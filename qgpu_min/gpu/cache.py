"""The compiled GPU (the circuit-only model) cached on disk, keyed by a hash of the circuit's definition.

Compiling the GPU takes seconds, most of it emitting the layer weights and the embedding rows of the
vocabulary; building and planning the circuit takes most of a second more. A launch needs neither once
the weights exist: only the layers, the embedding and where the data memory sits in the state. So the
entry's key is `definition_key`: a hash of what defines the circuit (the spec, the base shape, the entry
format and the source text of the packages that build, plan and emit it: gpu, circuit, machine, model).
`load_or_compile` takes `<cache dir>/<key>.npz` when that entry is present and intact, else builds,
plans and emits and writes the entry. `circuit_key`, a hash of the built circuit itself (every op), is
what a merged checkpoint's manifest records.

An entry stores every sparse matrix in CSR form (bf16 bits), the small vectors, the embedding in CSR
form (it is mostly zeros), the data memory's readout (circuit.run.Readout), its key, its format version
and a sha256 of all of that, packed into one blob with an index (`_pack`). A file that cannot
be read, fails its hash, or holds another key or format is reported on stderr, removed and rebuilt.
Entries are written to a temporary file in the same folder and renamed into place, so a reader (another
process included) sees either no entry or a whole one; two processes compiling at once both write whole
entries and the last rename wins.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..circuit import compile as compile_module, ir as ir_module, run as run_module
from ..circuit.compile import BaseShape, Coo, LayerWeights, Plan, check_exact_weights, emit, plan
from ..circuit.ir import CONST, Circuit, Gate, Group, Unit
from ..circuit.margin import static_check
from ..circuit.run import Readout, embedding_rows
from ..files import atomic_output, older_than_newest, unlink_quietly, user_cache_root
from ..model.bf16 import bf16_to_f32
from . import layout as layout_module, vocab as vocab_module
from .core import GpuCircuit, build
from .layout import GpuSpec
from .model import CompiledGpu, EmbedCsr, compiled_from
from .program import GpuLaunchError
from .vocab import Vocab

# Bump when the entry layout or the meaning of its arrays changes: older entries then read as stale.
FORMAT_VERSION = 3

# The packages whose source defines the GPU's weights (definition_key): building the circuit (gpu, machine),
# planning and emitting it (circuit) and the runtime's conversions the entry stores (model).
DEFINING_PACKAGES = ("gpu", "circuit", "machine", "model")

# The code that turns a circuit definition into weights and embedding rows. Its text is part of the key,
# so an entry written before the compiler changed is never taken for the new compiler's output.
_COMPILER_MODULES = (ir_module, compile_module, run_module, vocab_module, layout_module)

Progress = Callable[[str], None]


# ---------------------------------------------------------------------------------------------------------
# The key


class _Canon:
    """Canonical text of circuit objects, independent of object identity: a root group is named by the
    index of its first appearance (declared there with its name and size), a view by its root and its
    permutation, CONST by 'C'. Other IR objects (memory ops, memories, address products, the output code,
    the spec) are written field by field from their dataclass fields, so a field added to the IR is hashed
    without changing this class; an object of a kind it cannot write raises instead of being left out."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self._roots: dict[int, int] = {}   # id(root) -> index; ids are only used while the circuit is alive
        self._refs: dict[int, str] = {}    # id(group or view) -> its reference (views recur in many terms)

    def ref(self, g: Group) -> str:
        r = self._refs.get(id(g))
        if r is None:
            r = self._root_ref(g.root)
            if g.base is not None:
                r = f"{r}@{g.size}{g.perm!r}"
            self._refs[id(g)] = r
        return r

    def _root_ref(self, root: Group) -> str:
        if root is CONST:
            return "C"
        i = self._roots.get(id(root))
        if i is None:
            i = self._roots[id(root)] = len(self._roots)
            self.parts.append(f"G{i}={root.name!r}:{root.size}\n")  # precedes the record that uses it
        return f"#{i}"

    def value(self, x) -> str:
        """Any IR value: groups by reference, dataclasses by their fields, containers element-wise."""
        if isinstance(x, Group):
            return self.ref(x)
        if x is None or isinstance(x, (bool, int, float, str)):
            return repr(x)
        if isinstance(x, np.generic):
            return repr(x.item())
        if isinstance(x, (tuple, list)):
            return "(" + ",".join(self.value(v) for v in x) + ")"
        if isinstance(x, dict):  # built in a fixed order by the circuit's construction
            return "{" + ",".join(f"{self.value(k)}:{self.value(v)}" for k, v in x.items()) + "}"
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            fields = ",".join(f"{f.name}={self.value(getattr(x, f.name))}" for f in dataclasses.fields(x))
            return f"{type(x).__name__}{{{fields}}}"
        raise TypeError(f"circuit_key cannot hash a {type(x).__name__}; teach qgpu_min.gpu.cache._Canon about it")

    def add(self, record: str) -> None:
        self.parts.append(record + "\n")

    def gate(self, op: Gate) -> None:
        """The hot loop (every term of every unit): written directly while Gate and Unit have the fields it
        knows, else field by field like everything else."""
        if _field_names(Gate) != ("out", "default", "units") or _field_names(Unit) != ("terms", "theta", "out"):
            self.add(self.value(op))
            return
        units = []
        for u in op.units:
            terms = ";".join(f"{self.ref(g)},{e},{w!r}" for g, e, w in u.terms)
            units.append(f"[{terms}|{u.theta!r}|{u.out!r}]")
        self.add(f"gate {self.ref(op.out)} d={op.default} " + "".join(units))

    def circuit(self, c: Circuit) -> None:
        self.add(f"circuit {c.name!r}")
        self.add("inputs " + self.value(c.inputs))
        for op in c.ops:
            self.gate(op) if isinstance(op, Gate) else self.add(self.value(op))
        self.add("memories " + self.value(c.memories))
        self.add("outputs " + self.value(c.outputs))

    def gpu_extras(self, gc: GpuCircuit) -> None:
        """What emit (the output code) and the vocabulary (the spec, the named inputs and codes) take from
        the GpuCircuit beyond its circuit."""
        for name in ("spec", "out_code", "inputs", "codes"):
            self.add(f"{name} {self.value(getattr(gc, name))}")


def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _compiler_digest() -> str:
    """sha256 of the compiler's sources as loaded (see _COMPILER_MODULES); an unreadable one counts as empty."""
    h = hashlib.sha256()
    for mod in _COMPILER_MODULES:
        try:
            data = Path(mod.__file__).read_bytes()
        except (OSError, TypeError):
            data = b""
        h.update(f"{mod.__name__}:{len(data)}:".encode())
        h.update(data)
    return h.hexdigest()


def circuit_key(gc_or_circuit: GpuCircuit | Circuit, shape: BaseShape) -> str:
    """sha256 hex of everything the emitted weights and embedding depend on: every op of the circuit in
    order (gates with every unit's terms, theta and outputs; memory ops with their memory, addresses,
    sources, taps and outputs), the inputs and outputs, for a GpuCircuit its spec, output code and named
    inputs, the base shape, the entry format version and the compiler's sources."""
    canon = _Canon()
    canon.add(f"qgpu-min gpu cache format {FORMAT_VERSION}")
    canon.add(f"shape {shape!r}")
    canon.add(f"compiler {_compiler_digest()}")
    if isinstance(gc_or_circuit, GpuCircuit):
        canon.circuit(gc_or_circuit.circuit)
        canon.gpu_extras(gc_or_circuit)
    else:
        canon.circuit(gc_or_circuit)
    return hashlib.sha256("".join(canon.parts).encode()).hexdigest()


def definition_key(spec: GpuSpec, shape: BaseShape, package: Path | None = None) -> str:
    """sha256 hex of the entry format, the spec, the base shape and the source of DEFINING_PACKAGES (in
    `package`, default this one): the same key means the same circuit, plan and weights, known without
    building any of them (milliseconds)."""
    h = hashlib.sha256(f"qgpu-min gpu cache format {FORMAT_VERSION}\nspec {spec!r}\nshape {shape!r}\n".encode())
    package = package or Path(__file__).resolve().parent.parent
    for sub in DEFINING_PACKAGES:
        for path in sorted((package / sub).rglob("*.py")):
            data = path.read_bytes()
            h.update(f"{path.relative_to(package).as_posix()}:{len(data)}:".encode())
            h.update(data)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------------------
# Entries


class BadEntry(Exception):
    """A cache entry that cannot be used (unreadable, corrupt, stale)."""


def default_cache_dir() -> Path:
    """$QGPU_CACHE_DIR, else <user cache root>/gpu."""
    if os.environ.get("QGPU_CACHE_DIR"):
        return Path(os.environ["QGPU_CACHE_DIR"]).expanduser()
    return user_cache_root() / "gpu"


def entry_path(cache_dir: Path, key: str) -> Path:
    return Path(cache_dir) / f"{key}.npz"


def _payload_digest(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over every array but the digest itself: name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        if name == "meta.digest":
            continue
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.reshape(-1).view(np.uint8))     # the bytes tobytes() gives, without the copy
    return h.hexdigest()


def _csr_arrays(prefix: str, m: Coo) -> dict[str, np.ndarray]:
    s = m.to_sparse(exact=False)  # the runtime's own conversion: the entry holds what the model runs
    return {f"{prefix}.shape": np.array(s.shape, np.int64), f"{prefix}.indptr": s.indptr,
            f"{prefix}.indices": s.indices, f"{prefix}.values": s.values}


def _embed_arrays(embed: np.ndarray) -> dict[str, np.ndarray]:
    """The embedding in CSR form, f32 values (small integers, but f32 keeps it exact whatever they are)."""
    rows, cols = np.nonzero(embed)
    indptr = np.zeros(embed.shape[0] + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=embed.shape[0]), out=indptr[1:])
    return {"embed.shape": np.array(embed.shape, np.int64), "embed.indptr": indptr,
            "embed.indices": cols.astype(np.int32), "embed.values": embed[rows, cols].astype(np.float32)}


def entry_arrays(key: str, layers: list[LayerWeights], embed: np.ndarray, data: Readout) -> dict[str, np.ndarray]:
    """Everything an entry stores, its digest included."""
    arrays: dict[str, np.ndarray] = {"meta.format": np.array(FORMAT_VERSION, np.int64), "meta.key": np.array(key),
                                     "meta.layers": np.array([[lw.units, lw.heads] for lw in layers], np.int64),
                                     **data.arrays("data")}
    for i, lw in enumerate(layers):
        arrays[f"L{i}.mats"] = np.array(list(lw.mats))
        arrays[f"L{i}.vecs"] = np.array(list(lw.vecs))
        for name, m in lw.mats.items():
            arrays.update(_csr_arrays(f"L{i}.m.{name}", m))
        for name, v in lw.vecs.items():
            arrays[f"L{i}.v.{name}"] = np.asarray(v, np.float32)
    arrays.update(_embed_arrays(embed))
    arrays["meta.digest"] = np.array(_payload_digest(arrays))
    return arrays


# An entry's ~1,700 arrays travel packed, as two members of an uncompressed .npz: the JSON index of their
# names, dtypes, shapes and offsets, and one byte blob they are views of. Reading a member of an .npz costs
# ~0.2 ms whatever its size, so the arrays one by one took most of a warm start's 0.3 s of reading.
_ALIGN = 64


def _pack(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    index, parts, offset = {}, [], 0
    for name, a in arrays.items():
        a = np.asarray(a)
        index[name] = [a.dtype.str, list(a.shape), offset]
        raw = np.ascontiguousarray(a).reshape(-1).view(np.uint8)     # (ascontiguousarray makes 0-d 1-d)
        pad = -raw.size % _ALIGN
        parts += [raw, np.zeros(pad, np.uint8)]
        offset += raw.size + pad
    blob = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
    return {"packed.index": np.array(json.dumps(index)), "packed.blob": blob}


def load_arrays(path: Path) -> dict[str, np.ndarray]:
    """The arrays an entry file holds, unchecked (read_entry checks them); raises BadEntry when the file does
    not read whole as a packed entry."""
    try:
        with np.load(path, allow_pickle=False) as z:
            index, blob = json.loads(str(z["packed.index"])), z["packed.blob"]
        arrays = {}
        for name, (dtype, shape, offset) in index.items():
            dt = np.dtype(dtype)
            count = int(np.prod(shape, dtype=np.int64))
            if dt.hasobject or offset < 0 or offset + count * dt.itemsize > blob.size:
                raise ValueError(f"array {name!r} lies outside the blob")
            arrays[name] = np.frombuffer(blob, dt, count, offset).reshape(shape)
    except Exception as e:  # zip, npy header or JSON errors, truncation, a missing member: all mean the same
        raise BadEntry(f"unreadable ({type(e).__name__}: {e})") from None
    return arrays


def write_entry(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Written whole or not at all (files.atomic_output): readers never see a partial entry."""
    with atomic_output(path) as f:
        np.savez(f, **_pack(arrays))


def read_entry(path: Path, key: str) -> dict[str, np.ndarray]:
    """The entry's arrays, checked: raises BadEntry unless the file reads whole, its digest matches its
    payload, and it holds `key` in this format version."""
    arrays = load_arrays(path)
    try:
        digest, fmt, stored = str(arrays["meta.digest"]), int(arrays["meta.format"]), str(arrays["meta.key"])
    except (KeyError, ValueError, TypeError) as e:
        raise BadEntry(f"no valid header ({e})") from None
    if _payload_digest(arrays) != digest:
        raise BadEntry("payload hash mismatch")
    if fmt != FORMAT_VERSION:
        raise BadEntry(f"format {fmt}, this version reads {FORMAT_VERSION}")
    if stored != key:
        raise BadEntry(f"stale: holds key {stored[:12]}..., wanted {key[:12]}...")
    return arrays


# Arrays derived from an entry at first use (the engine's chunked head, its factor tables), kept beside it as
# <key>.<name>.npz, uncompressed: a warm start reads them instead of deriving them again (most of a second).
DERIVED_FORMAT = 1


def derived_path(cache_dir: Path, key: str, name: str) -> Path:
    return Path(cache_dir) / f"{key}.{name}.npz"


def read_derived(path: Path, key: str, name: str) -> dict[str, np.ndarray]:
    """A derived file's arrays, checked as read_entry checks an entry (whole, digest, format, key, name);
    raises BadEntry."""
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {n: z[n] for n in z.files}
        digest, fmt = str(arrays["meta.digest"]), int(arrays["meta.format"])
        stored = (str(arrays["meta.key"]), str(arrays["meta.name"]))
    except Exception as e:  # zip (CRC included), npy header errors, truncation, a missing header field
        raise BadEntry(f"unreadable ({type(e).__name__}: {e})") from None
    if _payload_digest(arrays) != digest:
        raise BadEntry("payload hash mismatch")
    if fmt != DERIVED_FORMAT or stored != (key, name):
        raise BadEntry(f"stale: holds {stored[1]!r} of key {stored[0][:12]}... in format {fmt}")
    return {n[2:]: a for n, a in arrays.items() if n.startswith("a.")}


@dataclasses.dataclass(frozen=True)
class DerivedStore:
    """derived(name, make): the arrays `make()` gives for the entry `key`, from <key>.<name>.npz when that file
    is intact, else made and written there (a file that cannot be written is only a warning; one that does
    not read is reported, removed and made again). `source`: the entry's embedding object as loaded; what is
    derived from it holds for a CompiledGpu only while that is its embedding (CompiledGpu.store)."""
    cache_dir: Path
    key: str
    source: object = dataclasses.field(default=None, compare=False, repr=False)

    def __call__(self, name: str, make: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        path = derived_path(self.cache_dir, self.key, name)
        if path.exists():
            try:
                return read_derived(path, self.key, name)
            except BadEntry as e:
                _warn(f"GPU cache file {path} is unusable, {e}; making it again")
                path.unlink(missing_ok=True)
        made = make()
        arrays = {f"a.{n}": np.asarray(a) for n, a in made.items()}
        arrays.update({"meta.format": np.array(DERIVED_FORMAT, np.int64), "meta.key": np.array(self.key),
                       "meta.name": np.array(name)})
        arrays["meta.digest"] = np.array(_payload_digest(arrays))
        try:
            with atomic_output(path) as f:
                np.savez(f, **arrays)
        except OSError as e:
            _warn(f"could not write the GPU cache file {path} ({e}); it is made again next time")
        return made

    def prune(self, prefix: str, keep: int) -> None:
        """Remove all but the `keep` newest derived files <key>.<prefix>*.npz (one another process removed
        first, or cannot be removed, is left alone)."""
        for old in older_than_newest(Path(self.cache_dir).glob(f"{self.key}.{prefix}*.npz"), keep):
            unlink_quietly(old)


def _coo_of(arrays: dict[str, np.ndarray], prefix: str) -> Coo:
    """A Coo holding the stored CSR matrix as one bulk block: to_sparse gives back the stored matrix bit for
    bit (the entries are already summed, sorted and bf16-exact), and it stays sparse in memory."""
    shape = tuple(int(x) for x in arrays[f"{prefix}.shape"])
    indptr = arrays[f"{prefix}.indptr"]
    m = Coo(shape)
    m.add_many(np.repeat(np.arange(shape[0]), np.diff(indptr)), arrays[f"{prefix}.indices"],
               bf16_to_f32(arrays[f"{prefix}.values"]))
    return m


def _embed_of(arrays: dict[str, np.ndarray]) -> EmbedCsr:
    """The stored embedding, kept sparse (CompiledGpu makes it dense or bf16 bits when asked)."""
    n, hidden = (int(x) for x in arrays["embed.shape"])
    indptr, indices = arrays["embed.indptr"], arrays["embed.indices"]
    if indptr.shape != (n + 1,) or indices.shape != arrays["embed.values"].shape or int(indptr[-1]) != indices.size \
            or (indices.size and (indices.min() < 0 or indices.max() >= hidden)) or np.any(np.diff(indptr) < 0):
        raise BadEntry("the embedding's CSR arrays do not fit its shape")
    return EmbedCsr((n, hidden), indptr, indices, arrays["embed.values"])


def layers_of(arrays: dict[str, np.ndarray]) -> list[LayerWeights]:
    """The emitted layers of a checked entry, Coo matrices in bulk form."""
    layers = []
    for i, (units, heads) in enumerate(arrays["meta.layers"]):
        mats = {str(n): _coo_of(arrays, f"L{i}.m.{n}") for n in arrays[f"L{i}.mats"]}
        vecs = {str(n): arrays[f"L{i}.v.{n}"].copy() for n in arrays[f"L{i}.vecs"]}
        layers.append(LayerWeights(mats, vecs, int(units), int(heads)))
    return layers


# ---------------------------------------------------------------------------------------------------------
# Load or compile


def _warn(msg: str) -> None:
    print(f"qgpu-min: {msg}", file=sys.stderr)


def _emit_checked(gc: GpuCircuit, vocab: Vocab, p: Plan) -> tuple[list[LayerWeights], np.ndarray]:
    """compile_gpu's check and emission steps, on a circuit and plan already built."""
    report = static_check(p)
    if not report.ok:
        raise GpuLaunchError(f"the GPU circuit fails its static check: {report.problems[:3]}")
    layers = emit(p, gc.out_code)
    check_exact_weights(layers)
    return layers, embedding_rows(p, vocab.table)


def _try_load(path: Path, key: str, spec: GpuSpec, shape: BaseShape) -> CompiledGpu | None:
    if not path.exists():
        return None
    try:
        arrays = read_entry(path, key)
        embed = _embed_of(arrays)
        return CompiledGpu(spec, shape, layers_of(arrays), embed, Readout.from_arrays(arrays, "data"),
                           derived=DerivedStore(path.parent, key, embed))
    except BadEntry as e:
        reason = str(e)
    except Exception as e:  # a checked entry that still does not rebuild: treat it as corrupt too
        reason = f"does not load ({type(e).__name__}: {e})"
    _warn(f"GPU cache entry {path} is unusable, {reason}; rebuilding it")
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass  # another process may hold or have replaced it; the rebuild's rename still wins
    return None


KEPT_KEYS = 3      # circuit definitions whose entries a cache folder keeps (~95 MB each with their derived files)
_ENTRY_NAME = re.compile(r"[0-9a-f]{64}\.npz")


def prune_other_entries(cache_dir: Path, key: str, keep: int = KEPT_KEYS) -> None:
    """After writing the entry `key`: remove the entries of other definitions (older code, other specs) and
    the files derived from them, all but the newest keep - 1 (a file that cannot be removed is left)."""
    others = [p for p in Path(cache_dir).iterdir() if _ENTRY_NAME.fullmatch(p.name) and p.stem != key]
    for old in older_than_newest(others, keep - 1):
        for f in Path(cache_dir).glob(f"{old.stem}.*"):
            unlink_quietly(f)


def load_or_compile(spec: GpuSpec = GpuSpec(), shape: BaseShape = BaseShape(), cache_dir: str | Path | None = None,
                    progress: Progress | None = None) -> CompiledGpu:
    """The compiled GPU, its layers, embedding and data readout from the cache when an intact entry for this
    definition is there (nothing is built or planned then), else compiled (and the entry written). Either way
    the layers hold bulk-form Coo matrices, so the result does not depend on the cache's state. A cache that
    cannot be written is only a warning."""
    key = definition_key(spec, shape)
    path = entry_path(Path(cache_dir) if cache_dir is not None else default_cache_dir(), key)
    loaded = _try_load(path, key, spec, shape)
    if loaded is not None:
        return loaded
    if progress is not None:
        progress("compiling the GPU (first use; about 10 s, then cached) ...")
    gc = build(spec)
    vocab = Vocab(gc)
    p = plan(gc.circuit, shape)
    layers, embed = _emit_checked(gc, vocab, p)
    cg = compiled_from(gc, p, layers, embed)
    arrays = entry_arrays(key, layers, embed, cg.data)
    try:
        write_entry(path, arrays)
        if progress is not None:
            progress(f"cached at {path}")
        prune_other_entries(path.parent, key)
    except OSError as e:
        _warn(f"could not write the GPU cache entry {path} ({e}); compiling again next time")
    # the layers as a warm load returns them (dropping emit's per-entry lists); the embedding as emitted,
    # which equals the stored one, so the dense array is not made twice
    cg.layers = layers_of(arrays)
    cg.derived = DerivedStore(path.parent, key, cg.embed_source)
    return cg

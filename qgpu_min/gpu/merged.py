"""The GPU compiled in front of a base Qwen3.5 checkpoint (`qgpu-min build`), and that checkpoint run as a GPU.

The merged checkpoint is an ordinary one (circuit.merge): the GPU's layers are decoder layers 0..n-1, the
base's layers follow, and the GPU's tokens are appended to the vocabulary (ids base_vocab + i, tied LM
head). A text gate per circuit sublayer, found against the base's embedding, keeps every text token's
circuit outputs exactly zero, so on text the merged model computes what the base computes.

A manifest (`qgpu_manifest.json`) beside the weights says what was built: the base (folder, config and
index hashes, weight file sizes), the GPU (its circuit key, spec), the layer and token ranges and the
measured text-gate margins. Running a merged checkpoint recomputes the circuit key and refuses a
checkpoint built from a different GPU: the token ids and state layout would not match.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..circuit.compile import BaseShape, Plan, plan
from ..circuit.ir import MemOp
from ..circuit.merge import build_merged
from ..circuit.run import Readout, readout
from ..circuit.tokens import CircuitTokens
from ..files import read_json, write_text_atomic
from ..model.config import load_config
from ..model.errors import CheckpointError
from ..model.forward import Model, check_device
from ..model.weights import check_quant
from ..model.tokenizer import padding_placeholder
from .core import GpuCircuit, build
from .layout import GpuSpec
from .model import data_memory_op
from .program import GpuLaunchError
from .vocab import Token, Vocab, token_name

MANIFEST = "qgpu_manifest.json"
MANIFEST_FORMAT = 1
Progress = Callable[[str], None]


def gpu_tokens(vocab: Vocab) -> CircuitTokens:
    """The GPU's vocabulary as circuit tokens: names and every token's input fields."""
    return CircuitTokens([token_name(t) for t in vocab.tokens], vocab.table)


def _sha256(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def _base_record(base: Path) -> dict:
    """What identifies the base: its folder, config and index hashes, and its weight files' sizes (hashing
    gigabytes of weights would double the build's time; the runtime checks every header anyway)."""
    from ..model.safetensors_io import INDEX_NAME, checkpoint_files
    return {"path": str(base.resolve()), "config_sha256": _sha256(base / "config.json"),
            "index_sha256": _sha256(base / INDEX_NAME),
            "weight_files": {f.name: f.stat().st_size for f in checkpoint_files(base)}}


DEFAULT_MAX_LEAKS = 256   # text tokens a build may leave unsilenced where no exact text gate exists (reported)


def build_gpu_checkpoint(base_dir: str | Path, out_dir: str | Path, spec: GpuSpec = GpuSpec(), force: bool = False,
                         progress: Progress | None = None, max_leaks: int = DEFAULT_MAX_LEAKS) -> dict:
    """Compile the GPU for the base's shapes, merge it in front of the base, write the manifest; returns the
    manifest. An existing out_dir is an error unless `force`; the checkpoint is written to a temporary
    folder and renamed at the end (circuit.merge), the manifest inside it before the rename. The text gates
    silence every embedding row when they can, else every row the base's tokenizer can produce (the others
    listed in `text_gate.unchecked_ids`); where no gate silences all of those, up to max_leaks are left out,
    named in the manifest (`text_gate.leaky_token_ids`) and in the progress output."""
    from .cache import circuit_key

    say = progress or (lambda _m: None)
    base, out = Path(base_dir), Path(out_dir)
    if out.exists() and not force:
        raise CheckpointError(f"{out} exists; give --force to replace it, or another --out")
    cfg = load_config(base)
    shape = BaseShape.from_config(cfg)
    say("building the GPU circuit ...")
    gc = build(spec)
    vocab = Vocab(gc)
    key = circuit_key(gc, shape)
    tmp = build_folder(out)
    check_disk(base, out, plan(gc.circuit, shape).n_layers, len(vocab.tokens), shape)
    say(f"compiling it for {base} and writing the merged checkpoint (the GPU's layers are dense in the file) ...")
    text_ids = text_token_ids(base, cfg.vocab_size)
    built = build_merged(gc.circuit, gpu_tokens(vocab), gc.out_code, base, tmp, keep=[],  # planned as compile_gpu
                         text_ids=text_ids, max_leaks=max_leaks)
    leaky = [int(i) for i in built.leaky_ids]
    if leaky:
        say(f"warning: no text gate silences every text token of this base; {len(leaky)} token ids are not "
            f"exactly silent (listed in {MANIFEST}: text_gate.leaky_token_ids); measure the drift with "
            f"`qgpu-min drift`")
    manifest = {
        "format": MANIFEST_FORMAT,
        "qgpu_min_version": _version(),
        "base": _base_record(base),
        "gpu": {"circuit_key": key, "spec": _spec_record(spec)},
        "layers": {"gpu": [0, built.n_layers], "base": [built.n_layers, built.n_layers + cfg.num_hidden_layers]},
        "tokens": {"gpu": [built.base_vocab, built.base_vocab + len(vocab.tokens)], "base_vocab": built.base_vocab},
        "text_gate": {"min_margin": built.tau, "max_text_pre_activation": built.text_max_pre,
                      "exact": not leaky, "leaky_token_ids": leaky,
                      "unchecked_ids": [int(i) for i in sorted(set(range(cfg.vocab_size)) - set(built.checked_ids.tolist()))]},
        # where the GPU's residual dims went (circuit.placement): dims[j] is the base dim of the plan's dim j
        "residual_dims": [int(d) for d in built.dims],
    }
    gpu_ids = range(built.base_vocab, built.base_vocab + len(vocab.tokens))
    placeholders = add_tokens_to_tokenizer(built.path, {i: added_token_text(t) for i, t in zip(gpu_ids, vocab.tokens)})
    suppress_in_text_generation(built.path, gpu_ids)
    manifest["tokens"]["placeholders"] = [placeholders.start, placeholders.stop]
    write_text_atomic(built.path / MANIFEST, json.dumps(manifest, indent=2))
    if out.exists():
        if not force:         # absent when this build began: another one wrote it meanwhile
            shutil.rmtree(built.path, ignore_errors=True)
            raise CheckpointError(f"{out} was written by another build while this one ran; give --force to "
                                  f"replace it, or another --out")
        shutil.rmtree(out)
    try:
        built.path.rename(out)
    except OSError as e:      # another build wrote `out` between the two lines above
        shutil.rmtree(built.path, ignore_errors=True)
        raise CheckpointError(f"{out} was written by another build while this one finished ({e}); nothing of "
                              f"this build was kept") from None
    say(f"wrote {out}")
    return manifest


def build_folder(out: Path) -> Path:
    """The folder a build of `out` writes before renaming it to `out`: one per process (`<out>.build-<pid>`),
    so two builds of one output at once never write into each other's files. Leftovers of builds whose
    process is gone (interrupted) are removed; never taken for a checkpoint."""
    for old in out.parent.glob(f"{out.name}.build*"):
        pid = old.name[len(out.name) + len(".build-"):]
        if old.name == f"{out.name}.build" or (pid.isdigit() and not _process_alive(int(pid))):
            shutil.rmtree(old, ignore_errors=True)
    tmp = out.with_name(f"{out.name}.build-{os.getpid()}")
    if tmp.exists():      # this very process was interrupted in an earlier build of `out` (library use)
        shutil.rmtree(tmp)
    return tmp


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # someone else's process: alive
        return True
    return True


TEXT_BYTES_PER_TOKEN = 360   # measured: 354 (tokenizer.json, tokenizer_config.json, generation_config.json)


def text_token_ids(base: Path, vocab_size: int):
    """The embedding rows text can produce: the ids the base's tokenizer knows (all rows without one). Qwen
    pads its embedding past the tokenizer; those rows need no gate, and the manifest lists them."""
    from ..model.tokenizer import load_tokenizer
    tok = load_tokenizer(base)
    return np.arange(vocab_size) if tok is None else np.flatnonzero(tok.known_ids(vocab_size))


def estimated_bytes(base: Path, gpu_layers: int, gpu_tokens: int, shape: BaseShape) -> int:
    """The merged checkpoint's size: the base's weight files, one base linear-attention layer's tensors per GPU
    layer (a GPU layer has exactly those tensors, stored dense), and per GPU token its embedding row (bf16)
    and its entries in the tokenizer files and suppress_tokens."""
    from ..model.safetensors_io import checkpoint_files, read_checkpoint_headers
    infos = read_checkpoint_headers(base)
    cfg = load_config(base)
    lin = cfg.layers_of("linear_attention")
    prefix = f"{cfg.tensor_prefix}layers.{lin[0]}." if lin else None
    per_layer = sum(i.end - i.begin for n, i in infos.items() if prefix and n.startswith(prefix))
    files = sum(f.stat().st_size for f in checkpoint_files(base))
    return files + gpu_layers * per_layer + gpu_tokens * (shape.hidden * 2 + TEXT_BYTES_PER_TOKEN)


def check_disk(base: Path, out: Path, gpu_layers: int, gpu_tokens: int, shape: BaseShape) -> None:
    """Refuse before writing anything when the output's file system cannot hold the checkpoint."""
    need = estimated_bytes(base, gpu_layers, gpu_tokens, shape)
    folder = next(p for p in (out.resolve(), *out.resolve().parents) if p.exists())
    free = shutil.disk_usage(folder).free
    if need * 1.02 + (64 << 20) > free:
        raise CheckpointError(f"the merged checkpoint needs about {need / 2**30:.1f} GiB; {folder} has "
                              f"{free / 2**30:.1f} GiB free")


def suppress_in_text_generation(folder: Path, ids: range) -> None:
    """generation_config.json's `suppress_tokens` gets the GPU's token ids: text generation (transformers'
    and ours) never samples them. Their rows score text positions too (the tied head), so without this a
    merged model's sampling would drift even though its text logits are the base's bit for bit."""
    path = folder / "generation_config.json"
    try:
        gen = read_json(path) if path.exists() else {}
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: cannot be read as JSON ({e})") from None
    old = gen.get("suppress_tokens") or []
    gen["suppress_tokens"] = sorted(set(old) | set(ids))
    write_text_atomic(path, json.dumps(gen, indent=2))


def added_token_text(t: Token) -> str:
    """How a GPU token is written in text: a special token, so ordinary text never produces it."""
    return f"<|qgpu {token_name(t)}|>"


def add_tokens_to_tokenizer(folder: Path, tokens: dict[int, str]) -> range:
    """The GPU's tokens become added special tokens of tokenizer.json (and tokenizer_config.json's
    added_tokens_decoder) at their own ids, so ids and text round-trip. `tokenizers` gives an added token the
    next free id whatever the file says, and the GPU's ids follow the embedding, which Qwen pads past the
    tokenizer: the padding ids in between get placeholder tokens (tokenizer.padding_placeholder). Returns the
    placeholders' ids: base rows, sampled by text generation exactly as the base's own padding rows are. A
    tokenizer the ids cannot be added to is an error naming the file."""
    path = folder / "tokenizer.json"
    if not path.exists():
        return range(min(tokens), min(tokens))
    data = _read_tokenizer_file(path)
    try:
        model_ids = list((data.get("model") or {}).get("vocab", {}).values())
        have = data.get("added_tokens") or []
        next_id = max([-1, *model_ids, *(a["id"] for a in have)]) + 1
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: cannot be read as a tokenizer file ({e!r})") from None
    if next_id > min(tokens):
        raise CheckpointError(f"{path}: the tokenizer already has ids up to {next_id - 1}, past the GPU's "
                              f"first token {min(tokens)} (the tokenizer has more tokens than the embedding)")
    every = {i: padding_placeholder(i) for i in range(next_id, min(tokens))} | tokens
    entry = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
    data["added_tokens"] = have + [{"id": i, "content": text, **entry} for i, text in sorted(every.items())]
    write_text_atomic(path, json.dumps(data, ensure_ascii=False, indent=1))
    _check_token_ids(path, every)
    config = folder / "tokenizer_config.json"
    if config.exists():
        cfg = _read_tokenizer_file(config)
        decoder = cfg.get("added_tokens_decoder") or {}
        cfg["added_tokens_decoder"] = {**decoder, **{str(i): {"content": t, **entry} for i, t in every.items()}}
        write_text_atomic(config, json.dumps(cfg, ensure_ascii=False, indent=1))
    return range(next_id, min(tokens))


def _read_tokenizer_file(path: Path) -> dict:
    try:
        data = read_json(path)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: cannot be read as a tokenizer file ({e})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: cannot be read as a tokenizer file (not a JSON object)")
    return data


def _check_token_ids(path: Path, tokens: dict[int, str]) -> None:
    """`tokenizers` itself must give every added token the id the model uses for it."""
    from tokenizers import Tokenizer as HFTokenizer
    try:
        inner = HFTokenizer.from_file(str(path))
    except Exception as e:  # the library raises a bare Exception on malformed files
        raise CheckpointError(f"{path}: cannot be read by `tokenizers` ({e})") from None
    wrong = [(i, t, inner.token_to_id(t)) for i, t in tokens.items() if inner.token_to_id(t) != i]
    if wrong:
        i, t, got = wrong[0]
        raise CheckpointError(f"{path}: the tokenizer gives {t} the id {got}, not the model's {i} "
                              f"({len(wrong)} tokens differ)")


def _version() -> str:
    from .. import __version__
    return __version__


def _spec_record(spec: GpuSpec) -> dict:
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name != "fmt"}


@dataclass
class MergedGpu:
    """A merged checkpoint as the launch driver sees it (the same face as model.CompiledGpu): the GPU
    circuit, its vocabulary at ids offset.., the plan (state layout) and the loaded model per mode."""
    gc: GpuCircuit
    vocab: Vocab
    plan: Plan
    path: Path
    offset: int
    n_layers: int
    quant: str | None = None     # the base's layers quantized at load ("int8"), the GPU's layers never
    device: str = "cpu"          # where the base's dense products run ("cuda": model/cuda.py)
    models: dict = field(default_factory=dict)
    loaded: OrderedDict = field(default_factory=OrderedDict)   # programs loaded before (model.load_state)

    def model(self, mode: str = "fp32") -> Model:
        if mode not in self.models:
            from ..model.forward import load_model
            model = load_model(self.path, mode, quant=self.quant, keep_layers=self.layers, device=self.device)
            skip_gpu_layers_on_text(model, self.path)
            self.models[mode] = model
        return self.models[mode]

    @property
    def launch_ids(self) -> np.ndarray:
        """The GPU's token ids: during a launch the logits are needed only for these (model.run_launch)."""
        return np.arange(self.offset, self.offset + len(self.vocab.tokens), dtype=np.int64)

    @property
    def layers(self) -> range:
        return range(self.n_layers)

    @property
    def data_op(self) -> MemOp:
        return data_memory_op(self.gc, self.plan)

    @property
    def data(self) -> Readout:
        return readout(self.plan, self.data_op)

    def token_id(self, t: Token) -> int:
        return self.offset + self.vocab.id(t)

    def token_at(self, i: int) -> Token | None:
        """The GPU token of vocabulary id i, or None for a text token."""
        j = i - self.offset
        return self.vocab.tokens[j] if 0 <= j < len(self.vocab.tokens) else None


def read_manifest(model_dir: str | Path) -> dict:
    path = Path(model_dir) / MANIFEST
    if not path.is_file():
        raise CheckpointError(f"{model_dir}: no {MANIFEST}: not a checkpoint built by `qgpu-min build`")
    try:
        m = read_json(path)
        if type(m["format"]) is not int or m["format"] != MANIFEST_FORMAT:
            raise ValueError(f"format {m['format']!r}, this version reads {MANIFEST_FORMAT}")
        return m
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: not a valid build manifest ({type(e).__name__}: {e})") from None


def load_merged(model_dir: str | Path, spec: GpuSpec = GpuSpec(), quant: str | None = None,
                device: str = "cpu") -> MergedGpu:
    """A merged checkpoint ready to run launches, after checking that it holds this version's GPU. quant:
    its base layers (and the full-vocabulary LM head) quantized at load; device: where the base layers' dense
    products run (forward.load_model; the GPU's layers are CSR and stay on the CPU)."""
    check_quant(quant)
    check_device(device)
    from .cache import circuit_key

    model_dir = Path(model_dir)
    manifest = read_manifest(model_dir)
    cfg = load_config(model_dir)
    shape = BaseShape.from_config(cfg)
    gc = build(spec)
    p = plan(gc.circuit, shape)   # as the build planned it (and compile_gpu does)
    vocab = Vocab(gc)
    lo, last = manifest_ranges(manifest, model_dir, circuit_key(gc, shape), len(vocab.tokens), cfg.vocab_size,
                               p.n_layers)
    return MergedGpu(gc, vocab, p, model_dir, lo, last, quant, device)


def load_checkpoint(model_dir: str | Path, mode: str = "fp32", quant: str | None = None,
                    progress: Callable[[int, int], None] | None = None, text_skip: bool = True,
                    device: str = "cpu") -> Model:
    """forward.load_model for any checkpoint; quantizing one built by `qgpu-min build` keeps its GPU's layers
    exact (its manifest names them), and its text tokens skip the GPU's layers where the build claimed them
    silent (skip_gpu_layers_on_text; text_skip=False runs every layer, as `drift` must to measure the claim)."""
    from ..model.forward import load_model
    model = load_model(model_dir, mode, quant=quant, keep_layers=gpu_layers(model_dir) if quant else (),
                       progress=progress, device=device)
    if text_skip:
        skip_gpu_layers_on_text(model, model_dir)
    return model


def skip_gpu_layers_on_text(model: Model, model_dir: str | Path) -> None:
    """Let the text tokens a built checkpoint's manifest claims silent skip its GPU's layers (Model's
    skip_gpu_layers_on_text; bit for bit, model/text_skip.py); nothing for another checkpoint."""
    if (Path(model_dir) / MANIFEST).is_file():
        manifest = read_manifest(model_dir)      # read once: its unchecked ids run to megabytes at full scale
        model.skip_gpu_layers_on_text(manifest_gpu_layers(manifest, model_dir).stop,
                                      manifest_silent_ids(manifest, Path(model_dir)))


def manifest_silent_ids(manifest: dict, model_dir: Path) -> np.ndarray:
    """The text token ids the build claims silent in every GPU layer: the base vocabulary's, less the rows it
    did not check and the leaky ones; none when the manifest's highest text pre-activation is not <= -90."""
    where = model_dir / MANIFEST
    try:
        gate, base_vocab = manifest["text_gate"], manifest["tokens"]["base_vocab"]
        unchecked, top = gate["unchecked_ids"], gate["max_text_pre_activation"]
    except (KeyError, TypeError) as e:
        raise CheckpointError(f"{where}: not a valid build manifest ({type(e).__name__}: {e})") from None
    if type(base_vocab) is not int or not isinstance(top, (int, float)) or not isinstance(unchecked, list) \
            or not all(type(i) is int for i in unchecked):
        raise CheckpointError(f"{where}: not a valid build manifest (tokens.base_vocab, text_gate.unchecked_ids or "
                              f"text_gate.max_text_pre_activation has the wrong type)")
    if not top <= -90:
        return np.zeros(0, np.int64)
    silent = np.ones(base_vocab, bool)
    for ids in (unchecked, manifest_leaky_ids(manifest, model_dir)):
        ids = np.asarray(ids, np.int64)
        silent[ids[(ids >= 0) & (ids < base_vocab)]] = False
    return np.flatnonzero(silent)


def gpu_layers(model_dir: str | Path) -> range:
    """The GPU's layers of a checkpoint built by `qgpu-min build` (its manifest says), none for any other
    checkpoint: what quantizing at load must keep exact."""
    if not (Path(model_dir) / MANIFEST).is_file():
        return range(0)
    return manifest_gpu_layers(read_manifest(model_dir), model_dir)


def manifest_gpu_layers(manifest: dict, model_dir: str | Path) -> range:
    """The manifest's layers.gpu as a range."""
    try:
        first, last = manifest["layers"]["gpu"]
        return range(first, last)
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"{model_dir}: the build manifest's layers.gpu is not a pair of layer numbers") from None


def manifest_leaky_ids(manifest: dict, model_dir: Path) -> list[int]:
    """The manifest's text_gate.leaky_token_ids (none when the build silenced every row)."""
    gate = manifest.get("text_gate")
    ids = gate.get("leaky_token_ids", []) if isinstance(gate, dict) else []
    if not isinstance(ids, list) or not all(type(i) is int for i in ids):
        raise CheckpointError(f"{model_dir}: the manifest's text_gate.leaky_token_ids is not a list of token ids")
    return ids


def manifest_ranges(manifest: dict, model_dir: Path, key: str, gpu_tokens: int, vocab_size: int,
                    gpu_layers: int) -> tuple[int, int]:
    """(first GPU token id, GPU layer count) from a manifest, after checking that it describes this version's GPU
    (`key`, `gpu_tokens`, `gpu_layers`) at the end of a vocabulary of `vocab_size` ids, in front of the base."""
    where = model_dir / MANIFEST
    try:
        built_key = manifest["gpu"]["circuit_key"]
        (lo, hi), (first, last) = manifest["tokens"]["gpu"], manifest["layers"]["gpu"]
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{where}: not a valid build manifest ({type(e).__name__}: {e})") from None
    if not isinstance(built_key, str) or not all(type(v) is int for v in (lo, hi, first, last)):
        raise CheckpointError(f"{where}: not a valid build manifest (the circuit key must be a string and the GPU's "
                              f"token and layer ranges pairs of integers)")
    if built_key != key:
        raise GpuLaunchError(f"{model_dir} holds a GPU built by another version (circuit key {built_key[:12]}..., "
                             f"this version's is {key[:12]}...): rebuild it with `qgpu-min build`")
    if (lo, hi) != (vocab_size - gpu_tokens, vocab_size) or (first, last) != (0, gpu_layers):
        raise CheckpointError(f"{where}: token range {lo}..{hi} or layers {first}..{last} do not match the "
                              f"checkpoint (vocab_size {vocab_size}, {gpu_tokens} GPU tokens, {gpu_layers} GPU layers)")
    return lo, last

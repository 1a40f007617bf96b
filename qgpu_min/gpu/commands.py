"""`qgpu-min build`: the GPU compiled in front of Qwen3.5-2B (or a given base), written as one checkpoint."""
from __future__ import annotations

import json
import time

import numpy as np
from pathlib import Path

import click

from ..cli import user_errors
from ..model.modes import QUANTS


def default_out_dir(base: Path) -> Path:
    """<user cache root>/merged/<hash of the base's resolved path>: one folder per base."""
    import hashlib

    from ..files import user_cache_root
    return user_cache_root() / "merged" / hashlib.sha256(str(base.resolve()).encode()).hexdigest()[:16]


@click.command("build")
@click.option("--base", type=click.Path(file_okay=False, path_type=Path),
              help="The base checkpoint folder (default: fetch the pinned Qwen/Qwen3.5-2B).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Where to write the merged checkpoint (default: under the user's cache; printed).")
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
@click.option("--max-leaky-tokens", "max_leaks", type=click.IntRange(min=0), metavar="N",
              help="Where no text gate silences every text token of the base, accept one that leaves at most N "
              "token ids unsilenced (named in the manifest and on stderr); 0: refuse instead. [default: 256]")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary (the manifest, the folder, the time).")
@user_errors
def build_command(base: Path | None, out: Path | None, force: bool, max_leaks: int | None, as_json: bool) -> None:
    """Compile the GPU for the base's shapes, merge it in front of the base's layers (text gates keep every
    text token's GPU outputs exactly zero) and write one checkpoint with a build manifest; print its folder.
    Launch through it with `qgpu-min run --backend model --model DIR`."""
    from .merged import build_gpu_checkpoint

    say = lambda message: click.echo(message, err=True)  # noqa: E731 - progress on stderr, results on stdout
    started = time.monotonic()
    if base is None:
        from ..model.fetch import fetch_model
        say("fetching the pinned Qwen/Qwen3.5-2B ...")
        base = fetch_model(log=say)
    out = out or default_out_dir(base)
    leaks = {} if max_leaks is None else {"max_leaks": max_leaks}    # else the library's default
    manifest = build_gpu_checkpoint(base, out, force=force, progress=say, **leaks)
    seconds = round(time.monotonic() - started, 1)
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    if as_json:
        click.echo(json.dumps({"path": str(out), "seconds": seconds, "bytes": size, "manifest": manifest}))
    else:
        lo, hi = manifest["layers"]["gpu"]
        t0, t1 = manifest["tokens"]["gpu"]
        say(f"built in {seconds} s: {size / 2**30:.2f} GiB, GPU layers {lo}..{hi - 1}, GPU tokens {t0}..{t1 - 1}, "
            f"text-gate margin {manifest['text_gate']['min_margin']:.3f}, text "
            + ("exactly silent" if manifest["text_gate"]["exact"]
               else f"silent except {len(manifest['text_gate']['leaky_token_ids'])} token ids"))
        click.echo(str(out))


@click.command("drift")
@click.option("--base", type=click.Path(file_okay=False, exists=True, path_type=Path), required=True,
              help="The base checkpoint the model was built on.")
@click.option("--model", "model_dir", type=click.Path(file_okay=False, exists=True, path_type=Path), required=True,
              help="The merged checkpoint (from `qgpu-min build`); with --quant, any checkpoint (the base itself "
                   "measures the quantization alone).")
@click.option("--quant", type=click.Choice(QUANTS), help="Load the model quantized (its GPU layers stay exact): "
              "the drift then includes the quantization's.")
@click.option("--text", "text_file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="A UTF-8 text to read (default: a built-in sample of varied text).")
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="Read at most the first N tokens.")
@click.option("--mode", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@user_errors
def drift_command(base: Path, model_dir: Path, quant: str | None, text_file: Path | None, limit: int | None,
                  mode: str, as_json: bool) -> None:
    """Next-token drift of a merged checkpoint against its base over a text: KL(base || merged) per position
    (the merged model's mass on GPU tokens counts), top-1 agreement, the largest logit difference. With
    --quant: of the model loaded quantized against the base at full precision."""
    from ..model.drift import drift
    from ..model.errors import ModelInputError
    from ..model.forward import load_model
    from ..model.generation_config import read_generation_config
    from .merged import MANIFEST, load_checkpoint, manifest_leaky_ids, read_manifest

    # a folder that is not a built checkpoint is refused before loading (with --quant it is compared as it is)
    manifest = read_manifest(model_dir) if not quant or (model_dir / MANIFEST).is_file() else None
    say = lambda message: click.echo(message, err=True)  # noqa: E731
    try:
        text = text_file.read_text(encoding="utf-8") if text_file else default_drift_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ModelInputError(f"{text_file}: cannot be read as UTF-8 text ({e})") from None
    say(f"loading {base} and {model_dir} ({mode}{', ' + quant if quant else ''}) ...")
    b, m = load_model(base, mode), load_checkpoint(model_dir, mode, quant, text_skip=False)  # the claim measured
    if b.tokenizer is None:
        raise ModelInputError(f"{base}: no tokenizer.json, so the text cannot be encoded")
    ids = b.tokenizer.encode(text)[:limit]
    gen = read_generation_config(model_dir)
    suppressed = np.array(gen.suppress_tokens if gen else (), np.int64)
    summary = drift(b, m, ids, suppressed=suppressed, progress=lambda done, total: say(f"  {done}/{total} positions"),
                    leaky=(manifest_leaky_ids(manifest, model_dir) or None) if manifest else None)
    summary.update(mode=mode, quant=quant, base=str(base), model=str(model_dir))
    if as_json:
        click.echo(json.dumps(summary))
        return
    kl = summary["kl"]
    click.echo(f"{summary['positions']} positions ({mode}{', ' + quant if quant else ''}): KL mean {kl['mean']:.3g}, p99 {kl['p99']:.3g}, "
               f"max {kl['max']:.3g} nats ({kl['zero_positions']} positions exactly 0); top-1 agreement "
               f"{summary['top1_agreement']:.4f}; largest logit difference {summary['max_logit_diff']:.3g} "
               f"({summary['suppressed_tokens']} GPU tokens suppressed; without that their mass would be mean "
               f"{summary['unsuppressed_extra_mass']['mean']:.3g}, max {summary['unsuppressed_extra_mass']['max']:.3g})")
    leak = summary.get("leaky")
    if leak:
        click.echo(f"the build left {leak['ids']} token ids not exactly silent; "
                   + (f"{leak['positions']} positions read one, the first at position {leak['first_position']}: "
                      f"KL before it max {leak['kl_max_before_first']:.3g}, from it on mean "
                      f"{leak['kl_mean_from_first']:.3g} nats" if leak["positions"] else "this text reads none of them"))


def default_drift_text() -> str:
    from importlib.resources import files
    return files("qgpu_min.model").joinpath("data/drift_sample.txt").read_text(encoding="utf-8")

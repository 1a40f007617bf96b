"""`qgpu-min build`: the GPU compiled in front of Qwen3.5-2B (or a given base), written as one checkpoint."""
from __future__ import annotations

import json
import time
from pathlib import Path

import click

from ..cli import user_errors


def default_out_dir(base: Path) -> Path:
    """<user cache root>/merged/<hash of the base's resolved path>: one folder per base."""
    import hashlib

    from .cache import user_cache_root
    return user_cache_root() / "merged" / hashlib.sha256(str(base.resolve()).encode()).hexdigest()[:16]


@click.command("build")
@click.option("--base", type=click.Path(file_okay=False, path_type=Path),
              help="The base checkpoint folder (default: fetch the pinned Qwen/Qwen3.5-2B).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Where to write the merged checkpoint (default: under the user's cache; printed).")
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary (the manifest, the folder, the time).")
@user_errors
def build_command(base: Path | None, out: Path | None, force: bool, as_json: bool) -> None:
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
    manifest = build_gpu_checkpoint(base, out, force=force, progress=say)
    seconds = round(time.monotonic() - started, 1)
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    if as_json:
        click.echo(json.dumps({"path": str(out), "seconds": seconds, "bytes": size, "manifest": manifest}))
    else:
        lo, hi = manifest["layers"]["gpu"]
        t0, t1 = manifest["tokens"]["gpu"]
        say(f"built in {seconds} s: {size / 2**30:.2f} GiB, GPU layers {lo}..{hi - 1}, GPU tokens {t0}..{t1 - 1}, "
            f"text-gate margin {manifest['text_gate']['min_margin']:.3f}")
        click.echo(str(out))

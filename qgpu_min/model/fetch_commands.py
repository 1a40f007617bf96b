"""`qgpu-min fetch`: download the model into the hub cache and print the verified snapshot folder."""
from __future__ import annotations

import click

from .fetch import DEFAULT_REPO, PINNED_REVISION, FetchError, fetch_model


@click.command("fetch")
@click.option("--repo", default=DEFAULT_REPO, show_default=True, help="Hub repository id.")
@click.option("--revision", default=PINNED_REVISION, show_default=True,
              help="Commit, branch or tag. The default is the revision the project was verified against.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Hub cache folder (default: the hub's, e.g. ~/.cache/huggingface/hub or $HF_HUB_CACHE).")
@click.option("--offline", is_flag=True, help="Do not use the network: check and return the cached copy.")
@click.option("--endpoint", default=None, help="Hub URL (default: $HF_ENDPOINT or the public hub).")
def fetch_command(repo: str, revision: str, cache_dir: str | None, offline: bool, endpoint: str | None) -> None:
    """Download Qwen3.5 (config, weights, tokenizer) and verify sizes and hashes; print the model folder."""
    try:
        path = fetch_model(repo, revision, cache_dir=cache_dir, local_files_only=offline, endpoint=endpoint,
                           log=lambda msg: click.echo(msg, err=True))
    except FetchError as e:
        raise click.ClickException(str(e)) from e
    click.echo(str(path))

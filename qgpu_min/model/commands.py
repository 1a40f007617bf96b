"""`qgpu-min generate`: text generation from a Qwen3.5 checkpoint directory."""
from __future__ import annotations

import json
import sys

import click

from ..errors import QgpuError
from .modes import DEVICES, MODES, QUANTS


@click.command("generate")
@click.option("--model", "model_dir", required=True, type=click.Path(exists=True, file_okay=False),
              help="checkpoint directory (config.json, safetensors, tokenizer.json)")
@click.argument("prompts", nargs=-1, required=True, metavar="PROMPT...")
@click.option("--max-new-tokens", default=256, show_default=True, type=click.IntRange(min=0))
@click.option("--greedy", is_flag=True, help="always take the most likely token")
@click.option("--temperature", type=float, help="sampling temperature [generation_config.json, else 0.7]")
@click.option("--top-p", type=float, help="nucleus sampling mass [generation_config.json, else 0.8]")
@click.option("--top-k", type=click.IntRange(min=0), help="keep the k most likely, 0 = all [else 20]")
@click.option("--seed", type=int, help="random seed for sampling (reproducible output)")
@click.option("--raw", is_flag=True, help="tokenize the prompt as is, without the chat format")
@click.option("--think", is_flag=True, help="let the model think first (chat format only)")
@click.option("--mode", type=click.Choice(MODES), default="fp32", show_default=True,
              help="activation precision: fp32, or bf16 emulating torch bf16 inference")
@click.option("--quant", type=click.Choice(QUANTS), help="quantize the dense matrices at load: int8 (Q8, a scale "
              "per 32 weights; about half the bytes per token; drift: `qgpu-min drift --quant int8`)")
@click.option("--device", type=click.Choice(DEVICES), default="cpu", show_default=True,
              help="where the layers' dense products run: cuda needs an NVIDIA GPU and nvcc (builds once)")
@click.option("--json", "as_json", is_flag=True,
              help='print {"prompt_ids": [...], "token_ids": [...], "text": "..."} instead of streaming (a list '
                   'of them for several prompts)')
def generate_command(model_dir: str, prompts: tuple[str, ...], max_new_tokens: int, greedy: bool, temperature: float | None,
                     top_p: float | None, top_k: int | None, seed: int | None, raw: bool, think: bool,
                     mode: str, quant: str | None, device: str, as_json: bool) -> None:
    """Generate text for PROMPT (a user message, or raw text with --raw). Several prompts are generated
    together (one pass over the weights per step for all of them); each answer is the one it gets alone."""
    from ..gpu.merged import load_checkpoint  # here, so that other commands' start does not load the model
    from .generate import Sampling, default_sampling, generate_ids, generate_many, prompt_ids, result, stream_text

    try:
        if quant and device != "cpu":
            raise click.UsageError("--quant runs on the CPU only; leave out --device cuda or --quant")
        model = load_quantized(model_dir, mode, quant) if quant else load_checkpoint(model_dir, mode, device=device)
        d = default_sampling(model)
        sampling = Sampling(greedy=greedy, seed=seed,
                            temperature=d["temperature"] if temperature is None else temperature,
                            top_p=d["top_p"] if top_p is None else top_p,
                            top_k=int(d["top_k"]) if top_k is None else top_k)
        all_ids = [prompt_ids(model, p, raw=raw, enable_thinking=think) for p in prompts]
        if len(all_ids) > 1:
            answers = generate_many(model, all_ids, max_new_tokens, sampling)
            results = [result(model, ids, tokens) for ids, tokens in zip(all_ids, answers)]
            if as_json:
                click.echo(json.dumps(results))
                return
            for k, r in enumerate(results, start=1):
                click.echo(f"[{k}] {r['text']}")
            return
        ids = all_ids[0]
        tokens = generate_ids(model, ids, max_new_tokens, sampling)
        if as_json:
            click.echo(json.dumps(result(model, ids, list(tokens))))
            return
        for piece in stream_text(model, tokens, model.tokenizer.stop_ids):
            sys.stdout.write(piece)
            sys.stdout.flush()
        sys.stdout.write("\n")
    except QgpuError as e:
        raise click.ClickException(str(e)) from None


def load_quantized(model_dir: str, mode: str, quant: str):
    """load_model with quant, a built checkpoint's GPU layers kept exact, progress on stderr."""
    from ..gpu.merged import load_checkpoint   # a built checkpoint's GPU layers stay exact

    click.echo(f"loading {model_dir}, quantizing to {quant} ...", err=True)
    return load_checkpoint(model_dir, mode, quant,
                           progress=lambda done, total: click.echo(f"  {done}/{total} layers", err=True)
                           if done == total or done % 8 == 0 else None)

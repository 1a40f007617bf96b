"""Write a small random Qwen3.5 checkpoint with HF transformers itself, and transformers' logits for it.

The checkpoint is what the published model looks like, scaled down: transformers'
`Qwen3_5ForConditionalGeneration` (nested `text_config`, a tiny vision tower under `model.visual.*`, text
tensors under `model.language_model.*`, tied embeddings), sharded behind `model.safetensors.index.json`,
all tensors BF16 except `linear_attn.A_log` and `linear_attn.norm.weight`, which stay F32 as in the real file.
Weights are drawn at scales that keep activations O(1) (the default init leaves a tiny model nearly inert)
and every norm weight is random, so `1 + w` versus `w` matters.

Reference logits come from the checkpoint as loaded back by transformers in fp32 (BF16 weights upcast
exactly), eager attention, on CPU.

    python tools/make_hf_checkpoint.py OUT_DIR [--seed 0] [--prompt-len 80] [--decode 64]

writes the checkpoint and `reference_logits.npz` (prompt, tokens, prefill [T, V], decode [n, V]).
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import torch
from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

# Small, but with every feature of the real text model: GQA in full attention, more value heads than
# key heads in the DeltaNet layers (HF repeats each key head over consecutive value heads), partial RoPE.
TEXT_CONFIG = dict(
    vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=6,
    layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention",
                 "linear_attention", "full_attention"],
    num_attention_heads=4, num_key_value_heads=2, head_dim=32,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
    linear_conv_kernel_dim=4, rms_norm_eps=1e-6, attn_output_gate=True, tie_word_embeddings=True,
    rope_parameters=dict(rope_type="default", rope_theta=10_000_000.0, partial_rotary_factor=0.25,
                         mrope_interleaved=True, mrope_section=[2, 1, 1]),
    eos_token_id=None, max_position_embeddings=4096,
)
VISION_CONFIG = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                     patch_size=4, num_position_embeddings=16)
F32_SUFFIXES = ("linear_attn.A_log", "linear_attn.norm.weight")  # F32 in the published checkpoint


def _randomize(model: torch.nn.Module, seed: int, embed_mean: float = 0.0) -> None:
    """Weights at O(1)-activation scales; norms random around their neutral value. embed_mean: every embedding
    entry's mean in units of its spread (trained embeddings share a common direction; a text gate needs one)."""
    gen = torch.Generator().manual_seed(seed)

    def normal(shape: torch.Size, std: float) -> torch.Tensor:
        return torch.randn(shape, generator=gen) * std

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.A_log"):
                # Decay rates A in [0.5, 4] keep some memory in the state. With fast decay (HF's init reaches
                # A = 16) a head's output is often a near-cancelling q.k, which the gated norm then blows up
                # to unit size, amplifying fp32 rounding in transformers itself past the 1e-4 bar.
                p.copy_(torch.empty(p.shape).uniform_(0.5, 4.0, generator=gen).log())
            elif name.endswith("linear_attn.dt_bias"):
                p.copy_(normal(p.shape, 0.5))
            elif name.endswith("linear_attn.norm.weight"):  # plain w, neutral 1
                p.copy_(1.0 + normal(p.shape, 0.2))
            elif name.endswith("norm.weight"):  # 1 + w, neutral 0
                p.copy_(normal(p.shape, 0.2))
            elif name.endswith("embed_tokens.weight"):
                # small next to the layers, so the stream is not just the input token
                p.copy_(normal(p.shape, 0.1) + 0.1 * embed_mean)
            elif name.endswith("conv1d.weight"):
                p.copy_(normal(p.shape, 0.5))
            elif p.dim() >= 2:
                p.copy_(normal(p.shape, 1.0 / math.sqrt(p.shape[-1])))
            else:
                p.copy_(normal(p.shape, 0.02))


def write_hf_checkpoint(out_dir: str | Path, seed: int = 0, max_shard_size: str = "200KB",
                        text_config: dict | None = None, embed_mean: float = 0.0) -> Path:
    """Build, randomize and save the model in the published layout; return the directory.

    text_config: the text model's fields (default TEXT_CONFIG; e.g. Qwen3.5-2B's shapes with few layers); the
    vision tower's output width follows its hidden_size. embed_mean: see _randomize (default 0: isotropic).
    """
    out = Path(out_dir)
    text = TEXT_CONFIG if text_config is None else text_config
    vision = {**VISION_CONFIG, "out_hidden_size": text["hidden_size"]}   # the merger writes into the text stream
    torch.manual_seed(seed)
    config = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=True)
    model = Qwen3_5ForConditionalGeneration(config)
    _randomize(model, seed, embed_mean)
    keep = {n: p.detach().clone() for n, p in model.named_parameters() if n.endswith(F32_SUFFIXES)}
    model.to(torch.bfloat16)
    for name, p in model.named_parameters():
        if name in keep:
            p.data = keep[name]  # full fp32 precision, as in the real file
    model.save_pretrained(out, max_shard_size=max_shard_size)
    return out


def load_reference(path: str | Path) -> Qwen3_5ForConditionalGeneration:
    model = Qwen3_5ForConditionalGeneration.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    return model.eval()


def reference_logits(path: str | Path, prompt: list[int], n_decode: int) -> dict[str, np.ndarray]:
    """transformers fp32: logits for every prompt position, then `n_decode` greedy decode steps.

    Returns prompt, tokens (the n_decode + 1 greedy tokens: tokens[0] from the prefill), prefill [T, V]
    and decode [n_decode, V] (decode[i] is the logits after feeding tokens[i]).
    """
    model = load_reference(path)
    ids = torch.tensor([prompt])
    with torch.no_grad():
        prefill = model(ids).logits[0].float().numpy()
        out = model.generate(ids, max_new_tokens=n_decode + 1, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)
    steps = np.stack([step[0].float().numpy() for step in out.logits])
    tokens = out.sequences[0, len(prompt):].numpy()
    if len(tokens) != n_decode + 1:
        raise RuntimeError(f"transformers generated {len(tokens)} tokens, expected {n_decode + 1}")
    return {"prompt": np.array(prompt), "tokens": tokens, "prefill": prefill, "decode": steps[1:],
            "first": steps[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompt-len", type=int, default=80)
    ap.add_argument("--decode", type=int, default=64)
    args = ap.parse_args()
    out = write_hf_checkpoint(args.out_dir, args.seed)
    prompt = np.random.default_rng(args.seed).integers(0, TEXT_CONFIG["vocab_size"], args.prompt_len).tolist()
    np.savez(out / "reference_logits.npz", **reference_logits(out, prompt, args.decode))
    print(out)


if __name__ == "__main__":
    main()

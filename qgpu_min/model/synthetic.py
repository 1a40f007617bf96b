"""Synthetic Qwen3.5 checkpoints in the exact published format, with random weights.

A directory holds: the nested `config.json` (`Qwen3_5ForConditionalGeneration`, `text_config` with
`layer_types`), weights named `model.language_model.*` in bf16 with F32 `A_log` and
`linear_attn.norm.weight`, a few `model.visual.*` and `mtp.*` tensors a text runtime must skip, the
published shard naming (`model.safetensors-00001-of-0000N.safetensors` + `model.safetensors.index.json`),
a real byte-level BPE `tokenizer.json` trained with `tokenizers` (Qwen's pre-tokenizer regex and special
tokens), `tokenizer_config.json` and `generation_config.json`.

Weights are scaled so activations stay O(1): input projections ~ N(0, 1/in), projections that write the
residual stream ~ N(0, e^2/in) with e the embedding scale, so every layer adds about as much as the token
embedding holds; norm gains near neutral.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .bf16 import f32_to_bf16
from .safetensors_io import write_checkpoint_weights

if TYPE_CHECKING:
    import tokenizers

SIZES: dict[str, dict] = {
    # tiny: for tests; GQA in both mixers (2 key heads serve 4 value heads in DeltaNet)
    "tiny": dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                 linear_value_head_dim=16, linear_conv_kernel_dim=4, vocab_size=512,
                 layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"]),
    # 2b: the published Qwen3.5-2B shapes (layer count chosen by the caller)
    "2b": dict(hidden_size=2048, intermediate_size=6144, num_attention_heads=8, num_key_value_heads=2,
               head_dim=256, linear_num_key_heads=16, linear_num_value_heads=16, linear_key_head_dim=128,
               linear_value_head_dim=128, linear_conv_kernel_dim=4, vocab_size=248320,
               layer_types=["linear_attention"] * 3 + ["full_attention"]),
}

# The published added tokens, in id order (reference §4.2); the <|...|> ones are special.
ADDED_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
    "</tool_response>", "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>",
    "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>",
)
# Qwen3.5's pre-tokenizer split (reference §4.1)
SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
                 r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CORPUS = """\
The quick brown fox jumps over the lazy dog. A small GPU lives inside the weights of a language model.
Hello! How are you today? I am fine, thank you. What is the sum of 12 and 30? It is 42.
def add(a, b):
    return a + b
for i in range(10):
    print(i * i)
Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 3.14159 2.71828 -7 +5 = 12%
The model reads tokens, computes hidden states, and predicts the next token with a softmax over the vocabulary.
Memory, registers, warps and lanes: a kernel runs on many threads at once, each with its own index.
Café naïve résumé über straße 東京 こんにちは 你好 Привет مرحبا 🙂 — “quotes” and ‘apostrophes’.
User: write a poem about the sea. Assistant: The sea is wide, the sea is deep, its waves will rock the world to sleep.
"""


def build_tokenizer(vocab_size: int) -> tokenizers.Tokenizer:
    """A byte-level BPE tokenizer trained on a small built-in corpus, with Qwen's normalizer, split regex,
    decoder and the 33 added tokens right after the learned vocabulary (ids < vocab_size)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    learned = min(vocab_size - len(ADDED_TOKENS) - 8, 4000)  # leave padded, unused ids like the real model
    if learned < 256:
        raise ValueError(f"vocab_size {vocab_size} is too small for a byte-level BPE vocabulary "
                         f"(needs >= {256 + len(ADDED_TOKENS) + 8})")
    trainer = trainers.BpeTrainer(vocab_size=learned, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS.splitlines(keepends=True), trainer)
    tok.add_tokens([AddedToken(t, special=t.startswith("<|"), normalized=False) for t in ADDED_TOKENS])
    return tok


def _config(sizes: dict, layer_types: list[str], ids: dict[str, int], tie: bool) -> dict:
    text = {
        "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True, "dtype": "bfloat16",
        "eos_token_id": ids["<|endoftext|>"], "full_attention_interval": 4,
        "head_dim": sizes["head_dim"], "hidden_act": "silu", "hidden_size": sizes["hidden_size"],
        "initializer_range": 0.02, "intermediate_size": sizes["intermediate_size"],
        "layer_types": layer_types, "linear_conv_kernel_dim": sizes["linear_conv_kernel_dim"],
        "linear_key_head_dim": sizes["linear_key_head_dim"], "linear_num_key_heads": sizes["linear_num_key_heads"],
        "linear_num_value_heads": sizes["linear_num_value_heads"],
        "linear_value_head_dim": sizes["linear_value_head_dim"], "mamba_ssm_dtype": "float32",
        "max_position_embeddings": 262144, "mlp_only_layers": [], "model_type": "qwen3_5_text",
        "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False,
        "num_attention_heads": sizes["num_attention_heads"], "num_hidden_layers": len(layer_types),
        "num_key_value_heads": sizes["num_key_value_heads"], "rms_norm_eps": 1e-06,
        "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10], "rope_type": "default",
                            "rope_theta": 10000000, "partial_rotary_factor": 0.25},
        "use_cache": True, "vocab_size": sizes["vocab_size"],
    }
    vision = {"deepstack_visual_indexes": [], "depth": 1, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 32,
              "in_channels": 3, "intermediate_size": 64, "model_type": "qwen3_5", "num_heads": 2,
              "num_position_embeddings": 64, "out_hidden_size": sizes["hidden_size"], "patch_size": 4,
              "spatial_merge_size": 2, "temporal_patch_size": 2}
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "image_token_id": ids["<|image_pad|>"],
            "model_type": "qwen3_5", "text_config": text, "tie_word_embeddings": tie,
            "transformers_version": "4.57.0.dev0", "video_token_id": ids["<|video_pad|>"],
            "vision_config": vision, "vision_end_token_id": ids["<|vision_end|>"],
            "vision_start_token_id": ids["<|vision_start|>"]}


def _tensor_specs(s: dict, layer_types: list[str], tie: bool, embed_mean: float = 0.0
                  ) -> dict[str, tuple[str, tuple, float, float]]:
    """name -> (dtype, shape, mean, std) of every tensor, text and skipped ones."""
    H, I, p = s["hidden_size"], s["intermediate_size"], "model.language_model."
    nk, nv = s["linear_num_key_heads"], s["linear_num_value_heads"]
    dk, dv, K = s["linear_key_head_dim"], s["linear_value_head_dim"], s["linear_conv_kernel_dim"]
    nq, nkv, hd = s["num_attention_heads"], s["num_key_value_heads"], s["head_dim"]
    conv = 2 * nk * dk + nv * dv
    e = 2.0 / np.sqrt(H)  # embedding scale: tied LM-head logits come out with std ~2
    inp = 1.0 / np.sqrt(H)
    specs = {f"{p}embed_tokens.weight": ("BF16", (s["vocab_size"], H), embed_mean * e, e),
             f"{p}norm.weight": ("BF16", (H,), 0.0, 0.1)}
    if not tie:
        specs["lm_head.weight"] = ("BF16", (s["vocab_size"], H), 0.0, e)
    for i, kind in enumerate(layer_types):
        q = f"{p}layers.{i}."
        if kind == "linear_attention":
            specs.update({
                q + "linear_attn.in_proj_qkv.weight": ("BF16", (conv, H), 0.0, inp),
                q + "linear_attn.in_proj_z.weight": ("BF16", (nv * dv, H), 0.0, inp),
                q + "linear_attn.in_proj_b.weight": ("BF16", (nv, H), 0.0, inp),
                q + "linear_attn.in_proj_a.weight": ("BF16", (nv, H), 0.0, inp),
                q + "linear_attn.conv1d.weight": ("BF16", (conv, 1, K), 0.0, 0.5),
                q + "linear_attn.dt_bias": ("BF16", (nv,), 0.0, 0.5),
                q + "linear_attn.A_log": ("F32", (nv,), -1.0, 0.7),  # decays exp(g) mostly in 0.3..0.95
                q + "linear_attn.norm.weight": ("F32", (dv,), 1.0, 0.1),
                q + "linear_attn.out_proj.weight": ("BF16", (H, nv * dv), 0.0, e / np.sqrt(nv * dv)),
            })
        else:
            specs.update({
                q + "self_attn.q_proj.weight": ("BF16", (2 * nq * hd, H), 0.0, inp),
                q + "self_attn.k_proj.weight": ("BF16", (nkv * hd, H), 0.0, inp),
                q + "self_attn.v_proj.weight": ("BF16", (nkv * hd, H), 0.0, inp),
                q + "self_attn.o_proj.weight": ("BF16", (H, nq * hd), 0.0, e / np.sqrt(nq * hd)),
                q + "self_attn.q_norm.weight": ("BF16", (hd,), 0.0, 0.1),
                q + "self_attn.k_norm.weight": ("BF16", (hd,), 0.0, 0.1),
            })
        specs.update({
            q + "input_layernorm.weight": ("BF16", (H,), 0.0, 0.1),
            q + "post_attention_layernorm.weight": ("BF16", (H,), 0.0, 0.1),
            q + "mlp.gate_proj.weight": ("BF16", (I, H), 0.0, inp),
            q + "mlp.up_proj.weight": ("BF16", (I, H), 0.0, inp),
            q + "mlp.down_proj.weight": ("BF16", (H, I), 0.0, 2 * e / np.sqrt(I)),
        })
    # a few tensors of the parts a text runtime skips (vision tower, multi-token-prediction head)
    specs.update({
        "model.visual.patch_embed.proj.weight": ("BF16", (32, 3, 2, 4, 4), 0.0, 0.02),
        "model.visual.blocks.0.norm1.weight": ("BF16", (32,), 1.0, 0.0),
        "model.visual.merger.linear_fc2.weight": ("BF16", (H, 128), 0.0, 0.02),
        "mtp.fc.weight": ("BF16", (H, 2 * H), 0.0, 0.02),
        "mtp.norm.weight": ("BF16", (H,), 0.0, 0.0),
        "mtp.layers.0.input_layernorm.weight": ("BF16", (H,), 0.0, 0.0),
    })
    return specs


CHUNK = 1 << 23  # elements generated at a time, so full-size tensors never sit in memory whole


def _random(rng: np.random.Generator, dtype: str, shape: tuple, mean: float, std: float):
    def chunks() -> Iterator[np.ndarray]:
        n = int(np.prod(shape))
        for start in range(0, n, CHUNK):
            x = rng.standard_normal(min(CHUNK, n - start), dtype=np.float32)
            x = x * np.float32(std) + np.float32(mean)
            yield f32_to_bf16(x) if dtype == "BF16" else x
    return chunks


def write_synthetic_checkpoint(path: str | Path, size: str = "tiny", layer_types: list[str] | None = None,
                               layers: int | None = None, seed: int = 0, shards: int = 1, tie: bool = True,
                               embed_mean: float = 0.0, **overrides: int) -> Path:
    """Write a synthetic checkpoint directory and return its path.

    size: a key of SIZES ("tiny" for tests, "2b" for the published shapes); overrides replace any of its
    fields (hidden_size=..., vocab_size=...). layer_types: the explicit list; or layers=N repeats the
    size's pattern (3 linear_attention + 1 full_attention for "2b") to N layers. embed_mean: every
    embedding entry's mean, in units of its spread (0: isotropic rows; trained embeddings share a strong
    common direction, which a positive mean imitates).
    """
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {', '.join(SIZES)}")
    s = {**SIZES[size], **overrides}
    unknown = set(overrides) - set(SIZES[size])
    if unknown:
        raise ValueError(f"unknown checkpoint fields {sorted(unknown)}")
    if layer_types is None:
        pattern = s["layer_types"]
        layer_types = [pattern[i % len(pattern)] for i in range(layers if layers is not None else len(pattern))]
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)

    tok = build_tokenizer(s["vocab_size"])
    tok.save(str(path / "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in ADDED_TOKENS}
    (path / "tokenizer_config.json").write_text(json.dumps({
        "add_bos_token": False, "add_prefix_space": False, "bos_token": None, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "errors": "replace", "model_max_length": 262144,
        "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
        "added_tokens_decoder": {str(ids[t]): {"content": t, "special": t.startswith("<|"), "lstrip": False,
                                               "rstrip": False, "normalized": False, "single_word": False}
                                 for t in ADDED_TOKENS},
    }, indent=2), encoding="utf-8")
    (path / "generation_config.json").write_text(json.dumps({
        "bos_token_id": ids["<|endoftext|>"], "do_sample": True,
        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]], "pad_token_id": ids["<|endoftext|>"],
        "temperature": 0.7, "top_k": 20, "top_p": 0.8, "transformers_version": "4.57.0.dev0"}, indent=2),
        encoding="utf-8")
    (path / "config.json").write_text(json.dumps(_config(s, layer_types, ids, tie), indent=4),
                                      encoding="utf-8")

    rng = np.random.default_rng(seed)
    specs = _tensor_specs(s, layer_types, tie, embed_mean)
    # the published file stores F32 tensors first, then by name
    order = sorted(specs, key=lambda n: (specs[n][0] != "F32", n))
    tensors = {n: (specs[n][0], specs[n][1], _random(rng, *specs[n])) for n in order}
    write_checkpoint_weights(path, tensors, shards=shards)
    return path

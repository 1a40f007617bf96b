"""The checkpoint's tokenizer (`tokenizer.json`, via the `tokenizers` library) and its special tokens."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import CheckpointError
from .generation_config import read_generation_config

CHAT_STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")


def padding_placeholder(i: int) -> str:
    """The token a built checkpoint's tokenizer holds at padding id i (an embedding row past the tokenizer's
    own ids): `tokenizers` cannot leave gaps before the GPU's ids. Text never produces it, and generation
    treats it like the padding row it stands for."""
    return f"<|qgpu pad {i}|>"


@dataclass
class Tokenizer:
    """`tokenizers.Tokenizer` plus what generation needs: stop ids, and how many ids it can decode."""
    inner: object  # tokenizers.Tokenizer
    stop_ids: tuple[int, ...]
    _known: np.ndarray | None = field(default=None, repr=False)

    @property
    def vocab_size(self) -> int:
        """How many tokens it has (learned and added); their ids need not be contiguous (a built checkpoint's
        GPU tokens follow the embedding's padding rows)."""
        return self.inner.get_vocab_size(with_added_tokens=True)

    def known_ids(self, n: int) -> np.ndarray:
        """bool [n]: which of the ids 0..n-1 are tokens (the others, padding rows and their placeholders, are
        no text)."""
        if self._known is None or len(self._known) != n:
            tokens = [self.inner.id_to_token(i) for i in range(n)]
            self._known = np.array([t is not None and t != padding_placeholder(i) for i, t in enumerate(tokens)])
        return self._known

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; special tokens written in the text (`<|im_start|>`) become their ids."""
        return self.inner.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.inner.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_id(self, token: str) -> int | None:
        return self.inner.token_to_id(token)


def load_tokenizer(model_dir: str | Path) -> Tokenizer | None:
    """The tokenizer of a checkpoint directory, or None when it has no tokenizer.json. Stop ids: the chat
    end tokens, plus generation_config.json's eos_token_id when present."""
    from tokenizers import Tokenizer as HFTokenizer

    model_dir = Path(model_dir)
    path = model_dir / "tokenizer.json"
    if not path.exists():
        return None
    try:
        inner = HFTokenizer.from_file(str(path))
    except Exception as e:  # the library raises a bare Exception on malformed files
        raise CheckpointError(f"{path}: cannot be read by `tokenizers` ({e})") from None
    stops = [i for i in (inner.token_to_id(t) for t in CHAT_STOP_TOKENS) if i is not None]
    gen = read_generation_config(model_dir)
    stops += gen.eos_token_ids if gen else ()
    return Tokenizer(inner, tuple(dict.fromkeys(stops)))

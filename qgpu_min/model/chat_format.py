"""Qwen's chat format (ChatML, reference §4.4): `<|im_start|>role\\ncontent<|im_end|>\\n` per message, then
the assistant prompt. Qwen3.5's small models answer without thinking by default, so the generation prompt
carries an empty think block unless thinking is asked for."""
from __future__ import annotations

from .errors import ModelInputError

ROLES = ("system", "user", "assistant", "tool")


def format_chat(messages: list[dict[str, str]], add_generation_prompt: bool = True,
                enable_thinking: bool = False) -> str:
    """The prompt text for `messages` ([{"role": ..., "content": ...}, ...])."""
    parts = []
    for i, m in enumerate(messages):
        role, content = m.get("role"), m.get("content")
        if role not in ROLES:
            raise ModelInputError(f"message {i}: role {role!r} is not one of {', '.join(ROLES)}")
        if not isinstance(content, str):
            raise ModelInputError(f"message {i}: content must be a string, got {type(content).__name__}")
        parts.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n" + ("<think>\n" if enable_thinking else "<think>\n\n</think>\n\n"))
    return "".join(parts)


def chat_prompt(user_text: str, system: str | None = None, enable_thinking: bool = False) -> str:
    """A one-turn chat prompt: optional system message, the user's text, the assistant prompt."""
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user_text}]
    return format_chat(messages, enable_thinking=enable_thinking)

"""The prompt for a conversation: the checkpoint's own `chat_template.jinja` rendered with jinja2 as
transformers renders it (a sandboxed environment, blocks trimmed, `tojson`, `raise_exception`), with the
`tools` list and `enable_thinking`. A checkpoint without a template gets qgpu-min's own in the Qwen3.5
format (data/qwen35_tools.jinja)."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from ..errors import QgpuError

DEFAULT_TEMPLATE = Path(__file__).resolve().parent / "data" / "qwen35_tools.jinja"


class TemplateError(QgpuError):
    """A chat template that cannot be read or rendered."""


def template_text(model_dir: str | Path | None) -> str:
    """The checkpoint's chat template (chat_template.jinja, or chat_template.json's "chat_template"), else ours."""
    folder = Path(model_dir) if model_dir else None
    if folder is not None and (folder / "chat_template.jinja").is_file():
        return _read(folder / "chat_template.jinja")
    if folder is not None and (folder / "chat_template.json").is_file():
        try:
            text = json.loads(_read(folder / "chat_template.json")).get("chat_template")
        except (json.JSONDecodeError, AttributeError) as e:
            raise TemplateError(f"{folder / 'chat_template.json'}: not a JSON object with \"chat_template\" ({e})")
        if isinstance(text, str):
            return text
    return DEFAULT_TEMPLATE.read_text()


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TemplateError(f"{path}: cannot be read ({e})") from None


@lru_cache(maxsize=8)
def _compiled(text: str):
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise TemplateError(f"the chat template refused the conversation: {message}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False: json.dumps(x, indent=indent,
                                                                                  ensure_ascii=ensure_ascii)
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(text)
    except jinja2.TemplateError as e:
        raise TemplateError(f"the chat template does not compile: {e}") from None


def render(text: str, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = True,
           enable_thinking: bool = False) -> str:
    """The prompt text for `messages` (role/content dicts; an assistant message may carry `tool_calls`:
    [{"name", "arguments"}], rendered both as themselves and in the OpenAI shape {"function": {...}})."""
    import jinja2
    shaped = [_shaped(m) for m in messages]
    try:
        return _compiled(text).render(messages=shaped, tools=tools or None, add_generation_prompt=add_generation_prompt,
                                      enable_thinking=enable_thinking, bos_token="", eos_token="<|im_end|>")
    except jinja2.TemplateError as e:
        raise TemplateError(f"the chat template failed on this conversation: {e}") from None


def _shaped(message: dict) -> dict:
    calls = message.get("tool_calls")
    if not calls:
        return dict(message)
    # Qwen's own templates read call.function.name / call.function.arguments; ours reads call.name
    shaped = [{"name": c["name"], "arguments": c["arguments"], "type": "function",
               "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]
    return {**message, "tool_calls": shaped}

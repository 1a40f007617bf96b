"""Tool calls in a model's reply, in both forms the Qwen family writes inside `<tool_call>` tags:

    <tool_call>
    {"name": "gpu_calc", "arguments": {"expression": "[1, 2] @ [3, 4]"}}
    </tool_call>

(Qwen2.5/Qwen3) and

    <tool_call>
    <function=gpu_calc>
    <parameter=expression>
    [1, 2] @ [3, 4]
    </parameter>
    </function>
    </tool_call>

(Qwen3.5, whose template teaches this one). A reply may hold several calls. A call that cannot be read is
not an exception: it comes back as a ToolCall with `error` set, so the error can go back to the model as
the tool's answer (issue #9: a malformed call is a tool error, never a crash).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)(?:" + re.escape(CLOSE) + r"|\Z)", re.DOTALL)
_FUNCTION = re.compile(r"\s*<function=([^>\n]+)>(.*?)</function>\s*\Z", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)


@dataclass
class ToolCall:
    name: str
    arguments: dict = field(default_factory=dict)
    error: str | None = None     # why the call could not be read; name/arguments are then what could be
    text: str = ""               # the call as written, between the tags


def split_reply(reply: str) -> tuple[str, list[ToolCall]]:
    """(the reply's text outside tool calls, the calls in order)."""
    calls = [parse_call(m.group(1), closed=m.group(0).endswith(CLOSE)) for m in _BLOCK.finditer(reply)]
    return _BLOCK.sub("", reply).strip(), calls


def parse_call(body: str, closed: bool = True) -> ToolCall:
    """One call from the text between `<tool_call>` and `</tool_call>`."""
    text = body.strip()
    if not closed:
        return ToolCall("", error=f"the tool call is not closed with {CLOSE}", text=text)
    if text.startswith("{"):
        return _json_call(text)
    if text.startswith("<function="):
        return _xml_call(text)
    return ToolCall("", error="a tool call must be a JSON object {\"name\": ..., \"arguments\": {...}} or "
                              "<function=NAME> with <parameter=NAME> blocks", text=text)


def _json_call(text: str) -> ToolCall:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        return ToolCall("", error=f"the tool call is not valid JSON ({e.msg} at character {e.pos})", text=text)
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ToolCall("", error="the tool call's JSON needs a string \"name\"", text=text)
    args = obj.get("arguments", {})
    if isinstance(args, str):            # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return ToolCall(obj["name"], error="\"arguments\" is a string that is not a JSON object", text=text)
    if not isinstance(args, dict):
        return ToolCall(obj["name"], error="\"arguments\" must be a JSON object", text=text)
    return ToolCall(obj["name"], args, text=text)


def _xml_call(text: str) -> ToolCall:
    m = _FUNCTION.fullmatch(text)
    if not m:
        return ToolCall("", error="<function=NAME> is not closed with </function>", text=text)
    name, body = m.group(1).strip(), m.group(2)
    args = {}
    for p in _PARAMETER.finditer(body):
        args[p.group(1).strip()] = _parameter_value(p.group(2))
    rest = _PARAMETER.sub("", body).strip()
    if rest:
        return ToolCall(name, args, error=f"text outside <parameter=...> blocks: {rest[:60]!r}", text=text)
    return ToolCall(name, args, text=text)


def _parameter_value(raw: str):
    """A parameter's value: the template writes one newline on each side; a JSON list or object is decoded,
    anything else stays text (the form carries no types: "2" may be a string parameter)."""
    value = raw[1:] if raw.startswith("\n") else raw
    value = value[:-1] if value.endswith("\n") else value
    try:
        decoded = json.loads(value)
    except json.JSONDecodeError:
        return value
    return decoded if isinstance(decoded, (list, dict)) else value


def format_call(name: str, arguments: dict) -> str:
    """A call written the way Qwen3.5's template renders one (what a scripted reply or a test writes)."""
    params = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
                     for k, v in arguments.items())
    return f"{OPEN}\n<function={name}>\n{params}</function>\n{CLOSE}"

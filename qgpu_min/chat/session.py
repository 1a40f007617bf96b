"""A chat in which Qwen calls the GPU in its own weights.

One question goes: the conversation rendered with the chat template and the tools of the mode -> the
model's reply -> its tool calls run on the GPU (each launch its own token sequence with its own state; the
conversation's state is not touched) -> the results go back as tool messages -> the model replies again,
until a reply calls no tool or the rounds run out. The replies come from a `ChatModel`: our runtime on a
checkpoint (`RuntimeChatModel`), or a list of scripted replies (`ScriptedChatModel`, for tests and demos).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol

from .template import render, template_text
from .toolcall import split_reply
from .tools import Gpu, ToolResult, run_tool, tool_specs

THINK_END = "</think>"


class ChatModel(Protocol):
    def reply(self, prompt: str, on_text: Callable[[str], None] | None = None) -> str:
        """The model's reply to the prompt text, up to (not including) its stop token."""


@dataclass
class Answer:
    text: str                                           # the final reply, thinking removed
    tools: list[ToolResult] = field(default_factory=list)
    rounds: int = 1
    finished: bool = True                               # False: the rounds ran out while it still called tools

    @property
    def launches(self) -> list[dict]:
        return [launch for t in self.tools for launch in t.launches]

    def as_dict(self) -> dict:
        return {"answer": self.text, "rounds": self.rounds, "finished": self.finished,
                "tool_calls": [{"name": t.name, "arguments": t.arguments, "ok": t.ok, "result": t.text,
                                "launches": t.launches, **({"source": t.source} if t.source else {})}
                               for t in self.tools]}


Event = Callable[[str, object], None]   # ("text", piece) while a reply streams, ("end", reply), ("tool", ToolResult)


class Conversation:
    """The messages so far, and how to answer the next question."""

    def __init__(self, model: ChatModel, mode: str = "normal", gpu: Gpu = Gpu(), template: str | None = None,
                 system: str | None = None, enable_thinking: bool = False, max_rounds: int = 4) -> None:
        self.model, self.mode, self.gpu = model, mode, gpu
        self.template = template if template is not None else template_text(None)
        self.tools = tool_specs(mode)
        self.system, self.enable_thinking, self.max_rounds = system, enable_thinking, max_rounds
        self.messages: list[dict] = []
        self.reset()

    def reset(self) -> None:
        self.messages = [{"role": "system", "content": self.system}] if self.system else []

    def prompt(self) -> str:
        return render(self.template, self.messages, self.tools, enable_thinking=self.enable_thinking)

    def ask(self, question: str, on_event: Event | None = None) -> Answer:
        """Answer one question; the exchange (replies and tool results) stays in the conversation."""
        emit = on_event or (lambda kind, payload: None)
        before = len(self.messages)
        self.messages.append({"role": "user", "content": question})
        try:
            return self._answer(emit)
        except BaseException:           # Ctrl-C or an error: the question leaves no half exchange behind
            del self.messages[before:]
            raise

    def _answer(self, emit: Event) -> Answer:
        results: list[ToolResult] = []
        for round_ in range(1, self.max_rounds + 1):
            raw = self.model.reply(self.prompt(), lambda piece: emit("text", piece))
            emit("end", raw)
            reply = raw.split(THINK_END, 1)[1].lstrip("\n") if THINK_END in raw else raw
            text, calls = split_reply(reply)
            # what the model wrote stays as written, so the next prompt extends this one token for token
            self.messages.append({"role": "assistant", "content": reply})
            if not calls:
                return Answer(text, results, round_)
            for call in calls:
                result = run_tool(call, self.mode, self.gpu)
                results.append(result)
                emit("tool", result)
                self.messages.append({"role": "tool", "content": result.text})
        return Answer(text, results, self.max_rounds, finished=False)


class ScriptedChatModel:
    """Replies taken in order from a list (a test's or a demo's script); records every prompt it was given."""

    def __init__(self, replies: list[str]) -> None:
        self.replies, self.prompts = list(replies), []

    def reply(self, prompt: str, on_text: Callable[[str], None] | None = None) -> str:
        self.prompts.append(prompt)
        if not self.replies:
            return "(the script has no more replies)"
        text = self.replies.pop(0)
        if on_text:
            on_text(text)
        return text


class RuntimeChatModel:
    """Replies generated by our runtime. The sequence fed so far is kept: a prompt that extends it costs only
    its new tokens (a conversation's prompts do, turn after turn); any other prompt starts a new state."""

    def __init__(self, model, max_new_tokens: int = 512, sampling=None) -> None:
        from ..model.generate import Sampling
        if model.tokenizer is None:
            from ..errors import QgpuError
            raise QgpuError(f"{model.path}: no tokenizer.json, so the model cannot chat")
        self.model, self.max_new_tokens = model, max_new_tokens
        self.sampling = sampling if sampling is not None else Sampling()
        self.state, self.fed = None, []

    def reply(self, prompt: str, on_text: Callable[[str], None] | None = None) -> str:
        from ..model.generate import generate_ids, stream_text
        ids = self.model.tokenizer.encode(prompt)
        if self.state is None or ids[:len(self.fed)] != self.fed or len(ids) == len(self.fed):
            self.state, self.fed = self.model.new_state(), []
        new = ids[len(self.fed):]
        stops = self.model.tokenizer.stop_ids
        got: list[int] = []

        def tracked() -> Iterator[int]:
            for token in generate_ids(self.model, new, self.max_new_tokens, self.sampling, stop_ids=stops,
                                      state=self.state):
                got.append(token)
                yield token
        try:
            pieces = []
            for piece in stream_text(self.model, tracked(), stops):
                pieces.append(piece)
                if on_text:
                    on_text(piece)
        except KeyboardInterrupt:
            self.state, self.fed = None, []     # a stopped generation leaves the state mid-reply: start afresh
            raise
        # generate_ids feeds every token but the last one it yields into the state
        self.fed = ids + got[:-1]
        return "".join(pieces)

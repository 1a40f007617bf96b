"""A chat in which Qwen calls the GPU in its own weights.

One question goes: the conversation rendered with the chat template and the tools of the mode -> the
model's reply -> its tool calls run on the GPU (each launch its own token sequence with its own state; the
conversation's state is not touched) -> the results go back as tool messages -> the model replies again,
until a reply calls no tool or the rounds run out. The replies come from a `ChatModel`: our runtime on a
checkpoint (`RuntimeChatModel`), or a list of scripted replies (`ScriptedChatModel`, for tests and demos).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Protocol

from ..model.errors import ModelInputError
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


def open_conversation(model_dir: str | Path, mode: str = "normal", backend: str | None = None,
                      precision: str = "fp32", enable_thinking: bool = False, max_new_tokens: int = 512,
                      max_rounds: int = 4, replies: list[str] | None = None, quant: str | None = None,
                      device: str = "cpu") -> Conversation:
    """A conversation with the checkpoint in model_dir, with its own chat template. Launches run on the GPU
    in that checkpoint when `qgpu-min build` made it (backend 'model'), else on the circuit-only GPU;
    `backend` chooses. `replies`: Qwen's replies scripted instead of generated (the launches still run).
    `quant`: the checkpoint's Qwen layers quantized at load ("int8"; its GPU's layers stay exact); Qwen and the
    launches then share the one quantized model. `device`: where the Qwen layers' dense products run ("cuda":
    the optional CUDA path; not with quant)."""
    if quant is not None and device != "cpu":
        raise ModelInputError(f"quant {quant!r} runs on the CPU only, not with device {device!r}")
    from ..model.generate import Sampling, default_sampling
    from .template import template_text
    backend = backend or ("model" if (Path(model_dir) / "qgpu_manifest.json").exists() else "circuit")
    if replies is not None:
        chat_model = ScriptedChatModel(replies)
    else:
        if backend == "model":   # Qwen answers through the model its launches run on (one copy of the weights)
            from ..gpu.backend import merged
            model = merged(str(model_dir), quant, device=device).model(precision)
        else:
            from ..gpu.merged import load_checkpoint
            model = load_checkpoint(model_dir, precision, quant, device=device)
        d = default_sampling(model)
        chat_model = RuntimeChatModel(model, max_new_tokens, Sampling(temperature=d["temperature"], top_p=d["top_p"],
                                                                      top_k=int(d["top_k"])))
    gpu = Gpu(backend, str(model_dir) if backend == "model" else None, precision, quant if backend == "model" else None,
              device if backend == "model" else "cpu")
    return Conversation(chat_model, mode, gpu, template=template_text(model_dir), enable_thinking=enable_thinking,
                        max_rounds=max_rounds)


def ask(question: str, model_dir: str | Path, mode: str = "normal", **options) -> Answer:
    """One question to the checkpoint in model_dir (options: as open_conversation's)."""
    return open_conversation(model_dir, mode, **options).ask(question)


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
    """Replies generated by our runtime. A conversation's next prompt extends its last one, so little is fed
    again: when the new prompt extends every token fed so far (the reply included), only its new tokens are;
    when it extends the last prompt but not the reply as generated (re-encoding the reply's text may split it
    into other tokens), the state saved right after that prompt is taken up again; otherwise a new state."""

    def __init__(self, model, max_new_tokens: int = 512, sampling=None) -> None:
        from ..model.generate import Sampling
        if model.tokenizer is None:
            from ..errors import QgpuError
            raise QgpuError(f"{model.path}: no tokenizer.json, so the model cannot chat")
        self.model, self.max_new_tokens = model, max_new_tokens
        self.sampling = sampling if sampling is not None else Sampling()
        self.state, self.fed = None, []          # the live sequence and every id fed into it
        self.saved = None                        # (a copy of the state after the last prompt, that prompt's ids)

    def _resume(self, ids: list[int]) -> tuple[object, list[int]]:
        """(the state to continue, the ids still to feed it) for a prompt of `ids`."""
        if self.state is not None and len(ids) > len(self.fed) and ids[:len(self.fed)] == self.fed:
            return self.state, ids[len(self.fed):]
        if self.saved is not None and len(ids) > len(self.saved[1]) and ids[:len(self.saved[1])] == self.saved[1]:
            return copy.deepcopy(self.saved[0]), ids[len(self.saved[1]):]
        return self.model.new_state(), ids

    def reply(self, prompt: str, on_text: Callable[[str], None] | None = None) -> str:
        from ..model.generate import generate_ids, stream_text
        ids = self.model.tokenizer.encode(prompt)
        state, new = self._resume(ids)
        self.state, self.fed = None, []          # until this reply is through: an interruption leaves no state
        if len(new) > 1:                         # the prompt but its last token, then a copy kept for next time
            self.model.prefill(state, new[:-1])
        self.saved = (copy.deepcopy(state), ids[:-1])
        stops = self.model.tokenizer.stop_ids
        got: list[int] = []

        def tracked() -> Iterator[int]:
            for token in generate_ids(self.model, new[-1:], self.max_new_tokens, self.sampling, stop_ids=stops,
                                      state=state):
                got.append(token)
                yield token
        pieces = []
        for piece in stream_text(self.model, tracked(), stops):
            pieces.append(piece)
            if on_text:
                on_text(piece)
        # generate_ids feeds every token but the last one it yields into the state
        self.state, self.fed = state, ids + got[:-1]
        return "".join(pieces)

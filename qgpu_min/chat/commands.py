"""`qgpu-min chat`: Qwen answers, and the numbers it needs are computed by the GPU in its weights."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..cli import user_errors
from ..errors import QgpuError
from ..model.modes import DEVICES, MODES, QUANTS
from .toolcall import CLOSE, OPEN
from .tools import MODES as CHAT_MODES

GPU_MARK = "[GPU]"
HELP_LINE = "Type a question. /reset starts over, /quit (or Ctrl-D) leaves; Ctrl-C stops an answer."


@click.command("chat")
@click.argument("question", required=False)
@click.option("--model", "model_dir", required=True, type=click.Path(exists=True, file_okay=False), metavar="DIR",
              help="the checkpoint Qwen answers from: a merged one from `qgpu-min build` (its GPU runs the launches)")
@click.option("--mode", "chat_mode", type=click.Choice(CHAT_MODES), default="normal", show_default=True,
              help="normal: Qwen calls ready-made kernels through expressions like [1,2,3] @ [4,5,6]; "
                   "advanced: Qwen writes the CUDA kernel and its launch")
@click.option("--gpu", "backend", type=click.Choice(("model", "circuit", "interp")),
              help="where launches run [model when --model was built by qgpu-min build, else circuit]")
@click.option("--precision", type=click.Choice(MODES), default="fp32", show_default=True,
              help="activations of Qwen and of the GPU: fp32, or bf16 as torch rounds them")
@click.option("--quant", type=click.Choice(QUANTS), help="quantize the checkpoint's Qwen layers and LM head to int8 "
              "at load (about half the bytes per token; the GPU's layers stay exact)")
@click.option("--device", type=click.Choice(DEVICES), default="cpu", show_default=True,
              help="where the Qwen layers' dense products run (Qwen's answers, and launches on --gpu model); cuda "
                   "needs an NVIDIA GPU and nvcc, and no --quant")
@click.option("--think", is_flag=True, help="let Qwen think before it answers")
@click.option("--max-new-tokens", default=512, show_default=True, type=click.IntRange(min=1),
              help="the longest reply, per round")
@click.option("--rounds", default=4, show_default=True, type=click.IntRange(min=1),
              help="tool rounds per question (advanced mode: the retries after a failed kernel)")
@click.option("--script", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="a JSON list of Qwen's replies to use instead of generating them (demos and tests: the "
                   "launches still run on the GPU)")
@click.option("--json", "as_json", is_flag=True,
              help="one question (QUESTION): print one JSON object with the answer, the tool calls, their "
                   "launches and token counts")
@user_errors
def chat_command(question: str | None, model_dir: str, chat_mode: str, backend: str | None, precision: str,
                 quant: str | None, device: str, think: bool, max_new_tokens: int, rounds: int, script: str | None,
                 as_json: bool) -> None:
    """Chat with Qwen; the numbers it needs are computed by the GPU in its weights.

    \b
    With QUESTION: answer it and exit. Without: an interactive session.
    """
    from .session import open_conversation

    if as_json and not question:
        raise click.UsageError("--json answers one QUESTION: give it as an argument")
    conv = open_conversation(model_dir, chat_mode, backend, precision, think, max_new_tokens, rounds,
                             _script(script) if script else None, quant=quant, device=device)
    if question:
        _one_question(conv, question, as_json)
    else:
        _interactive(conv)


def _script(path: str) -> list[str]:
    try:
        replies = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise QgpuError(f"{path}: not a JSON list of replies ({e})") from None
    if not isinstance(replies, list) or not all(isinstance(r, str) for r in replies):
        raise QgpuError(f"{path}: must be a JSON list of strings (Qwen's replies, in order)")
    return replies


def describe(result) -> str:
    """One line for a tool call: what Qwen asked, what the GPU returned, where it ran and its tokens."""
    args = result.arguments.get("expression") or (f"kernel, args {result.arguments.get('args')}"
                                                    if result.name == "run_cuda" else result.arguments)
    tokens = ", ".join(f"{l['backend']} {l['tokens']['prompt']}+{l['tokens']['generated']} tokens"
                       for l in result.launches)
    where = f"  ({len(result.launches)} launch{'es' * (len(result.launches) != 1)}: {tokens})" if tokens else ""
    return f"{GPU_MARK} {result.name}({args}) = {result.text}{where}"


class _Hider:
    """Streamed reply text with tool-call blocks left out (the [GPU] line says what was called). A piece may
    end inside a tag, so text that could begin one is held back until the next piece decides."""

    def __init__(self) -> None:
        self.pending, self.inside, self.visible = "", False, False

    def feed(self, piece: str) -> str:
        self.pending += piece
        shown = ""
        while True:
            tag = CLOSE if self.inside else OPEN
            at = self.pending.find(tag)
            if at >= 0:
                shown += "" if self.inside else self.pending[:at]
                self.pending, self.inside = self.pending[at + len(tag):], not self.inside
                continue
            keep = next((k for k in range(min(len(tag) - 1, len(self.pending)), 0, -1)
                         if tag.startswith(self.pending[-k:])), 0)
            if not self.inside:
                shown += self.pending[:len(self.pending) - keep]
            self.pending = self.pending[len(self.pending) - keep:]
            self.visible = self.visible or bool(shown.strip())
            return shown.lstrip("\n") if not self.visible else shown

    def flush(self) -> str:
        """The end of a reply: what was held back, and a line break after visible text."""
        shown = "" if self.inside else self.pending
        end = "\n" if self.visible or shown.strip() else ""
        self.pending, self.inside, self.visible = "", False, False
        return shown.rstrip("\n") + end


def _printer():
    hider = _Hider()

    def on_event(kind: str, payload) -> None:
        stream = sys.stdout         # looked up now: a test's runner replaces it
        if kind == "text":
            stream.write(hider.feed(payload))
        elif kind == "end":
            stream.write(hider.flush())
        else:
            stream.write(f"{describe(payload)}\n")
        stream.flush()
    return on_event


def _one_question(conv, question: str, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(conv.ask(question).as_dict()))
        return
    answer = conv.ask(question, _printer())
    _footer(answer)


def _footer(answer) -> None:
    if answer.tools and answer.tools[-1].source and answer.tools[-1].ok:
        sys.stdout.write(f"\nthe kernel that ran:\n{answer.tools[-1].source}\n")
    if not answer.finished:
        sys.stdout.write(f"(stopped after {answer.rounds} tool rounds)\n")
    sys.stdout.flush()


def _interactive(conv) -> None:
    click.echo(HELP_LINE)
    while True:
        try:
            question = input("> ")
        except EOFError:
            click.echo()
            return
        except KeyboardInterrupt:
            click.echo()
            continue
        command = question.strip()
        if not command:
            continue
        if command in ("/quit", "/exit"):
            return
        if command == "/reset":
            conv.reset()
            click.echo("(conversation reset)")
            continue
        try:
            _footer(conv.ask(question, _printer()))
        except KeyboardInterrupt:
            click.echo("\n(stopped)")
        except QgpuError as e:
            click.echo(f"\nerror: {e}", err=True)

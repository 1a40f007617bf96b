"""The `qgpu-min` command line. Each area defines its commands; this file only names them.

A command's module is imported when that command runs (or when `--help` lists it), so `qgpu-min run`
does not pay for the model's loader or huggingface_hub, nor `fetch` for the CUDA compiler.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from functools import wraps

import click

from . import __version__
from .errors import QgpuError

# name -> (module, attribute), in the order of the data flow: kernels in, the model, the circuit compiler
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("qgpu_min.host.commands", "run"),
    "compile": ("qgpu_min.host.commands", "compile_cmd"),
    "fetch": ("qgpu_min.model.fetch_commands", "fetch_command"),
    "build": ("qgpu_min.gpu.commands", "build_command"),
    "drift": ("qgpu_min.gpu.commands", "drift_command"),
    "generate": ("qgpu_min.model.commands", "generate_command"),
    "chat": ("qgpu_min.chat.commands", "chat_command"),
    "selftest": ("qgpu_min.circuit.commands", "selftest_command"),
    "circuit-report": ("qgpu_min.circuit.commands", "circuit_report_command"),
}


def user_errors(command: Callable) -> Callable:
    """Report QgpuError as `error: <message>` with exit code 1 instead of a traceback (for every command)."""
    @wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except QgpuError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(1)
    return wrapper


class LazyGroup(click.Group):
    """A group whose commands load from ``COMMANDS`` on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attribute = COMMANDS[name]
        return getattr(importlib.import_module(module), attribute)


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="qgpu-min")
def main() -> None:
    """A small SIMT GPU compiled into the weights of Qwen3.5-2B."""

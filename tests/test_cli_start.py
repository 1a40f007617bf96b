"""The CLI loads a command's module only when that command runs: `run` never imports the model's loader or
huggingface_hub, `fetch` never the CUDA compiler. Checked by the modules a fresh interpreter holds, not by a
clock (tools/ measures time)."""
from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from qgpu_min.cli import COMMANDS, main


def _modules_after(argv: list[str]) -> set[str]:
    """The modules loaded by running the CLI with ``argv`` in a fresh interpreter."""
    code = ("import sys\nfrom qgpu_min.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print('\\n'.join(sorted(sys.modules)), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    return set(out.stderr.split())


@pytest.mark.parametrize("argv", [["run", "--help"], ["compile", "--help"], ["--help"]])
def test_help_loads_no_model_and_no_hub(argv: list[str]) -> None:
    loaded = _modules_after(argv)
    assert "click" in loaded                     # the probe itself works
    for heavy in ("huggingface_hub", "qgpu_min.model.forward", "qgpu_min.gpu.model", "qgpu_min.circuit.compile"):
        assert heavy not in loaded, heavy


def test_fetch_help_loads_no_compiler() -> None:
    loaded = _modules_after(["fetch", "--help"])
    assert "qgpu_min.model.fetch" in loaded
    assert "qgpu_min.cuda.compiler" not in loaded and "huggingface_hub" not in loaded


def test_every_listed_command_loads_under_its_name() -> None:
    ctx = click.Context(main)
    for name in COMMANDS:
        command = main.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name == name
    assert main.get_command(ctx, "nope") is None
    res = CliRunner().invoke(main, ["--help"])
    assert res.exit_code == 0 and all(name in res.output for name in COMMANDS)
    res = CliRunner().invoke(main, ["nope"])
    assert res.exit_code == 2 and "No such command 'nope'" in res.output

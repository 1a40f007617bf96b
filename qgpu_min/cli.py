"""The `qgpu-min` command line. Each area defines its commands; this file only gathers them."""
import click

from . import __version__
from .circuit.commands import circuit_report_command, selftest_command
from .host.commands import compile_cmd, run
from .model.commands import generate_command
from .model.fetch_commands import fetch_command


@click.group()
@click.version_option(__version__, prog_name="qgpu-min")
def main() -> None:
    """A small SIMT GPU compiled into the weights of Qwen3.5-2B."""


# In the order of the data flow: kernels in, the model, the circuit compiler.
for command, name in ((run, None), (compile_cmd, "compile"), (fetch_command, None), (generate_command, None),
                      (selftest_command, None), (circuit_report_command, None)):
    main.add_command(command, name=name)

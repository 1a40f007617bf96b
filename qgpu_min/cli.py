"""The `qgpu-min` command line. Each area registers its own commands; this file only gathers them."""
import click

from . import __version__


@click.group()
@click.version_option(__version__, prog_name="qgpu-min")
def main() -> None:
    """A small SIMT GPU compiled into the weights of Qwen3.5-2B."""


# Area command modules are imported here; each defines click commands and is owned by its area.
# (add_command lines are appended as the areas land)
from .model.fetch_commands import fetch_command  # noqa: E402
main.add_command(fetch_command)
from .model.commands import generate_command  # noqa: E402
main.add_command(generate_command)
from .host.commands import run, compile_cmd  # noqa: E402
main.add_command(run); main.add_command(compile_cmd, name="compile")
from .circuit.commands import selftest_command, circuit_report_command  # noqa: E402
main.add_command(selftest_command); main.add_command(circuit_report_command)

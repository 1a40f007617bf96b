"""The 'interp' backend: the reference interpreter (qgpu_min/machine/interp.py) behind the backend seam."""
from __future__ import annotations

from typing import Any

from ..machine import interp
from ..machine.isa import Program
from .backend import BackendRun, LaunchError


def run_launch(program: Program, memory: list[int], grid: tuple[int, int], block: tuple[int, int],
               step_limit: int | None, **options: Any) -> BackendRun:
    """Run the launch on the interpreter, with the trace (for --check replay against other backends)."""
    if options:     # the interpreter has no modes: an option meant for another backend is a mistake
        raise LaunchError(f"backend 'interp' takes no options, got {', '.join(sorted(options))}")
    res = interp.run(program, memory, grid, block, step_limit, trace=True)
    return BackendRun(res.memory, res.steps, res.trace)

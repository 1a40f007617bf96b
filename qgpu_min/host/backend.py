"""The one seam between launch() and the machines that execute a launch (docs/interfaces.md §2).

A backend is a function, found by name in ``BACKENDS`` ('module:function') and imported on first use,
so a backend's dependencies (a model's weights, a compiled circuit) cost nothing until it is chosen:

    run_launch(program, memory, grid, block, step_limit, **options) -> BackendRun

``program`` is bound (parameters are immediates), ``memory`` is the launch's image (isa.MEM_WORDS
unsigned words; the backend must not modify it), ``grid``/``block`` are (x, y). ``options`` are the
launch's extra keyword arguments, for the backend to interpret (e.g. mode='bf16'); a backend rejects
ones it does not know with a LaunchError. A run that does not halt raises interp.StepLimitError with
the block it stopped at, so launch() can name the source line.

This module imports nothing heavy, so backends can import it (BackendRun, LaunchError) without a cycle.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import QgpuError
from ..machine.isa import Program


class LaunchError(QgpuError):
    """Bad launch arguments or configuration."""


@dataclass
class BackendRun:
    memory: list[int]                                   # the final memory words, unsigned
    steps: int                                          # warp steps (block executions)
    trace: list[tuple[int, int, int]] = field(default_factory=list)   # executed (cta, warp, block), if known
    tokens: dict[str, int] = field(default_factory=lambda: {"prompt": 0, "generated": 0})
    extra: dict[str, Any] = field(default_factory=dict)   # anything else a backend reports (timings, checks)


class BackendFn(Protocol):
    def __call__(self, program: Program, memory: list[int], grid: tuple[int, int], block: tuple[int, int],
                 step_limit: int | None, **options: Any) -> BackendRun: ...


# name -> 'module:function'. A new backend is one line here; launch() does not change.
BACKENDS: dict[str, str] = {
    "interp": "qgpu_min.host.backend_interp:run_launch",
    "circuit": "qgpu_min.gpu.backend:run_launch",
    "model": "qgpu_min.gpu.backend:run_launch_model",
}


def load_backend(name: str) -> BackendFn:
    """The backend function for a name in BACKENDS, importing its module (once: Python caches modules)."""
    if name not in BACKENDS:
        raise LaunchError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    module, _, function = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), function)

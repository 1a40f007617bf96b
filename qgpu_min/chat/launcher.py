"""Running the calculator's kernels: compile once per process, check that a launch fits, launch, record it.

Every result the calculator reports comes out of ``host.launch.launch`` (looked up at call time, so a
test that replaces it sees every launch). The kernels are package data (``kernels/*.cu``), shipped compiled
as saved programs too (``programs/*.qgpu``, written by tools/save_calc_programs.py), so the calculator needs
no CUDA compiler; a kernel whose .cu file changed since is compiled like a user's kernel, with the zig clang
that ships as a dependency: the same compiler everywhere, and not clang 14, which may hoist a shared-memory
read above ``__syncthreads()`` (docs/usage.md).

A launch's record (``CalcResult.launches``) is a JSON-ready dict, the shape the chat's run_cuda tool
reports too: ``{"op": "a @ b", "kernel": "calc_dot", "grid": [1, 1], "block": [3, 1], "backend": "circuit",
"tokens": {"prompt": 305, "generated": 46}}``.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import QgpuError
from ..host import launch as host_launch
from ..host.backend import BACKENDS, load_backend
from ..host.launch import CompiledKernel, for_format
from ..host.saved import SUFFIX, load_program
from ..machine.isa import MAX_CTAS, MAX_THREADS_PER_CTA, MEM_WORDS
from .errors import CalcError

KERNEL_DIR = Path(__file__).with_name("kernels")
PROGRAM_DIR = Path(__file__).with_name("programs")     # the kernels as saved programs (package data)
COMPILER = "zig"
MODES = ("fp32", "bf16")

Dim = tuple[int, int]
Plan = Callable[[int], tuple[Dim, Dim]]       # threads a CTA may have (memory allows) -> (grid, block)


def record(op: str, r: Any) -> dict[str, Any]:
    """A launch's record, from what the launch itself reported."""
    return {"op": op, "kernel": r.kernel, "grid": list(r.grid), "block": list(r.block), "backend": r.backend,
            "tokens": {"prompt": int(r.tokens.get("prompt", 0)), "generated": int(r.tokens.get("generated", 0))}}


def program_name(file: str, kernel: str) -> str:
    """The shipped saved program of a kernel of a calculator file (tools/save_calc_programs.py writes them)."""
    return f"{Path(file).stem}.{kernel}{SUFFIX}"


@functools.lru_cache(maxsize=None)
def compiled(file: str, kernel: str) -> CompiledKernel:
    """The kernel for the machine (interp's block format), once per process: its shipped saved program
    (no CUDA compiler needed) while that was saved from the .cu file as it is, else compiled."""
    saved = PROGRAM_DIR / program_name(file, kernel)
    if saved.is_file():
        k = load_program(saved)
        if k.source == (KERNEL_DIR / file).read_text() and kernel in (k.name, k.entry):
            return k
    return host_launch.compile_kernel(str(KERNEL_DIR / file), kernel=kernel, compiler=COMPILER)


@functools.lru_cache(maxsize=None)
def for_backend(file: str, kernel: str, backend: str) -> CompiledKernel:
    """The kernel lowered for the backend's block format, once per process: launch() would lower it again on
    every call, and its thread frames (which take memory) depend on the format."""
    fmt = getattr(load_backend(backend), "block_format", None)
    k = compiled(file, kernel)
    return k if fmt is None else for_format(k, fmt() if callable(fmt) else fmt)


def backend_options(backend: str, model: str | None, mode: str, quant: str | None = None,
                    device: str = "cpu") -> dict[str, Any]:
    """launch()'s backend options: 'interp' takes none, 'circuit' the mode, 'model' the folder, the mode, the
    quantization of its Qwen layers and where their dense products run."""
    if backend not in BACKENDS:
        raise CalcError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if mode not in MODES:
        raise CalcError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    if backend == "interp":
        return {}
    if backend == "model" and not model:
        raise CalcError("backend 'model' needs the merged checkpoint's folder (model=DIR, from `qgpu-min build`)")
    if backend == "model":
        return {"model": model, "mode": mode, **({"quant": quant} if quant else {}),
                **({"device": device} if device != "cpu" else {})}
    return {"mode": mode}


# ---- launch shapes ------------------------------------------------------------------------------
def per_element(n: int) -> Plan:
    """One thread per element, as many CTAs as it takes."""
    def plan(threads: int) -> tuple[Dim, Dim]:
        block = min(n, threads)
        return (-(-n // block), 1), (block, 1)
    return plan


def one_cta(work: int) -> Plan:
    """One CTA (its threads meet at barriers), with up to one thread per unit of work."""
    def plan(threads: int) -> tuple[Dim, Dim]:
        return (1, 1), (min(work, threads), 1)
    return plan


def per_cell(rows: int, cols: int) -> Plan:
    """One thread per cell of a rows x cols result: x over columns, y over rows."""
    def plan(threads: int) -> tuple[Dim, Dim]:
        bx = min(cols, threads)
        by = min(rows, threads // bx)
        return (-(-cols // bx), -(-rows // by)), (bx, by)
    return plan


# ---- running ------------------------------------------------------------------------------------
class Launcher:
    """Launches kernels on one backend and keeps a record of every launch."""

    def __init__(self, backend: str = "circuit", model: str | None = None, mode: str = "fp32",
                 quant: str | None = None, device: str = "cpu") -> None:
        self.backend = backend
        self.options = backend_options(backend, model, mode, quant, device)
        self.launches: list[dict[str, Any]] = []

    def run(self, file: str, kernel: str, args: list, plan: Plan, op: str, pos: int) -> dict[str, np.ndarray]:
        """Launch ``kernel`` of ``kernels/file`` on ``args`` (int32 arrays and ints) in the shape ``plan`` gives
        for the threads that fit; returns the launch's arrays by parameter name. ``op``/``pos``: for errors."""
        k = self._kernel(file, kernel, op, pos)
        grid, block = plan(self._threads(k, args, op, pos))
        if grid[0] * grid[1] > MAX_CTAS:
            raise CalcError(f"{op}: the launch needs {grid[0] * grid[1]} CTAs, over the machine's {MAX_CTAS}", pos)
        try:
            r = host_launch.launch(k, args, grid=grid, block=block, backend=self.backend, **self.options)
        except QgpuError as e:
            raise CalcError(f"{op}: the GPU launch of {kernel} failed: {e}", pos) from e
        self.launches.append(record(op, r))
        return r.arrays

    def threads(self, file: str, kernel: str, arrays: list, op: str, pos: int) -> int:
        """The most threads a CTA of this launch may have: run() gives its plan the same number."""
        return self._threads(self._kernel(file, kernel, op, pos), arrays, op, pos)

    def _kernel(self, file: str, kernel: str, op: str, pos: int) -> CompiledKernel:
        try:
            return for_backend(file, kernel, self.backend)
        except QgpuError as e:
            raise CalcError(f"{op}: kernel {kernel} ({file}) does not compile: {e}", pos) from e

    @staticmethod
    def _threads(k: CompiledKernel, args: list, op: str, pos: int) -> int:
        """Threads a CTA may have: the kernel's variables, the arrays and one thread frame per thread (its
        spilled registers) share the machine's memory (layout: host/launch.py)."""
        words = [a.size for a in args if isinstance(a, np.ndarray)]
        used = -(-k.memory.static_bytes // 4) + sum(words)
        frame = k.memory.frame_bytes // 4
        room = MEM_WORDS - used - frame        # one thread at least
        if room < 0:
            parts = [f"arrays of {' + '.join(str(w) for w in words)} words"]
            if used > sum(words):
                parts.append(f"{used - sum(words)} for the kernel's variables and shared memory")
            if frame:
                parts.append(f"{frame} for a thread's frame")
            raise CalcError(f"{op} is too big for the GPU: the launch needs {used + frame} words of memory "
                            f"({', '.join(parts)}), over the machine's {MEM_WORDS} words (for all arrays, shared "
                            f"and local memory together) by {used + frame - MEM_WORDS}", pos)
        return MAX_THREADS_PER_CTA if frame == 0 else min(MAX_THREADS_PER_CTA, 1 + room // frame)

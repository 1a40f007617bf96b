"""qgpu-min: a small SIMT GPU compiled into the weights of Qwen3.5-2B.

The library in one import:

    import numpy as np, qgpu_min
    k = qgpu_min.compile("examples/dot.cu")              # CUDA or PTX text, or a .cu/.ptx path
    r = qgpu_min.launch(k, [np.array([1, 2, 3]), np.array([4, 5, 6]), np.zeros(1, np.int32), 3])
    r.arrays["out"]                                      # array([32], dtype=int32)

``launch`` runs on the reference interpreter unless ``backend="circuit"`` (the GPU in the weights; the
CLI's default) is given. Every error a user can cause is a ``QgpuError``.

The names load on first use, so ``import qgpu_min`` costs nothing: the CLI and a script that needs one
command do not pay for the compiler, NumPy or the model.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> (module, attribute)
_EXPORTS: dict[str, tuple[str, str]] = {
    "compile": ("qgpu_min.host.launch", "compile_kernel"),
    "compile_kernel": ("qgpu_min.host.launch", "compile_kernel"),
    "launch": ("qgpu_min.host.launch", "launch"),
    "CompiledKernel": ("qgpu_min.host.launch", "CompiledKernel"),
    "LaunchResult": ("qgpu_min.host.launch", "LaunchResult"),
    "QgpuError": ("qgpu_min.errors", "QgpuError"),
    "LaunchError": ("qgpu_min.host.backend", "LaunchError"),
    "CapacityError": ("qgpu_min.machine.isa", "CapacityError"),
    "MachineError": ("qgpu_min.machine.isa", "MachineError"),
    "MemoryFault": ("qgpu_min.machine.interp", "MemoryFault"),
    "StepLimitError": ("qgpu_min.machine.interp", "StepLimitError"),
    "CudaCompileError": ("qgpu_min.cuda.compiler", "CudaCompileError"),
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'qgpu_min' has no attribute {name!r}")
    module, attribute = _EXPORTS[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value         # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))

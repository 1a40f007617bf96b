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

from .lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "compile": (".host.launch", "compile_kernel"),
    "compile_kernel": (".host.launch", "compile_kernel"),
    "launch": (".host.launch", "launch"),
    "launch_many": (".host.launch", "launch_many"),
    "CompiledKernel": (".host.launch", "CompiledKernel"),
    "LaunchResult": (".host.launch", "LaunchResult"),
    "QgpuError": (".errors", "QgpuError"),
    "LaunchError": (".host.backend", "LaunchError"),
    "CapacityError": (".machine.isa", "CapacityError"),
    "MachineError": (".machine.isa", "MachineError"),
    "MemoryFault": (".machine.interp", "MemoryFault"),
    "StepLimitError": (".machine.interp", "StepLimitError"),
    "MemcheckError": (".machine.memcheck", "MemcheckError"),
    "CudaCompileError": (".cuda.compiler", "CudaCompileError"),
    "save_program": (".host.saved", "save_program"),
    "load_program": (".host.saved", "load_program"),
    "SavedProgramError": (".host.saved", "SavedProgramError"),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["__version__", *_EXPORTS]

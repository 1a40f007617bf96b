"""Errors of the model runtime."""
from ..errors import QgpuError


class CheckpointError(QgpuError):
    """A checkpoint directory, config.json or weights file that cannot be used as is."""


class ModelInputError(QgpuError, ValueError):
    """A token id, token subset or generation setting the model cannot take; the message names it."""


class CudaError(QgpuError):
    """The optional CUDA path cannot run here: no nvcc to build it, no GPU, or a CUDA call failed."""

"""Kernels the model runtime calls (same signatures as `kernels_ref`).

Interim: the NumPy references, until the C core lands behind these same names.
"""
from qgpu_min.model.kernels_ref import (  # noqa: F401
    KernelInputError, SparseBF16, conv_update, deltanet_step, gated_rmsnorm, l2norm, matmul_bf16,
    matvec_bf16, maybe_sparse, rmsnorm, silu, sparse_matmul, sparse_matvec)

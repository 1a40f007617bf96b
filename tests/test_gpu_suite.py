"""The kernel suite on the GPU in the weights (--backend circuit --check), against each case's NumPy
reference, and token by token, register by register and word by word against the interpreter (check).

A launch the GPU refuses before starting (over one of its limits: more than 64 CTAs or 32 threads per
CTA, more than 128 blocks or 1024 memory words, an op it lacks) is skipped with the refusal as the reason:
it does not fit. Anything else that goes wrong fails.

Default run: a representative set (loops, divergence, barriers across warps, shared memory, atomics,
division by a constant, grids, a 2-D launch, several warps, shuffles, votes) in fp32, two in bf16. `-m slow`: every case at every launch shape that fits, fp32 and bf16.
"""
from __future__ import annotations

import pytest

from kernel_suite import CASES, Case, Shape
from qgpu_min.gpu.program import GpuLaunchError
from qgpu_min.machine.isa import CapacityError
from test_kernel_suite import run_case

GPU_THREADS, GPU_CTAS = 32, 64


def _fits_shape(shape: Shape) -> bool:
    return shape.block[0] * shape.block[1] <= GPU_THREADS and shape.grid[0] * shape.grid[1] <= GPU_CTAS


def run_on_gpu(case: Case, shape: Shape, mode: str) -> None:
    try:
        run_case(case, "zig", shape, backend="circuit", mode=mode, check=True)
    except (CapacityError, GpuLaunchError) as e:
        pytest.skip(f"does not fit the GPU in the weights: {e}")


# (case, launch shape): loops and divergence, shared memory and atomics, bytes, division by a constant (MULHU
# rewritten), grids of CTAs and a 2-D block and grid, shuffles, votes; shapes kept small for the default run's time
# (collatz, the longest loop of the suite, runs with every other kernel in the slow set)
REPRESENTATIVE = (("vec_add", "g3x1-b8x1"), ("histogram_shared", "g3x1-b8x1"),
                  ("branch_chain", "g1x1-b4x1"), ("atomic_minmax", "g2x1-b7x1"), ("search_break", "g1x1-b4x1"),
                  ("divmod_const", "g1x1-b3x1"), ("index_2d", "g2x2-b4x2"), ("bytes-brighten", "g1x1-b4x1"),
                  ("warp_scan", "g1x1-b4x1"), ("warp_2d", "g1x1-b2x2"), ("ballot", "g1x1-b4x1"))
_BY_ID = {c.id: c for c in CASES}


def _shape(case: Case, name: str) -> Shape:
    return next(s for s in case.shapes if str(s) == name)


@pytest.mark.parametrize("name, shape", REPRESENTATIVE)
def test_representative_kernels_exact_on_the_gpu(name: str, shape: str) -> None:
    case = _BY_ID[name]
    run_on_gpu(case, _shape(case, shape), "fp32")


@pytest.mark.parametrize("name, threads, mode", [("block_reverse", 13, "fp32"), ("reduce_sum", 13, "bf16"),
                                                      ("shfl_width", 12, "bf16")])
def test_suite_kernels_on_several_warps(name: str, threads: int, mode: str) -> None:
    """One CTA of several warps, the last partial (the suite's own shapes run in the slow set)."""
    run_on_gpu(_BY_ID[name], Shape((1, 1), (threads, 1)), mode)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fp32", "bf16"])
@pytest.mark.parametrize("case, shape", [pytest.param(c, s, id=f"{c.id}-{s}") for c in CASES for s in c.shapes
                                         if _fits_shape(s)])
def test_every_fitting_suite_launch_exact_on_the_gpu(case: Case, shape: Shape, mode: str) -> None:
    run_on_gpu(case, shape, mode)

"""The README's dot launch, which several tools measure: examples/dot.cu on [1,2,3] . [4,5,6], 3 threads."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "examples" / "dot.cu"
ARGS = [[1, 2, 3], [4, 5, 6], [0], 3]     # a, b, out, n: out = [32]
BLOCK = (3, 1)


def gpu_image(spec):
    """(program, memory) of the launch, lowered for the GPU of `spec` (gpu.layout.GpuSpec)."""
    from qgpu_min.gpu.program import block_format
    from qgpu_min.host.launch import build_image, compile_kernel, for_format

    kernel = for_format(compile_kernel(SOURCE), block_format(spec))
    image = build_image(kernel, ARGS, BLOCK)
    return image.program, image.memory

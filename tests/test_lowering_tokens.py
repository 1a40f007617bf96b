"""Token-aware lowering (isa.BlockFormat.writeback_cost, the GPU in the weights' format): constants are
recomputed where they are read instead of being kept in registers (lower_remat, lower._pack), so fewer
registers are written back. Every suite kernel lowered this way stays exact on the interpreter, on the
suite's seeded random inputs, and the README dot launch costs a pinned number of generated tokens."""
from __future__ import annotations

import functools
from dataclasses import replace

import pytest

from kernel_suite import CASES, Case
from test_kernel_suite import _compiled, _default_shapes, run_case
from qgpu_min.cuda.lower import lower
from qgpu_min.cuda.ptx import parse_ptx, select_kernel
from qgpu_min.gpu.check import expected_tokens
from qgpu_min.gpu.layout import GpuSpec
from qgpu_min.gpu.program import block_format, prompt
from qgpu_min.host.launch import CompiledKernel, build_image, compile_kernel, for_format, launch
from qgpu_min.machine.isa import (MACHINE_FORMAT, BlockFormat, CapacityError, check_block_format, decode,
                                  encode)

SPEC = GpuSpec()
GPU = block_format(SPEC)
# the machine's own slots, but paying for write-backs: every suite kernel fits it
WIDE = replace(MACHINE_FORMAT, writeback_cost=True)
DOT_ARGS = [[1, 2, 3], [4, 5, 6], [0], 3]
DOT_GENERATED = 46          # was 85 before the token-aware lowering
DOT_PROMPT = 291            # was 363


@functools.cache
def _lowered(case: Case, fmt: BlockFormat) -> CompiledKernel:
    kernel = _compiled(case, "zig")
    module = parse_ptx(kernel.ptx)
    return replace(kernel, program=lower(module, select_kernel(module, case.kernel), fmt).program, fmt=fmt)


def _tokens(kernel: CompiledKernel, args: list, threads: int) -> tuple[int, int]:
    """(prompt, generated) tokens of a launch on the GPU in the weights, from the --check oracle."""
    image = build_image(kernel, args, (threads, 1))
    return (len(prompt(image.program, image.memory, threads, SPEC)),
            len(expected_tokens(image.program, image.memory, threads, SPEC)))


@pytest.mark.parametrize("fmt", [WIDE, GPU], ids=["wide", "gpu"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_writeback_cost_lowering_exact(case: Case, fmt: BlockFormat) -> None:
    try:
        kernel = _lowered(case, fmt)
    except CapacityError as e:          # an op or size the GPU's format lacks: refused, as before
        assert fmt is GPU, e
        pytest.skip(str(e))
    check_block_format(kernel.program, fmt)
    assert decode(encode(kernel.program)).blocks == [replace(b, note="", lines=()) for b in kernel.program.blocks]
    for shape in _default_shapes(case):
        run_case(case, "zig", shape, kernel)


def test_machine_format_unchanged_by_the_flag_default() -> None:
    """Without writeback_cost nothing of the new lowering runs (the interpreter's programs stay as they were)."""
    case = next(c for c in CASES if c.id == "vec_add")
    assert (encode(_lowered(case, MACHINE_FORMAT).program) == encode(_compiled(case, "zig").program)).all()


def test_dot_token_count_pinned() -> None:
    k = for_format(compile_kernel("examples/dot.cu"), GPU)
    p, g = _tokens(k, DOT_ARGS, 3)
    assert g <= 47 and g == DOT_GENERATED, (p, g)
    assert p == DOT_PROMPT

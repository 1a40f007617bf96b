"""--memcheck on the host side: the kernel lowered again with redzones around its variables, the launch laid
out with redzones around its arrays, and the map of what every byte is, for the checked interpreter
(machine/memcheck.py: what it checks). Its errors get the kernel's PTX and source line here."""
from __future__ import annotations

import functools
from dataclasses import replace

from ..cuda.lower import Lowered, lower
from ..cuda.ptx import demangle, parse_ptx, select_kernel
from ..machine import memcheck
from ..machine.interp import MemoryFault, RunResult, StepLimitError
from ..machine.isa import MACHINE_FORMAT, CapacityError
from ..machine.memcheck import ARRAY, GLOBAL, INTERNAL, LOCAL, SHARED, SPILL, Region
from .launch import CompiledKernel, LaunchImage, build_image, located

# Bytes left unused around every array and variable: an index up to 8 words past either end of an int
# array lands in one (memory is 4096 bytes in all, so not more).
REDZONE = 32

_SPACE_KIND = {"global": GLOBAL, "const": GLOBAL, "shared": SHARED}


def checked_kernel(kernel: CompiledKernel) -> tuple[CompiledKernel, dict[str, int]]:
    """The kernel lowered from its PTX with redzones, in the interpreter's block format, and the element
    size of each of its variables."""
    lowered, sizes = _lower_with_redzones(kernel.ptx, kernel.entry)
    return replace(kernel, program=lowered.program, memory=lowered.layout, fmt=MACHINE_FORMAT), sizes


@functools.lru_cache(maxsize=64)        # a kernel launched again is not lowered again
def _lower_with_redzones(ptx: str, entry: str) -> tuple[Lowered, dict[str, int]]:
    module = parse_ptx(ptx)
    fn = select_kernel(module, entry or None)
    try:
        lowered = lower(module, fn, MACHINE_FORMAT, redzone=REDZONE)
    except CapacityError as e:
        raise CapacityError(f"{e} with --memcheck's {REDZONE}-byte redzones around every variable; run without "
                            f"--memcheck") from None
    decls = [*module.globals, *(d for f in module.functions.values() for d in f.decls)]
    return lowered, {d.name: d.elem_bytes for d in decls}


def regions(kernel: CompiledKernel, image: LaunchImage, block: tuple[int, int],
            elem_bytes: dict[str, int]) -> list[Region]:
    """What every byte of the launch's memory is (bytes in no region are redzones or unused)."""
    lay = kernel.memory
    out = []
    internal = lay.symbols.get("$bar.red")
    for space, name, addr, size in lay.entries:
        if space in _SPACE_KIND and size:
            kind = INTERNAL if addr == internal else _SPACE_KIND[space]
            out.append(Region(kind, demangle(name), addr, size, elem_bytes.get(name, 1)))
    for a in image.arrays:
        out.append(Region(ARRAY, a.name, a.base, a.count * a.elem_bytes, a.elem_bytes))
    threads = block[0] * block[1]
    if lay.dynamic_shared:
        extern = sorted(lay.dynamic_shared)[0]
        end = lay.frame_base(threads - 1) - REDZONE      # below the lowest thread's frame
        if end > image.dynamic_shared:
            out.append(Region(SHARED, demangle(extern), image.dynamic_shared, end - image.dynamic_shared,
                              elem_bytes.get(extern, 1)))
    spill = lay.frame_bytes - lay.local_bytes
    for t in range(threads):
        base = lay.frame_base(t)
        for name, offset in lay.local_depot.items():
            if lay.local_sizes.get(name):
                label = "the local memory" if name.startswith("__local_depot") else demangle(name)
                out.append(Region(LOCAL, label, base + offset, lay.local_sizes[name], 1, t))
        if spill:
            out.append(Region(SPILL, "the register spill slots", base + lay.local_bytes, spill, 4, t))
    return out


def run_checked(kernel: CompiledKernel, args: list, grid: tuple[int, int], block: tuple[int, int],
                step_limit: int | None) -> tuple[LaunchImage, RunResult]:
    """The launch on the checked interpreter: its image (with redzones) and result. A failed check raises
    MemcheckError naming the kernel's PTX line and source line."""
    checked, sizes = checked_kernel(kernel)
    try:
        image = build_image(checked, args, block, redzone=REDZONE)
    except CapacityError as e:
        raise CapacityError(f"{e} with --memcheck's {REDZONE}-byte redzones around every array; run without "
                            f"--memcheck") from None
    try:
        return image, memcheck.run(image.program, image.memory, grid, block, regions(checked, image, block, sizes),
                                   step_limit)
    except (memcheck.MemcheckError, StepLimitError, MemoryFault) as e:
        raise located(checked, e) from None

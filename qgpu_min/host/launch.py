"""compile_kernel and launch: CUDA/PTX -> machine program, and a launch on a backend (docs/interfaces.md §2).

A launch is three steps: build_image (check the arguments, lay out memory, bind the parameters into the
program), the backend (backend.py: a function named in BACKENDS, imported on first use, that returns
the final memory), and read_arrays (the pointer parameters' arrays from that memory).

Memory map of a launch (byte addresses, one unified memory of isa.MEM_WORDS words): the kernel's
.global/.const variables (with their initial values) and .shared variables from 0, then the launch's
arrays in parameter order, each starting on a word (elements of 1, 2, 4 or 8 bytes), then the
kernel's extern __shared__ array (all memory left); the threads' frames (.local variables and spill
slots, one per thread of the block) fill memory downward from the top. A pointer parameter's value is its array's base address; kernel parameters reach the
program as immediates (Program.param_slots), not through memory.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..cuda.compiler import TEXT_SOURCE_NAME, compile_to_ptx
from ..cuda.lines import annotate, block_note
from ..cuda.lower import lower
from ..cuda.lower_ir import LoweringError, MemoryLayout
from ..cuda.ptx import demangle, parse_ptx, select_kernel
from ..errors import QgpuError
from ..machine import interp
from ..machine.isa import (INT32_MIN, MACHINE_FORMAT, MAX_THREADS_PER_CTA, MEM_WORDS, BlockFormat, CapacityError,
                           MachineError, Program, bind, format_program)
# LaunchError and BACKENDS live with the backend interface (backends raise LaunchError); callers import them from here
from .backend import BACKENDS, BackendFn, BackendRun, LaunchError, load_backend


@dataclass(frozen=True)
class ParamInfo:
    name: str
    kind: str              # 'ptr' | 'scalar' | 'unknown' (no type information: decided by the argument)
    signed: bool           # of the value, or of the pointee for a pointer
    elem_bytes: int = 4    # pointee size for pointers (1, 2 or 4)


@dataclass
class CompiledKernel:
    name: str
    params: list[ParamInfo]
    program: Program
    memory: MemoryLayout
    compiler: str
    ptx: str
    warnings: list[str] = field(default_factory=list)   # the lowering's: runs, but assumes 32-lane warps
    entry: str = ""                                      # the kernel's PTX (mangled) name
    fmt: BlockFormat = MACHINE_FORMAT                    # the block format the program was lowered for
    block_warnings: list[tuple[int, str]] = field(default_factory=list)  # (threads, warning): see launch
    source: str | None = None                            # the CUDA text compiled (for quoting source lines)
    source_name: str | None = None                       # its file name ('kernel.cu' for text)

    def listing(self) -> str:
        return format_kernel(self)


@dataclass
class LaunchResult:
    kernel: str
    grid: tuple[int, int]
    block: tuple[int, int]
    backend: str
    arrays: dict[str, np.ndarray]
    tokens: dict[str, int] = field(default_factory=lambda: {"prompt": 0, "generated": 0})
    trace: list[tuple[int, int, int]] = field(default_factory=list)
    steps: int = 0
    extra: dict[str, Any] = field(default_factory=dict)     # the backend's BackendRun.extra
    warnings: list[str] = field(default_factory=list)       # the kernel's block_warnings this launch's block meets


# ---- parameter types --------------------------------------------------------------------------
_BUILTIN = {"b": (False, 1), "c": (True, 1), "a": (True, 1), "h": (False, 1), "s": (True, 2), "t": (False, 2),
            "i": (True, 4), "j": (False, 4), "l": (True, 8), "m": (False, 8), "x": (True, 8), "y": (False, 8)}


def _mangled_params(name: str) -> list[tuple[bool, bool, int]] | None:
    """(is pointer, signed, size of value or pointee) per parameter of an Itanium-mangled plain function name."""
    m = re.match(r"_Z(\d+)", name)
    if not m:
        return None
    rest = name[m.end() + int(m.group(1)):]
    subs: list[tuple[bool, bool, int]] = []
    out = []
    pos = 0

    def parse() -> tuple[bool, bool, int]:
        nonlocal pos
        c = rest[pos]
        pos += 1
        if c in "KVr":
            t = parse()
            subs.append(t)
            return t
        if c == "P":
            inner = parse()
            t = (True, inner[1], inner[2])
            subs.append(t)
            return t
        if c == "S":
            end = rest.index("_", pos)
            k = 0 if end == pos else int(rest[pos:end], 36) + 1
            pos = end + 1
            return subs[k]
        if c in _BUILTIN:
            return (False,) + _BUILTIN[c]
        if c == "v":
            return (False, False, 0)
        raise ValueError(c)

    try:
        while pos < len(rest):
            out.append(parse())
    except (ValueError, IndexError):
        return None
    return [] if out == [(False, False, 0)] else out


def _source_params(text: str, kernel: str) -> list[tuple[str, bool, bool, int]] | None:
    """(name, is pointer, signed, size) from the kernel's signature in CUDA source."""
    m = re.search(r"__global__[^;{(]*?\b" + re.escape(kernel) + r"\s*\(([^)]*)\)", text)
    if not m:
        return None
    out = []
    for p in filter(None, (x.strip() for x in m.group(1).split(","))):
        if p == "void":
            continue
        name = re.findall(r"\w+", p)[-1]
        ty = p[: p.rfind(name)]
        unsigned = bool(re.search(r"\bunsigned\b|\buint\d*_t\b|\bsize_t\b", ty))
        size = 1 if re.search(r"\bchar\b|int8_t", ty) else 2 if re.search(r"\bshort\b|int16_t", ty) else 4
        out.append((name, "*" in ty or "[" in p, not unsigned, size))
    return out


def _params(fn, source_text: str | None) -> list[ParamInfo]:
    mangled = _mangled_params(fn.name)
    src = _source_params(source_text, fn.demangled.rsplit("::", 1)[-1]) if source_text else None
    if src is not None and len(src) != len(fn.params):
        src = None
    infos = []
    for i, p in enumerate(fn.params):
        name = src[i][0] if src else p.name.removeprefix(fn.name + "_")     # PTX: _Z3dotPiS_i_param_0
        if mangled is not None and len(mangled) == len(fn.params):
            is_ptr, signed, size = mangled[i]
        elif src:
            is_ptr, signed, size = src[i][1:]
        else:
            infos.append(ParamInfo(name, "unknown", True, 4))
            continue
        if is_ptr and size not in (1, 2, 4, 8):
            raise QgpuError(f"parameter {name}: arrays of {size}-byte elements are not supported")
        infos.append(ParamInfo(name, "ptr" if is_ptr else "scalar", signed, size if is_ptr else 4))
    return infos


# ---- compile ----------------------------------------------------------------------------------
def compile_kernel(source: str | Path, kernel: str | None = None, compiler: str | None = None,
                   fmt: BlockFormat = MACHINE_FORMAT) -> CompiledKernel:
    """Compile CUDA (a .cu path or source text) or PTX to a machine program for one kernel, in the block
    format of the target that will run it (the machine's by default)."""
    res = compile_to_ptx(source, compiler)
    text = _cuda_text(source)
    name = None if text is None else TEXT_SOURCE_NAME if "__global__" in str(source) else Path(source).name
    return kernel_from_ptx(res.text, res.compiler, kernel, text, name, fmt)


def kernel_from_ptx(ptx: str, compiler: str, kernel: str | None = None, source: str | None = None,
                    source_name: str | None = None, fmt: BlockFormat = MACHINE_FORMAT) -> CompiledKernel:
    """The machine program of one kernel of a PTX module (no CUDA compiler runs): `source`, the CUDA text the
    PTX came from, gives parameter names and types and the source lines of errors; `compiler` is recorded."""
    module = parse_ptx(ptx)
    fn = select_kernel(module, kernel)
    try:
        lowered = lower(module, fn, fmt)
    except (LoweringError, CapacityError) as e:     # the same error, naming the CUDA line too
        raise type(e)(annotate(str(e), ptx, source, source_name)) from None
    warnings = [annotate(w, ptx, source, source_name) for w in lowered.warnings]
    block_warnings = [(n, annotate(w, ptx, source, source_name)) for n, w in lowered.block_warnings]
    return CompiledKernel(_display_name(fn.name, fn.demangled), _params(fn, source), lowered.program,
                          lowered.layout, compiler, ptx, warnings, fn.name, fmt, block_warnings, source, source_name)


def _display_name(mangled: str, demangled: str | None) -> str:
    """The kernel's name as users wrote it: no namespace, template arguments kept ('scale<3>')."""
    if not demangled:
        return mangled
    base = demangled.rsplit("::", 1)[-1]
    full = demangle(mangled, template_args=True)
    return full[full.rfind(base):] if base in full else base


def _cuda_text(source: str | Path) -> str | None:
    """The CUDA source text, when the source is a .cu file or CUDA text (for parameter names and types)."""
    if isinstance(source, str) and "__global__" in source:
        return source
    try:
        p = Path(source)
        return p.read_text() if p.suffix == ".cu" and p.is_file() else None
    except (OSError, ValueError):
        return None


def format_kernel(k: CompiledKernel) -> str:
    lay = k.memory
    lines = [f"kernel {k.name}  (compiled by {k.compiler})",
             "parameters: " + ", ".join(f"{p.name}:{p.kind}{'' if p.signed else ' unsigned'}"
                                        + (f" {p.elem_bytes}B" if p.kind == 'ptr' else '') for p in k.params),
             "memory map (bytes):"]
    for space, name, addr, size in lay.entries:
        lines.append(f"  {addr:#06x}..{addr + size:#06x}  .{space} {name}")
    lines.append(f"  {lay.static_bytes:#06x}..        launch arrays, in parameter order"
                 + (", then extern __shared__ " + "/".join(sorted(lay.dynamic_shared)) if lay.dynamic_shared else "")
                 + ", up to the thread frames")
    noted = [replace(b, note=block_note(k.ptx, b.lines)) if b.lines else b for b in k.program.blocks]
    lines.append(format_program(Program(noted, k.program.param_slots), [p.name for p in k.params]))
    return "\n".join(lines)


# ---- launch -----------------------------------------------------------------------------------
def _shape(x, what: str) -> tuple[int, int]:
    t = (x, 1) if isinstance(x, int) else tuple(x)
    if len(t) == 1:
        t = (t[0], 1)
    if len(t) != 2 or not all(isinstance(v, (int, np.integer)) and v >= 1 for v in t):
        raise LaunchError(f"{what} must be N or (X, Y) with positive integers, got {x!r}")
    return int(t[0]), int(t[1])


def _check_value(v, lo: int, hi: int, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise LaunchError(f"{what}: {v!r} is not an integer")
    v = int(v)
    if not lo <= v < hi:
        raise LaunchError(f"{what}: {v} is outside [{lo}, {hi})")
    return v


STEP_LIMIT_CAUSES = (
    "Likely causes: a spin lock that lanes of ONE warp contend for (`while (atomicCAS(lock, 0, 1) != 0) {}` run "
    "by several lanes of a warp), warp-synchronous code written for 32-lane warps, or a wait for a value no "
    "thread writes; this machine has 4-lane "
    "warps without independent thread scheduling (a warp runs its lowest-PC lanes first), so the lane holding "
    "the lock never runs again. Take a lock from one lane per warp (`if (threadIdx.x % warpSize == 0)`; "
    "docs/machine.md), or raise the step limit (--step-limit) if the kernel only needs more steps")


def _where(kernel: CompiledKernel, block: int, line: int = 0) -> str:
    """', PTX line N: `text`' for PTX ``line``, or else the block's first instruction (the nearest block that
    has one), plus the CUDA source line from the PTX's `.loc` line table when it has one."""
    blocks = kernel.program.blocks
    near = sorted(range(len(blocks)), key=lambda i: (i < block, abs(i - block)))   # this one, later, earlier
    line = line or next((blocks[i].lines[0] for i in near if blocks[i].lines), None)
    if line is None:
        return ""
    text = kernel.ptx.splitlines()
    return annotate(f", PTX line {line}: `{' '.join(text[line - 1].split())}`", kernel.ptx, kernel.source,
                    kernel.source_name)


class ArraySlot(NamedTuple):
    """Where a pointer argument's array lies in the launch's memory, and how it was given."""
    name: str
    base: int              # byte address
    count: int             # elements
    signed: bool
    elem_bytes: int        # 1, 2, 4 or 8
    given: np.ndarray | None = None     # the NumPy argument (its shape and dtype come back); None for a list


@dataclass
class LaunchImage:
    """What every backend is given, and where the results will be."""
    program: Program               # the kernel's program with the parameters bound
    memory: list[int]              # MEM_WORDS unsigned words: kernel variables, then the arrays
    arrays: list[ArraySlot]        # the pointer parameters, in parameter order
    dynamic_shared: int = 0        # byte address of the extern __shared__ array (all memory up to the frames)


def build_image(kernel: CompiledKernel, args: list, block: tuple[int, int], redzone: int = 0) -> LaunchImage:
    """Check the arguments and lay out the launch's memory (map: module docstring). ``block`` sizes the frames;
    ``redzone`` bytes are left unused before each array and after the last (--memcheck)."""
    if len(args) != len(kernel.params):
        raise LaunchError(f"kernel {kernel.name} takes {len(kernel.params)} arguments "
                          f"({', '.join(p.name for p in kernel.params)}), got {len(args)}")
    lay = kernel.memory
    mem_bytes = bytearray(MEM_WORDS * 4)
    for a, v in lay.init.items():
        mem_bytes[a] = v
    addr = (lay.static_bytes + 3) // 4 * 4
    frames = lay.frame_bytes * block[0] * block[1]
    values: list[int] = []
    arrays: list[ArraySlot] = []
    for p, a in zip(kernel.params, args):
        is_ptr = p.kind == "ptr" or (p.kind == "unknown" and not isinstance(a, (int, np.integer)))
        if not is_ptr:
            if p.kind == "ptr":
                raise LaunchError(f"argument {p.name} is a pointer: pass a list of integers")
            values.append(_check_value(a, INT32_MIN, 1 << 32, f"argument {p.name}"))
            continue
        slot = _place_array(p, a, addr + redzone, frames + redzone, mem_bytes)
        values.append(slot.base)
        arrays.append(slot)
        addr = slot.base + (slot.count * slot.elem_bytes + 3) // 4 * 4
    addr += redzone if arrays else 0
    if lay.dynamic_shared and addr + frames + redzone >= MEM_WORDS * 4:
        raise CapacityError(f"no memory is left for the kernel's extern __shared__ array: arrays and thread "
                            f"frames fill all {MEM_WORDS} words")
    words = np.frombuffer(bytes(mem_bytes), dtype="<u4").astype(np.int64).tolist()
    return LaunchImage(bind(kernel.program, values, addr), words, arrays, addr)


def _elements(p: ParamInfo, a) -> tuple[list, np.ndarray | None]:
    """A pointer argument's elements in row-major order, and the argument itself when it is a NumPy array."""
    if isinstance(a, (int, np.integer)):
        raise LaunchError(f"argument {p.name} is a pointer: pass a list of integers or an integer NumPy array, "
                          f"not {a}")
    if not isinstance(a, np.ndarray):
        return list(a), None
    if a.dtype.kind not in "iu":
        raise LaunchError(f"argument {p.name}: a NumPy array of dtype {a.dtype} is not an integer array; pass an "
                          f"integer dtype (e.g. np.int32), converting it yourself if it holds whole numbers")
    if a.size == 0:
        raise LaunchError(f"argument {p.name}: an empty array has no words to point to; give at least one element")
    return np.ascontiguousarray(a).ravel().tolist(), a


def _place_array(p: ParamInfo, a, addr: int, frames: int, mem_bytes: bytearray) -> ArraySlot:
    """Write a pointer argument's elements at byte ``addr``, checking each value and that the thread frames
    (``frames`` bytes at the top) still fit after it."""
    values, given = _elements(p, a)
    e = p.elem_bytes
    lo, hi = -(1 << (min(8 * e, 32) - 1)), 1 << min(8 * e, 32)
    if e == 8:
        lo, hi = -(1 << 63), 1 << 64
    items = [_check_value(v, lo, hi, f"argument {p.name}[{i}]") for i, v in enumerate(values)]
    size = (len(items) * e + 3) // 4 * 4
    if addr + size + frames > MEM_WORDS * 4:
        need = (addr + size + frames) // 4
        raise CapacityError(f"the launch needs {need} words of memory (kernel variables, arrays up to "
                            f"{p.name}, {frames // 4} words of thread frames); the machine has {MEM_WORDS} "
                            f"(over by {need - MEM_WORDS})")
    for i, v in enumerate(items):
        mem_bytes[addr + i * e: addr + (i + 1) * e] = (v & ((1 << 8 * e) - 1)).to_bytes(e, "little")
    return ArraySlot(p.name, addr, len(items), p.signed, e, given)


def read_arrays(memory: list[int], arrays: list[ArraySlot]) -> dict[str, np.ndarray]:
    """The arrays' values in a final memory image. An array given as a list comes back 1-D, as int64 with the
    parameter's signedness (uint64 for an unsigned 64-bit one); one given as a NumPy array comes back in its
    shape and dtype (``_as_given``)."""
    out_bytes = np.array(memory, dtype="<u4").tobytes()
    out = {}
    for name, base, n, signed, e, given in arrays:
        raw = np.frombuffer(out_bytes[base: base + n * e], dtype=f"<{'i' if signed else 'u'}{e}")
        vals = raw.copy() if e == 8 else raw.astype(np.int64)
        out[name] = vals if given is None else _as_given(name, vals, given, signed, e)
    return out


def _as_given(name: str, vals: np.ndarray, given: np.ndarray, signed: bool, e: int) -> np.ndarray:
    """The kernel's elements in the argument's shape and dtype. Of the same width, the bits come back (what
    cudaMemcpy does: an int32 array under an `unsigned*` parameter reads 0xFFFFFFFF as -1); of another width,
    the values, and a value the dtype cannot hold is an error naming it, never wrapped silently."""
    if given.dtype.itemsize == e:
        return vals.astype(f"<{'i' if signed else 'u'}{e}").view(given.dtype.newbyteorder("<")) \
                   .astype(given.dtype).reshape(given.shape)
    info = np.iinfo(given.dtype)
    bad = [k for k, v in enumerate(vals.tolist()) if not info.min <= v <= info.max]
    if bad:
        k = bad[0]
        raise LaunchError(f"argument {name}: the kernel left {int(vals[k])} in element {k}, which dtype "
                          f"{given.dtype} cannot hold; pass an array of dtype {'' if signed else 'u'}int{8 * e} "
                          f"(the kernel's element type) or a wider one")
    return vals.astype(given.dtype).reshape(given.shape)


def located(kernel: CompiledKernel, e: MachineError) -> MachineError:
    """A run-time error of a launch with the PTX and CUDA line of the block it names added, where the PTX is
    known, so that every backend (and --memcheck) reports the same way: a step-limit stop at its loop's
    branch, with the likely causes; a memory fault or a memcheck error at the access (or barrier)."""
    block = getattr(e, "block", None)
    if block is None:
        return e
    blk = kernel.program.blocks[block]
    if isinstance(e, interp.StepLimitError):
        return interp.StepLimitError(f"{e}{_where(kernel, block, blk.term_line)}. {STEP_LIMIT_CAUSES}", block)
    line = getattr(e, "line", 0) or blk.mem_line
    error = type(e)(f"{e}{_where(kernel, block, line)}", block)
    if hasattr(e, "line"):
        error.line = line
    return error


def _run_backend(run_launch: BackendFn, backend: str, kernel: CompiledKernel, image: LaunchImage,
                 grid: tuple[int, int], block: tuple[int, int], step_limit: int | None,
                 options: dict[str, Any]) -> BackendRun:
    """Call the backend; its run-time errors get the kernel's source line here (``located``)."""
    try:
        run = run_launch(image.program, image.memory, grid, block, step_limit, **options)
    except (interp.StepLimitError, interp.MemoryFault) as e:
        raise located(kernel, e) from None
    if len(run.memory) != MEM_WORDS:      # a backend under construction: fail here, not as wrong arrays
        raise LaunchError(f"backend {backend!r} returned {len(run.memory)} memory words; the machine has "
                          f"{MEM_WORDS}")
    return run


def for_format(kernel: CompiledKernel, fmt: BlockFormat) -> CompiledKernel:
    """The kernel lowered again from its PTX for a target's block format (the same kernel if it already is)."""
    if kernel.fmt == fmt:
        return kernel
    module = parse_ptx(kernel.ptx)
    lowered = lower(module, select_kernel(module, kernel.entry or None), fmt)
    return replace(kernel, program=lowered.program, memory=lowered.layout, fmt=fmt)


def default_block(args: list, max_threads: int = MAX_THREADS_PER_CTA) -> tuple[int, int]:
    """The block of a launch that names none (the CLI's too): one thread per element of the largest array
    argument, at most ``max_threads``; one thread if no argument is an array."""
    sizes = [a.size if isinstance(a, np.ndarray) else len(a) for a in args
             if not isinstance(a, (int, np.integer)) and hasattr(a, "__len__")]
    return min(max(sizes, default=1), max_threads), 1


def _for_backend(kernel: CompiledKernel, backend: str, run_launch: BackendFn) -> CompiledKernel:
    """The kernel lowered for the backend's block format, when it has its own."""
    fmt = getattr(run_launch, "block_format", None)
    if fmt is None:
        return kernel
    try:
        return for_format(kernel, fmt() if callable(fmt) else fmt)
    except CapacityError as e:      # say which target's limit it is: the interpreter would run it
        why = annotate(str(e), kernel.ptx, kernel.source, kernel.source_name)
        raise CapacityError(f"backend {backend!r} cannot run this kernel: {why} (its block format is not the "
                            f"interpreter's: --backend interp may run it)") from None


def launch_many(kernel: CompiledKernel, args_list: list[list], grid=(1, 1), block=None, backend: str = "interp",
                step_limit: int | None = None, **backend_options: Any) -> list[LaunchResult]:
    """The kernel launched once per argument list, all with one shape (``block`` defaults from the first list).
    Result j is what ``launch(kernel, args_list[j], ...)`` returns. On a backend with a batch form ('model':
    the launches decode together, one pass over the weights per step for all of them; 'circuit': the step
    engine runs them on the core's threads) they run together; on the others one after another."""
    run_launch = load_backend(backend)
    many = getattr(run_launch, "many", None)
    if not args_list:
        return []
    block = default_block(args_list[0]) if block is None else block
    if many is None or len(args_list) == 1:
        return [launch(kernel, args, grid, block, backend, step_limit, **backend_options) for args in args_list]
    kernel = _for_backend(kernel, backend, run_launch)
    grid, block = _shape(grid, "grid"), _shape(block, "block")
    warnings = [w for n, w in kernel.block_warnings if block[0] * block[1] > n]
    images = [build_image(kernel, args, block) for args in args_list]
    try:
        runs = many([(image.program, image.memory) for image in images], grid, block, step_limit, **backend_options)
    except (interp.StepLimitError, interp.MemoryFault) as e:
        raise located(kernel, e) from None
    return [LaunchResult(kernel.name, grid, block, backend, read_arrays(run.memory, image.arrays), dict(run.tokens),
                         run.trace, run.steps, run.extra, warnings) for image, run in zip(images, runs)]


def launch(kernel: CompiledKernel, args: list, grid=(1, 1), block=None, backend: str = "interp",
           step_limit: int | None = None, memcheck: bool = False, **backend_options: Any) -> LaunchResult:
    """Run the kernel; returns the arrays of its pointer parameters read back after the launch.

    ``args``: one per kernel parameter, in order: an integer for a scalar; for a pointer a list of integers
    or an integer NumPy array of any shape (row-major), which comes back in its shape and dtype.
    ``block`` defaults as on the command line (``default_block``). ``memcheck``: run the launch on the checked
    interpreter first (host/memcheck.py), which raises MemcheckError at the first out-of-bounds access,
    read of unwritten shared or local memory, shared-memory race or divergent barrier; on 'interp' its run
    is the result, on another backend the launch then runs there as usual. ``backend_options`` go to the backend
    unchanged (e.g. mode='bf16' for 'circuit'); 'interp' takes none. A backend whose function carries a
    ``block_format`` gets the kernel lowered for that format.
    """
    run_launch = load_backend(backend)      # an unknown backend is reported before the arguments are looked at
    kernel = _for_backend(kernel, backend, run_launch)
    grid, block = _shape(grid, "grid"), _shape(default_block(args) if block is None else block, "block")
    warnings = [w for n, w in kernel.block_warnings if block[0] * block[1] > n]
    if memcheck:
        from .memcheck import run_checked
        checked_image, checked = run_checked(kernel, args, grid, block, step_limit)
        if backend == "interp":
            return LaunchResult(kernel.name, grid, block, backend, read_arrays(checked.memory, checked_image.arrays),
                                steps=checked.steps, warnings=warnings)
    image = build_image(kernel, args, block)
    run = _run_backend(run_launch, backend, kernel, image, grid, block, step_limit, backend_options)
    return LaunchResult(kernel.name, grid, block, backend, read_arrays(run.memory, image.arrays), dict(run.tokens),
                        run.trace, run.steps, run.extra, warnings)

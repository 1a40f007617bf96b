"""The host's side of a launch on the GPU: the lowering format, the ROM image, the prompt tokens.

All of this is tokenization (an assembler's work): the program's blocks become ROM words, the launch's
memory image becomes data words, and each word travels as three 12-bit payload tokens followed by the
token that names where it goes. Nothing here executes the program.
"""
from __future__ import annotations

from ..errors import QgpuError
from ..machine.isa import BlockFormat, CapacityError, Program, bind
from .datapath import ALL_ALU_OPCODES
from .encode import GPU_MEM_OPS, BlockCode, encode_block
from .layout import MEM_KINDS, MEM_VARIANTS, PAY_BITS, TERM_KINDS, GpuSpec, field_offsets, rom_rows
from .vocab import Token


class GpuLaunchError(QgpuError):
    """A kernel or launch the GPU in the weights cannot run (over one of its limits, or not supported)."""


def block_format(spec: GpuSpec) -> BlockFormat:
    """The lowering's target format for this GPU: its slots, read ports and memory ops."""
    f = spec.fmt
    pre = tuple(frozenset(f.opcodes(k)) for k in range(f.pre))
    post = tuple(frozenset(f.opcodes(k)) for k in range(f.pre, f.slots))
    # an atomic's record write-back reads its scratch row through the last read port; a shuffle reads its
    # source lane's register while that lane's block may not have run yet (core.py)
    return BlockFormat(f.pre, f.post, pre, post, f.reads, frozenset(GPU_MEM_OPS), writeback_cost=True,
                       atomic_reads=f.reads - 1, lane_serial=True)


def _pack(fields: list[tuple[str, int]], values: dict[str, int]) -> int:
    word = 0
    for name, (lo, bits) in field_offsets(fields).items():
        v = values.get(name, 0)
        if not 0 <= v < 1 << bits:
            raise GpuLaunchError(f"ROM field {name}={v} does not fit {bits} bits")
        word |= v << lo
    return word


def _rom_values(code: BlockCode, spec: GpuSpec) -> dict[str, dict[str, int]]:
    f = spec.fmt
    out: dict[str, dict[str, int]] = {}
    for k, s in enumerate(code.slots):
        out[f"slot{k}"] = {"op": s.op, "a": code.index(f, k, "a"), "b": code.index(f, k, "b"),
                           "c": code.index(f, k, "c"), "sp": s.special}
        out[f"imm{k}"] = {"imm": s.imm}
    out["memimm"] = {"imm": code.mem_imm}
    out["ctl"] = {"mem": MEM_KINDS.index(code.mem_op or "none"), "mema": code.index(f, "mem", "a"),
                  "memd": code.index(f, "mem", "b"),
                  "term": TERM_KINDS.index(code.term), "taken": code.taken, "not_taken": code.not_taken,
                  "variant": MEM_VARIANTS[code.mem_op].index(code.variant) if code.mem_op in MEM_VARIANTS else 0}
    out["reads"] = {f"r{i}": r for i, r in enumerate(code.reads)}
    out["reads"]["memc"] = code.index(f, "mem", "c")
    out["reads"]["cross"] = code.cross_reg
    out["reads"]["cond"] = code.index(f, "cond", "c")
    out["wbreg"] = {f"reg{e}": r for e, (r, _) in enumerate(code.writeback)}
    out["wbsrc"] = {"count": len(code.writeback)}
    out["wbsrc"].update({f"src{e}": spec.wb_sources.index(s) for e, (_, s) in enumerate(code.writeback)})
    return out


def rom_image(program: Program, spec: GpuSpec) -> dict[str, list[int]]:
    """ROM row name -> the 32-bit word of every block."""
    if len(program.blocks) > spec.blocks:
        raise CapacityError(f"program needs {len(program.blocks)} blocks; the GPU's ROM holds {spec.blocks} "
                            f"(over by {len(program.blocks) - spec.blocks})")
    rows = rom_rows(spec)
    image = {name: [0] * len(program.blocks) for name in rows}
    for b, blk in enumerate(program.blocks):
        values = _rom_values(encode_block(blk, spec.fmt, f"block B{b}"), spec)
        for name, fields in rows.items():
            image[name][b] = _pack(fields, values.get(name, {}))
    return image


def _word_tokens(word: int) -> list[Token]:
    m = (1 << PAY_BITS) - 1
    return [("pay", word & m), ("pay", (word >> PAY_BITS) & m), ("pay", (word >> 2 * PAY_BITS) & m)]


def launch_shape(grid: tuple[int, int], block: tuple[int, int] | int, spec: GpuSpec) -> tuple[tuple[int, int], tuple[int, int]]:
    """(grid, block) as 2-D shapes, refused (CapacityError naming the limit) when over the GPU's capacities."""
    block = (block, 1) if isinstance(block, int) else tuple(block)
    grid = tuple(grid)
    threads, ctas = block[0] * block[1], grid[0] * grid[1]
    if min(block) < 1 or threads > spec.threads:
        raise CapacityError(f"the GPU in the weights runs a CTA of 1..{spec.threads} threads ({spec.warps} warps of "
                            f"{spec.lanes}); the block is {block[0]}x{block[1]} = {threads} threads")
    if min(grid) < 1 or ctas > spec.ctas:
        raise CapacityError(f"the GPU in the weights runs a grid of 1..{spec.ctas} CTAs; the grid is "
                            f"{grid[0]}x{grid[1]} = {ctas} CTAs")
    return grid, block


def prompt(program: Program, memory: list[int], block: tuple[int, int] | int, spec: GpuSpec,
           grid: tuple[int, int] = (1, 1)) -> list[Token]:
    """The launch's prompt: prompt_parts' load part, then its launch part."""
    load, run = prompt_parts(program, memory, block, spec, grid)
    return load + run


def prompt_parts(program: Program, memory: list[int], block: tuple[int, int] | int, spec: GpuSpec,
                 grid: tuple[int, int] = (1, 1)) -> tuple[list[Token], list[Token]]:
    """(load, launch). load: init (one per warp of the block, the last first), clear for every block but 0 that
    has a zero word when its parameters are 0, and the ROM's nonzero words that no argument changes; it is
    the same for every launch of the program with as many warps (CUDA's module load: a state after it can be
    taken up again). launch: the ROM words that hold arguments, the memory image (nonzero words within the
    GPU's memory), the block shape, the grid shape (unless 1x1), go. `block`: (x, y), or a thread count for a
    1-D block."""
    grid, block = launch_shape(grid, block, spec)
    # registers of warps the block does not have are never read: only its own warps need an init token
    warps = (block[0] * block[1] + spec.lanes - 1) // spec.lanes
    load: list[Token] = [("init", w) for w in reversed(range(warps))]
    image = rom_image(program, spec)
    args = [0] * (max([pi for _, _, pi, _ in program.param_slots] + [-1]) + 1)
    unbound = rom_image(bind(program, args, 0), spec)
    changes = rom_image(bind(program, [-1] * len(args), -1), spec)
    # init zeroes block 0 of the ROM; every other block's rows are zeroed before its nonzero words come (a
    # block that an argument may leave with a zero word is cleared whatever the arguments are)
    load += [("clear", b) for b in range(1, len(program.blocks))
             if not all(im[name][b] for im in (image, unbound, changes) for name in im)]
    run: list[Token] = []
    for m, (name, words) in enumerate(image.items()):
        for b, w in enumerate(words):
            if w:
                part = run if unbound[name][b] != changes[name][b] else load
                part += _word_tokens(w) + [("rom", m, b)]
    for a, w in enumerate(memory):
        if w and a < spec.mem_words:
            run += _word_tokens(w) + [("mem", a)]
        elif w:
            raise CapacityError(f"memory word {a} is in use; the GPU has {spec.mem_words} words")
    # init leaves a 1x1 grid: a single CTA's launch needs no grid token
    return load, run + [("launch", *block)] + ([("grid", *grid)] if grid != (1, 1) else []) + [("go",)]


def check_supported(program: Program, spec: GpuSpec) -> None:
    """Refuse a program the GPU cannot run, before anything is sent (every block must encode)."""
    for b, blk in enumerate(program.blocks):
        for ins in blk.pre + blk.post:
            if ins.op not in ALL_ALU_OPCODES and ins.op != "NOP":
                raise GpuLaunchError(f"block B{b}: {ins.op} is not executed by the GPU in the weights yet "
                                     f"(--backend interp runs it)")
    rom_image(program, spec)

"""Warnings for PTX that assumes 32-lane warps: it runs, but gives other results on our 4-lane warps.

Each check reads the PTX of the kernel and of the functions it calls, and reports only what it can
tell from constants and exact copies, so ordinary kernels stay silent:
- a shuffle whose lane distance (up/down/bfly) or source lane (idx) is a known constant >= LANES,
  unless its width (c operand) is a known value below LANES (then a 32-lane GPU gives the same);
- `and x, 31` / `rem x, 32` of threadIdx.x itself (`%tid.x` or a register that only copies it);
- a volatile shared (or generic) load at least LANES elements away from this thread's earlier
  volatile store through the same base register, with no CTA barrier in between (Harris's "unroll
  the last warp": another warp's lanes have not run yet when this one reads).
"""
from __future__ import annotations

from ..machine.isa import LANES
from .lower_bits import _written, constant_registers
from .lower_ir import INT_TYPES
from .ptx import Function, Imm, Instr, Label, Mem, PtxModule, Reg, SReg, Sym, type_width

WARP32 = {"and": 31, "rem": 32}        # opcode -> the constant that makes it "% 32" on the thread index
BARRIERS = {"bar", "barrier"}           # bar.sync / barrier.sync (CTA-wide; bar.warp.sync spans 4 lanes here)


def _where(ins: Instr) -> str:
    return f"PTX line {ins.line}: `{' '.join(ins.text.split())}`"


def _value(o, consts: dict[str, int]) -> int | None:
    if isinstance(o, Imm):
        return o.value & 0xFFFFFFFF
    if isinstance(o, Reg):
        return consts.get(o.name)
    return None


def _segment_width(c: int) -> int:
    """Lanes per shuffle segment on a 32-lane GPU, from c = ((32 - width) << 8) | clamp."""
    return 32 >> bin((c >> 8) & 31).count("1")


def _shuffle(ins: Instr, consts: dict[str, int]) -> str | None:
    mode = next((m for m in ins.mods if m in ("up", "down", "bfly", "idx")), None)
    b, c = (_value(o, consts) for o in ins.operands[2:4])
    if mode is None or b is None or b & 31 < LANES:
        return None
    if c is not None and _segment_width(c) < LANES:
        return None
    n = b & 31
    if mode == "idx":
        return (f"{_where(ins)}: this shuffle reads lane {n} but a warp here has {LANES} lanes (warpSize = {LANES}); "
                f"name a lane below warpSize (e.g. `warpSize - 1`)")
    return (f"{_where(ins)}: this shuffle reaches lane distance {n} but a warp here has {LANES} lanes (warpSize = "
            f"{LANES}), so every lane gets its own value back; write loops over warpSize "
            f"(`for (int o = warpSize / 2; o > 0; o /= 2)`)")


def _tid_copies(fn: Function) -> set[str]:
    """Registers whose only definition is an unguarded `mov r, %tid.x`."""
    defs: dict[str, list[Instr]] = {}
    for ins in fn.body:
        if isinstance(ins, Instr) and ins.operands:
            for r in _written(ins.operands[0]):
                defs.setdefault(r, []).append(ins)
    return {r for r, d in defs.items() if len(d) == 1 and d[0].opcode == "mov" and d[0].pred is None
            and d[0].operands[1] == SReg("%tid.x")}


def _lane_mask(ins: Instr, consts: dict[str, int], tids: set[str]) -> str | None:
    k = WARP32.get(ins.opcode)
    if k is None or len(ins.operands) < 3:
        return None
    x, y = ins.operands[1:3]
    pairs = [(x, y), (y, x)] if ins.opcode == "and" else [(x, y)]
    is_tid = lambda o: o == SReg("%tid.x") or (isinstance(o, Reg) and o.name in tids)
    if not any(is_tid(t) and _value(m, consts) == k for t, m in pairs):
        return None
    op = "&" if ins.opcode == "and" else "%"
    return (f"{_where(ins)}: lane index computed for 32-lane warps (threadIdx.x {op} {k}); a warp here has {LANES} "
            f"lanes: write `threadIdx.x % warpSize`")


def _volatile_neighbours(fn: Function) -> tuple[int, str] | None:
    """The first volatile load >= LANES elements from an earlier volatile store of the same thread (same base
    register, same straight-line stretch, no CTA barrier between), as described in the module docstring."""
    stored: dict[str, set[int]] = {}      # base register -> byte offsets this thread stored to
    for ins in fn.body:
        if isinstance(ins, Label) or ins.opcode in ("bra", "call", "ret", "exit") \
                or (ins.opcode in BARRIERS and "warp" not in ins.mods):
            stored.clear()
            continue
        if "volatile" in ins.mods and not {"global", "local", "const", "param"} & set(ins.mods):
            mem = next((o for o in ins.operands if isinstance(o, Mem)), None)
            width = next((type_width(m) for m in ins.mods if m in INT_TYPES), None)
            if mem is not None and isinstance(mem.base, Reg) and width:
                size = max(width // 8, 1)
                far = [abs(mem.offset - o) // size for o in stored.get(mem.base.name, ())
                       if abs(mem.offset - o) >= LANES * size]
                if ins.opcode == "ld" and far:
                    return ins.line, (f"{_where(ins)}: volatile shared memory read {min(far)} elements from this "
                                      f"thread's earlier store with no __syncthreads() between: warp-synchronous "
                                      f"code written for 32-lane warps; a warp here has {LANES} lanes and other "
                                      f"warps run at other times, so put __syncthreads() between the steps")
                if ins.opcode == "st":
                    stored.setdefault(mem.base.name, set()).add(mem.offset)
                    continue
        for r in _written(ins.operands[0]) if ins.operands and ins.opcode != "st" else ():
            stored.pop(r, None)
    return None


def _reachable(module: PtxModule, kernel: Function) -> list[Function]:
    """The kernel and every function it calls, directly or not, each once."""
    out, todo = [], [kernel]
    while todo:
        fn = todo.pop()
        if fn in out:
            continue
        out.append(fn)
        for ins in fn.body:
            if isinstance(ins, Instr) and ins.opcode == "call":
                callee = next((module.functions.get(o.name) for o in ins.operands if isinstance(o, Sym)
                               and o.name in module.functions), None)
                if callee is not None:
                    todo.append(callee)
    return out


def warp_size_warnings(module: PtxModule, kernel: Function) -> list[str]:
    """Warnings (strings naming the PTX line and what to write instead) for code that assumes 32-lane warps."""
    found: list[tuple[int, str]] = []
    for fn in _reachable(module, kernel):
        consts, tids = constant_registers(fn), _tid_copies(fn)
        for ins in fn.body:
            if isinstance(ins, Instr):
                w = _shuffle(ins, consts) if ins.opcode == "shfl" else _lane_mask(ins, consts, tids)
                if w:
                    found.append((ins.line, w))
        found.extend(filter(None, [_volatile_neighbours(fn)]))
    return [w for _, w in sorted(found)]

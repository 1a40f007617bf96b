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


def _tid_copies(fn: Function, sreg: SReg = SReg("%tid.x")) -> set[str]:
    """Registers whose only definition is an unguarded `mov r, %tid.x` (or of another special register)."""
    defs: dict[str, list[Instr]] = {}
    for ins in fn.body:
        if isinstance(ins, Instr) and ins.operands:
            for r in _written(ins.operands[0]):
                defs.setdefault(r, []).append(ins)
    return {r for r, d in defs.items() if len(d) == 1 and d[0].opcode == "mov" and d[0].pred is None
            and d[0].operands[1] == sreg}


def _is_tid(o, tids: set[str]) -> bool:
    """threadIdx.x itself, or a register that only copies it."""
    return o == SReg("%tid.x") or (isinstance(o, Reg) and o.name in tids)


def _lane_mask(ins: Instr, consts: dict[str, int], tids: set[str]) -> str | None:
    k = WARP32.get(ins.opcode)
    if k is None or len(ins.operands) < 3:
        return None
    x, y = ins.operands[1:3]
    pairs = [(x, y), (y, x)] if ins.opcode == "and" else [(x, y)]
    if not any(_is_tid(t, tids) and _value(m, consts) == k for t, m in pairs):
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


# ---- per-warp partials reduced by one warp ----------------------------------------------------------
# The usual blockReduceSum stores each warp's partial at shared[threadIdx.x / warpSize] and lets warp 0
# reduce shared[threadIdx.x % warpSize]: one warp combines at most warpSize partials, so the block may
# have at most warpSize * warpSize threads (1024 on NVIDIA GPUs, 16 here). Registers are tagged with what
# they are made of: the warp index ('wid', tid / 4 or tid & ~3 for its byte offset), the lane ('lane',
# tid % 4) and the shared variables whose address they hold.
ADDRESS_OPS = {"mov", "add", "sub", "shl", "mul", "mad", "cvt", "cvta", "or"}
# (opcode, constant operand) applied to threadIdx.x -> what it gives (tid & ~(LANES - 1) is _warp_tag's)
WARP_SPLITS = {("shr", LANES.bit_length() - 1): "wid", ("div", LANES): "wid", ("rem", LANES): "lane",
               ("and", LANES - 1): "lane"}


def _warp_tag(ins: Instr, consts: dict[str, int], tids: set[str]) -> str | None:
    """'wid' or 'lane' when ``ins`` splits threadIdx.x into warp and lane (with warpSize = LANES)."""
    if len(ins.operands) < 3 or not _is_tid(ins.operands[1], tids):
        return None
    k = _value(ins.operands[2], consts)
    if ins.operands[2] == SReg("WARP_SZ"):
        k = LANES
    if k is None:
        return None
    if ins.opcode == "and" and k & (LANES - 1) == 0 and k >= LANES:
        return "wid"                  # tid & ~(LANES - 1): the warp's index times LANES (a byte offset)
    return WARP_SPLITS.get((ins.opcode, k))


def _tags(fn: Function, shared: set[str]) -> dict[str, set[str]]:
    """Register -> the tags of the values it is computed from (over all its definitions)."""
    consts, tids = constant_registers(fn), _tid_copies(fn)
    # nvcc reads warpSize as WARP_SZ into a register it may reuse later (a loop's counter): any copy counts
    consts.update({ins.operands[0].name: LANES for ins in fn.body if isinstance(ins, Instr) and ins.opcode == "mov"
                   and len(ins.operands) == 2 and ins.operands[1] == SReg("WARP_SZ")})
    tags: dict[str, set[str]] = {}
    for _ in range(4):                # a few passes reach the loops' back edges
        for ins in fn.body:
            if not isinstance(ins, Instr) or not ins.operands or not isinstance(ins.operands[0], Reg):
                continue
            own = _warp_tag(ins, consts, tids)
            got = {own} if own else set()
            if own is None and ins.opcode in ADDRESS_OPS:
                for o in ins.operands[1:]:
                    if isinstance(o, Reg):
                        got |= tags.get(o.name, set())
                    elif isinstance(o, Sym) and o.name in shared:
                        got.add("sym:" + o.name)
            if got - tags.get(ins.operands[0].name, set()):
                tags.setdefault(ins.operands[0].name, set()).update(got)
    return tags


def _address_tags(ins: Instr, tags: dict[str, set[str]]) -> set[str]:
    mem = next((o for o in ins.operands if isinstance(o, Mem)), None)
    if mem is None:
        return set()
    if isinstance(mem.base, Sym):
        return {"sym:" + mem.base.name}
    return set(tags.get(mem.base.name, ())) if isinstance(mem.base, Reg) else set()


def warp_partials(module: PtxModule, kernel: Function) -> tuple[int, str] | None:
    """(LANES * LANES, a warning) for the pattern above (a shared array of LANES or 32 words written per warp
    and read per lane), for a launch of more threads per block to show; None when the kernel has none."""
    for fn in _reachable(module, kernel):
        partials = {d.name for d in module.globals + kernel.decls + fn.decls
                    if d.space == "shared" and d.elem_bytes * d.count in (4 * LANES, 4 * 32)}
        tags = _tags(fn, partials)
        stores = {t[4:]: ins for ins in fn.body if isinstance(ins, Instr) and ins.opcode == "st"
                  for tg in [_address_tags(ins, tags)] if "wid" in tg and "lane" not in tg
                  for t in tg if t.startswith("sym:")}
        for ins in fn.body:
            if isinstance(ins, Instr) and ins.opcode == "ld":
                tg = _address_tags(ins, tags)
                hit = [t[4:] for t in tg if t.startswith("sym:") and t[4:] in stores]
                if hit and "lane" in tg and "wid" not in tg:
                    st = stores[hit[0]]
                    return LANES * LANES, (
                        f"{_where(st)}: per-warp partials stored at [threadIdx.x / warpSize] and read back at "
                        f"[threadIdx.x % warpSize] by one warp: that warp combines at most warpSize = {LANES} "
                        f"partials, so blocks of more than {LANES * LANES} threads (warpSize * warpSize) lose "
                        f"some; reduce the partials in a loop, or launch at most {LANES * LANES} threads per block")
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

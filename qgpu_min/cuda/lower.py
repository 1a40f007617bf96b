"""PTX kernel -> machine Program: memory layout, op expansion, CFG layout, register allocation, packing.

Pipeline: lower_ops (PTX -> virtual code, calls inlined) -> lower_cfg (basic blocks, jump threading,
reconvergence layout) -> lower_opt (constant propagation, branch inversion) -> lower_regalloc (15
registers) -> pack each basic block into machine blocks (isa.N_PRE ALU, one memory op, isa.N_POST ALU,
terminator; or the narrower isa.BlockFormat given to `lower`), then live-in/out masks.

Kernel parameters are not in memory: each `ld.param` becomes `ADD rd, rz, imm` whose imm the launch
sets to the argument (an array's base address or a scalar), recorded in Program.param_slots.

Memory: .global/.const variables (with initial values) and .shared variables from address 0; each
thread's frame (its .local variables, then register spill slots) at the top of memory, thread t
(t = tid.lin) at MEM - (t + 1) * frame, addressed as tid.lin * -frame + (MEM - frame + offset).
The launch's arrays go between the two.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..machine.isa import (MACHINE_FORMAT, MEM_WORDS, N_PRE, STORE_OPS, ZERO, Block, BlockFormat, CapacityError,
                           Instr, Program, Term, annotate_liveness, check_block_format, check_program,
                           live_in_reads)
from .lower_cfg import build_blocks, exit_directly, layout, thread_jumps
from .lower_expand import expand_missing_ops
from .lower_ir import RZ, MemoryLayout, V
from .lower_ops import Lowerer
from .lower_opt import COMPARES, optimize
from .lower_regalloc import allocate, dead_code, liveness
from .lower_remat import (constant_def, drop_known_constants, fold_derived_ivs, recolour_zero_inits,
                          rematerialise)
from .lower_warn import warp_partials, warp_size_warnings
from .ptx import Function, PtxModule


@dataclass
class Lowered:
    program: Program
    layout: MemoryLayout
    warnings: list[str] = field(default_factory=list)   # code that runs but assumes 32-lane warps (lower_warn)
    # (threads, warning): code that is right only for blocks of at most that many threads, for a launch to show
    block_warnings: list[tuple[int, str]] = field(default_factory=list)


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def memory_layout(module: PtxModule, kernel: Function, redzone: int = 0) -> MemoryLayout:
    """The kernel's variables: .global/.const/.shared from address 0 (``redzone`` unused bytes before each
    and after the last, so that --memcheck sees an access that runs off one), .local in the frame."""
    lay = MemoryLayout({}, {})
    addr = 0
    decls = [d for d in module.globals if d.space in ("global", "const")] + \
            [d for d in module.globals + kernel.decls if d.space == "shared"]
    for d in decls:
        if d.count == 0:            # extern __shared__: placed by the launch, after the arrays
            lay.dynamic_shared.add(d.name)
            continue
        addr = _align(addr + redzone, max(d.align, 4))
        size = d.elem_bytes * d.count
        lay.symbols[d.name] = addr
        lay.entries.append((d.space, d.name, addr, size))
        for i, v in enumerate(d.init or []):
            for k in range(d.elem_bytes):
                lay.init[addr + i * d.elem_bytes + k] = (v >> (8 * k)) & 0xFF
        addr += size
    if lay.entries:
        addr += redzone
    for d in kernel.decls:
        if d.space == "local":
            lay.place_local(d.name, d.align, d.elem_bytes * d.count)
    lay.static_bytes = _align(addr, 4)
    if lay.static_bytes + lay.frame_bytes > MEM_WORDS * 4:
        words = (lay.static_bytes + lay.frame_bytes) // 4
        raise CapacityError(f"the kernel's variables need {words} words of memory; the machine has {MEM_WORDS} "
                            f"(over by {words - MEM_WORDS})")
    return lay


def _phys(v: V, colour: dict[str, int]) -> Instr:
    r = lambda x: ZERO if x == RZ else colour[x]
    return Instr(v.op, r(v.d), r(v.a), ZERO if v.bimm else r(v.b), r(v.c), v.imm, v.bimm)


def _rw(ins: Instr) -> tuple[set[int], set[int]]:
    reads = ({ins.ra, ins.rc} if ins.bimm else {ins.ra, ins.rb, ins.rc}) - {ZERO}
    writes = set() if ins.op in STORE_OPS or ins.rd == ZERO else {ins.rd}
    return reads, writes


# A chunk becomes one machine block: (pre slots, memory slot, post slots). A None slot is left empty
# (NOP) because a typed format put the next op into a later slot.
Slot = tuple[Instr, V]
Chunk = tuple[list[Slot | None], Slot | None, list[Slot | None]]


def _check_ops(ops: list[Slot], fmt: BlockFormat) -> None:
    """Reject an op that no block of ``fmt`` can hold (the packer would otherwise wait for it forever)."""
    for ins, v in ops:
        where = f"PTX line {v.line}" if v.line else "the kernel"
        if ins.is_mem and not fmt.allows_mem(ins.op):
            allowed = ", ".join(sorted(fmt.mem_ops or ())) or "none"
            raise CapacityError(f"{where}: {ins.op} is not allowed by the block format "
                                f"(its memory ops: {allowed})")
        if not ins.is_mem and not fmt.fits_some_slot(ins.op):
            raise CapacityError(f"{where}: {ins.op} fits no ALU slot of the block format")


def _pack(ops: list[Slot], fmt: BlockFormat = MACHINE_FORMAT, branch_reg: int = ZERO,
          remat: dict[int, set[int]] | None = None, local: set[int] | None = None,
          by_room: bool = True) -> list[Chunk]:
    """Schedule a basic block's instructions into (pre, mem, post) chunks of format ``fmt``.

    List scheduling over register dependences (memory ops keep their order): each chunk first takes
    the ALU ops the next memory op needs, then other ready ALU ops (hoisting independent work above the
    memory op), then the memory op, then ready ALU ops into the post slots. Slots fill in order, each
    with the best ready op it allows; an op that no remaining slot allows, or that would push the chunk's
    live-in reads over fmt.max_reads, waits for the next chunk. ``branch_reg`` is the register the
    block's BR tests: it counts as a read of the last chunk, and gets an empty chunk of its own when
    that chunk has no read to spare.

    ``remat`` maps the index of a constant definition (a literal, parameter or S2R: it reads no register)
    to the ops that read its value. Such a definition is not scheduled on its own: a copy of it goes into
    every chunk that holds one of its readers, in a slot before the first of them, so its register is
    never live from one chunk to the next (on a target with ``writeback_cost`` that saves a write-back
    per lane and chunk). Copies rewrite the register with the value it already holds, so they can go
    anywhere in its live range: after the definition's own WAR/WAW predecessors.

    ``local``: ops whose results the basic block does not leave live. Such an op is only placed while it
    is needed by the chunk's memory op or one of its readers could follow it into the chunk: hoisted
    into an earlier chunk its result would cross into the next one (a write-back on the GPU). A chunk
    that this leaves without any op is scheduled again without the rule."""
    remat = remat or {}
    local = local or set()
    n = len(ops)
    rw = [_rw(i) for i, _ in ops]
    preds: list[set[int]] = []
    for j in range(n):
        rj, wj = rw[j]
        preds.append({i for i in range(j) if rw[i][1] & rj or rw[i][0] & wj or rw[i][1] & wj
                      or (ops[i][0].is_mem and ops[j][0].is_mem)})
    consts: list[set[int]] = [set() for _ in range(n)]      # op -> the deferred definitions it reads
    for i, readers in remat.items():
        for j in readers:
            preds[j].discard(i)
            consts[j].add(i)
    done: set[int] = set(remat)     # every other op may go as if they had run (their copies follow)
    chunk_start: set[int] = set()   # done before the chunk being filled
    readers: list[set[int]] = [set() for _ in range(n)]      # op -> the ops that read the value it writes
    last: dict[int, int] = {}
    for j in range(n):
        for r in rw[j][0]:
            if r in last:
                readers[last[r]].add(j)
        last.update((r, j) for r in rw[j][1])
    chunks: list[Chunk] = []

    def ancestors(k: int) -> set[int]:
        out, stack = set(), list(preds[k])
        while stack:
            x = stack.pop()
            if x not in out:
                out.add(x)
                stack.extend(preds[x])
        return out

    def within_reads(placed: list[Instr], ins: Instr) -> bool:
        """ins may join the chunk: its reads stay within the limit, and the lane_serial rule holds."""
        limit = fmt.read_limit(placed + [ins])
        return (limit is None or len(live_in_reads(placed + [ins])) <= limit) and \
            fmt.lane_serial_rule(placed + [ins]) is None

    def candidates(here: set[int], keep: Callable[[int], bool] = lambda k: True,
                   mem_next: int | None = None) -> list[int]:
        """Ready ALU ops in program order (those ``keep`` accepts); an op still missing a deferred
        definition in this chunk stands for that definition's copy instead, and so does the chunk's
        memory op ``mem_next`` (while the pre slots fill) once it is otherwise ready."""
        out: list[int] = []
        for k in range(n):
            if k in done or ops[k][0].is_mem or not preds[k] <= done or not keep(k):
                continue
            missing = sorted(consts[k] - here)
            if not missing:
                out.append(k)
            out += [i for i in missing if preds[i] <= done and i not in out]
        if mem_next is not None and preds[mem_next] <= done:
            out += [i for i in sorted(consts[mem_next] - here) if preds[i] <= done and i not in out]
        return out

    def reads_on(k: int, need: set[int], mem_next: int | None, assumed: set[int], depth: int) -> bool:
        """Some reader of k could follow it into this chunk and is worth placing there: it is needed
        by the chunk's memory op, is that op, leaves the block, or has such a reader itself."""
        assumed = assumed | {k}
        for j in readers[k]:
            if j in done or not preds[j] - assumed <= done or (ops[j][0].is_mem and j != mem_next):
                continue
            if j not in local or j in need or j == mem_next or \
                    (depth > 0 and reads_on(j, need, mem_next, assumed, depth - 1)):
                return True
        return False

    def wanted(k: int, need: set[int], mem_next: int | None, room: int) -> bool:
        """A local op is placed now only if something in reach of this chunk reads it, or it is the last
        reader of a local value written in this chunk (placing it then ends one value as it starts
        another; a value from an earlier chunk is written back already, and staying live costs nothing
        more), or nothing but such ops is left (the BR register's compare). ``room``: the chunk's ALU
        slots after this one; with none left a reader cannot follow, and with some a ready reader can."""
        if k not in local or k in need:
            return True
        if by_room and readers[k] and room == 0:
            return False
        if by_room and any(j not in done and not ops[j][0].is_mem and preds[j] - {k} <= done for j in readers[k]):
            return True
        if reads_on(k, need, mem_next, set(), 3):
            return True
        if any(p in local and p in done - chunk_start and k in readers[p] and readers[p] - {k} <= done
               for p in range(n)):
            return True
        return not readers[k] and all(j in done or j == k or not readers[j] for j in range(n))

    def take(n_slots: int, allows: Callable[[int, str], bool], need: set[int],
             placed: list[Instr], here: set[int], lazy: bool = False,
             mem_next: int | None = None, later: int = 0) -> list[int | None]:
        """Fill up to n_slots slots; ``later``: the chunk's ALU slots after these (its post slots)."""
        picked: list[int | None] = []
        for slot in range(n_slots):
            room = n_slots - slot - 1 + later
            ready = candidates(here, (lambda k: wanted(k, need, mem_next, room)) if lazy else (lambda k: True),
                               mem_next)
            if not ready:
                break
            fit = [k for k in ready if allows(slot, ops[k][0].op) and within_reads(placed, ops[k][0])]
            if not fit:     # the slot's type or the read limit rules out every ready op: try the next slot
                picked.append(None)
                continue
            k = next((x for x in fit if x in need), fit[0])
            picked.append(k)
            (here if k in remat else done).add(k)
            placed.append(ops[k][0])
        while picked and picked[-1] is None:
            picked.pop()
        return picked

    def slots(picked: list[int | None]) -> list[Slot | None]:
        return [None if k is None else ops[k] for k in picked]

    def prune(picked: list[int | None], used: set[int]) -> list[int | None]:
        """Drop copies whose readers all missed the chunk (they would only fill a slot)."""
        out = [None if k in remat and k not in used else k for k in picked]
        while out and out[-1] is None:
            out.pop()
        return out

    placed: list[Instr] = []
    while len(done) < n:
        before = len(done)
        nxt = next((k for k in range(n) if k not in done and ops[k][0].is_mem), None)
        need = ancestors(nxt) - done if nxt is not None else set()
        need |= {i for k in need | ({nxt} if nxt is not None else set()) for i in consts[k]}
        saved = chunk_start = set(done)
        for lazy in ((True, False) if local else (False,)):
            done.clear()
            done.update(saved)
            placed, here = [], set()
            pre = take(fmt.n_pre, fmt.pre_allows, need, placed, here, lazy, nxt, later=fmt.n_post)
            mem = nxt if nxt is not None and preds[nxt] <= done and consts[nxt] <= here \
                and within_reads(placed, ops[nxt][0]) else None
            if mem is not None:
                done.add(mem)
                placed.append(ops[mem][0])
            post = take(fmt.n_post, fmt.post_allows, need, placed, here, lazy)
            if len(done) > before:
                break
        if len(done) == before:     # a guard: _check_ops and max_reads >= 3 make every chunk take an op
            raise CapacityError(f"the block format leaves no room for {ops[min(set(range(n)) - done)][0]}")
        if remat:
            members = [k for k in pre + post + [mem] if k is not None and k not in remat]
            used = set().union(*(consts[k] for k in members))
            pre, post = prune(pre, used), prune(post, used)
        chunks.append((slots(pre), ops[mem] if mem is not None else None, slots(post)))
    limit = fmt.read_limit(placed)
    if chunks and ((limit is not None and len(live_in_reads(placed, branch_reg)) > limit)
                   or fmt.lane_serial_rule(placed, branch_reg) is not None):
        chunks.append(([], None, []))
    return chunks or [([], None, [])]


def _writeback_tokens(ins: Instr) -> int:
    """The write-back tokens a lane's value of ins likely costs: one for a value known to lie in [-128, 128)
    (a compare, an AND with a small mask), else three (a wide write-back, WA WB W3)."""
    small = ins.op in COMPARES or (ins.op == "AND" and ins.bimm and 0 <= ins.imm < 128)
    return 1 if small else 3


def _chunk_cost(chunks: list[Chunk], live_out: set[int], branch_reg: int = ZERO) -> int:
    """Tokens per lane that running these chunks likely costs the GPU: one EXEC per chunk plus the
    write-back (_writeback_tokens) of each register a chunk writes that is read after it (a later chunk,
    the last chunk's BR on ``branch_reg``, or ``live_out`` of the block)."""
    cost, live = 0, set(live_out) | ({branch_reg} - {ZERO})
    for pre, mem, post in reversed(chunks):
        instrs = [x[0] for x in pre + [mem] + post if x is not None]
        last = {r: i for i in instrs for r in _rw(i)[1]}     # each register's last writer in the chunk
        cost += 1 + sum(_writeback_tokens(i) for r, i in last.items() if r in live)
        live = (live - set(last)) | live_in_reads(instrs)
    return cost


def _best_pack(ops: list[Slot], fmt: BlockFormat, branch_reg: int, remat: dict[int, set[int]],
               local: set[int], live_out: set[int]) -> list[Chunk]:
    """The cheapest (by _chunk_cost) of the schedules with and without the write-back rules of _pack;
    without any (the machine's format) just the plain one. The plain schedule always exists."""
    if not remat and not local:
        return _pack(ops, fmt, branch_reg)
    tries = []
    for args in ((remat, local, True), (remat, local, False), (remat, set()), ({}, set())):
        try:
            tries.append(_pack(ops, fmt, branch_reg, *args))
        except CapacityError:
            continue
    return min(tries, key=lambda c: _chunk_cost(c, live_out, branch_reg)) if tries else _pack(ops, fmt, branch_reg)


def _deferred_constants(ops: list[Slot], term: V, live_out: set[str]) -> tuple[dict[int, set[int]], set[int]]:
    """What _pack needs for a target with writeback_cost: (1) the constant definitions of a basic block
    that it may copy next to their readers: index -> the indices of the ops that read the value it
    defines; a definition whose value is still held at the end of the block (live out, or the BR
    register) stays an ordinary op; (2) the ops whose values do not leave the block (``local``).
    Values are followed by virtual register, also through moves that coalescing turned into `rX = rX`
    (dropped before packing)."""
    reaching: dict[str, int] = {}       # virtual register -> the op whose value it holds
    readers: dict[int, set[int]] = {}
    for k, (ins, v) in enumerate(ops):
        dropped = v.is_move and ins.rd == ins.ra
        for r in V.uses(v):
            if r in reaching and not dropped:
                readers[reaching[r]].add(k)
        src = reaching.get(v.a) if dropped else None
        for d in v.defs():
            reaching.pop(d, None)
        if src is not None:
            reaching[v.d] = src
        elif v.defs():
            reaching[v.d] = k
            readers[k] = set()
    held = {reaching[r] for r in set(live_out) | set(V.uses(term)) if r in reaching}
    remat = {i: js for i, js in readers.items() if i not in held and js and constant_def(ops[i][1])}
    live_end = {reaching[r] for r in live_out if r in reaching}
    return remat, {k for k in readers if k not in live_end}


def _slot_instrs(slots: list[Slot | None]) -> list[Instr]:
    return [Instr("NOP") if x is None else x[0] for x in slots]


def _branch_reg(term: V, colour: dict[str, int]) -> int:
    """The register a BR terminator tests (ZERO for other terminators)."""
    return colour[term.a] if term.op == "BR" and term.a != RZ else ZERO


def lower(module: PtxModule, kernel: Function, fmt: BlockFormat = MACHINE_FORMAT, redzone: int = 0) -> Lowered:
    """The machine program for ``kernel``; every block obeys ``fmt`` (default: the machine's own format).
    ``redzone``: memory_layout's gaps around the variables (--memcheck)."""
    lay = memory_layout(module, kernel, redzone)
    code = expand_missing_ops(Lowerer(module, kernel, lay).lower_kernel(), fmt)
    blocks = thread_jumps(build_blocks(code))
    if fmt.writeback_cost:
        rematerialise(blocks)
    optimize(blocks, params=fmt.writeback_cost)
    if fmt.writeback_cost:      # the copies left definitions unread: drop them and the blocks they emptied
        fold_derived_ivs(blocks)
        drop_known_constants(blocks, list(blocks))
        dead_code(blocks, list(blocks))
        blocks = thread_jumps(blocks)
        exit_directly(blocks)
    order = layout(blocks)
    colour = allocate(blocks, order, lay)
    if fmt.writeback_cost:
        recolour_zero_inits(blocks, order, colour)
        drop_known_constants(blocks, order, colour)
    live_out = liveness(blocks, order)[1]
    top = lay.frame_base(0)
    for n in order:
        for v in blocks[n].ops:
            if v.frame:
                v.imm = -lay.frame_bytes if v.frame[0] == "neg" else top + v.frame[1]
    if lay.frame_bytes:
        lay.entries.append(("local", f"per-thread frames of {lay.frame_bytes} bytes, thread t at "
                            f"{MEM_WORDS * 4:#x} - (t+1)*{lay.frame_bytes}", top, lay.frame_bytes))
    machine: list[Block] = []
    start: dict[str, int] = {}
    fixups: list[tuple[int, V]] = []
    params: list[tuple[int, int, int]] = []
    for pos, name in enumerate(order):
        bb = blocks[name]
        start[name] = len(machine)
        ops = [(_phys(v, colour), v) for v in bb.ops]
        remat, local = _deferred_constants(ops, bb.term, live_out[name]) if fmt.writeback_cost else ({}, set())
        keep = [k for k, (i, v) in enumerate(ops) if not (v.is_move and i.rd == i.ra)]
        index = {k: n for n, k in enumerate(keep)}
        remat = {index[i]: {index[j] for j in js} for i, js in remat.items()}
        local = {index[k] for k in local if k in index}
        ops = [ops[k] for k in keep]
        _check_ops(ops, fmt)
        chunks = _best_pack(ops, fmt, _branch_reg(bb.term, colour), remat, local,
                            {colour[x] for x in live_out[name]} - {ZERO})
        for k, (pre, mem, post) in enumerate(chunks):
            used = [x for x in pre + post + [mem] if x is not None]
            lines = sorted({v.line for _, v in used if v.line})
            blk = Block(_slot_instrs(pre), mem[0] if mem else None, _slot_instrs(post),
                        note=("PTX lines " + ",".join(map(str, lines))) if lines else "", lines=tuple(lines),
                        mem_line=mem[1].line if mem else 0)
            idx = len(machine)
            for slot, x in list(enumerate(pre)) + [(N_PRE + 1 + j, x) for j, x in enumerate(post)]:
                if x is not None and x[1].param is not None:
                    params.append((idx, slot, x[1].param, x[1].param_part))
            machine.append(blk)
            if k + 1 < len(chunks):
                blk.term = Term("JMP", taken=idx + 1)
        fixups.append((len(machine) - 1, bb.term))
        if bb.term.op == "BAR" and (pos + 1 >= len(order) or order[pos + 1] != bb.term.t):
            machine.append(Block(term=Term("JMP")))          # continuation of the barrier
            fixups.append((len(machine) - 1, V("JMP", t=bb.term.t)))
    for idx, t in fixups:
        machine[idx].term_line = t.line
        if t.op == "JMP":
            machine[idx].term = Term("JMP", taken=start[t.t])
        elif t.op == "BR":
            machine[idx].term = Term("BR", _branch_reg(t, colour), start[t.t], start[t.f])
        else:
            machine[idx].term = Term(t.op)
    program = Program(machine, params)
    annotate_liveness(program)
    check_program(program)
    check_block_format(program, fmt)
    partials = warp_partials(module, kernel)
    return Lowered(program, lay, warp_size_warnings(module, kernel), [partials] if partials else [])

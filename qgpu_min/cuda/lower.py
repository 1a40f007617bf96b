"""PTX kernel -> machine Program: memory layout, op expansion, CFG layout, register allocation, packing.

Pipeline: lower_ops (PTX -> virtual code, calls inlined) -> lower_cfg (basic blocks, jump threading,
reconvergence layout) -> lower_opt (constant propagation, branch inversion) -> lower_regalloc (15
registers) -> pack each basic block into machine blocks (isa.N_PRE ALU, one memory op, isa.N_POST ALU,
terminator), then live-in/out masks.

Kernel parameters are not in memory: each `ld.param` becomes `ADD rd, rz, imm` whose imm the launch
sets to the argument (an array's base address or a scalar), recorded in Program.param_slots.

Memory: .global/.const variables (with initial values) and .shared variables from address 0; each
thread's frame (its .local variables, then register spill slots) at the top of memory, thread t
(t = tid.lin) at MEM - (t + 1) * frame, addressed as tid.lin * -frame + (MEM - frame + offset).
The launch's arrays go between the two.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..machine.isa import (MEM_WORDS, N_POST, N_PRE, STORE_OPS, ZERO, Block, CapacityError, Instr, Program,
                           Term, annotate_liveness, check_program)
from .lower_cfg import build_blocks, layout, thread_jumps
from .lower_ir import RZ, MemoryLayout, V
from .lower_ops import Lowerer
from .lower_opt import optimize
from .lower_regalloc import allocate
from .lower_warn import warp_size_warnings
from .ptx import Function, PtxModule


@dataclass
class Lowered:
    program: Program
    layout: MemoryLayout
    warnings: list[str] = field(default_factory=list)   # code that runs but assumes 32-lane warps (lower_warn)


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def memory_layout(module: PtxModule, kernel: Function) -> MemoryLayout:
    lay = MemoryLayout({}, {})
    addr = 0
    decls = [d for d in module.globals if d.space in ("global", "const")] + \
            [d for d in module.globals + kernel.decls if d.space == "shared"]
    for d in decls:
        if d.count == 0:            # extern __shared__: placed by the launch, after the arrays
            lay.dynamic_shared.add(d.name)
            continue
        addr = _align(addr, max(d.align, 4))
        size = d.elem_bytes * d.count
        lay.symbols[d.name] = addr
        lay.entries.append((d.space, d.name, addr, size))
        for i, v in enumerate(d.init or []):
            for k in range(d.elem_bytes):
                lay.init[addr + i * d.elem_bytes + k] = (v >> (8 * k)) & 0xFF
        addr += size
    frame = 0
    for d in kernel.decls:
        if d.space == "local":
            frame = _align(frame, max(d.align, 4))
            lay.local_depot[d.name] = frame
            frame += d.elem_bytes * d.count
    lay.static_bytes = _align(addr, 4)
    lay.local_bytes = lay.frame_bytes = _align(frame, 4)
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


def _pack(ops: list[tuple[Instr, V]]) -> list[tuple[list, tuple | None, list]]:
    """Schedule a basic block's instructions into (pre, mem, post) chunks.

    List scheduling over register dependences (memory ops keep their order): each chunk first takes
    the ALU ops the next memory op needs, then other ready ALU ops (hoisting independent work above the
    memory op), then the memory op, then ready ALU ops into the post slots."""
    n = len(ops)
    rw = [_rw(i) for i, _ in ops]
    preds: list[set[int]] = []
    for j in range(n):
        rj, wj = rw[j]
        preds.append({i for i in range(j) if rw[i][1] & rj or rw[i][0] & wj or rw[i][1] & wj
                      or (ops[i][0].is_mem and ops[j][0].is_mem)})
    done: set[int] = set()
    chunks: list[tuple[list, tuple | None, list]] = []

    def ancestors(k: int) -> set[int]:
        out, stack = set(), list(preds[k])
        while stack:
            x = stack.pop()
            if x not in out:
                out.add(x)
                stack.extend(preds[x])
        return out

    def take(limit: int, need: set[int]) -> list[int]:
        picked: list[int] = []
        while len(picked) < limit:
            ready = [k for k in range(n) if k not in done and not ops[k][0].is_mem and preds[k] <= done]
            if not ready:
                break
            k = next((x for x in ready if x in need), ready[0])
            picked.append(k)
            done.add(k)
        return picked

    while len(done) < n:
        nxt = next((k for k in range(n) if k not in done and ops[k][0].is_mem), None)
        need = ancestors(nxt) - done if nxt is not None else set()
        pre = take(N_PRE, need)
        mem = nxt if nxt is not None and preds[nxt] <= done else None
        if mem is not None:
            done.add(mem)
        post = take(N_POST, need)
        chunks.append(([ops[k] for k in pre], ops[mem] if mem is not None else None, [ops[k] for k in post]))
    return chunks or [([], None, [])]


def lower(module: PtxModule, kernel: Function) -> Lowered:
    lay = memory_layout(module, kernel)
    code = Lowerer(module, kernel, lay).lower_kernel()
    blocks = thread_jumps(build_blocks(code))
    optimize(blocks)
    order = layout(blocks)
    colour = allocate(blocks, order, lay)
    top = MEM_WORDS * 4 - lay.frame_bytes
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
        ops = [(i, v) for i, v in ops if not (v.is_move and i.rd == i.ra)]
        chunks = _pack(ops)
        for k, (pre, mem, post) in enumerate(chunks):
            lines = sorted({v.line for _, v in pre + post + ([mem] if mem else []) if v.line})
            blk = Block([i for i, _ in pre], mem[0] if mem else None, [i for i, _ in post],
                        note=("PTX lines " + ",".join(map(str, lines))) if lines else "", lines=tuple(lines))
            idx = len(machine)
            for slot, (_, v) in list(enumerate(pre)) + [(N_PRE + 1 + j, x) for j, x in enumerate(post)]:
                if v.param is not None:
                    params.append((idx, slot, v.param, v.param_part))
            machine.append(blk)
            if k + 1 < len(chunks):
                blk.term = Term("JMP", taken=idx + 1)
        fixups.append((len(machine) - 1, bb.term))
        if bb.term.op == "BAR" and (pos + 1 >= len(order) or order[pos + 1] != bb.term.t):
            machine.append(Block(term=Term("JMP")))          # continuation of the barrier
            fixups.append((len(machine) - 1, V("JMP", t=bb.term.t)))
    for idx, t in fixups:
        if t.op == "JMP":
            machine[idx].term = Term("JMP", taken=start[t.t])
        elif t.op == "BR":
            machine[idx].term = Term("BR", colour[t.a] if t.a != RZ else ZERO, start[t.t], start[t.f])
        else:
            machine[idx].term = Term(t.op)
    program = Program(machine, params)
    annotate_liveness(program)
    check_program(program)
    return Lowered(program, lay, warp_size_warnings(module, kernel))

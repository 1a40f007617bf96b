"""Rematerialisation of per-thread constants, for targets that pay for every value a block leaves live.

On the GPU in the weights (`BlockFormat.writeback_cost`) each register a block writes and leaves live
costs one or three generated tokens per lane, while an extra op in a slot costs nothing. A value that is
the same everywhere in the thread's run, i.e. whose only definition is

- `ADD d, rz, imm`: a literal or a kernel parameter (which the launch binds into the immediate), or
- `S2R d, special`: tid, ntid, ctaid, nctaid, laneid, warpid (fixed for the thread),

is therefore recomputed in every other block that reads it, right before the first read there, instead
of being carried in a register from its definition. Constant propagation (lower_opt) then folds most
copies into immediates, and dead-code removal drops the definitions nobody reads any more, so the value
never has to be written back. A copy is only made where the definition's block dominates the reader, so
every read still sees the value the definition would have given it.
"""
from __future__ import annotations

from dataclasses import replace

from .lower_cfg import BB, dominators
from .lower_ir import RZ, V


def constant_def(v: V) -> bool:
    """Whether ``v`` gives its register a value that is the same wherever and whenever it runs."""
    if v.frame is not None or v.d == RZ:
        return False
    return v.op == "S2R" or (v.op == "ADD" and v.a == RZ and v.bimm)


def rematerialise(blocks: dict[str, BB]) -> int:
    """Give every block that reads a single-definition constant (module docstring) its own copy of the
    definition, placed before its first read; returns the number of copies made."""
    entry = next(iter(blocks))
    defs: dict[str, list[tuple[str, V]]] = {}
    for name, b in blocks.items():
        for v in b.ops:
            for d in v.defs():
                defs.setdefault(d, []).append((name, v))
    dom = dominators(blocks, entry)
    single = {r: d[0] for r, d in defs.items() if len(d) == 1}
    # register -> (its definition's block, the constant definition it copies); moves of a constant
    # (as `cvta` lowers to) are constants too, provided the copied definition dominates the move
    consts = {r: (b, v) for r, (b, v) in single.items() if constant_def(v)}
    grew = True
    while grew:
        grew = False
        for r, (b, v) in single.items():
            if r not in consts and v.is_move and v.a in consts and consts[v.a][0] in dom[b]:
                consts[r] = (b, consts[v.a][1])
                grew = True
    if not consts:
        return 0
    copies = 0
    for name, b in blocks.items():
        seq = b.ops + [b.term]
        rename: dict[str, str] = {}
        out: list[V] = []
        for v in seq:
            for r in V.uses(v):
                if r in consts and r not in rename and consts[r][0] != name and consts[r][0] in dom[name]:
                    fresh = f"{r}@{name}"
                    rename[r] = fresh
                    out.append(replace(consts[r][1], d=fresh))
                    copies += 1
            if rename:
                v.a, v.b, v.c = (rename.get(x, x) for x in (v.a, v.b, v.c))
            if v is not b.term:
                out.append(v)
        b.ops = out
    return copies


def _known_key(v: V) -> tuple | None:
    """What a constant definition puts in its register, as a comparable key (None: not a constant)."""
    if v.frame is not None:
        return None
    if v.op == "S2R":
        return ("special", v.imm)
    if v.op == "ADD" and v.a == RZ and v.bimm:
        return ("imm", v.imm & 0xFFFFFFFF) if v.param is None else ("param", v.param, v.param_part)
    return None


def drop_known_constants(blocks: dict[str, BB], order: list[str], colour: dict[str, int],
                         n_regs: int = 15) -> int:
    """Remove constant definitions whose physical register already holds that constant on every path
    (registers start at 0, as the machine defines), e.g. the `sum = 0` that clang writes before a loop
    and again on the path that skips it, once both got the same register. Returns how many went.

    A forward dataflow over the basic blocks: the known (register -> constant) pairs at a block's start
    are those every predecessor ends with; the entry also starts from all registers 0."""
    entry = order[0]
    preds = {n: [] for n in order}
    for n in order:
        for s in blocks[n].succs():
            preds[s].append(n)
    start_state = {r: ("imm", 0) for r in range(n_regs)}
    out: dict[str, dict[int, tuple] | None] = {n: None for n in order}     # None: not reached yet

    def state_in(n: str) -> dict[int, tuple]:
        states = [out[p] for p in preds[n] if out[p] is not None] + ([start_state] if n == entry else [])
        if not states:
            return {}
        common = dict(states[0])
        for st in states[1:]:
            common = {r: k for r, k in common.items() if st.get(r) == k}
        return common

    def walk(n: str, drop: bool) -> dict[int, tuple]:
        state = state_in(n)
        kept = []
        for v in blocks[n].ops:
            key = _known_key(v)
            regs = [colour[d] for d in v.defs()]
            if drop and key is not None and regs and state.get(regs[0]) == key:
                continue
            for r in regs:
                state.pop(r, None)
            if key is not None and regs:
                state[regs[0]] = key
            kept.append(v)
        if drop:
            blocks[n].ops = kept
        return state

    changed = True
    while changed:
        changed = False
        for n in order:
            new = walk(n, False)
            if new != out[n]:
                out[n], changed = new, True
    before = sum(len(blocks[n].ops) for n in order)
    for n in order:
        walk(n, True)
    return before - sum(len(blocks[n].ops) for n in order)

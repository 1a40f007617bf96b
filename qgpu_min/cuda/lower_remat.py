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

from ..machine.isa import ALU_OPS
from .lower_cfg import BB, dominators, natural_loops
from .lower_ir import RZ, V
from .lower_opt import COMMUTATIVE


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
    loops = natural_loops(blocks, dom)
    copies = 0
    for name, b in blocks.items():
        seq = b.ops + [b.term]
        # in a loop of one basic block (a division's steps, say) a copy that no immediate absorbs takes a
        # slot on every trip and may split the block in two, while the register costs one write-back before
        # the loop: there, copy only what folds (in longer loops the kept register's pressure cost more)
        kept = {r for r in consts if name in loops and loops[name] == {name} and consts[r][0] != name
                and not all(_folds(v, r) for v in seq if r in V.uses(v))}
        rename: dict[str, str] = {}
        out: list[V] = []
        for v in seq:
            for r in V.uses(v):
                if r in consts and r not in rename and r not in kept and consts[r][0] != name \
                        and consts[r][0] in dom[name]:
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


def _folds(v: V, r: str) -> bool:
    """Whether constant propagation (lower_opt) can turn this read of r into v's immediate."""
    if v.op not in ALU_OPS or v.op in ("S2R", "NOP") or v.bimm or v.c == r:
        return False
    return (v.b == r and v.a != r) or (v.a == r and v.b != r and v.op in COMMUTATIVE)


def _known_key(v: V) -> tuple | None:
    """What a constant definition puts in its register, as a comparable key (None: not a constant)."""
    if v.frame is not None:
        return None
    if v.op == "S2R":
        return ("special", v.imm)
    if v.op == "ADD" and v.a == RZ and v.bimm:
        return ("imm", v.imm & 0xFFFFFFFF) if v.param is None else ("param", v.param, v.param_part)
    return None


def drop_known_constants(blocks: dict[str, BB], order: list[str], colour: dict[str, int] | None = None,
                         n_regs: int = 15) -> int:
    """Remove constant definitions whose physical register already holds that constant on every path
    (registers start at 0, as the machine defines), e.g. the `sum = 0` that clang writes before a loop
    and again on the path that skips it, once both got the same register. Returns how many went.

    A forward dataflow over the basic blocks: the known (register -> constant) pairs at a block's start
    are those every predecessor ends with; the entry also starts from all registers 0. Without
    ``colour`` it runs on the virtual registers (nothing known at the entry), before allocation, so that
    the allocator sees one long-lived value instead of two that may get different registers."""
    entry = order[0]
    preds = {n: [] for n in order}
    for n in order:
        for s in blocks[n].succs():
            preds[s].append(n)
    start_state = {r: ("imm", 0) for r in range(n_regs)} if colour is not None else {}
    reg = (lambda d: colour[d]) if colour is not None else (lambda d: d)
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
            regs = [reg(d) for d in v.defs()]
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


def fold_derived_ivs(blocks: dict[str, BB]) -> int:
    """Undo strength reduction where it costs write-backs: a loop counter ``x`` that is always
    ``(b << k) [+ c]`` for another counter ``b`` (LLVM's `off = 4*i` or pointer `a + 4*i` beside `i`)
    is recomputed from ``b`` at each read, and its own update, which would be written back every trip,
    goes. Returns the number of counters removed.

    The shape recognised, with every register named having just the definitions listed:
    ``x = SHL b, k`` or ``x = ADD y, c`` with ``y = SHL b, k`` (c an immediate or a parameter) outside
    the loop, where it dominates the header (b's only other definition, outside
    the loop too, dominates it), and in ONE block U of the loop both ``b = b + s`` and ``x = x + t``,
    where ``t = s << k``: t and s are the same immediate shifted, or t's only definition is
    ``SHL t, s, k`` with s defined only outside the loop. Shifts and adds wrap alike, so
    ``(b << k) + (s << k) == (b + s) << k`` holds exactly, and x == (b << k) [+ c] at every block boundary of
    the loop; inside U a read of x must come before both updates or after both. Every read of x is in
    the loop (x is dead after it)."""
    entry = next(iter(blocks))
    dom = dominators(blocks, entry)
    folded = 0
    for h, body in natural_loops(blocks, dom).items():
        defs: dict[str, list[tuple[str, int, V]]] = {}
        uses: dict[str, list[tuple[str, V]]] = {}
        for name, b in blocks.items():
            for i, v in enumerate(b.ops):
                for d in v.defs():
                    defs.setdefault(d, []).append((name, i, v))
            for v in b.ops + [b.term]:
                for r in set(V.uses(v)):
                    uses.setdefault(r, []).append((name, v))
        for x, xdefs in list(defs.items()):
            match = _derived_iv(x, xdefs, defs, body, dom, h)
            if match is None:
                continue
            base, k, init, upd, ubase, offset = match
            ublock = upd[0]
            ops = blocks[ublock].ops
            lo, hi = sorted((_index(ops, upd[2]), _index(ops, ubase[2])))
            reads = [(n, v) for n, v in uses.get(x, []) if v is not upd[2]]
            if any(n not in body for n, _ in reads):
                continue
            # in U a read between the two updates would see one counter stepped and not the other (the
            # BR, after every op, sees both stepped)
            if any(n == ublock and v is not blocks[n].term and lo < _index(ops, v) < hi for n, v in reads):
                continue
            for j, (n, v) in enumerate(reads):
                b = blocks[n]
                t = f"{x}<<{j}@{n}"
                code = [V("SHL", t, base, imm=k, bimm=True, line=v.line)]
                if offset is not None:
                    code.append(replace(offset, d=t + "+", a=t, line=v.line))
                    t += "+"
                at = len(b.ops) if v is b.term else _index(b.ops, v)
                b.ops[at:at] = code
                v.a, v.b, v.c = (t if r == x else r for r in (v.a, v.b, v.c))
            del blocks[ublock].ops[_index(blocks[ublock].ops, upd[2])]
            del blocks[init[0]].ops[_index(blocks[init[0]].ops, init[2])]
            folded += 1
            return folded + fold_derived_ivs(blocks)     # positions moved: start again
    return folded


def _index(ops: list[V], v: V) -> int:
    """Position of op ``v`` itself in ``ops`` (V compares by value: two equal ops are different ops)."""
    return next(i for i, o in enumerate(ops) if o is v)


def _derived_iv(x: str, xdefs: list, defs: dict, body: set[str], dom: dict[str, set[str]], h: str):
    """(base, k, init def, update def, base's update def) if ``x`` is a counter derived as in
    fold_derived_ivs, else None. Definitions are (block, index, V)."""
    if len(xdefs) != 2:
        return None
    inside = [d for d in xdefs if d[0] in body]
    outside = [d for d in xdefs if d[0] not in body]
    if len(inside) != 1 or len(outside) != 1:
        return None
    init, upd = outside[0], inside[0]
    iv, uv = init[2], upd[2]
    offset, shl_at = None, init
    if iv.op == "ADD" and iv.bimm and iv.frame is None and iv.a not in (RZ, x) and init[0] in dom[h]:
        # x = (b << k) + c with c an immediate or a parameter (LLVM's pointer counter `a + 4*i`)
        ydefs = defs.get(iv.a, [])
        if len(ydefs) != 1 or ydefs[0][0] in body or ydefs[0][0] not in dom[init[0]]:
            return None
        offset, iv, shl_at = iv, ydefs[0][2], ydefs[0]
    if not (iv.op == "SHL" and iv.bimm and iv.param is None and iv.frame is None and iv.a != RZ
            and iv.a != x and init[0] in dom[h]):
        return None
    base, k = iv.a, iv.imm & 31
    if not (uv.op == "ADD" and uv.a == x and uv.param is None and uv.frame is None and (uv.bimm or uv.b != x)):
        return None
    bdefs = defs.get(base, [])
    binside = [d for d in bdefs if d[0] in body]
    boutside = [d for d in bdefs if d[0] not in body]
    if len(binside) != 1 or len(boutside) != 1 or binside[0][0] != upd[0]:
        return None
    bo, bu = boutside[0], binside[0]
    if not (bo[0] in dom[shl_at[0]] and (bo[0] != shl_at[0] or bo[1] < shl_at[1])):     # b << k of b's start
        return None
    bv = bu[2]
    if not (bv.op == "ADD" and bv.a == base and bv.param is None and bv.frame is None):
        return None
    if uv.bimm != bv.bimm:
        return None
    if uv.bimm:
        if (uv.imm & 0xFFFFFFFF) != ((bv.imm << k) & 0xFFFFFFFF):
            return None
    else:
        s, t = bv.b, uv.b
        tdefs, sdefs = defs.get(t, []), defs.get(s, [])
        if s == base or len(tdefs) != 1 or not sdefs or any(d[0] in body for d in sdefs + tdefs):
            return None
        tv = tdefs[0][2]
        if not (tv.op == "SHL" and tv.bimm and tv.param is None and tv.a == s and (tv.imm & 31) == k):
            return None
        if len(sdefs) != 1:
            return None
    return base, k, init, upd, bu, offset


def recolour_zero_inits(blocks: dict[str, BB], order: list[str], colour: dict[str, int],
                        n_regs: int = 15) -> int:
    """Move a value that the entry block first sets to 0 (`sum = 0`) into a register nothing else uses,
    so that it still holds its launch value 0 there and drop_known_constants removes the write (one
    write-back per lane). The value's move partners of the same register go with it, so coalesced moves
    stay `rX = rX`; they did not interfere with each other (they shared a register), and nothing else
    uses the new one. Returns the number of values moved."""
    entry = order[0]
    if any(entry in blocks[n].succs() for n in order):      # the entry is a loop header: not first
        return 0
    free = sorted(set(range(n_regs)) - set(colour.values()))
    moved = 0
    written: set[str] = set()
    for v in blocks[entry].ops:
        key = _known_key(v)
        d = v.defs()
        if free and key == ("imm", 0) and d and d[0] not in written:
            group = _move_group(d[0], blocks, colour)
            if not group & written:
                c = free.pop(0)
                for r in group:
                    colour[r] = c
                moved += 1
        written |= set(d)
    return moved


def _move_group(x: str, blocks: dict[str, BB], colour: dict[str, int]) -> set[str]:
    """x and the values joined to it by moves (transitively) that share its register."""
    edges: dict[str, set[str]] = {}
    for b in blocks.values():
        for v in b.ops:
            if v.is_move and v.a != RZ and colour.get(v.a) == colour.get(v.d):
                edges.setdefault(v.a, set()).add(v.d)
                edges.setdefault(v.d, set()).add(v.a)
    group, stack = set(), [x]
    while stack:
        r = stack.pop()
        if r not in group:
            group.add(r)
            stack.extend(edges.get(r, ()))
    return group

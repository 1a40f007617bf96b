"""Register allocation: liveness over the basic blocks, interference graph, colouring into 15 registers.

Dead ALU operations are dropped first. Moves are coalesced by preference (a value takes its move
partner's colour when it is free) and moves that become `rX = rX` are dropped later. A value that gets
no register is spilled: it lives in a slot of the thread's frame (see lower.py), loaded before
each use and stored after each definition; each such access is a memory op, so it costs a block.
"""
from __future__ import annotations

from ..machine.isa import ALU_OPS, MEM_WORDS, SHFL_OPS, SPECIAL, VOTE_OPS, CapacityError
from .lower_cfg import BB
from .lower_ir import RZ, LoweringError, V
from .lower_ir import MemoryLayout

N_COLOURS = 15


def liveness(blocks: dict[str, BB], order: list[str]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    use, defs = {}, {}
    for n in order:
        u, d = set(), set()
        for v in blocks[n].ops + [blocks[n].term]:
            u |= {r for r in V.uses(v) if r not in d}
            d |= set(v.defs())
        use[n], defs[n] = u, d
    live_in = {n: set() for n in order}
    live_out = {n: set() for n in order}
    changed = True
    while changed:
        changed = False
        for n in reversed(order):
            out = set().union(*(live_in[s] for s in blocks[n].succs())) if blocks[n].succs() else set()
            inn = use[n] | (out - defs[n])
            if out != live_out[n] or inn != live_in[n]:
                live_out[n], live_in[n], changed = out, inn, True
    return live_in, live_out


def dead_code(blocks: dict[str, BB], order: list[str]) -> None:
    """Drop ALU operations whose result is never read."""
    changed = True
    while changed:
        changed = False
        _, live_out = liveness(blocks, order)
        for n in order:
            b = blocks[n]
            live = set(live_out[n]) | set(V.uses(b.term))
            kept = []
            for v in reversed(b.ops):
                if v.op in ALU_OPS and v.d not in live:
                    changed = True
                    continue
                live -= set(v.defs())
                live |= set(V.uses(v))
                kept.append(v)
            b.ops = kept[::-1]


def _colour(blocks: dict[str, BB], order: list[str]) -> tuple[dict[str, int], list[str]]:
    """Try to colour; returns the colouring and the values that got no register."""
    live_in, live_out = liveness(blocks, order)
    adj: dict[str, set[str]] = {}
    partners: dict[str, list[str]] = {}
    count: dict[str, int] = {}

    def node(r: str) -> set[str]:
        return adj.setdefault(r, set())

    for n in order:
        live = set(live_out[n])
        for r in live:
            node(r)
        for v in reversed(blocks[n].ops + [blocks[n].term]):
            # a shuffle's or vote's result never takes the register it reads from the other lanes: a target
            # that runs a warp's lanes one after another reads it while the first lanes' results are written
            cross = v.a if v.op in SHFL_OPS else v.b if v.op in VOTE_OPS and not v.bimm else RZ
            clash = live | ({cross} - {RZ})
            for d in v.defs():
                node(d)
                count[d] = count.get(d, 0) + 1
                for l in clash:
                    if l != d and not (v.is_move and l == v.a):
                        adj[d].add(l)
                        node(l).add(d)
                live.discard(d)
            if v.is_move and v.a != RZ:
                partners.setdefault(v.d, []).append(v.a)
                partners.setdefault(v.a, []).append(v.d)
            for u in V.uses(v):
                node(u)
                count[u] = count.get(u, 0) + 1
                live.add(u)
    entry_live = sorted(live_in[order[0]])
    for i, a in enumerate(entry_live):          # values read before any write (undefined): keep apart
        for b in entry_live[i + 1:]:
            adj[a].add(b)
            adj[b].add(a)
    # simplify / select (Chaitin-Briggs, optimistic); spill candidates: many neighbours, few occurrences
    degree = {r: len(a) for r, a in adj.items()}
    removed: set[str] = set()
    stack: list[str] = []
    pending = set(adj)

    def spill_cost(x: str) -> tuple:
        return (x.startswith("$s"), count.get(x, 0) / (degree[x] + 1), x)

    while pending:
        low = [r for r in pending if degree[r] < N_COLOURS]
        r = min(low, key=lambda x: (degree[x], x)) if low else min(pending, key=spill_cost)
        pending.discard(r)
        removed.add(r)
        stack.append(r)
        for x in adj[r]:
            if x not in removed:
                degree[x] -= 1
    colour: dict[str, int] = {RZ: 15}
    failed = []
    for r in reversed(stack):
        taken = {colour[x] for x in adj[r] if x in colour}
        pref = [colour[p] for p in partners.get(r, []) if p in colour and colour[p] not in taken and colour[p] < 15]
        free = [c for c in range(N_COLOURS) if c not in taken]
        if not free:
            failed.append(r)
            continue
        colour[r] = pref[0] if pref else free[0]
    return colour, failed


def _spill(name: str, blocks: dict[str, BB], order: list[str], offset: int) -> None:
    """Keep `name` in its memory slot: load it before every use, store it after every definition."""
    n = 0

    def fresh() -> str:
        nonlocal n
        n += 1
        return f"$s{n}{name}"

    def addr(line: int) -> tuple[list[V], str]:
        a = fresh()
        return [V("S2R", a, imm=SPECIAL["tid.lin"], bimm=True, line=line),
                V("MUL", a, a, bimm=True, frame=("neg",), line=line)], a

    for bname in order:
        b = blocks[bname]
        ops: list[V] = []
        for v in b.ops + [b.term]:
            if name in V.uses(v):
                code, a = addr(v.line)
                t = fresh()
                ops += code + [V("LD", t, a, frame=("top", offset), line=v.line)]
                v.a, v.b, v.c = (t if r == name else r for r in (v.a, v.b, v.c))
            if v is b.term:
                break
            if name in v.defs():
                t = fresh()
                v.d = t
                code, a = addr(v.line)
                ops += [v] + code + [V("ST", RZ, a, t, frame=("top", offset), line=v.line)]
            else:
                ops.append(v)
        b.ops = ops


def allocate(blocks: dict[str, BB], order: list[str], layout: MemoryLayout) -> dict[str, int]:
    """Virtual register -> physical register 0..14 (RZ -> 15), spilling to per-thread memory slots."""
    dead_code(blocks, order)
    for _ in range(64):
        colour, failed = _colour(blocks, order)
        if not failed:
            return colour
        for name in failed:
            if name.startswith("$s"):
                break
            offset = layout.frame_bytes
            layout.frame_bytes += 4
            need = (layout.static_bytes + layout.frame_bytes) // 4
            if need > MEM_WORDS:
                raise CapacityError(f"register spill slots need {need} words of memory; the machine has "
                                    f"{MEM_WORDS} (over by {need - MEM_WORDS})")
            _spill(name, blocks, order, offset)
        else:
            continue
        break
    raise LoweringError(f"register allocation failed: more than {N_COLOURS} values are live together even after "
                        f"spilling")

"""Register allocation: liveness over the basic blocks, interference graph, colouring into 15 registers.

Moves are coalesced by preference (a value takes its move partner's colour when it is free) and the
moves that become `rX = rX` are dropped later. No spilling: a kernel that needs more than 15 values
live at once gets an error naming where.
"""
from __future__ import annotations

from .lower_cfg import BB
from .lower_ir import RZ, LoweringError, V

N_COLOURS = 15


def _uses(v: V) -> list[str]:
    return v.uses()


def liveness(blocks: dict[str, BB], order: list[str]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    use, defs = {}, {}
    for n in order:
        u, d = set(), set()
        for v in blocks[n].ops + [blocks[n].term]:
            u |= {r for r in _uses(v) if r not in d}
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


def allocate(blocks: dict[str, BB], order: list[str]) -> dict[str, int]:
    """Virtual register -> physical register 0..14 (RZ -> 15)."""
    live_in, live_out = liveness(blocks, order)
    adj: dict[str, set[str]] = {}
    partners: dict[str, list[str]] = {}
    worst = (0, 0)

    def node(r: str) -> set[str]:
        return adj.setdefault(r, set())

    for n in order:
        live = set(live_out[n])
        for r in live:
            node(r)
        for v in reversed(blocks[n].ops + [blocks[n].term]):
            for d in v.defs():
                node(d)
                for l in live:
                    if l != d and not (v.is_move and l == v.a):
                        adj[d].add(l)
                        node(l).add(d)
                live.discard(d)
            if v.is_move and v.a != RZ:
                partners.setdefault(v.d, []).append(v.a)
                partners.setdefault(v.a, []).append(v.d)
            for u in _uses(v):
                node(u)
                live.add(u)
            if len(live) > worst[0]:
                worst = (len(live), v.line)
    entry_live = sorted(live_in[order[0]])
    for i, a in enumerate(entry_live):          # values read before any write (undefined): keep apart
        for b in entry_live[i + 1:]:
            adj[a].add(b)
            adj[b].add(a)
    if worst[0] > N_COLOURS:
        raise LoweringError(f"the kernel needs {worst[0]} registers live at once (near PTX line {worst[1]}); "
                            f"the machine has {N_COLOURS} per lane (over by {worst[0] - N_COLOURS}) and the "
                            f"lowering does not spill yet")
    # simplify / select (Chaitin-Briggs, optimistic)
    degree = {r: len(a) for r, a in adj.items()}
    removed: set[str] = set()
    stack: list[str] = []
    pending = set(adj)
    while pending:
        low = [r for r in pending if degree[r] < N_COLOURS]
        r = min(low, key=lambda x: (degree[x], x)) if low else max(pending, key=lambda x: (degree[x], x))
        pending.discard(r)
        removed.add(r)
        stack.append(r)
        for x in adj[r]:
            if x not in removed:
                degree[x] -= 1
    colour: dict[str, int] = {RZ: 15}
    for r in reversed(stack):
        taken = {colour[x] for x in adj[r] if x in colour}
        pref = [colour[p] for p in partners.get(r, []) if p in colour and colour[p] not in taken and colour[p] < 15]
        free = [c for c in range(N_COLOURS) if c not in taken]
        if not free:
            raise LoweringError(f"register allocation failed: {r.split('@')[0]} cannot get one of the "
                                f"{N_COLOURS} registers (too many values live together); the lowering does "
                                f"not spill yet")
        colour[r] = pref[0] if pref else free[0]
    return colour

"""Basic blocks of the virtual code and their layout order for lowest-PC-first reconvergence.

Layout rule: collapse every natural loop into one node, lay out the resulting acyclic graph in a
topological (reverse post-) order, and expand each loop in place the same way, header first. Then
every block between a branch and its immediate post-dominator comes before it, and a loop's blocks are
contiguous, so lanes that leave a loop early wait (at a higher PC) until the others leave too, and
lanes of both arms of an `if` meet again at the join.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .lower_ir import LoweringError, V


@dataclass
class BB:
    name: str
    ops: list[V] = field(default_factory=list)
    term: V | None = None

    def succs(self) -> list[str]:
        t = self.term
        if t.op == "JMP":
            return [t.t]
        if t.op == "BR":
            return [t.t] if t.t == t.f else [t.t, t.f]
        if t.op == "BAR":
            return [t.t]
        return []


def build_blocks(code: list[V]) -> dict[str, BB]:
    """Split into basic blocks (dict in code order, first = entry); fall-through becomes an explicit JMP,
    a BAR's t names its continuation."""
    blocks: dict[str, BB] = {}
    cur: BB | None = None
    n = 0

    def start(name: str) -> BB:
        b = BB(name)
        if name in blocks:
            raise LoweringError(f"label {name} defined twice")
        blocks[name] = b
        return b

    for v in code:
        if v.op == "LABEL":
            if cur is not None and cur.term is None:
                cur.term = V("JMP", t=v.t, line=v.line)
            elif cur is not None and cur.term.op == "BAR" and not cur.term.t:    # a barrier right before a label
                cur.term.t = v.t
            cur = start(v.t)
            continue
        if cur is None or cur.term is not None:
            n += 1
            nxt = f"$bb{n}"
            if cur is not None and cur.term.op == "BAR" and not cur.term.t:
                cur.term.t = nxt
            cur = start(nxt)
        if v.op in ("JMP", "BR", "EXIT", "BAR"):
            cur.term = V(v.op, a=v.a, t=v.t, f=v.f, line=v.line)
        else:
            cur.ops.append(v)
    if cur is not None and cur.term is None:
        cur.term = V("EXIT", line=cur.ops[-1].line if cur.ops else 0)
    for b in list(blocks.values()):
        if b.term.op == "BAR" and not b.term.t:
            n += 1
            tail = BB(f"$bb{n}", [], V("EXIT", line=b.term.line))
            blocks[tail.name] = tail
            b.term.t = tail.name
        for s in b.succs():
            if s not in blocks:
                raise LoweringError(f"branch to unknown label {s} (PTX line {b.term.line})")
    return blocks


def thread_jumps(blocks: dict[str, BB]) -> dict[str, BB]:
    """Skip empty blocks that only jump on, drop unreachable blocks, merge straight-line chains."""
    entry = next(iter(blocks))

    def final(name: str, seen=()) -> str:
        b = blocks[name]
        if name != entry and not b.ops and b.term.op == "JMP" and b.term.t not in seen and b.term.t != name:
            return final(b.term.t, seen + (name,))
        return name

    for b in blocks.values():
        b.term.t = final(b.term.t) if b.term.t else b.term.t
        b.term.f = final(b.term.f) if b.term.f else b.term.f
        if b.term.op == "BR" and b.term.t == b.term.f:
            b.term = V("JMP", t=b.term.t, line=b.term.line)
    reach = reachable(blocks, entry)
    blocks = {k: b for k, b in blocks.items() if k in reach}
    # merge a block into its only predecessor when that predecessor just jumps to it
    npred: dict[str, int] = {k: 0 for k in blocks}
    for b in blocks.values():
        for s in b.succs():
            npred[s] += 1
    for name in list(blocks):
        b = blocks.get(name)
        while b is not None and b.term.op == "JMP" and b.term.t != entry and b.term.t != name \
                and npred[b.term.t] == 1:
            nxt = blocks.pop(b.term.t)
            b.ops += nxt.ops
            b.term = nxt.term
    return blocks


def exit_directly(blocks: dict[str, BB]) -> int:
    """A JMP to a block that only exits becomes that EXIT: on a target that pays per block executed (the
    GPU's EXEC token per lane), the lanes leave one block earlier. Lanes that exit wait for nothing, so
    reconvergence is unchanged. Returns the number of jumps replaced (unreachable blocks are dropped)."""
    n = 0
    for b in blocks.values():
        t = blocks.get(b.term.t) if b.term.op == "JMP" else None
        if t is not None and t is not b and not t.ops and t.term.op == "EXIT":
            b.term = V("EXIT", line=b.term.line)
            n += 1
    if n:
        entry = next(iter(blocks))
        reach = reachable(blocks, entry)
        for k in [k for k in blocks if k not in reach]:
            del blocks[k]
    return n


def _dominators(blocks: dict[str, BB], entry: str, preds: dict[str, list[str]]) -> dict[str, set[str]]:
    names = list(blocks)
    dom = {n: set(names) for n in names}
    dom[entry] = {entry}
    changed = True
    while changed:
        changed = False
        for n in names:
            if n == entry:
                continue
            ps = [dom[p] for p in preds[n]]
            new = set.intersection(*ps) | {n} if ps else {n}
            if new != dom[n]:
                dom[n], changed = new, True
    return dom


def predecessors(blocks: dict[str, BB]) -> dict[str, list[str]]:
    preds: dict[str, list[str]] = {n: [] for n in blocks}
    for n, b in blocks.items():
        for s in b.succs():
            preds[s].append(n)
    return preds


def dominators(blocks: dict[str, BB], entry: str) -> dict[str, set[str]]:
    """Block -> the blocks that dominate it (itself included)."""
    return _dominators(blocks, entry, predecessors(blocks))


def natural_loops(blocks: dict[str, BB], dom: dict[str, set[str]],
                  preds: dict[str, list[str]] | None = None) -> dict[str, set[str]]:
    """Natural loops: header -> the blocks of its loop (all back edges to it together)."""
    preds = predecessors(blocks) if preds is None else preds
    loops: dict[str, set[str]] = {}
    for n, b in blocks.items():
        for s in b.succs():
            if s in dom[n]:                     # back edge n -> s
                body = loops.setdefault(s, {s})
                stack = [n]
                while stack:
                    x = stack.pop()
                    if x not in body:
                        body.add(x)
                        stack.extend(preds[x])
    return loops


def reachable(blocks: dict[str, BB], entry: str) -> set[str]:
    """The blocks reachable from entry."""
    reach, stack = set(), [entry]
    while stack:
        x = stack.pop()
        if x not in reach:
            reach.add(x)
            stack.extend(blocks[x].succs())
    return reach


def layout(blocks: dict[str, BB]) -> list[str]:
    """Block order: loops contiguous (header first), acyclic parts topologically sorted."""
    entry = next(iter(blocks))
    preds = predecessors(blocks)
    loops = natural_loops(blocks, _dominators(blocks, entry, preds), preds)

    def order(nodes: set[str], head: str) -> list[str]:
        inner = {h: body for h, body in loops.items() if h != head and h in nodes}
        # the outermost loops inside this region, each collapsed to its header
        top = {h: body for h, body in inner.items()
               if not any(h in other and h != oh and len(other) > len(body) for oh, other in inner.items())}
        rep = {x: h for h, body in top.items() for x in body}
        item = lambda x: rep.get(x, x)
        seen: set[str] = set()
        post: list[str] = []

        def visit(x: str, path: set[str]) -> None:
            seen.add(x)
            path.add(x)
            members = top.get(x, {x})
            for m in sorted(members, key=list(blocks).index):
                for s in reversed(blocks[m].succs()):
                    if s not in nodes or s == head:
                        continue
                    si = item(s)
                    if si == x:
                        continue
                    if si in path:
                        raise LoweringError("irreducible control flow is not supported")
                    if si not in seen:
                        visit(si, path)
            path.discard(x)
            post.append(x)

        visit(item(head), set())
        out = []
        for x in reversed(post):
            out.extend(order(top[x], x) if x in top else [x])
        return out

    return order(set(blocks), entry)

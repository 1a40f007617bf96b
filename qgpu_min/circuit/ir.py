"""Circuit IR: one-hot feature groups, ReLU gates over their indicators, DeltaNet memories.

Every feature is a *group* with exactly one active element (value 1 in the residual stream). A dual-rail
bit is a group of size 2 (element 1 active means the bit is 1); a 32-bit word is 32 bit groups, LSB first.
A *view* re-labels a group's elements without any weights (bit NOT swaps the rails; constants are views
of the always-active constant group), so renaming costs nothing.

A gate writes one new group. Its units compute relu(sum of weighted indicators - theta): an integer
ReLU network, which the compiled SwiGLU units reproduce exactly (silu(K n)/K = max(n, 0) for integers n
and gain K >= 32). The output starts at the gate's default element (written by the layer's constant
unit); each unit moves mass between output elements. A gate is valid only if the result is one-hot for
every input: the simulator checks that on every case it runs.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from qgpu_min.errors import QgpuError


class CircuitError(QgpuError, ValueError):
    """A circuit is malformed (bad group sizes, a gate that is not one-hot, a memory over its limits)."""


@dataclass(eq=False)
class Group:
    """A one-hot feature group, or a view of one: element e of the view is element perm[e] of `base`
    (None: an element that is never active; a tuple: active when any of those elements is, which makes
    linear decodes free, e.g. a one-hot value's bits or 'kind is one of these')."""

    name: str
    size: int
    base: "Group | None" = None
    perm: tuple[int | tuple[int, ...] | None, ...] | None = None

    @property
    def root(self) -> "Group":
        return self if self.base is None else self.base

    def phys(self, elem: int) -> int | None:
        """The physical element of the root group that element `elem` of this view stands for (views whose
        element stands for several use phys_set)."""
        ps = self.phys_set(elem)
        if len(ps) > 1:
            raise CircuitError(f"group {self.name}: element {elem} stands for several elements of {self.root.name}")
        return ps[0] if ps else None

    def phys_set(self, elem: int) -> tuple[int, ...]:
        """The physical elements of the root group that make element `elem` of this view active."""
        if not 0 <= elem < self.size:
            raise CircuitError(f"group {self.name}: element {elem} out of range 0..{self.size - 1}")
        if self.base is None:
            return (elem,)
        p = self.perm[elem]
        return () if p is None else (p,) if isinstance(p, int) else p

    def __repr__(self) -> str:
        return f"Group({self.name}, {self.size})"


Word = list  # list[Group] of 32 bit groups, LSB first


@dataclass(eq=False)
class Product:
    """A memory address that is the AND of several one-hot groups: row = mixed-radix number of the parts'
    values (part 0 most significant). Element v < radix[i] of part i is a value; element every[i] (if
    set) stands for every value of that part (a write of several rows at once, e.g. to initialise); any
    other element matches no row (a zero key or query: no write, no read). Compiled, each row's key or
    query channel is silu(A * (matches - parts + 1/2)), exactly 0 unless every part matches, so no group
    ever holds the product one-hot."""

    parts: tuple[Group, ...]
    radix: tuple[int, ...]
    every: tuple[int | None, ...] = ()

    def __post_init__(self) -> None:
        if not self.every:
            self.every = (None,) * len(self.parts)
        if not (len(self.parts) == len(self.radix) == len(self.every)) or any(
                r < 1 or r > g.size for g, r in zip(self.parts, self.radix)):
            raise CircuitError(f"product address: parts {[g.name for g in self.parts]} / radix {self.radix} / "
                               f"every {self.every} do not fit")

    @property
    def size(self) -> int:
        n = 1
        for r in self.radix:
            n *= r
        return n

    @property
    def name(self) -> str:
        return "x".join(g.name for g in self.parts)

    def digits(self, row: int) -> list[int]:
        """The parts' values of a row."""
        out = []
        for r in reversed(self.radix):
            out.append(row % r)
            row //= r
        return out[::-1]


Address = "Group | Product"

# A term: (group or view, element, integer weight). A unit: relu(sum w*[g == e] - theta).


@dataclass(frozen=True)
class Unit:
    terms: tuple[tuple[Group, int, int], ...]
    theta: int
    out: tuple[tuple[int, int], ...]  # (output element, coefficient)


def weights_by_element(u: Unit) -> tuple[int, dict[int, tuple[int, dict[int, int]]]]:
    """A unit's weights summed per physical element, so its range over all inputs can be read off: the
    constant part (the always-active group), and per input root group (keyed by id) its size and
    {element: summed weight}. Views and repeated terms land on the same element; elements a view leaves
    out (phys None) are never active and carry no weight."""
    const, groups = 0, {}
    for g, e, w in u.terms:
        for phys in g.phys_set(e):
            if g.root is CONST:
                const += w
                continue
            _, ws = groups.setdefault(id(g.root), (g.root.size, {}))
            ws[phys] = ws.get(phys, 0) + w
    return const, groups


@dataclass(eq=False)
class Gate:
    out: Group
    default: int
    units: list[Unit]

    @property
    def inputs(self) -> list[Group]:
        return _distinct_roots(g for u in self.units for g, _, _ in u.terms)


@dataclass(eq=False)
class Memory:
    """A DeltaNet memory: `rows` addressable rows (<= MAX_ROWS), each holding one value per field group.

    Stored rows are constant-RMS codes: every field is one-hot, padded with always-on filler channels to
    exactly ROW_ACTIVE active channels (the per-head output norm then maps each active channel to 1).
    A head holds ROW_CHANNELS rows; the compiler splits more rows into banks (compile.banks).
    """

    name: str
    rows: int
    fields: tuple[int, ...]  # group sizes of a row


@dataclass(eq=False)
class MemOp:
    """One access per token: an optional write and any number of read ports (address groups of size rows),
    each a copy of the memory in its own head. Reads see this token's own write.

    The write address group has size rows+1 (element rows = no write) or rows+2 (element rows+1 = write
    every row at once: a key spread evenly over all rows stores the value, scaled, in each; reads undo the
    scale because the head's output norm is scale-free). Initialise a memory that way before reading rows
    that were never written: an empty row reads as no active element at all.

    value_taps[i] = d: write field i takes the value its group had d tokens earlier (the DeltaNet short conv
    reads it back), so a row can be assembled over up to MAX_TAP + 1 tokens; the key is always this token's.
    The d previous tokens must be circuit tokens of the same sequence."""

    mem: Memory
    write_addr: Group | None
    write_value: list[Group]
    read_addrs: list[Group]
    outputs: list[list[Group]] = field(default_factory=list)
    value_taps: tuple[int, ...] = ()
    # more sources for some fields: (field, group, tap); a field with several sources has one channel
    # block per source, and on every write exactly one of them is present (not its 'absent' element)
    alternatives: tuple[tuple[int, "Group", int], ...] = ()
    # a bit (size-2 group): on tokens where it is 1 the memory is emptied before this token's write
    # (compiled as the heads' decay: exp(g) = 0 there, exactly 1 elsewhere)
    reset: "Group | None" = None

    def __post_init__(self) -> None:
        if not self.value_taps:
            self.value_taps = (0,) * len(self.write_value)

    def field_sources(self, i: int) -> list[tuple["Group", int]]:
        """(group, tap) sources of write field i, the main one first."""
        return [(self.write_value[i], self.value_taps[i])] + [(g, d) for j, g, d in self.alternatives if j == i]

    def all_sources(self) -> list[tuple["Group", int]]:
        return [src for i in range(len(self.write_value)) for src in self.field_sources(i)]

    @property
    def writes_all_rows(self) -> bool:
        """Whether the write address has the all-rows element (size rows+2)."""
        return isinstance(self.write_addr, Group) and self.write_addr.size == self.mem.rows + 2

    @property
    def inputs(self) -> list[Group]:
        addrs = ([self.write_addr] if self.write_addr is not None else []) + list(self.read_addrs)
        groups = [g for a in addrs for g in (a.parts if isinstance(a, Product) else (a,))]
        return _distinct_roots(groups + [g for g, _ in self.all_sources()] + ([self.reset] if self.reset else []))


def _distinct_roots(groups: Iterable[Group]) -> list[Group]:
    """The root groups the given groups or views read, each once, in first-use order (the constant group,
    which every token holds, is no input)."""
    roots: dict[int, Group] = {}
    for g in groups:
        if g.root is not CONST:
            roots.setdefault(id(g.root), g.root)
    return list(roots.values())


CONST = Group("const", 1)
ROW_CHANNELS = 128
ROW_ACTIVE = 32
MAX_ROWS = 2048  # rows beyond one head's ROW_CHANNELS are banked over several heads by the compiler
MAX_TAP = 3      # the conv1d has 4 taps: a write field reaches back at most 3 tokens


def const_bit(value: int) -> Group:
    """A bit that is always `value`: a view of the constant group."""
    return Group(f"bit{value}", 2, CONST, (None, 0) if value else (0, None))


def const_word(value: int) -> Word:
    return [const_bit((value >> i) & 1) for i in range(32)]


def view(g: Group, perm: tuple, name: str | None = None) -> Group:
    """A relabelled group: element e of the result is element perm[e] of g (None: never active; a tuple of
    elements of g: active when any of them is; they must be distinct elements of the root)."""
    out = []
    for p in perm:
        ps = () if p is None else (p,) if isinstance(p, int) else tuple(p)
        phys = tuple(x for q in ps for x in g.phys_set(q))
        if len(set(phys)) != len(phys):
            raise CircuitError(f"view of {g.name}: an element stands for the same element twice")
        out.append(None if not phys else phys[0] if len(phys) == 1 else phys)
    used = [x for p in out if p is not None for x in ((p,) if isinstance(p, int) else p)]
    if len(set(used)) != len(used):
        raise CircuitError(f"view of {g.name}: two elements stand for the same element (the view would not be one-hot)")
    return Group(name or f"{g.name}'", len(perm), g.root, tuple(out))


def decode_view(g: Group, size: int, value_of, name: str | None = None) -> Group:
    """A view of size `size` whose element v is active when g's element e has value_of(e) == v (None: no
    value). One-hot -> any function of it, e.g. a bit of the index, for free."""
    sets: list[list[int]] = [[] for _ in range(size)]
    for e in range(g.size):
        v = value_of(e)
        if v is not None:
            sets[v].append(e)
    return view(g, tuple(tuple(s) if s else None for s in sets), name)


def onehot_bits(g: Group, bits: int, name: str | None = None) -> Word:
    """The binary digits of a one-hot group's element index, LSB first (views: free)."""
    return [decode_view(g, 2, lambda e, i=i: (e >> i) & 1, f"{name or g.name}.b{i}") for i in range(bits)]


def bit_not(b: Group) -> Group:
    if b.size != 2:
        raise CircuitError(f"bit_not needs a bit (size 2), got {b}")
    return view(b, (1, 0), f"~{b.name}")


class Circuit:
    """A circuit under construction: input fields, gates and memory ops in dependency order, outputs."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.inputs: list[Group] = []
        self.ops: list[Gate | MemOp] = []
        self.outputs: list[Group] = []
        self.memories: list[Memory] = []

    def input(self, name: str, size: int) -> Group:
        g = Group(name, size)
        self.inputs.append(g)
        return g

    def input_word(self, name: str, bits: int = 32) -> Word:
        return [self.input(f"{name}[{i}]", 2) for i in range(bits)]

    def gate(self, name: str, size: int, default: int, units: list[Unit]) -> Group:
        if not 0 <= default < size:
            raise CircuitError(f"gate {name}: default element {default} out of range")
        out = Group(name, size)
        for u in units:
            for g, e, _ in u.terms:
                g.phys_set(e)  # range check
            for e, _ in u.out:
                if not 0 <= e < size:
                    raise CircuitError(f"gate {name}: unit writes element {e} of a group of size {size}")
        self.ops.append(Gate(out, default, list(units)))
        return out

    def memory(self, name: str, rows: int, fields: tuple[int, ...]) -> Memory:
        channels = sum(fields)
        active = len(fields)
        if not 1 <= rows <= MAX_ROWS:
            raise CircuitError(f"memory {name}: {rows} rows, a memory holds 1..{MAX_ROWS} (banked, "
                               f"{ROW_CHANNELS} rows per head)")
        if active > ROW_ACTIVE or channels + (ROW_ACTIVE - active) > ROW_CHANNELS:
            raise CircuitError(f"memory {name}: a row of {active} fields / {channels} channels does not fit a "
                               f"{ROW_CHANNELS}-channel head with {ROW_ACTIVE} active channels")
        m = Memory(name, rows, tuple(fields))
        self.memories.append(m)
        return m

    def access(self, mem: Memory, write_addr: Group | None, write_value: list[Group],
               read_addrs: list[Group], value_taps: list[int] | None = None,
               alternatives: list[tuple[int, Group, int]] = (), reset: Group | None = None) -> list[list[Group]]:
        """Schedule one access of `mem` (each memory is accessed by exactly one op per token).

        value_taps: per write field, how many tokens back (0..MAX_TAP) its value is taken from (default 0).
        alternatives: more (field, group, tap) sources of a field, e.g. one path for values assembled from
        earlier tokens and one for values computed now; each source of such a field has the field's size
        plus one 'absent' element, and exactly one source is present on every write.
        reset: a bit that empties the memory, before the write, on the tokens where it is 1 (then an
        all-rows write initialises it again: such a write needs its rows empty, or all still holding one
        earlier all-rows write)."""
        if any(op.mem is mem for op in self.ops if isinstance(op, MemOp)):
            raise CircuitError(f"memory {mem.name} is accessed twice; give each memory one access op")
        taps = tuple(int(d) for d in value_taps) if value_taps is not None else (0,) * len(write_value)
        if len(taps) != len(write_value) or not all(0 <= d <= MAX_TAP for d in taps):
            raise CircuitError(f"memory {mem.name}: value_taps {list(taps)} needs one tap in 0..{MAX_TAP} per "
                               f"write field ({len(write_value)})")
        for a in ([write_addr] if isinstance(write_addr, Product) else []) + \
                [a for a in read_addrs if isinstance(a, Product)]:
            if a.size != mem.rows:
                raise CircuitError(f"memory {mem.name}: product address {a.name} covers {a.size} rows, the memory "
                                   f"has {mem.rows}")
        if write_addr is not None:
            if isinstance(write_addr, Group) and write_addr.size not in (mem.rows + 1, mem.rows + 2):
                raise CircuitError(f"memory {mem.name}: write address needs size {mem.rows + 1} (last = none) or "
                                   f"{mem.rows + 2} (then last = all rows)")
            multi = {i for i, _, _ in alternatives}
            if len(write_value) != len(mem.fields) or any(
                    g.size != f and not (i in multi and g.size == f + 1)
                    for i, (g, f) in enumerate(zip(write_value, mem.fields))):
                raise CircuitError(f"memory {mem.name}: write value sizes {[g.size for g in write_value]} "
                                   f"!= fields {list(mem.fields)}")
            for i, g, d in alternatives:
                if not 0 <= i < len(mem.fields) or g.size != mem.fields[i] + 1 or not 0 <= d <= MAX_TAP:
                    raise CircuitError(f"memory {mem.name}: alternative source {g.name} for field {i} needs size "
                                       f"field+1 (absent last) and a tap in 0..{MAX_TAP}")
            channels = sum(f * (1 + sum(1 for j, _, _ in alternatives if j == i)) for i, f in enumerate(mem.fields))
            if channels + ROW_ACTIVE - len(mem.fields) > ROW_CHANNELS:
                raise CircuitError(f"memory {mem.name}: {channels} value channels (alternatives included) and "
                                   f"{ROW_ACTIVE - len(mem.fields)} filler do not fit a {ROW_CHANNELS}-channel head")
        if reset is not None and reset.size != 2:
            raise CircuitError(f"memory {mem.name}: reset {reset.name} must be a bit (size 2), not size {reset.size}")
        for a in read_addrs:
            if isinstance(a, Group) and a.size != mem.rows:
                raise CircuitError(f"memory {mem.name}: read address needs size {mem.rows}, got {a.size}")
        op = MemOp(mem, write_addr, list(write_value), list(read_addrs), value_taps=taps,
                   alternatives=tuple((int(i), g, int(d)) for i, g, d in alternatives), reset=reset)
        op.outputs = [[Group(f"{mem.name}.r{p}.{i}", s) for i, s in enumerate(mem.fields)]
                      for p in range(len(read_addrs))]
        self.ops.append(op)
        return op.outputs

    def output(self, g: Group) -> None:
        self.outputs.append(g)

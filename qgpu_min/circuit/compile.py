"""The circuit compiler: schedule, residual layout, and Qwen3.5 `linear_attention` layer weights.

Plan (`plan`): gates go to MLP sublayers, memory ops to DeltaNet sublayers, each as early as its inputs
and the per-layer budget (MLP width, heads) allow. Every group lives in residual dims from its birth to
the MLP sublayer of its last use, where clear units subtract it exactly; freed dims are reused.

Norm invariance: on a circuit token every live group holds one element of value 1, two constant dims
hold 1, and four ballast dims hold integers whose squares fill the squared norm up to exactly `hidden`
at every RMSNorm, so every norm scale is 1/sqrt(1 + eps): features enter every sublayer as 1 (exactly 1
after bf16 rounding). Ballast changes are constants: the MLP's constant unit writes them, and a DeltaNet
"constant head" (one row written and read on every token) writes them in attention sublayers.

Emission (`emit`): unit pre-activations K*(sum w*x - theta) with K = 64, up = the constant dim, down =
coefficient/K; memory heads use one-hot keys/queries of amplitude 32, values of amplitude 32, beta = 1,
decay 0 (exp(g) = 1; a memory's reset token: exp(g) = 0), and the gated norm turns each stored active
channel back into exactly 1.

Banks: a memory of more rows than a head holds is split into banks (`banks`), one head per read port and
bank. A head's query and key use only its bank's address elements, so the other banks see a zero query
(they output exactly 0) and a zero key (their write is an exact no-op); every bank head of a port adds
into the port's output dims, which therefore stay one-hot.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from qgpu_min.model.bf16 import f32_to_bf16, round_bf16
from qgpu_min.model.config import TextConfig
from qgpu_min.model.kernels_ref import SparseBF16

from .ir import CONST, ROW_ACTIVE, ROW_CHANNELS, Circuit, CircuitError, Gate, Group, MemOp, Product

K_GATE = 64.0     # MLP gain: silu(64 n) = 64 n for integers n >= 1, ~0 for n <= -1
A_KEY = 32.0      # key/query amplitude before SiLU and L2 norm
# product addresses: a row's channel is silu(A_PRODUCT * (matching parts - parts + 1/2)): A/2 = 128 when
# every part matches, <= -128 otherwise, where silu is exactly -0 (exp overflows; sigmoid underflows too)
A_PRODUCT = 256.0
# Stored value amplitude. A read returns x = L * q with q = fl(1/sqrt(128)); for this L, fl(x*x) has five
# trailing zero bits, so the head norm's sum of 32 equal squares is exact in any order, and the normalised
# value is exactly 2 for rows at scale 1, 1/4, 1/16, 1/64 (memories initialised all at once): reads are
# exact in fp32 too (tests/test_circuit_compile.py checks this against both kernel implementations).
L_VALUE = 30720.0
B_WRITE = 32.0    # in_proj_b on the constant dim: beta = sigmoid(32) = 1
Z_GATE = 64.0     # in_proj_z on the constant dim: silu(64) = 64
DT_BIAS = -100.0  # softplus(-100) ~ 4e-44: decay g = 0, exp(g) = 1
A_LOG = -30.0
# a memory's reset (MemOp.reset): in_proj_a reads the reset bit at A_RESET, and the heads' A_log is
# A_LOG_RESET: a reset token has g = -e^2 * softplus(100) = -739, exp(g) = 0 (the state is emptied); any
# other token a = 0, g = -e^2 * 4e-44, exp(g) = 1 exactly, as for every other head
A_RESET = 200.0
A_LOG_RESET = 2.0
N_BALLAST = 4
# RMSNorm gain 1 + 2^-21 cancels the eps: x * rsqrt(1 + 1e-6) * (1 + 2^-21) is exactly x in fp32 for the
# small integers on circuit dims, so fp32 arithmetic stays on integers just as bf16's rounding does.
NORM_W = 2.0 ** -21


@dataclass(frozen=True)
class BaseShape:
    """The base model's per-layer shapes the circuit layers must match."""

    hidden: int = 2048
    intermediate: int = 6144
    heads: int = 16
    head_dim: int = 128
    conv_kernel: int = 4
    eps: float = 1e-6

    @property
    def qk_rows(self) -> int:
        """The query and key rows of in_proj_qkv: the ones a text gate must silence (with zero keys and
        queries a text token writes and reads nothing, so values need no gate)."""
        return 2 * self.heads * self.head_dim

    @classmethod
    def from_config(cls, cfg: TextConfig) -> "BaseShape":
        if cfg.linear_num_key_heads != cfg.linear_num_value_heads:
            raise CircuitError(f"circuit layers need linear_num_key_heads == linear_num_value_heads, the config has "
                               f"{cfg.linear_num_key_heads} and {cfg.linear_num_value_heads}")
        if cfg.linear_key_head_dim != ROW_CHANNELS or cfg.linear_value_head_dim != ROW_CHANNELS:
            raise CircuitError(f"circuit memories need DeltaNet head dims of {ROW_CHANNELS}, the config has "
                               f"key {cfg.linear_key_head_dim} and value {cfg.linear_value_head_dim}")
        return cls(cfg.hidden_size, cfg.intermediate_size, cfg.linear_num_value_heads, ROW_CHANNELS,
                   cfg.linear_conv_kernel_dim, cfg.rms_norm_eps)


# ---------------------------------------------------------------------------------------------------------
# Planning


def _live_ops(c: Circuit, keep: list[Group]) -> list[Gate | MemOp]:
    """Drop gates whose output nobody uses (memory ops always stay: their writes are effects)."""
    needed = {id(g.root) for g in c.outputs + keep}
    live = []
    for op in reversed(c.ops):
        if isinstance(op, Gate) and id(op.out) not in needed:
            continue
        live.append(op)
        needed.update(id(g) for g in op.inputs)
    return live[::-1]


# op -> its banks, decided once (an op's rows and write address never change); weak, so circuits can go
_BANKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def banks(op: MemOp) -> tuple[range, ...]:
    """The memory's row ranges, one head per read port each: ROW_CHANNELS rows, or half that when the op
    can write all rows at once (an all-rows key needs a power of 4 channels >= the bank's rows), or when a
    product write's 'every' elements would key a count of rows in a full bank that is not a power of 4."""
    if op not in _BANKS:
        half = op.writes_all_rows or (isinstance(op.write_addr, Product)
                                      and _every_fault(op, ROW_CHANNELS) and not _every_fault(op, ROW_CHANNELS // 2))
        _BANKS[op] = tuple(_ranges(op.mem.rows, ROW_CHANNELS // 2 if half else ROW_CHANNELS))
    return _BANKS[op]


def _ranges(rows: int, size: int) -> list[range]:
    return [range(lo, min(lo + size, rows)) for lo in range(0, rows, size)]


def _every_fault(op: MemOp, bank_rows: int) -> str | None:
    """Why a product write with 'every' elements, over banks of bank_rows rows, keys a count of rows of a
    bank that is not a power of 4 (each must get exactly 1/2^j of the value; a read's head norm undoes it)."""
    a = op.write_addr
    if not isinstance(a, Product) or all(ev is None for ev in a.every):
        return None
    flexible = [i for i, ev in enumerate(a.every) if ev is not None]
    for mask in range(1, 1 << len(flexible)):
        S = {flexible[j] for j in range(len(flexible)) if mask >> j & 1}
        for bank in _ranges(op.mem.rows, bank_rows):
            counts: dict[tuple, int] = {}
            for row in bank:
                key = tuple(d for i, d in enumerate(a.digits(row)) if i not in S)
                counts[key] = counts.get(key, 0) + 1
            bad = [n for n in counts.values() if n & (n - 1) or (n.bit_length() - 1) % 2]
            if bad:
                return (f"memory {op.mem.name}: a write through {a.name} with 'every' on parts {sorted(S)} keys "
                        f"{bad[0]} rows of a bank; it must be a power of 4")
    return None


def _check_every(op: MemOp) -> None:
    fault = _every_fault(op, len(banks(op)[0]))
    if fault:
        raise CircuitError(fault)


def steady_port(op: MemOp) -> int | None:
    """A read port that reads exactly one row on every token (a group address, or a product whose parts
    always name one row), or None. Its field 0 then outputs exactly one active element of value 1, which
    the layer's ballast change can ride on instead of a constant head."""
    for port, a in enumerate(op.read_addrs):
        if isinstance(a, Group) or (all(ev is None for ev in a.every)
                                    and all(g.size == r for g, r in zip(a.parts, a.radix))):
            return port
    return None


def mem_heads(op: MemOp) -> int:
    """DeltaNet heads a memory op occupies: read ports x banks (a write-only memory needs none)."""
    return len(op.read_addrs) * len(banks(op))


def _time_of_layer(kind: str, layer: int) -> int:
    return 2 * layer + (1 if kind == "mlp" else 0)


def _on_residual(born: int, cleared: int | None, t: int) -> bool:
    """Whether a group born at time `born` and cleared by layer `cleared`'s MLP (None: kept to the end) is
    on the residual stream at norm point t (2L-1: attention L's input, 2L: MLP L's)."""
    return born <= t and (cleared is None or 2 * cleared + 1 > t)


@dataclass
class Plan:
    circuit: Circuit
    shape: BaseShape
    ops: list                      # live ops in order
    layer_of: dict                 # id(op) -> layer
    birth: dict                    # id(root group) -> time (-1: embedding, 2L: attention L, 2L+1: MLP L)
    clear_at: dict                 # id(root group) -> layer whose MLP clears it (absent: kept to the end)
    dims: dict                     # id(root group) -> list of residual dims, one per element
    groups: dict                   # id(root group) -> Group
    const_dims: tuple[int, int]
    ballast_dims: tuple[int, ...]
    ballast: list                  # per norm point (time 2L-1 -> before attention L, 2L -> before MLP L)
    n_layers: int

    def live_groups(self, t: int) -> list[int]:
        """ids of the root groups on the residual stream at norm point t."""
        return [gid for gid, b in self.birth.items() if _on_residual(b, self.clear_at.get(gid), t)]

    @cached_property
    def memory_heads(self) -> dict[int, tuple[int, int]]:
        """memory_heads(self), computed once (a plan is not changed after planning)."""
        return _memory_heads(self)

    def used_dims(self) -> set[int]:
        out = set(self.const_dims) | set(self.ballast_dims)
        for ds in self.dims.values():
            out.update(ds)
        return out


def _four_squares(n: int) -> tuple[int, int, int, int]:
    if n < 0:
        raise CircuitError(f"the circuit needs {-n} more residual dims than the hidden size provides")
    for a in range(math.isqrt(n), -1, -1):
        r1 = n - a * a
        for b in range(min(a, math.isqrt(r1)), -1, -1):
            r2 = r1 - b * b
            for c_ in range(min(b, math.isqrt(r2)), -1, -1):
                r3 = r2 - c_ * c_
                d = math.isqrt(r3)
                if d * d == r3 and d <= c_:
                    return (a, b, c_, d)
    raise AssertionError("Lagrange's four-square theorem")


def plan(c: Circuit, shape: BaseShape = BaseShape(), keep: list[Group] = (), mlp_fill: float = 0.85,
         dim_order: list[int] | None = None) -> Plan:
    """Schedule and lay out `c`. keep: extra groups held to the end (besides c.outputs)."""
    ops = _live_ops(c, list(keep))
    birth: dict[int, int] = {id(g): -1 for g in c.inputs}
    groups: dict[int, Group] = {id(g): g for g in c.inputs}
    mlp_units: dict[int, int] = {}
    heads: dict[int, int] = {}
    layer_of: dict[int, int] = {}
    steady_layers: set[int] = set()      # layers whose ballast change rides on a steady read port
    cap_units = int(shape.intermediate * mlp_fill)
    for op in ops:
        t_in = max([birth[id(g)] for g in op.inputs] + [-1])
        if isinstance(op, Gate):
            layer, need = max(0, (t_in + 1) // 2), len(op.units)
            if need > cap_units:
                raise CircuitError(f"gate {op.out.name} needs {need} units; an MLP sublayer holds {cap_units}")
            while mlp_units.get(layer, 0) + need > cap_units:
                layer += 1
            mlp_units[layer] = mlp_units.get(layer, 0) + need
            birth[id(op.out)] = _time_of_layer("mlp", layer)
            groups[id(op.out)] = op.out
        else:
            layer, need = t_in // 2 + 1, mem_heads(op)
            steady = steady_port(op) is not None     # then the layer's ballast change needs no constant head
            if need + (0 if steady else 1) > shape.heads:
                raise CircuitError(f"memory {op.mem.name}: {len(op.read_addrs)} read ports x {len(banks(op))} "
                                   f"banks = {need} heads{'' if steady else ' + a constant head'} exceed the "
                                   f"{shape.heads} heads of a layer")
            while heads.get(layer, 0) + need + (0 if steady or layer in steady_layers else 1) > shape.heads:
                layer += 1
            heads[layer] = heads.get(layer, 0) + need
            if steady:
                steady_layers.add(layer)
            for port in op.outputs:
                for g in port:
                    birth[id(g)] = _time_of_layer("attn", layer)
                    groups[id(g)] = g
        layer_of[id(op)] = layer
    n_layers = max([layer_of[id(op)] for op in ops] + [0]) + 1

    held_ids = {id(g.root) for g in list(c.outputs) + list(keep) if g.root is not CONST}
    last_use: dict[int, int] = {}
    for op in ops:
        t = _time_of_layer("mlp" if isinstance(op, Gate) else "attn", layer_of[id(op)])
        for g in op.inputs:
            last_use[id(g)] = max(last_use.get(id(g), -1), t)
    clear_at = {gid: max(0, last_use.get(gid, birth[gid]) // 2) for gid in groups if gid not in held_ids}

    # residual dims: constants and ballast first, then groups in order of birth, reusing cleared dims
    order = list(dim_order) if dim_order is not None else list(range(shape.hidden))
    rank = {d: i for i, d in enumerate(order)}
    const_dims = (order[0], order[1])
    ballast_dims = tuple(order[2:2 + N_BALLAST])
    free = order[2 + N_BALLAST:][::-1]  # a stack: lowest-ordered dims are taken first
    dims: dict[int, list[int]] = {}
    events = sorted(set(birth.values()) | {2 * L + 1 for L in clear_at.values()})
    for t in events:
        if t % 2 == 1 and t >= 0:  # an MLP sublayer: its clears free dims for its own outputs
            for gid, L in clear_at.items():
                if 2 * L + 1 == t and gid in dims:
                    free.extend(sorted(dims[gid], key=rank.__getitem__, reverse=True))
        for gid, b in birth.items():
            if b == t:
                g = groups[gid]
                if len(free) < g.size:
                    raise CircuitError(f"out of residual dims at time {t} placing {g.name} ({g.size} dims); "
                                       f"the circuit needs more than {shape.hidden}")
                dims[gid] = [free.pop() for _ in range(g.size)]

    _check_delayed_fields(ops, layer_of, birth, clear_at, shape)
    for op in ops:
        if isinstance(op, MemOp):
            _check_every(op)

    # ballast per norm point: time 2L-1 (before attention L) and 2L (before MLP L)
    ballast = []
    for t in range(-1, 2 * n_layers):
        live = sum(1 for gid, b in birth.items() if _on_residual(b, clear_at.get(gid), t))
        ballast.append(_four_squares(shape.hidden - live - 2))
    return Plan(c, shape, ops, layer_of, birth, clear_at, dims, groups, const_dims, ballast_dims, ballast,
                n_layers)


def _check_delayed_fields(ops: list, layer_of: dict, birth: dict, clear_at: dict, shape: BaseShape) -> None:
    """A write field with tap d is read by the conv from the dims its group has at that attention layer on
    the token d places back: the tap must fit the conv kernel, and the group must be on the residual at
    that layer. The layout is the same on every circuit token, so it is then there on every token."""
    for op in ops:
        if not isinstance(op, MemOp) or op.write_addr is None:
            continue
        t = 2 * layer_of[id(op)] - 1
        for g, d in op.all_sources():
            if d > shape.conv_kernel - 1:
                raise CircuitError(f"memory {op.mem.name}: field {g.name} has tap {d}, the conv kernel of "
                                   f"{shape.conv_kernel} reaches {shape.conv_kernel - 1} tokens back")
            gid = id(g.root)
            if d and g.root is not CONST and not _on_residual(birth[gid], clear_at.get(gid), t):
                raise CircuitError(f"memory {op.mem.name}: delayed field {g.name} is not on the residual at "
                                   f"attention {layer_of[id(op)]}")


def ballast_at(p: Plan, t: int) -> tuple[int, ...]:
    return p.ballast[min(t + 1, len(p.ballast) - 1)]


# ---------------------------------------------------------------------------------------------------------
# Emission


class Coo:
    """A sparse matrix under construction (duplicates add)."""

    def __init__(self, shape: tuple[int, int]) -> None:
        self.shape = shape
        self.r: list[int] = []
        self.c: list[int] = []
        self.v: list[float] = []
        self.bulk: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, r: int, c: int, v: float) -> None:
        if v:
            self.r.append(r)
            self.c.append(c)
            self.v.append(v)

    def add_many(self, r: np.ndarray, c: np.ndarray, v: np.ndarray) -> None:
        self.bulk.append((np.asarray(r, np.int64), np.asarray(c, np.int64), np.asarray(v, np.float64)))

    def summed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        parts = [(np.asarray(self.r, np.int64), np.asarray(self.c, np.int64), np.asarray(self.v, np.float64))]
        parts += self.bulk
        r = np.concatenate([x[0] for x in parts])
        c = np.concatenate([x[1] for x in parts])
        v = np.concatenate([x[2] for x in parts])
        if not len(r):
            return r, c, v
        uniq, inv = np.unique(r * self.shape[1] + c, return_inverse=True)
        vals = np.zeros(len(uniq))
        np.add.at(vals, inv, v)
        keep = vals != 0
        return uniq[keep] // self.shape[1], uniq[keep] % self.shape[1], vals[keep]

    def to_sparse(self, exact: bool = True) -> SparseBF16:
        rows, cols, vals = self.summed()
        bits = f32_to_bf16(vals.astype(np.float32))
        if exact:
            back = round_bf16(vals.astype(np.float32)).astype(np.float64)
            bad = np.nonzero(back != vals)[0]
            if bad.size:
                i = bad[0]
                raise CircuitError(f"weight {vals[i]!r} at ({rows[i]}, {cols[i]}) is not exact in bf16")
        indptr = np.zeros(self.shape[0] + 1, np.int64)
        np.cumsum(np.bincount(rows, minlength=self.shape[0]), out=indptr[1:])
        return SparseBF16(self.shape, indptr, cols.astype(np.int32), bits)


@dataclass
class LayerWeights:
    """One compiled decoder layer: sparse bf16 matrices plus the small vectors (f32)."""

    mats: dict   # short name -> Coo (gate, up, down, qkv, z, b, a, out)
    vecs: dict   # short name -> np.ndarray f32 (in_norm, post_norm, conv [C, K], dt_bias, A_log, gdn_norm)
    units: int = 0
    heads: int = 0


@dataclass
class Mute:
    """A text gate: T(u) = lam . u (over dims that hold 0 on circuit tokens at that sublayer) is <= -tau on
    every text token and 0 on circuit tokens; adding B*T to every pre-activation of the sublayer drives it
    below -90 on text."""

    lam: np.ndarray   # [hidden], zero on dims live on circuit tokens
    tau: float
    max_abs: np.ndarray  # [hidden] max |normalised text value| per dim, over the rows it silences
    margin: float = 100.0
    leaks: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # text rows it does NOT silence


@dataclass
class OutputCode:
    """The output code: each (output group, token-code input group) pair of equal size; the last MLP clears
    the token's own code and writes amplitude * output group onto the same dims."""

    pairs: list
    amplitude: float = 256.0


def all_rows(rows: int) -> int:
    """Channels an all-rows write spreads its key over: a power of 4, so every row gets exactly v / 2^j."""
    m = 1
    while m < rows:
        m *= 4
    if m > ROW_CHANNELS:
        raise CircuitError(f"an all-rows write needs <= {ROW_CHANNELS // 2} rows, memory has {rows}")
    return m


def _term_dims(p: Plan, g: Group, e: int) -> list[int]:
    """The residual dims whose sum is the indicator [g == e] (a view element may stand for several)."""
    if g.root is CONST:
        return [p.const_dims[0]] if g.phys_set(e) else []
    return [p.dims[id(g.root)][x] for x in g.phys_set(e)]


def _term_dim(p: Plan, g: Group, e: int) -> int | None:
    """The one residual dim of [g == e] (None: never active)."""
    ds = _term_dims(p, g, e)
    if len(ds) > 1:
        raise CircuitError(f"{g.name}: element {e} stands for several elements here, where one dim is needed")
    return ds[0] if ds else None


def _split(v: float) -> tuple[float, float]:
    """v = hi + lo with both exact in bf16 (for thresholds wider than 8 significant bits)."""
    hi = float(round_bf16(np.float32(v)))
    return hi, v - hi


class _Mlp:
    def __init__(self, p: Plan) -> None:
        self.p = p
        H, I = p.shape.hidden, p.shape.intermediate
        self.gate, self.up, self.down = Coo((I, H)), Coo((I, H)), Coo((H, I))
        self.n = 0

    def unit(self, terms: dict[int, float], theta: float, out: dict[int, float]) -> None:
        """pre = K*(sum terms[d]*x_d - theta); writes relu(...)*out[d] to dims d."""
        if self.n >= self.p.shape.intermediate:
            raise CircuitError(f"MLP sublayer over its width of {self.p.shape.intermediate} units")
        u = self.n
        for d, w in terms.items():
            self.gate.add(u, d, K_GATE * w)
        hi, lo = _split(-K_GATE * theta)
        self.gate.add(u, self.p.const_dims[0], hi)
        self.gate.add(u, self.p.const_dims[1], lo)
        self.up.add(u, self.p.const_dims[0], 1.0)
        for d, v in out.items():
            self.down.add(d, u, v / K_GATE)
        self.n += 1


def _gate_units(p: Plan, mlp: _Mlp, gate: Gate, dims: list[int], scale: float = 1.0) -> None:
    """The gate's units, writing its output elements to `dims` (times `scale`)."""
    for u in gate.units:
        terms: dict[int, float] = {}
        theta = float(u.theta)
        for g, e, w in u.terms:
            for d in _term_dims(p, g, e):
                if d == p.const_dims[0]:
                    theta -= w  # an always-active literal: a constant
                else:
                    terms[d] = terms.get(d, 0.0) + w
        out: dict[int, float] = {}
        for e, cf in u.out:
            out[dims[e]] = out.get(dims[e], 0.0) + cf * scale
        mlp.unit(terms, theta, out)


def _write_always(p: Plan, h: int, z: Coo, b: Coo) -> None:
    """Head h writes on every circuit token (beta = 1) and passes its output ungated (silu(z) = Z_GATE,
    undone by the output projection's 1/Z_GATE)."""
    b.add(h, p.const_dims[0], B_WRITE)
    for ch in range(p.shape.head_dim):
        z.add(h * p.shape.head_dim + ch, p.const_dims[0], Z_GATE)


def _product_channel(p: Plan, addr: Product, row: int, ch: int, qkv: Coo) -> None:
    """Channel `ch` (a row of q or k) = the AND of the address parts that name `row` (SiLU does the AND)."""
    for g, d, ev in zip(addr.parts, addr.digits(row), addr.every):
        for e in (d,) if ev is None else (d, ev):
            for dim in _term_dims(p, g, e):
                qkv.add(ch, dim, A_PRODUCT)
    qkv.add(ch, p.const_dims[0], -(len(addr.parts) - 0.5) * A_PRODUCT)


def _query(p: Plan, addr: Group | Product, bank: range, h: int, qkv: Coo) -> None:
    """Read port query of head h: only this bank's address elements (other banks: zero query, output 0)."""
    for a in bank:
        if isinstance(addr, Product):
            _product_channel(p, addr, a, h * p.shape.head_dim + a - bank.start, qkv)
            continue
        for dq in _term_dims(p, addr, a):
            qkv.add(h * p.shape.head_dim + a - bank.start, dq, A_KEY)


def _write_key(p: Plan, op: MemOp, bank: range, h: int, qkv: Coo) -> None:
    """Write key of head h: this bank's single-row elements, and the all-rows element spread over
    all_rows(bank rows) channels (other elements: zero key, an exact no-op write)."""
    if op.write_addr is None:
        return
    key0 = (p.shape.heads + h) * p.shape.head_dim
    if isinstance(op.write_addr, Product):
        for a in bank:
            _product_channel(p, op.write_addr, a, key0 + a - bank.start, qkv)
        return
    for a in bank:
        for dk in _term_dims(p, op.write_addr, a):
            qkv.add(key0 + a - bank.start, dk, A_KEY)
    if op.writes_all_rows:
        for dk in _term_dims(p, op.write_addr, op.mem.rows + 1):
            for ch in range(all_rows(len(bank))):
                qkv.add(key0 + ch, dk, A_KEY)


def _row_values(p: Plan, op: MemOp, outputs: list[Group], h: int, qkv: Coo, out: Coo, conv: np.ndarray) -> None:
    """Value channels of head h (each field at its conv tap, filler from this token) and the out_proj
    from them to the port's output dims."""
    hd, K = p.shape.head_dim, p.shape.conv_kernel
    val0 = (2 * p.shape.heads + h) * hd
    ch = 0
    for i, size in enumerate(op.mem.fields):
        for g, d in op.field_sources(i):      # one channel block per alternative source, summed on read
            for e in range(size):             # element `size` of an alternative is 'absent': no channel
                for dv in _term_dims(p, g, e):
                    qkv.add(val0 + ch + e, dv, L_VALUE)
                conv[val0 + ch + e, :] = 0.0
                conv[val0 + ch + e, K - 1 - d] = 1.0  # the value this token's residual had d tokens earlier
                out.add(p.dims[id(outputs[i])][e], h * hd + ch + e, 1.0 / Z_GATE)
            ch += size
    for f in range(ROW_ACTIVE - len(op.mem.fields)):  # filler channels: constant-RMS rows
        qkv.add(val0 + ch + f, p.const_dims[0], L_VALUE)


def _mem_heads(p: Plan, op: MemOp, first_head: int, qkv: Coo, z: Coo, b: Coo, out: Coo, conv: np.ndarray) -> int:
    """Heads first_head.. for op: one per (read port, bank), every bank of a port writing the same
    output dims. Returns the number of heads used."""
    h = first_head
    for port, addr in enumerate(op.read_addrs):
        for bank in banks(op):
            _query(p, addr, bank, h, qkv)
            _write_key(p, op, bank, h, qkv)
            _row_values(p, op, op.outputs[port], h, qkv, out, conv)
            _write_always(p, h, z, b)
            h += 1
    return h - first_head


def _ballast_via_port(p: Plan, op: MemOp, first_head: int, delta: tuple[int, ...], out: Coo) -> None:
    """The ballast change through op's steady read port: its field 0's channels (both elements, every bank
    head and source block) sum to exactly 1 on every token, so delta/Z_GATE on each adds exactly delta."""
    port, nb = steady_port(op), len(banks(op))
    size = op.mem.fields[0]
    hd = p.shape.head_dim
    for bank_i in range(nb):
        h = first_head + port * nb + bank_i
        for k in range(len(op.field_sources(0))):
            for e in range(size):
                for d, v in zip(p.ballast_dims, delta):
                    out.add(d, h * hd + k * size + e, v / Z_GATE)


def _const_head(p: Plan, h: int, delta: tuple[int, ...], qkv: Coo, z: Coo, b: Coo, out: Coo) -> None:
    hd, H = p.shape.head_dim, p.shape.heads
    c0 = p.const_dims[0]
    qkv.add(h * hd, c0, A_KEY)
    qkv.add(H * hd + h * hd, c0, A_KEY)
    for ch in range(ROW_ACTIVE):
        qkv.add(2 * H * hd + h * hd + ch, c0, L_VALUE)
    _write_always(p, h, z, b)
    for d, v in zip(p.ballast_dims, delta):
        out.add(d, h * hd, v / Z_GATE)


def memory_heads(p: Plan) -> dict[int, tuple[int, int]]:
    """id(memory op) -> (layer, first head): heads go to a layer's memory ops in plan order, each op taking
    ports x banks heads (mem_heads), port-major; the constant head, if any, comes after them."""
    return p.memory_heads


def _memory_heads(p: Plan) -> dict[int, tuple[int, int]]:
    out, next_head = {}, {}
    for op in p.ops:
        if isinstance(op, MemOp):
            L = p.layer_of[id(op)]
            out[id(op)] = (L, next_head.get(L, 0))
            next_head[L] = next_head.get(L, 0) + mem_heads(op)
    return out


def emit(p: Plan, out_code: OutputCode | None = None) -> list[LayerWeights]:
    """The weights of every circuit layer. With out_code, the last MLP also writes the output code: gates
    that produce an output group there write it straight onto the code dims at the code amplitude, other
    output groups are copied there, and the token's own code is cleared."""
    s = p.shape
    H, I, nh, hd = s.hidden, s.intermediate, s.heads, s.head_dim
    conv_dim = 3 * nh * hd
    last = p.n_layers - 1
    code_dims: dict[int, tuple[list[int], float]] = {}  # id(output group) -> (code dims, amplitude)
    if out_code is not None:
        for og, ig in out_code.pairs:
            if og.size != ig.size:
                raise CircuitError(f"output code: {og.name} (size {og.size}) and {ig.name} (size {ig.size}) "
                                   "must have the same size")
            code_dims[id(og)] = ([_term_dim(p, ig, e) for e in range(ig.size)], out_code.amplitude)
    layers = []
    heads = memory_heads(p)
    for L in range(p.n_layers):
        qkv, z, b, a, out = Coo((conv_dim, H)), Coo((nh * hd, H)), Coo((nh, H)), Coo((nh, H)), Coo((H, nh * hd))
        mlp = _Mlp(p)
        conv = np.zeros((conv_dim, s.conv_kernel), np.float32)
        conv[:, -1] = 1.0  # current token only, except delayed write fields (_row_values)
        # attention: memory ops (heads as memory_heads assigns them), then the constant head
        head = 0
        a_log = np.full(nh, A_LOG, np.float32)
        for op in p.ops:
            if isinstance(op, MemOp) and p.layer_of[id(op)] == L:
                n = _mem_heads(p, op, heads[id(op)][1], qkv, z, b, out, conv)
                if op.reset is not None:
                    for h in range(heads[id(op)][1], heads[id(op)][1] + n):
                        a.add(h, _term_dim(p, op.reset, 1), A_RESET)
                        a_log[h] = A_LOG_RESET
                head += n
        before, after = ballast_at(p, 2 * L - 1), ballast_at(p, 2 * L)
        if before != after:
            delta = tuple(x - y for x, y in zip(after, before))
            steady = [op for op in p.ops if isinstance(op, MemOp) and p.layer_of[id(op)] == L
                      and steady_port(op) is not None]
            if steady:
                _ballast_via_port(p, steady[0], heads[id(steady[0])][1], delta, out)
            else:
                _const_head(p, head, delta, qkv, z, b, out)
                head += 1
        # MLP: the constant unit (ballast change and every gate's default element), gates, clears
        const_out: dict[int, float] = {}
        for d, v in zip(p.ballast_dims, tuple(x - y for x, y in zip(ballast_at(p, 2 * L + 1), after))):
            const_out[d] = float(v)
        gates = [op for op in p.ops if isinstance(op, Gate) and p.layer_of[id(op)] == L]
        targets = {id(g): code_dims.get(id(g.out), (p.dims[id(g.out)], 1.0)) if L == last
                   else (p.dims[id(g.out)], 1.0) for g in gates}
        for g in gates:
            dims, scale = targets[id(g)]
            const_out[dims[g.default]] = const_out.get(dims[g.default], 0.0) + scale
        if L == last and out_code is not None:
            made_here = {id(g.out) for g in gates}
            for og, ig in out_code.pairs:
                dims, amp = code_dims[id(og)]
                if og.base is not None and id(og.root) in made_here:
                    raise CircuitError(f"output {og.name} is a view of a gate in the last layer; output the gate")
                for e in range(og.size):
                    mlp.unit({dims[e]: 1.0}, 0, {dims[e]: -1.0})  # the token's own code
                    if id(og.root) not in made_here:
                        mlp.unit({_term_dim(p, og, e): 1.0}, 0, {dims[e]: amp})
        mlp.unit({}, -1.0, const_out)  # relu(1) = 1: the constants
        for g in gates:
            _gate_units(p, mlp, g, *targets[id(g)])
        for gid, cl in p.clear_at.items():
            if cl == L and gid in p.dims:
                for d in p.dims[gid]:
                    mlp.unit({d: 1.0}, 0, {d: -1.0})
        vecs = {"in_norm": np.full(H, NORM_W, np.float32), "post_norm": np.full(H, NORM_W, np.float32), "conv": conv,
                "dt_bias": np.full(nh, DT_BIAS, np.float32), "A_log": a_log,
                "gdn_norm": np.full(hd, math.sqrt(ROW_ACTIVE / hd), np.float32)}
        layers.append(LayerWeights({"gate": mlp.gate, "up": mlp.up, "down": mlp.down, "qkv": qkv, "z": z,
                                    "b": b, "a": a, "out": out}, vecs, mlp.n, head))
    return layers


def live_dims(p: Plan, t: int) -> set[int]:
    """Dims that are nonzero on circuit tokens at norm point t (2L-1: attention L's input, 2L: MLP L's)."""
    out = set(p.const_dims) | set(p.ballast_dims)
    for gid in p.live_groups(t):
        out.update(p.dims.get(gid, ()))
    return out


def free_dims(p: Plan) -> dict[tuple[str, int], list[int]]:
    """{("attn", L) / ("mlp", L): the dims that are zero on circuit tokens at that sublayer's input}, sorted:
    where its text gate may live."""
    every = set(range(p.shape.hidden))
    return {(kind, L): sorted(every - live_dims(p, t))
            for L in range(p.n_layers) for kind, t in (("attn", 2 * L - 1), ("mlp", 2 * L))}


def add_mute(layers: list[LayerWeights], gates: dict, shape: BaseShape) -> None:
    """Add B * T(u) to every used MLP unit (gate gates[("mlp", L)]) and every used query/key channel
    (gates[("attn", L)]), B sized per row from its own weights (see Mute). Values need no gate: with a
    zero key a text token writes nothing, and with a zero query it reads nothing."""
    for L, lw in enumerate(layers):
        for name, kind in (("gate", "mlp"), ("qkv", "attn")):
            mute: Mute = gates[(kind, L)]
            lam_dims = np.nonzero(mute.lam)[0]
            m: Coo = lw.mats[name]
            rows, cols, vals = m.summed()
            keep = rows < (shape.qk_rows if name == "qkv" else m.shape[0])
            rows, cols, vals = rows[keep], cols[keep], vals[keep]
            if not len(rows):
                continue
            bound = np.zeros(m.shape[0])
            np.add.at(bound, rows, np.abs(vals) * mute.max_abs[cols])
            used = np.unique(rows)
            B = (bound[used] + mute.margin) / mute.tau
            m.add_many(np.repeat(used, len(lam_dims)), np.tile(lam_dims, len(used)),
                       (B[:, None] * mute.lam[lam_dims][None, :]).ravel())


def runtime_layer(lw: LayerWeights) -> dict:
    """The layer as the runtime's Weights.layers entry (short names, CSR matrices, f32 vectors)."""
    out = {name: m.to_sparse(exact=False) for name, m in lw.mats.items()}
    out.update({k: v.copy() for k, v in lw.vecs.items()})
    return out


def check_exact_weights(layers: list[LayerWeights]) -> None:
    """Every circuit weight (before the text gate is added) must be exact in bf16."""
    for i, lw in enumerate(layers):
        for name, m in lw.mats.items():
            try:
                m.to_sparse(exact=True)
            except CircuitError as e:
                raise CircuitError(f"layer {i} {name}: {e}") from None

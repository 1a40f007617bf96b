"""What the GPU in the weights costs, measured by building, planning and emitting it (`qgpu-min circuit-report --gpu`).

Every number comes from the code: the circuit (core.build), its plan (circuit.compile.plan: layers, gate
units, residual dims), the emitted layers (circuit.compile.emit: MLP units with clears and the constant
unit, attention heads with constant heads), the vocabulary (vocab.all_tokens) and the spec. The layer map
says per layer which memories its attention heads hold and which gates its MLP computes, the gates grouped
into families by name (bit indices dropped; names that differ only in digits merged as `name*`).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from ..circuit.compile import BaseShape, emit, mem_heads, plan
from ..circuit.ir import Gate, MemOp
from ..circuit.report import _peak_dims
from .core import build
from .layout import GpuSpec, rom_rows
from .vocab import all_tokens


@dataclass
class LayerInfo:
    index: int
    units: int                       # MLP units emitted: gate units, clears, the constant unit
    gate_units: int                  # units of the layer's gates (the plan's count)
    heads: int                       # DeltaNet heads emitted: memory heads and a constant head, if any
    memories: list[tuple[str, int]]  # (memory name or family, heads), in plan order
    gates: list[tuple[str, int]]     # (gate family, units), most units first


@dataclass
class GpuReport:
    spec: GpuSpec
    shape: BaseShape
    layers: list[LayerInfo]
    peak_dims: int                   # residual dims live at once (circuit.report._peak_dims)
    vocab_by_kind: dict[str, int]    # token kind -> tokens of that kind
    rom_rows: list[str]              # ROM memories (one 32-bit word per block each)
    extra: dict = field(default_factory=dict)

    @property
    def vocab(self) -> int:
        return sum(self.vocab_by_kind.values())

    @property
    def total_units(self) -> int:
        return sum(li.units for li in self.layers)

    @property
    def total_gate_units(self) -> int:
        return sum(li.gate_units for li in self.layers)


def _family(name: str) -> str:
    """A gate's family: its name without bit indices, cut after the second dotted part."""
    return ".".join(re.sub(r"\[[^]]*\]", "", name).split(".")[:2])


def _merge_digits(counts: dict[str, int]) -> list[tuple[str, int]]:
    """Merge names that differ only in their digits (slot0.op, slot1.op -> slot*.op) when there are several."""
    pattern = {n: re.sub(r"\d+", "*", n) for n in counts}
    by_pattern = Counter(pattern.values())
    out: dict[str, int] = {}
    for n, v in counts.items():
        key = pattern[n] if by_pattern[pattern[n]] > 1 else n
        out[key] = out.get(key, 0) + v
    return list(out.items())


def gpu_report(spec: GpuSpec = GpuSpec(), shape: BaseShape = BaseShape()) -> GpuReport:
    gc = build(spec)
    p = plan(gc.circuit, shape)
    layers = emit(p, gc.out_code)
    gate_units: dict[int, Counter] = {L: Counter() for L in range(p.n_layers)}
    memories: dict[int, dict[str, int]] = {L: {} for L in range(p.n_layers)}
    for op in p.ops:
        L = p.layer_of[id(op)]
        if isinstance(op, Gate):
            gate_units[L][_family(op.out.name)] += len(op.units)
        elif isinstance(op, MemOp):
            memories[L][op.mem.name] = memories[L].get(op.mem.name, 0) + mem_heads(op)
    info = [LayerInfo(L, lw.units, sum(gate_units[L].values()), lw.heads, _merge_digits(memories[L]),
                      sorted(_merge_digits(gate_units[L]), key=lambda kv: -kv[1]))
            for L, lw in enumerate(layers)]
    kinds = Counter(t[0] for t in all_tokens(spec))
    return GpuReport(spec, shape, info, _peak_dims(p), dict(kinds), list(rom_rows(spec)))


def as_json(r: GpuReport) -> dict:
    s = r.spec
    return {
        "layers": len(r.layers),
        "units_per_layer": [li.units for li in r.layers],
        "gate_units_per_layer": [li.gate_units for li in r.layers],
        "heads_per_layer": [li.heads for li in r.layers],
        "peak_dims": r.peak_dims,
        "hidden": r.shape.hidden,
        "mlp_units_per_layer_max": r.shape.intermediate,
        "heads_per_layer_max": r.shape.heads,
        "total_units": r.total_units,
        "total_gate_units": r.total_gate_units,
        "vocab": r.vocab,
        "vocab_by_kind": r.vocab_by_kind,
        "rom_blocks": s.blocks,
        "rom_rows": r.rom_rows,
        "memory_words": s.mem_words,
        "lanes": s.lanes,
        "regs": s.regs,
        "slots": {"pre": s.fmt.pre, "post": s.fmt.post, "reads": s.fmt.reads, "mul_slots": list(s.fmt.mul_slots)},
        "layer_map": [{"layer": li.index, "units": li.units, "gate_units": li.gate_units, "heads": li.heads,
                       "memories": [list(m) for m in li.memories], "gates": [list(g) for g in li.gates]}
                      for li in r.layers],
    }


def _short(items: list[tuple[str, int]], width: int) -> str:
    """'name n, name n, ...' within width (at least the first item), ending ', +k more' when cut."""
    parts = [f"{name} {n}" for name, n in items]
    for keep in range(len(parts), 0, -1):
        text = ", ".join(parts[:keep]) + (f", +{len(parts) - keep} more" if keep < len(parts) else "")
        if len(text) <= width or keep == 1:
            return text
    return ""


def format_report(r: GpuReport, layer_map: bool = True) -> str:
    s = r.spec
    lines = [
        f"GPU in the weights: {len(r.layers)} layers, peak {r.peak_dims} of {r.shape.hidden} residual dims, "
        f"{r.total_units} MLP units ({r.total_gate_units} in gates), {sum(li.heads for li in r.layers)} heads",
        f"spec: {s.warps} warps x {s.lanes} lanes, {s.regs} registers per lane, {s.blocks} ROM blocks x {len(r.rom_rows)} rows, "
        f"{s.mem_words} memory words, {s.fmt.pre} pre + {s.fmt.post} post ALU slots, {s.fmt.reads} read ports",
        f"vocabulary: {r.vocab} tokens (" + ", ".join(f"{k} {n}" for k, n in r.vocab_by_kind.items()) + ")",
        f"units per layer: {[li.units for li in r.layers]}",
        f"heads per layer: {[li.heads for li in r.layers]}",
    ]
    if layer_map:
        head = (f"{'layer':>5} {'units':>6} {'gate':>6} {'heads':>5}  {'attention: memory (heads)':<40} "
                "MLP: gate families (units)")
        lines += ["", head, "-" * len(head)]
        for li in r.layers:
            mems = _short(li.memories, 40) or "-"
            lines.append(f"{li.index:>5} {li.units:>6} {li.gate_units:>6} {li.heads:>5}  {mems:<40} "
                         f"{_short(li.gates, 70) or '-'}")
    return "\n".join(lines)

"""One lane's execution of a machine block, as a circuit (qgpu_min.circuit IR).

A block runs as a fixed pipeline of slots: `pre` ALU slots, the memory slot (its address A + imm and
its store data), `post` ALU slots, then the branch condition. Every slot names its operands by
*source* rather than by register: one of the block's register reads (the ROM lists the distinct
registers a block reads before writing them, at most `reads`), the result of an earlier slot, the
memory slot's loaded value (post slots), the slot's immediate, zero, or (pre slots) a special value
(S2R). So values computed inside a block are forwarded inside the forward pass, and only the block's
live-out results need to leave it. The block's decoded fields (op and source one-hots, immediates)
and the register values are inputs here; the GPU feeds them from its ROM and register file memories.

Each slot is one operand-select layer (one AND unit per bit and source) and the fused ALU (2 MLP
layers, lib.alu). Op sets per slot come from the format, so a narrower slot costs fewer units.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..circuit import lib
from ..circuit.ir import Circuit, CircuitError, Group, Word, const_word

# ISA opcode -> the fused ALU's op name. S2R is `add` with A = the special value and B = zero.
ALU_OF_OPCODE = {
    "ADD": "add", "SUB": "sub", "AND": "and", "OR": "or", "XOR": "xor", "SHL": "shl", "SHR": "shr",
    "SRA": "sra", "SEQ": "eq", "SNE": "ne", "SLT": "slt", "SLE": "sle", "SLTU": "sltu", "SLEU": "sleu",
    "MIN": "min", "MAX": "max", "MINU": "minu", "MAXU": "maxu", "SEL": "sel", "S2R": "add", "MUL": "mul",
}
ALL_ALU_OPCODES = tuple(ALU_OF_OPCODE)


@dataclass(frozen=True)
class CoreFormat:
    """The block shape the circuit executes (a restriction of the machine's block format)."""

    pre: int = 3
    post: int = 2
    reads: int = 4                       # register read ports
    specials: int = 11                   # S2R values available to pre slots (isa.SPECIALS order)
    slot_opcodes: tuple[tuple[str, ...], ...] | None = None   # per slot; None = every ALU opcode
    # slots that also multiply: mul.lo is 6 MLP layers and ~2.7k units, so only these pay for it
    mul_slots: tuple[int, ...] = (4,)

    @property
    def slots(self) -> int:
        return self.pre + self.post

    def opcodes(self, k: int) -> tuple[str, ...]:
        ops = ALL_ALU_OPCODES if self.slot_opcodes is None else self.slot_opcodes[k]
        return tuple(o for o in ops if (k < self.pre or o != "S2R") and (k in self.mul_slots or o != "MUL"))

    def alu_names(self, k: int) -> tuple[str, ...]:
        """The slot's op one-hot: the fused ALU's ops, then 'mul' (an extra word the ALU selects)."""
        names = dict.fromkeys(ALU_OF_OPCODE[o] for o in self.opcodes(k))
        return tuple(n for n in names if n != "mul") + (("mul",) if "mul" in names else ())

    def sources(self, k: int | str, operand: str) -> tuple[str, ...]:
        """Operand sources of slot k (an int) or of 'mem' / 'cond', for operand 'a', 'b' or 'c'.
        Names: 'rI' register read port I, 'sJ' slot J's result, 'ld' the loaded value, 'imm', 'zero',
        'sp' the slot's special value."""
        upto = {"mem": self.pre, "cond": self.slots}.get(k, k)
        regs = tuple(f"r{i}" for i in range(self.reads))
        slots = tuple(f"s{j}" for j in range(upto))
        ld = ("ld",) if (k == "cond" or (isinstance(k, int) and k >= self.pre)) else ()
        extra = {"a": ("zero",) + (("sp",) if isinstance(k, int) and k < self.pre else ()),
                 "b": ("imm", "zero"), "c": ("zero",)}[operand]
        if (k, operand) == ("mem", "c"):    # zero first: a block without CAS leaves its ROM field (word) 0, unsent
            return extra + regs + slots + ld
        return regs + slots + ld + extra


@dataclass
class SlotFields:
    """The decoded fields of one ALU slot, as groups (one-hot over the format's lists)."""

    op: Group            # over fmt.alu_names(k)
    a: Group             # over fmt.sources(k, 'a')
    b: Group
    c: Group
    imm: Word
    special: Group       # over fmt.specials (pre slots; ignored elsewhere)


@dataclass
class BlockFields:
    slots: list[SlotFields]
    mem_a: Group         # address base, over fmt.sources('mem', 'a')
    mem_imm: Word
    mem_data: Group      # store data, over fmt.sources('mem', 'b')
    cond: Group          # branch register, over fmt.sources('cond', 'c')
    mem_c: Group | None = None   # an atomic's third operand (CAS: the new word), over fmt.sources('mem', 'c')


@dataclass
class LaneOutputs:
    results: list[Word]          # per ALU slot
    address: Word                # memory slot: A + imm
    store_data: Word
    third: Word | None
    cond: Group                  # bit: the branch register is non-zero
    extra: dict = field(default_factory=dict)


def block_inputs(c: Circuit, fmt: CoreFormat, prefix: str = "") -> BlockFields:
    """Circuit inputs for a block's decoded fields (the ROM supplies these in the GPU)."""
    slots = []
    for k in range(fmt.slots):
        slots.append(SlotFields(
            c.input(f"{prefix}op{k}", len(fmt.alu_names(k))),
            *(c.input(f"{prefix}src{o}{k}", len(fmt.sources(k, o))) for o in "abc"),
            c.input_word(f"{prefix}imm{k}"),
            c.input(f"{prefix}sp{k}", fmt.specials)))
    return BlockFields(slots, c.input(f"{prefix}mema", len(fmt.sources("mem", "a"))), c.input_word(f"{prefix}memimm"),
                       c.input(f"{prefix}memd", len(fmt.sources("mem", "b"))),
                       c.input(f"{prefix}cond", len(fmt.sources("cond", "c"))),
                       c.input(f"{prefix}memc", len(fmt.sources("mem", "c"))))


def _select(c: Circuit, sel: Group, options: dict[str, Word], names: tuple[str, ...], name: str) -> Word:
    if sel.size != len(names):
        raise CircuitError(f"{name}: selector of size {sel.size} for {len(names)} sources")
    return lib.mux_onehot(c, sel, [options[n] for n in names], name)


def _special_word(c: Circuit, sel: Group, specials: list[Word], name: str) -> Word:
    return lib.mux_onehot(c, sel, specials, name)


def _nonzero_of(c: Circuit, sel: Group, options: dict[str, Word], names: tuple[str, ...], name: str) -> Group:
    """[the selected word != 0]: per source a bit [selected and not zero] (a step on its bit count + 33 *
    selected >= 34), each placed as soon as its source exists so the words need not stay for it; then
    their OR (at most one is set)."""
    nz = [c.gate(f"{name}.{n}", 2, 0, lib.step_units([(x, 1, 1) for x in options[n]] + [(sel, k, 33)], 34))
          for k, n in enumerate(names) if n != "zero"]
    return c.gate(name, 2, 0, [lib.and_unit([(b, 1)], lib.SET) for b in nz])


Forward = Callable[[str, Word], Word]


def lane_datapath(c: Circuit, fmt: CoreFormat, f: BlockFields, regs: list[Word], specials: list[Word],
                  load: Word | None = None, name: str = "lane", forward: Forward | None = None) -> LaneOutputs:
    """Build one lane's block execution. regs: the values of the block's register read ports; specials:
    this lane's S2R values (isa.SPECIALS order, fmt.specials of them); load: the memory slot's loaded
    value (None: the memory stage is built by the caller after `address`, and passed later through
    `post_slots`). forward(source name, word): the copy of a slot result (or the load) that later slots
    and the caller use, e.g. a memory's read-back of it, so the ALU's own output can be cleared early."""
    if len(regs) != fmt.reads or len(specials) != fmt.specials:
        raise CircuitError(f"{name}: {len(regs)} register reads / {len(specials)} specials for a format with "
                           f"{fmt.reads} / {fmt.specials}")
    values: dict[str, Word] = {f"r{i}": w for i, w in enumerate(regs)}
    values["zero"] = const_word(0)
    fwd = forward or (lambda n, w: w)
    results = []
    for k in range(fmt.pre):
        results.append(fwd(f"s{k}", _slot(c, fmt, k, f.slots[k], values, specials, name)))
        values[f"s{k}"] = results[-1]
    address = lib.add(c, _select(c, f.mem_a, values, fmt.sources("mem", "a"), f"{name}.mema"), f.mem_imm, 0,
                      f"{name}.addr")
    store = _select(c, f.mem_data, values | {"imm": f.mem_imm}, fmt.sources("mem", "b"), f"{name}.memd")
    third = _select(c, f.mem_c, values, fmt.sources("mem", "c"), f"{name}.memc") if f.mem_c is not None else None
    out = LaneOutputs(results, address, store, third, None)
    out.extra["values"], out.extra["forward"] = values, fwd
    if load is not None:
        post_slots(c, fmt, f, out, values, load, name)
    return out


def post_slots(c: Circuit, fmt: CoreFormat, f: BlockFields, out: LaneOutputs, values: dict[str, Word],
               load: Word, name: str = "lane") -> None:
    """The post slots and the branch condition, once the loaded value exists."""
    fwd = out.extra["forward"]
    values["ld"] = fwd("ld", load)
    for k in range(fmt.pre, fmt.slots):
        out.results.append(fwd(f"s{k}", _slot(c, fmt, k, f.slots[k], values, [], name)))
        values[f"s{k}"] = out.results[-1]
    out.cond = _nonzero_of(c, f.cond, values, fmt.sources("cond", "c"), f"{name}.cond")


def _slot(c: Circuit, fmt: CoreFormat, k: int, s: SlotFields, values: dict[str, Word], specials: list[Word],
          name: str) -> Word:
    opts = dict(values)
    opts["imm"] = s.imm
    if k < fmt.pre:
        opts["sp"] = _special_word(c, s.special, specials, f"{name}.sp{k}")
    a = _select(c, s.a, opts, fmt.sources(k, "a"), f"{name}.a{k}")
    b = _select(c, s.b, opts, fmt.sources(k, "b"), f"{name}.b{k}")
    names = fmt.alu_names(k)
    third = _select(c, s.c, opts, fmt.sources(k, "c"), f"{name}.c{k}") if "sel" in names else None
    extras = (lib.mul_lo(c, a, b, f"{name}.mul{k}"),) if "mul" in names else ()
    return lib.alu(c, s.op, a, b, tuple(n for n in names if n != "mul"), extras, f"{name}.alu{k}", third=third,
                   clamp_shifts=False)

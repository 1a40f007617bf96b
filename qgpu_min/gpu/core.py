"""The GPU circuit: every token of a launch runs through it (qgpu_min.circuit IR, compiled by it).

Data flow of one token, in depth order (the planner places each part as early as its inputs allow):

  embedding   the token's fields: kind, payload bits, block/lane/warp/entry, ROM and memory addresses,
              the launch shape, a cta token's CTA
  ctx         (memories) the block, lane, warp and barrier parity of the last EXEC, the CTA, the grid and
              block shape, read by every token; the next CTA's coordinates
  ROM         (memories, one per row of layout.rom_rows) read at the current block; written by the
              prompt: a row's 32 bits arrive in three `pay` tokens before its `rom` token (conv taps)
  decode      ROM bits -> one-hot fields for the datapath
  registers   (memory, rows (warp * lanes + lane) * 16 + r) read through the block's read ports; written
              by the W3 token of a write-back, whose 32 bits arrive over WA, WB, W3 (conv taps)
  step        (memories) the previous EXEC (from the token before, through the conv tap) and the lanes of the
              current warp step that ran before this one; a vote's predicate in every lane (a register-file
              copy, 4 ports)
  datapath    datapath.py: pre slots, memory address and data
  shuffle     (memory) a copy of the register file, written as it is, read at (warp, source lane, register)
  data memory (memory) loads, stores, atomics' records, and the prompt's array words (`pay` x3 + `mem`)
  datapath    post slots, branch condition
  warp table  (memory, one row per lane of each warp: pc, exited) updated by EXEC
  scheduler   the next EXEC (same block, next active lane; the warp's next step; the next ready warp,
              or a barrier opening) or the end of the CTA; a vote's word, once the step's active lanes
              after this one are known (its own outbox: only the write-back reads it)
  outbox      (memories) the EXEC's slot results and load, read by the write-back tokens
  output      the code of the next token: WA/WB/W3 of the next write-back entry, the scheduler's
              decision, CTA tokens for the next CTA, HALT after the last, or FAULT

Every memory is initialised by the first token (init), through its 'now' source; values assembled from
earlier tokens use an alternative source (ir.MemOp.alternatives), present only on the tokens that
carry them, so both kinds of write share a memory. A cta token clears what a CTA starts with (its warp's
registers, the warp tables); memory and ROM persist across CTAs, as on the machine.

Limits (GpuSpec): warps x lanes threads per CTA (any 2-D block shape within them), spec.ctas CTAs; word
LD/ST, the read-modify-writes of layout.ATOM_OPS (the atomics, byte and halfword stores), shuffles and
votes (the register they read from other lanes unchanged through the block, a vote's result not read in
it: BlockFormat.lane_serial); the datapath's ALU opcodes; ROM of spec.blocks blocks, spec.mem_words words
of memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..circuit import lib
from ..circuit.compile import OutputCode
from ..machine.interp import shfl_source
from ..machine.isa import LANES
from ..circuit.ir import (CONST, ROW_CHANNELS, Circuit, Group, Product, Unit, Word, const_bit, decode_view, onehot_bits,
                          view)
from .datapath import BlockFields, SlotFields, lane_datapath, post_slots
from .layout import (ATOM_OPS, KINDS, MEM_KINDS, PAY_BITS, RECORD_REG, SHFL_MODES, SMALL_BITS, TERM_KINDS,
                     VOTE_MODES, WB_PAYLOADS, GpuSpec, bits_for, field_offsets, rom_rows)

# the atomic ALU's op one-hot follows layout.ATOM_OPS: lib.alu ops, then the extra words (EXCH: B itself;
# STB, STH: old with B's low byte / halfword put in; INC, DEC: the wrapping counters; CAS: C if old == B)
ATOM_EXTRA = ("EXCH", "STB", "STH", "INC", "DEC", "CAS")
ATOM_ALU = tuple(op.lower() for op in ATOM_OPS if op not in ATOM_EXTRA)
assert ATOM_OPS[len(ATOM_ALU):] == ATOM_EXTRA, "the extra words come after lib.alu's ops in the op one-hot"

ABSENT = 2   # the third element of a payload bit: this token carries no such bit


@dataclass
class GpuCircuit:
    spec: GpuSpec
    circuit: Circuit
    inputs: dict                  # name -> input group (or list of groups)
    codes: dict                   # code name -> input group(s) of the token's own code
    out_code: OutputCode
    data_memory: object           # the Memory whose rows are the launch's words
    rom_memories: dict = field(default_factory=dict)   # row name -> Memory
    probes: dict = field(default_factory=dict)         # name -> groups, for tests and --check


def _kind_is(kind: Group, *names: str) -> Group:
    """Bit (a view): the token's kind is one of `names`."""
    return decode_view(kind, 2, lambda e: int(KINDS[e] in names), "is_" + "_".join(names))


def _row0_when(kind: Group, *names: str) -> Group:
    """Write address of a one-row memory: row 0 on tokens of these kinds, else none."""
    return decode_view(kind, 2, lambda e: 0 if KINDS[e] in names else 1, "w0_" + "_".join(names))


def _const_row(size: int, row: int) -> Group:
    return view(CONST, tuple(0 if e == row else None for e in range(size)), f"row{row}")


def _zero_on(kind: Group, n: int, *kinds: str) -> list[Group]:
    """'now' source of a word that is 0 on tokens of these kinds and absent on every other token."""
    return [decode_view(kind, 3, lambda e: 0 if KINDS[e] in kinds else ABSENT, f"zero.{'_'.join(kinds)}[{i}]")
            for i in range(n)]


def _payload_alternatives(pay: list[Group], taps: tuple[int, ...]) -> list[tuple[int, Group, int]]:
    """Field i of a 32-bit row from payload bit i % PAY_BITS of the token taps[i // PAY_BITS] back."""
    return [(i, pay[i % PAY_BITS], taps[i // PAY_BITS]) for i in range(32)]


def _step_down(terms: list, theta: int) -> list:
    """Units that subtract [sum terms >= theta] (lib.step_units with the opposite sign)."""
    return [Unit(tuple(terms), theta - 1, lib.UNSET), Unit(tuple(terms), theta, lib.SET)]


def _binary(c: Circuit, g: Group, name: str, offset: int = 0) -> list[Group]:
    """The bits of (g's element + offset), each its own gate: fewer dims than the one-hot where it must
    stay alive long."""
    return [c.gate(f"{name}[{k}]", 2, 0, [lib.and_unit([(g, v)], lib.SET) for v in range(g.size) if (v + offset) >> k & 1])
            for k in range((g.size - 1 + offset).bit_length())]


def _equal_units(a: list[Group], b: list[Group], lits: list = ()) -> list[Unit]:
    """Units of the bit [binary a == binary b] (and the literals `lits`): sum 2^k (a_k - b_k) is 0."""
    terms = [(a[k], 1, 1 << k) for k in range(len(a))] + [(b[k], 1, -(1 << k)) for k in range(len(b))]
    units = lib.step_units(terms, 0) + _step_down(terms, 1)
    return lib.gated(units, list(lits)) if lits else units


def _step_bit(bits: list[Group], i: int, carry: int, when: list = ()) -> list[Unit]:
    """Units of bit i of x + 1 (carry 1) or x - 1 (carry 0) for binary x = `bits`, ANDed with `when`: x_i
    flipped when the bits below are all 1 (all 0)."""
    when, below = list(when), [(bits[j], carry) for j in range(i)]
    return [lib.and_unit(when + [(bits[i], 1)], lib.SET),
            lib.and_unit(when + [(bits[i], 1)] + below, lib.UNSET),
            lib.and_unit(when + [(bits[i], 0)] + below, lib.SET)]


def _is(bits: list[Group], v: int) -> list[tuple[Group, int]]:
    """Literals: the binary `bits` spell v."""
    return [(b, v >> k & 1) for k, b in enumerate(bits)]


def _word_of_onehot(g: Group, name: str) -> Word:
    """A small one-hot value as a 32-bit word (views: free)."""
    bits = onehot_bits(g, max(1, (g.size - 1).bit_length()), name)
    return bits + [const_bit(0)] * (32 - len(bits))


def _shuffle_units(on: Group, mode: Group, lane: Group, b: Word, cw: Word) -> list[Unit]:
    """Units of the source lane of a shuffle (on a `on` token; else lane 0: a read always names one row) as a
    one-hot (interp.shfl_source): it depends on
    B's bits 0-4 (one of bits 2-4 set: out of any warp, except for IDX) and C's bits 0, 1, 8, 9 (the clamp
    and segment bits a 4-lane warp has)."""
    assert lane.size == LANES, "the shuffle rule is the machine's, for its warp width"
    units = []
    c_bits = [cw[0], cw[1], cw[8], cw[9]]
    high_b = ([(b[2], 1)], [(b[2], 0), (b[3], 1)], [(b[2], 0), (b[3], 0), (b[4], 1)])
    for m, name in enumerate(SHFL_MODES):
        for l in range(lane.size):
            common = [(on, 1), (mode, m), (lane, l)]
            for low in range(4):
                for cv in range(16):
                    bv, c_val = low, (cv & 3) | (cv >> 2) << 8
                    j = shfl_source(name, l, bv, c_val)
                    lits = common + [(b[0], low & 1), (b[1], low >> 1)] + _is(c_bits, cv)
                    if name != "IDX":
                        lits += [(b[2], 0), (b[3], 0), (b[4], 0)]
                    if j:
                        units.append(lib.and_unit(lits, ((j, 1), (0, -1))))
            if name != "IDX" and l:     # B >= 4 reaches no other lane of a 4-lane warp: the lane itself
                units += [lib.and_unit(common + big, ((l, 1), (0, -1))) for big in high_b]
    return units


def build(spec: GpuSpec = GpuSpec()) -> GpuCircuit:
    fmt = spec.fmt
    c = Circuit("gpu")
    rows = rom_rows(spec)
    n_rom = len(rows)
    L, B, W, NW, T = spec.lanes, spec.blocks, spec.wb_entries, spec.warps, spec.threads
    NB = bits_for(B)    # a block number is binary everywhere (a one-hot of 128 fits no memory row)

    # ---- embedding fields -------------------------------------------------------------------------
    kind = c.input("kind", len(KINDS))
    pay = [c.input(f"pay[{i}]", 3) for i in range(PAY_BITS)]        # prompt payload (bit, or absent)
    # write-back payloads, one group per token role, so a source is present only on its own role's token
    # (the register file's assembled source must be absent on a w1, whose value comes through 'now')
    wpay = {r: [c.input(f"{r}pay[{i}]", 3) for i in range(n)] for r, n in WB_PAYLOADS.items()}
    x_b = [c.input(f"x_b[{k}]", 2) for k in range(NB)]
    x_l, x_e = c.input("x_l", L), c.input("x_e", W)
    x_w, x_p = c.input("x_w", NW), c.input("x_p", 2)   # an EXEC's warp and barrier parity; an init's warp
    # a ROM write's row m (then none, every row) and block b (binary): the product is the address
    x_rm, x_rb = c.input("x_rm", n_rom + 2), [c.input(f"x_rb[{k}]", 2) for k in range(NB)]
    # a mem token's word address, in binary (a one-hot would hold its dims until the data memory's layer)
    x_mem = [c.input(f"x_mem[{k}]", 2) for k in range(bits_for(spec.mem_words))]
    x_n = c.input("x_n", T + 1)                      # a launch token: threads of a CTA, ntid.x, ntid.y
    x_bx, x_by = c.input("x_bx", T + 1), c.input("x_by", T + 1)
    C = spec.ctas       # a cta token's (ctaid.x, ctaid.y); a grid token's (nctaid.x - 1, nctaid.y - 1)
    x_cx, x_cy = c.input("x_cx", C), c.input("x_cy", C)
    code_in = {"kind": c.input("code_kind", len(KINDS)), "b": [c.input(f"code_b[{k}]", 2) for k in range(NB)],
               "l": c.input("code_l", L),
               "w": c.input("code_w", NW), "p": c.input("code_p", 2),
               "e": c.input("code_e", W), "pay": [c.input(f"code_pay[{i}]", 2) for i in range(PAY_BITS)]}
    is_init, is_exec = _kind_is(kind, "init"), _kind_is(kind, "exec")
    clears = _kind_is(kind, "init", "cta")     # initialises its warp's registers and the write-back pointer
    is_cta = _kind_is(kind, "cta")

    # ---- context: the current EXEC's block, lane, warp and barrier parity; the CTA; the launch shape ------
    # (the init and cta tokens come last warp first, so the context holds warp 0 when the next EXEC comes)
    *b_bits, cur_l, cur_w, cur_p = c.access(c.memory("ctx", 1, (2,) * NB + (L, NW, 2)),
                                            _row0_when(kind, "exec", "init", "cta"), [*x_b, x_l, x_w, x_p],
                                            [_const_row(1, 0)])[0]
    # the ROM's rows are addressed by the block's bits (a product address, most significant bit first)
    rom_at = Product(tuple(reversed(b_bits)), (2,) * NB)
    # (one memory per coordinate: a row holds at most ROW_CHANNELS channels)
    cur_cx, cur_cy, grid_x, grid_y = (
        c.access(c.memory(name, 1, (C,)), _row0_when(kind, on, "init"), [x], [_const_row(1, 0)])[0][0]
        for name, on, x in (("cta.x", "cta", x_cx), ("cta.y", "cta", x_cy), ("grid.x", "grid", x_cx),
                            ("grid.y", "grid", x_cy)))      # grid: nctaid - 1
    cur_n, cur_bx, cur_by = c.access(c.memory("launch", 1, (T + 1,) * 3), _row0_when(kind, "launch", "init"),
                                     [x_n, x_bx, x_by], [_const_row(1, 0)])[0]

    # the first cta token (the block's last warp) empties the register file and the warp tables (a memory
    # reset: the DeltaNet decay) before they are initialised again
    top_warp = decode_view(cur_n, NW, lambda n: max(n - 1, 0) // L, "top.warp")
    cta_first = c.gate("cta.first", 2, 0, [lib.and_unit([(is_cta, 1), (x_w, v), (top_warp, v)], lib.SET)
                                           for v in range(NW)])

    # ---- the next CTA (x fastest): its coordinates go out in a cta token's payload bits. On a cta token the
    # context already holds its own CTA, which the next cta token (the next warp down) repeats. The one-hot
    # coordinates are used once, right after they are read (the residual is fullest two layers later); y and
    # the grid's height go on as binary words, which the specials use too.
    CB = spec.cta_bits
    assert 2 * CB <= PAY_BITS, "a cta token's code carries both coordinates in its payload bits"

    def binary_word(g: Group, name: str, offset: int = 0) -> Word:
        bits = _binary(c, g, name, offset)
        return bits + [const_bit(0)] * (32 - len(bits))
    cx_word, cy_word = binary_word(cur_cx, "ctaid.x"), binary_word(cur_cy, "ctaid.y")
    gx_word, gy_word = binary_word(grid_x, "nctaid.x", 1), binary_word(grid_y, "nctaid.y", 1)
    wrap = c.gate("cta.wrap", 2, 0, [lib.and_unit([(cur_cx, v), (grid_x, v)], lib.SET) for v in range(C)])
    # the last CTA: x wrapped and y + 1 == nctaid.y, i.e. s = nctaid.y - y + 128 * wrap is 129
    big = 1 << (CB + 1)
    last_terms = [(gy_word[k], 1, 1 << k) for k in range(CB + 1)] + [(cy_word[k], 1, -(1 << k)) for k in range(CB)] \
        + [(wrap, 1, big)]
    last_cta = c.gate("cta.last", 2, 0, lib.step_units(last_terms, big + 1) + _step_down(last_terms, big + 2))
    cta_pay = []
    x_not_last = [decode_view(grid_x, 2, lambda g, v=v: int(g != v), f"gx!={v}") for v in range(C)]
    for k_ in range(CB):      # x + 1, or 0 after the last column; a cta token: its own x
        cta_pay.append(c.gate(f"cta.pay[{k_}]", 2, 0,
                              [lib.and_unit([(is_cta, 1), (cur_cx, v)], lib.SET) for v in range(C) if v >> k_ & 1]
                              + [lib.and_unit([(is_cta, 0), (x_not_last[v], 1), (cur_cx, v)], lib.SET)
                                 for v in range(C) if (v + 1) >> k_ & 1]))
    for k_ in range(CB):      # y + wrap (bit k: the low k+1 bits plus wrap are in [2^k, 2^(k+1))); own y
        terms = [(cy_word[j], 1, 1 << j) for j in range(k_ + 1)] + [(wrap, 1, 1)]
        units = lib.gated(lib.step_units(terms, 1 << k_) + _step_down(terms, 2 << k_), [(is_cta, 0)])
        cta_pay.append(c.gate(f"cta.pay[{CB + k_}]", 2, 0, units + [lib.and_unit([(is_cta, 1), (cy_word[k_], 1)], lib.SET)]))

    # ---- ROM ------------------------------------------------------------------------------------
    rom: dict[str, list[Group]] = {}
    rom_mems = {}
    for m, name in enumerate(rows):
        mem = c.memory(f"rom.{name}", B, (2,) * 32)
        rom_mems[name] = mem
        # this row: 0; every row (init, clear: the block's words are 0): 1; another row or none: 2 (no write)
        this = decode_view(x_rm, 3, lambda e, m=m: 0 if e == m else 1 if e == n_rom + 1 else 2, f"rom.{name}.m")
        waddr = Product((this, *reversed(x_rb)), (1,) + (2,) * NB, (1,) + (None,) * NB)
        rom[name] = c.access(mem, waddr, _zero_on(kind, 32, "init", "clear"), [rom_at],
                             alternatives=_payload_alternatives(pay, (3, 2, 1)))[0]

    def field_bits(row: str, fname: str) -> list[Group]:
        lo, nb = field_offsets(rows[row])[fname]
        return rom[row][lo:lo + nb]

    def field_of(row: str, fname: str, size: int) -> Group:
        return lib.onehot_of_bits(c, field_bits(row, fname), size, f"{row}.{fname}")

    slots = [SlotFields(field_of(f"slot{k}", "op", len(fmt.alu_names(k))),
                        *(field_of(f"slot{k}", o, len(fmt.sources(k, o))) for o in "abc"),
                        rom[f"imm{k}"], field_of(f"slot{k}", "sp", fmt.specials)) for k in range(fmt.slots)]
    fields = BlockFields(slots, field_of("ctl", "mema", len(fmt.sources("mem", "a"))), rom["memimm"],
                         field_of("ctl", "memd", len(fmt.sources("mem", "b"))),
                         field_of("reads", "cond", len(fmt.sources("cond", "c"))),
                         field_of("reads", "memc", len(fmt.sources("mem", "c"))))
    mem_kind = field_of("ctl", "mem", len(MEM_KINDS))
    term = field_of("ctl", "term", len(TERM_KINDS))
    # the branch targets stay binary (ROM bits) until the next pc is chosen, ~30 layers later
    taken, not_taken = field_bits("ctl", "taken"), field_bits("ctl", "not_taken")
    # the memory slot's variant: an atomic's op (the atomic ALU's one-hot), or a shuffle's mode (a view of it)
    variant = field_of("ctl", "variant", len(ATOM_OPS))
    shfl_mode = decode_view(variant, len(SHFL_MODES), lambda e: e if e < len(SHFL_MODES) else None, "shfl.mode")
    vote_mode = decode_view(variant, len(VOTE_MODES), lambda e: e if e < len(VOTE_MODES) else None, "vote.mode")
    cross_reg = field_of("reads", "cross", spec.regs)
    read_reg = [field_of("reads", f"r{i}", spec.regs) for i in range(fmt.reads)]
    wb_reg = [field_of("wbreg", f"reg{e}", spec.regs) for e in range(W)]
    wb_count = field_of("wbsrc", "count", W + 1)
    wb_src = [field_of("wbsrc", f"src{e}", len(spec.wb_sources)) for e in range(W)]

    # ---- register file: rows (warp * lanes + lane) * regs + r; a product address (warp, lane * regs + r) --
    R = spec.regs
    ends = _kind_is(kind, "w3", "w1")      # the token that completes a write-back entry writes the register
    is_w1 = _kind_is(kind, "w1")
    units = [lib.and_unit([(clears, 1)], ((L * R + 1, 1), (L * R, -1)))]
    for l in range(L):
        for e in range(W):
            for r in range(R):      # r15's row is the scratch of an atomic's record (layout.RECORD_REG)
                units.append(lib.and_unit([(ends, 1), (cur_l, l), (x_e, e), (wb_reg[e], r)],
                                          ((l * R + r, 1), (L * R, -1))))
    reg_waddr = c.gate("regs.w", L * R + 2, L * R, units)
    # the warp part: the current warp; an init or cta token's own warp (its 'every' covers that warp's rows
    # only: the count of rows one write keys in a bank must be a power of 4)
    reg_wwarp = c.gate("regs.ww", NW, 0, [lib.and_unit([(clears, 0), (cur_w, w)], ((w, 1), (0, -1))) for w in range(1, NW)]
                       + [lib.and_unit([(clears, 1), (x_w, w)], ((w, 1), (0, -1))) for w in range(1, NW)])

    def in_warp(a: Group, every: int | None = None) -> Product:
        return Product((reg_wwarp if every is not None else cur_w, a), (NW, L * R), (None, every))
    # the last read port doubles as the record's scratch read on a write-back's last token (a block with an
    # atomic reads at most reads - 1 registers: program.block_format), which recomputes the address from the others
    scratch_port = fmt.reads - 1
    reg_raddr = [c.gate(f"regs.r{i}", L * R, 0, [lib.and_unit([(cur_l, l), (read_reg[i], r)] + ([(ends, 0)] if i == scratch_port else []),
                                                               ((l * R + r, 1), (0, -1)))
                                                  for l in range(L) for r in range(R) if l or r]
                        + ([lib.and_unit([(ends, 1), (cur_l, l)], ((l * R + RECORD_REG, 1), (0, -1))) for l in range(L)]
                           if i == scratch_port else []))
                 for i in range(fmt.reads)]
    # 'now' source: 0 on init and cta, a w1's sign-extended small value; the alternative: a w3's three tokens
    reg_now = [c.gate(f"regs.now[{i}]", 3, ABSENT,
                      [lib.and_unit([(clears, 1)], ((0, 1), (ABSENT, -1)))]
                      + [lib.and_unit([(is_w1, 1), (wpay["w1"][min(i, SMALL_BITS - 1)], v)], ((v, 1), (ABSENT, -1)))
                         for v in (0, 1)]) for i in range(32)]
    assembled = [(i, wpay[r][i - lo], tap) for r, lo, tap in (("wa", 0, 2), ("wb", PAY_BITS, 1), ("w3", 2 * PAY_BITS, 0))
                 for i in range(lo, min(lo + PAY_BITS, 32))]
    def register_file(name: str, reads: list[Product]) -> list[Word]:
        """A memory written exactly as the register file is (its copies only add read ports elsewhere)."""
        return c.access(c.memory(name, NW * L * R, (2,) * 32), in_warp(reg_waddr, L * R + 1), reg_now, reads,
                        alternatives=assembled, reset=cta_first)
    regs = register_file("regs", [in_warp(a) for a in reg_raddr])
    scratch = regs[scratch_port]

    # ---- the warp step's lanes so far (a vote's active lanes before this one) ------------------------------
    # 'prev' gets, on each EXEC, the previous token's context (conv tap 1): the last EXEC's block bits, lane
    # and warp (a write-back's context is its EXEC's; after init or cta tokens warp w, block 0, lane 0). A
    # step starts unless the last EXEC was the same warp and block at a lower lane (lanes of a step run in
    # increasing order, and a step at the block a step just ran runs a subset of its lanes)
    def tapped(g: Group, name: str) -> Group:
        """g on every token but init (absent there): the previous-token source of prev's fields."""
        return c.gate(name, g.size + 1, g.size, [lib.and_unit([(is_init, 0), (g, v)], ((v, 1), (g.size, -1)))
                                                 for v in range(g.size)])
    prev_src = [tapped(g, f"prev.src{i}") for i, g in enumerate(b_bits + [cur_l, cur_w])]
    prev_now = [decode_view(kind, g.size, lambda e, n=g.size - 1: 0 if KINDS[e] == "init" else n, f"prev.now{i}")
                for i, g in enumerate(prev_src)]
    prev = c.access(c.memory("prev", 1, tuple(g.size - 1 for g in prev_src)), _row0_when(kind, "exec", "init"),
                    prev_now, [_const_row(1, 0)], alternatives=[(i, g, 1) for i, g in enumerate(prev_src)])[0]
    same_b = c.gate("prev.same_b", 2, 0, _equal_units(prev[:len(b_bits)], b_bits))
    p_l, p_w = prev[len(b_bits)], prev[len(b_bits) + 1]
    goes_on = c.gate("step.goes_on", 2, 0, [lib.and_unit([(same_b, 1), (p_w, w), (cur_w, w), (p_l, a), (cur_l, l)],
                                                          lib.SET) for w in range(NW) for l in range(L) for a in range(l)])
    step_start = c.gate("step.start", 2, 0, [lib.and_unit([(is_exec, 1), (goes_on, 0)], lib.SET)])
    # 'step': one row per lane, emptied and written whole (every row: this lane) by a step's first EXEC, row l
    # (l) by the step's EXEC of lane l; so row j names j exactly when lane j has run in this step
    step_w = c.gate("step.w", L + 2, L, [lib.and_unit([(is_init, 1)], ((L + 1, 1), (L, -1))),
                                         lib.and_unit([(step_start, 1)], ((L + 1, 1), (L, -1)))]
                    + [lib.and_unit([(is_exec, 1), (goes_on, 1), (cur_l, l)], ((l, 1), (L, -1))) for l in range(L)])
    ran = [decode_view(g, 2, lambda e, j=j: int(e == j), f"ran{j}") for j, g in enumerate(
        r[0] for r in c.access(c.memory("step", L, (L,)), step_w, [cur_l], [_const_row(L, j) for j in range(L)],
                               reset=step_start))]
    # the vote's predicate of every lane of the warp: register `cross` is nonzero (a copy of the register file
    # read at each lane; the block leaves that register unchanged, so every lane's holds the step's value)
    votes_rd = register_file("regs.votes", [Product((cur_w, _const_row(L, j), cross_reg), (NW, L, R))
                                            for j in range(L)])
    nonzero = [c.gate(f"vote.nz{j}", 2, 0, lib.step_units([(b, 1, 1) for b in w], 1)) for j, w in enumerate(votes_rd)]
    # a W3 whose entry is the record (register r15) writes the assembled word to memory too
    record = c.gate("record", 2, 0, [lib.and_unit([(ends, 1), (x_e, e), (wb_reg[e], RECORD_REG)], lib.SET)
                                     for e in range(W)])

    # ---- specials: the order of machine.isa.SPECIALS ------------------------------------------------------
    # thread t = warp * lanes + lane is (t % ntid.x, t // ntid.x); the CTA coordinates become binary words
    # here, so that their one-hots are not kept alive until the datapath reads them
    def thread_units(f) -> list:
        return [lib.and_unit([(cur_w, w), (cur_l, l), (cur_bx, bx)], ((f(w * L + l, bx), 1), (0, -1)))
                for w in range(NW) for l in range(L) for bx in range(1, T + 1) if f(w * L + l, bx)]
    tid_x = c.gate("tid.x", T, 0, thread_units(lambda t, bx: t % bx))
    tid_y = c.gate("tid.y", T, 0, thread_units(lambda t, bx: t // bx))

    # the linear index warp * lanes + lane: the lane's bits under the warp's (lanes is a power of 2)
    assert L & (L - 1) == 0, "tid.lin is the lane's bits under the warp's"
    lane_bits = onehot_bits(cur_l, bits_for(L), "tid.lane")
    tid_word = (lane_bits + onehot_bits(cur_w, bits_for(NW), "tid.warp") + [const_bit(0)] * 32)[:32]
    specials = [_word_of_onehot(tid_x, "tid.x"), _word_of_onehot(tid_y, "tid.y"),
                binary_word(cur_bx, "ntid.x"), binary_word(cur_by, "ntid.y"),
                cx_word, cy_word, gx_word, gy_word,
                _word_of_onehot(cur_l, "lane"), _word_of_onehot(cur_w, "warpid"), tid_word]
    specials = specials[:fmt.specials]

    # ---- datapath, data memory ------------------------------------------------------------------------
    # the outbox: every slot result and the load, kept for the write-back tokens; its read-back is also
    # what later slots use, so the ALU's own output is cleared as soon as the outbox has it
    box: dict[str, Word] = {}

    def to_outbox(name: str, word: Word) -> Word:
        box[name] = c.access(c.memory(f"out.{name}", 1, (2,) * 32), _row0_when(kind, "exec", "init"), word,
                             [_const_row(1, 0)])[0]
        return box[name]
    out = lane_datapath(c, fmt, fields, regs, specials, None, "lane", to_outbox)
    addr = out.address
    # a word address is (hi, lo): lo names a row of a 64-row bank (the banks of a memory written all at
    # once), hi the bank; the memory's rows are the product, so no group holds a one-hot of every word
    N = spec.mem_words
    nb = bits_for(N)
    lo_bits = min(nb, bits_for(ROW_CHANNELS // 2))
    LO, HI = 1 << lo_bits, N >> lo_bits
    word_lo = lib.onehot_of_bits(c, addr[2:2 + lo_bits], LO, "mem.lo")
    word_hi = lib.onehot_of_bits(c, addr[2 + lo_bits:2 + nb], HI, "mem.hi") if HI > 1 else _const_row(1, 0)
    accesses = decode_view(mem_kind, 2, lambda e: int(MEM_KINDS[e] in ("LD", "ST", "ATOM")), "accesses")
    # outside the memory, or misaligned: a word access needs both low bits 0, STH bit 0, STB neither
    # (4 per high bit, 2 for bit 0, 1 for bit 1, less 3 for STB and 1 for STH: >= 1 exactly when it faults)
    stb, sth = (variant, ATOM_OPS.index("STB")), (variant, ATOM_OPS.index("STH"))
    off = [(b, 1, 4) for b in addr[2 + nb:]] + [(addr[0], 1, 2), (addr[1], 1, 1), (*stb, -3), (*sth, -1)]
    fault = c.gate("fault", 2, 0, lib.step_units(off + [(accesses, 1, 40), (is_exec, 1, 40)], 81))
    stores = [(is_exec, 1), (mem_kind, MEM_KINDS.index("ST")), (fault, 0)]
    records = [(record, 1), (fault, 0)]     # the datapath recomputes the EXEC's address: no register changed yet
    is_mem_tok = _kind_is(kind, "mem")

    def word_part(name: str, size: int, at: Group, bits: list[Group]) -> Group:
        """One part of the data memory's write address: a value, `size` = no write, size + 1 = every row."""
        return c.gate(f"mem.w{name}", size + 2, size,
                      [lib.and_unit([(is_init, 1)], ((size + 1, 1), (size, -1)))]
                      + [lib.and_unit([(is_mem_tok, 1)] + [(g, a >> k & 1) for k, g in enumerate(bits)],
                                      ((a, 1), (size, -1))) for a in range(size)]
                      + [lib.and_unit(when + [(at, a)], ((a, 1), (size, -1))) for when in (stores, records)
                         for a in range(size)])
    data_waddr = Product((word_part("hi", HI, word_hi, x_mem[lo_bits:]), word_part("lo", LO, word_lo, x_mem[:lo_bits])),
                         (HI, LO), (HI + 1, LO + 1))
    store_now = [c.gate(f"mem.v[{i}]", 3, ABSENT,
                        [lib.and_unit(stores + [(out.store_data[i], v)], ((v, 1), (ABSENT, -1))) for v in (0, 1)]
                        + [lib.and_unit(records + [(scratch[i], v)], ((v, 1), (ABSENT, -1))) for v in (0, 1)]
                        + [lib.and_unit([(is_init, 1)], ((0, 1), (ABSENT, -1)))]) for i in range(32)]
    data_mem = c.memory("data", N, (2,) * 32)
    (loaded,) = c.access(data_mem, data_waddr, store_now, [Product((word_hi, word_lo), (HI, LO))],
                         alternatives=_payload_alternatives(pay, (3, 2, 1)))
    # ---- shuffle: register `cross` of the source lane, from a copy of the register file ---------------------
    # the block leaves that register unchanged (program.block_format), so every lane's copy holds the value
    # of the warp step's start while the lanes run one after another
    is_shfl = decode_view(mem_kind, 2, lambda e: int(MEM_KINDS[e] == "SHFL"), "is_shfl")
    src_lane = c.gate("shfl.src", L, 0, _shuffle_units(is_shfl, shfl_mode, cur_l, out.store_data, out.third))
    (shuffled,) = register_file("regs.lanes", [Product((cur_w, src_lane, cross_reg), (NW, L, R))])
    # the memory slot's value: the loaded word, or the shuffled one
    slot_value = [c.gate(f"ld[{i}]", 2, 0, [lib.and_unit([(is_shfl, 0), (loaded[i], 1)], lib.SET),
                                            lib.and_unit([(is_shfl, 1), (shuffled[i], 1)], lib.SET)]) for i in range(32)]
    post_slots(c, fmt, fields, out, out.extra["values"], slot_value, "lane")
    loaded = box["ld"]
    # an atomic's new word: op(old, B), kept in the outbox for its record write-back
    def put(width: int) -> Word:
        """old with B's low `width` bits at the address's byte offset (the machine's sub-word store)."""
        shifts = range(0, 32, width)
        sel = [[(addr[1], s >> 4 & 1)] + ([(addr[0], s >> 3 & 1)] if width == 8 else []) for s in shifts]
        return [c.gate(f"atom.st{width}[{i}]", 2, 0,
                       [lib.and_unit(sel[s // width] + [(out.store_data[i - s], 1)], lib.SET) for s in shifts if s <= i < s + width]
                       + [lib.and_unit(sel[k] + [(loaded[i], 1)], lib.SET) for k, s in enumerate(shifts)
                          if not s <= i < s + width]) for i in range(32)]
    # INC: 0 if u(old) >= u(B) else old + 1; DEC: B if old == 0 or u(old) > u(B) else old - 1. Bit i of
    # old +- 1 is old_i flipped when the bits below are all 1 (all 0): one gate per bit after the compares
    lt, is0 = lib.ult(c, loaded, out.store_data, "atom.inc.lt"), lib.eq(c, loaded, [const_bit(0)] * 32, "atom.dec.zero")
    above = lib.ult(c, out.store_data, loaded, "atom.dec.gt")
    inc = [c.gate(f"atom.inc[{i}]", 2, 0, _step_bit(loaded, i, 1, [(lt, 1)])) for i in range(32)]
    dec = [c.gate(f"atom.dec[{i}]", 2, 0, _step_bit(loaded, i, 0, [(is0, 0), (above, 0)])
                  + [lib.and_unit([(is0, 1), (out.store_data[i], 1)], lib.SET),
                     lib.and_unit([(is0, 0), (above, 1), (out.store_data[i], 1)], lib.SET)]) for i in range(32)]
    cas = lib.mux_word(c, lib.eq(c, loaded, out.store_data, "atom.cas.eq"), out.third, loaded, "atom.cas")
    to_outbox("atom", lib.alu(c, variant, loaded, out.store_data, ATOM_ALU,
                              (out.store_data, put(8), put(16), inc, dec, cas), "atom", clamp_shifts=False))

    # ---- warp table: each lane's next pc and exit, rows warp * lanes + lane -------------------------------
    tk = {k: (term, TERM_KINDS.index(k)) for k in TERM_KINDS}
    # the next pc, in binary: JMP / BR's target, or the next block after a BAR
    next_b = [c.gate(f"b+1[{k}]", 2, 0, _step_bit(b_bits, k, 1)) for k in range(NB)]
    pc_new = [c.gate(f"pc.new[{k}]", 2, 0, [lib.and_unit([(is_exec, 1), tk["JMP"], (taken[k], 1)], lib.SET),
                                            lib.and_unit([(is_exec, 1), tk["BR"], (out.cond, 1), (taken[k], 1)], lib.SET),
                                            lib.and_unit([(is_exec, 1), tk["BR"], (out.cond, 0), (not_taken[k], 1)], lib.SET),
                                            lib.and_unit([(is_exec, 1), tk["BAR"], (next_b[k], 1)], lib.SET)])
              for k in range(NB)]
    exited_new = c.gate("exited.new", 2, 0, [lib.and_unit([(is_exec, 1), tk["EXIT"]], lib.SET)])
    NL = NW * L
    fresh = [[(is_init, 1)], [(cta_first, 1)]]     # the tokens that initialise the warp tables
    wt_waddr = c.gate("lanes.w", NL + 2, NL, [lib.and_unit(f, ((NL + 1, 1), (NL, -1))) for f in fresh]
                      + [lib.and_unit([(is_exec, 1), (fault, 0), (cur_w, w), (cur_l, l)], ((w * L + l, 1), (NL, -1)))
                         for w in range(NW) for l in range(L)])
    table = c.access(c.memory("lanes", NL, (2,) * NB + (2,)), wt_waddr, [*pc_new, exited_new],
                     [Product((cur_w, _const_row(L, j)), (NW, L)) for j in range(L)], reset=cta_first)
    pc_bits, exited = [t[:NB] for t in table], [t[NB] for t in table]

    # ---- scheduler: within the warp's step, then its turn, then the next warp (machine.interp's rule) ----
    # lane j of the current warp exists when warp * lanes + j < threads
    live = [c.gate(f"live{j}", 2, 0, [lib.and_unit(
        [(cur_w, w), (decode_view(cur_n, 2, lambda e, t=w * L + j: int(t < e), f"n>{w * L + j}"), 1), (exited[j], 0)],
        lib.SET) for w in range(NW)]) for j in range(L)]
    # cand_j: lane j > current lane, live, still at the current block: it runs next in this warp step
    cand = [c.gate(f"cand{j}", 2, 0, _equal_units(pc_bits[j], b_bits, [
        (decode_view(cur_l, 2, lambda e, j=j: int(e < j), f"l<{j}"), 1), (live[j], 1)])) for j in range(L)]
    # a vote: the step's active lanes are those that ran before this one (the step memory), this one, and the
    # candidates after it; its word goes to the outbox for the write-back (the block does not read it)
    active = [c.gate(f"vote.active{j}", 2, 0, [lib.and_unit([(cand[j], 1)], lib.SET), lib.and_unit([(cur_l, j)], lib.SET)]
                     + [lib.and_unit([(cur_l, l), (ran[j], 1)], lib.SET) for l in range(j + 1, L)]) for j in range(L)]
    vm = {m: (vote_mode, VOTE_MODES.index(m)) for m in VOTE_MODES}
    yes = [c.gate(f"vote.yes{j}", 2, 0, [lib.and_unit([(active[j], 1), (nonzero[j], 1), vm["BALLOT"]], lib.SET),
                                         lib.and_unit([(active[j], 1), (nonzero[j], 1), vm["ANY"]], lib.SET),
                                         lib.and_unit([(active[j], 1), vm["MASK"]], lib.SET)]) for j in range(L)]
    fails = [c.gate(f"vote.no{j}", 2, 0, [lib.and_unit([(active[j], 1), (nonzero[j], 0)], lib.SET)]) for j in range(L)]
    vote_bits = [c.gate("vote[0]", 2, 0, [lib.and_unit([(yes[0], 1), vm[m]], lib.SET) for m in ("BALLOT", "MASK")]
                        + lib.gated(lib.step_units([(y, 1, 1) for y in yes], 1), [vm["ANY"]])
                        + lib.gated(lib.step_units([(f, 1, -1) for f in fails], 0), [vm["ALL"]]))]
    vote_bits += [c.gate(f"vote[{j}]", 2, 0, [lib.and_unit([(yes[j], 1), vm[m]], lib.SET) for m in ("BALLOT", "MASK")])
                  for j in range(1, L)]
    to_outbox("vote", vote_bits + [const_bit(0)] * (32 - L))
    next_in_step = c.gate("next.lane", L + 1, L, [lib.and_unit(
        [(cand[j], 1)] + [(cand[i], 0) for i in range(j)], ((j, 1), (L, -1))) for j in range(L)])
    # a new step: the first live lane at the lowest pc (key = pc * lanes + lane, compared in binary)

    def before(i: int, j: int) -> Group:   # key_i < key_j
        ti = [(pc_bits[j][k], 1, 1 << k) for k in range(NB)] + [(pc_bits[i][k], 1, -(1 << k)) for k in range(NB)]
        return c.gate(f"before{i}{j}", 2, 0, lib.step_units(ti, 1 if i > j else 0))
    ok = {}
    for i in range(L):
        for j in range(L):
            if i != j:
                b_ij = before(i, j)
                ok[i, j] = c.gate(f"ok{i}{j}", 2, 0, [lib.and_unit([(b_ij, 1)], lib.SET),
                                                      lib.and_unit([(b_ij, 0), (live[j], 0)], lib.SET)])
    first = [c.gate(f"first{i}", 2, 0, [lib.and_unit([(live[i], 1)] + [(ok[i, j], 1) for j in range(L) if j != i],
                                                     lib.SET)]) for i in range(L)]
    continues = c.gate("continues", 2, 0, [lib.and_unit([(is_exec, 1), (next_in_step, j)], lib.SET) for j in range(L)])
    # the warp's turn goes on after its step unless it is done, at a barrier, or a lane went back (pc <= block)
    went_back = [c.gate(f"back{j}", 2, 0, lib.step_units(
        [(b_bits[k], 1, 1 << k) for k in range(NB)] + [(pc_bits[j][k], 1, -(1 << k)) for k in range(NB)], 0))
        for j in range(L)]
    is_bar = decode_view(term, 2, lambda e: int(TERM_KINDS[e] == "BAR"), "is_bar")
    back_live = [c.gate(f"backlive{j}", 2, 0, [lib.and_unit([(went_back[j], 1), (live[j], 1)], lib.SET)])
                 for j in range(L)]
    stays = c.gate("turn.stays", 2, 0, [lib.and_unit([(first[i], 1), (is_bar, 0)] + [(g, 0) for g in back_live],
                                                     lib.SET) for i in range(L)])     # one first lane at most
    # the warp status table, one row per warp, written by each of its EXECs (the last of a step leaves the
    # next step's first EXEC): done, barrier parity it waits for (this EXEC's parity, flipped by a BAR block),
    # and the block and lane its next step starts at
    done_new = c.gate("done.new", 2, 0, [lib.and_unit([(is_exec, 1)] + [(first[i], 0) for i in range(L)], lib.SET)])
    bar_new = c.gate("bar.new", 2, 0, [lib.and_unit([(is_exec, 1), (cur_p, 0), (is_bar, 1)], lib.SET),
                                       lib.and_unit([(is_exec, 1), (cur_p, 1), (is_bar, 0)], lib.SET)])
    nb_new = [c.gate(f"nb.new[{k}]", 2, 0, [lib.and_unit([(first[i], 1), (pc_bits[i][k], 1)], lib.SET) for i in range(L)])
              for k in range(NB)]
    nl_new = c.gate("nl.new", L, 0, [lib.and_unit([(first[i], 1)], ((i, 1), (0, -1))) for i in range(1, L)])
    ws_waddr = c.gate("warps.w", NW + 2, NW, [lib.and_unit(f, ((NW + 1, 1), (NW, -1))) for f in fresh]
                      + [lib.and_unit([(is_exec, 1), (fault, 0), (cur_w, w)], ((w, 1), (NW, -1))) for w in range(NW)])
    status = c.access(c.memory("warps", NW, (2, 2) + (2,) * NB + (L,)), ws_waddr, [done_new, bar_new, *nb_new, nl_new],
                      [_const_row(NW, v) for v in range(NW)], reset=cta_first)
    status = [(st[0], st[1], st[2:2 + NB], st[2 + NB]) for st in status]     # done, parity, next block bits, lane
    exists = [decode_view(cur_n, 2, lambda e, v=v: int(v * L < e), f"n>{v * L}") for v in range(NW)]
    waiting = [c.gate(f"waiting{v}", 2, 0, [lib.and_unit([(exists[v], 1), (status[v][0], 0)], lib.SET)])
               for v in range(NW)]
    ready = [c.gate(f"ready{v}", 2, 0, [lib.and_unit([(waiting[v], 1), (status[v][1], p), (cur_p, p)], lib.SET)
                                        for p in (0, 1)]) for v in range(NW)]

    def first_after(cond: list[Group], extra: list) -> list:
        """Units: warp v = the first after the current one (round robin, the current last) with cond[v]."""
        units = []
        for w in range(NW):
            for k in range(1, NW + 1):
                v = (w + k) % NW
                units.append(lib.and_unit(extra + [(cur_w, w), (cond[v], 1)]
                                          + [(cond[(w + x) % NW], 0) for x in range(1, k)], ((v, 1), (NW, -1))))
        return units
    none_ready = [(ready[v], 0) for v in range(NW)]
    # the next warp: the current one while its turn goes on; else the next ready one; else, when every
    # waiting warp is at the barrier, the barrier opens (the parity flips) and the next waiting one runs
    chosen = c.gate("warp.next", NW + 1, NW,
                    [lib.and_unit([(stays, 1), (cur_w, w)], ((w, 1), (NW, -1))) for w in range(NW)]
                    + first_after(ready, [(stays, 0)]) + first_after(waiting, [(stays, 0)] + none_ready))
    opens = c.gate("bar.opens", 2, 0, [lib.and_unit([(stays, 0), (waiting[v], 1)] + none_ready
                                                    + [(waiting[u], 0) for u in range(v)], lib.SET) for v in range(NW)])
    dec_kind = c.gate("dec.kind", 2, 0, [lib.and_unit([(continues, 1)], lib.SET)]
                      + [lib.and_unit([(continues, 0), (chosen, v)], lib.SET) for v in range(NW)])   # 1 = exec
    dec_b = [c.gate(f"dec.b[{k}]", 2, 0, [lib.and_unit([(continues, 1), (b_bits[k], 1)], lib.SET)]
                    + [lib.and_unit([(continues, 0), (chosen, v), (status[v][2][k], 1)], lib.SET) for v in range(NW)])
             for k in range(NB)]
    dec_l = c.gate("dec.l", L, 0, [lib.and_unit([(continues, 1), (next_in_step, j)], ((j, 1), (0, -1)))
                                   for j in range(1, L)]
                   + [lib.and_unit([(continues, 0), (chosen, v), (status[v][3], j)], ((j, 1), (0, -1)))
                      for v in range(NW) for j in range(1, L)])
    dec_w = c.gate("dec.w", NW, 0, [lib.and_unit([(continues, 1), (cur_w, v)], ((v, 1), (0, -1))) for v in range(1, NW)]
                   + [lib.and_unit([(continues, 0), (chosen, v)], ((v, 1), (0, -1))) for v in range(1, NW)])
    dec_p = c.gate("dec.p", 2, 0, [lib.and_unit([(continues, 1), (cur_p, 1)], lib.SET),
                                   lib.and_unit([(continues, 0), (cur_p, 1), (opens, 0)], lib.SET),
                                   lib.and_unit([(continues, 0), (cur_p, 0), (opens, 1)], lib.SET)])
    nxt_kind, *nxt_b, nxt_l, nxt_w, nxt_p = c.access(
        c.memory("next", 1, (2,) + (2,) * NB + (L, NW, 2)), _row0_when(kind, "exec", "init"),
        [dec_kind, *dec_b, dec_l, dec_w, dec_p], [_const_row(1, 0)])[0]

    # ---- outbox and write-back pointer --------------------------------------------------------------
    ptr_value = c.gate("ptr.v", W + 1, 0, [lib.and_unit([(ends, 1), (x_e, e)], ((e + 1, 1), (0, -1))) for e in range(W)])
    (ptr,) = c.access(c.memory("ptr", 1, (W + 1,)), _row0_when(kind, "exec", "w3", "w1", "init", "cta"), [ptr_value],
                      [_const_row(1, 0)])[0]

    # ---- the next token's code ------------------------------------------------------------------------
    k = {n: (kind, KINDS.index(n)) for n in KINDS}
    estar_units = []
    for e in range(W):
        if e:
            estar_units += [lib.and_unit([k["wa"], (ptr, e)], ((e, 1), (0, -1))),
                            lib.and_unit([k["wb"], (ptr, e)], ((e, 1), (0, -1)))]
        estar_units.append(lib.and_unit([(ends, 1), (x_e, e)], ((e + 1, 1), (0, -1))))
    estar = c.gate("wb.entry", W + 1, 0, estar_units)            # the entry whose bits go out next
    more = c.gate("wb.more", 2, 0, [lib.and_unit([(estar, e), (wb_count, n)], lib.SET)
                                    for e in range(W) for n in range(e + 1, W + 1)])
    src = c.gate("wb.src", len(spec.wb_sources), 0, [lib.and_unit([(estar, e), (wb_src[e], s)], ((s, 1), (0, -1)))
                                                     for e in range(W) for s in range(1, len(spec.wb_sources))])
    # the value of that entry: every source but the last slot's is selected as soon as they exist, so at the
    # widest point (the last slot) only one word waits for it
    last = f"s{fmt.slots - 1}"
    early = [s for s in spec.wb_sources if s not in (last, "vote")]
    src_early = decode_view(src, len(early) + 1, lambda e: early.index(spec.wb_sources[e])
                            if spec.wb_sources[e] in early else len(early), "wb.src.early")
    partial = lib.mux_onehot(c, src_early, [box[s] for s in early] + [[const_bit(0)] * 32], "wb.partial")
    late = decode_view(src, 3, lambda e: (last, "vote").index(spec.wb_sources[e]) + 1
                       if spec.wb_sources[e] in (last, "vote") else 0, "wb.src.late")
    value = lib.mux_onehot(c, late, [partial, box[last], box["vote"]], "wb.value")
    K = {n: KINDS.index(n) for n in KINDS}
    # the next entry goes out in one w1 token when its value is a sign-extended SMALL_BITS number
    fits = c.gate("wb.fits", 2, 0, [lib.and_unit([(value[i], v) for i in range(SMALL_BITS - 1, 32)], lib.SET)
                                    for v in (0, 1)])
    starts = c.gate("wb.starts", 2, 0, [lib.and_unit([k["exec"], (fault, 0), (more, 1)], lib.SET),
                                        lib.and_unit([(ends, 1), (more, 1)], lib.SET)])
    after = c.gate("wb.after", 2, 0, [lib.and_unit([k["exec"], (fault, 0), (more, 0)], lib.SET),
                                      lib.and_unit([(ends, 1), (more, 0)], lib.SET)])   # the step's tokens are done

    def to(n: str) -> tuple:
        return ((K[n], 1), (K["halt"], -1))
    # the CTA is over (no warp has work left) on the token that ends its last lane step; another CTA follows
    # unless this is the last one: then its cta tokens come, one per warp from the block's last warp down
    cta_over = [[k["exec"], (after, 1), (dec_kind, 0), (last_cta, 0)],
                [(ends, 1), (after, 1), (nxt_kind, 0), (last_cta, 0)]]
    warp_above0 = decode_view(cur_w, 2, lambda w: int(w > 0), "warp>0")
    kind_out = c.gate("out.kind", len(KINDS), K["halt"], [
        lib.and_unit([(starts, 1), (fits, 0)], to("wa")),
        lib.and_unit([(starts, 1), (fits, 1)], to("w1")),
        lib.and_unit([k["exec"], (after, 1), (dec_kind, 1)], to("exec")),
        lib.and_unit([k["exec"], (fault, 1)], to("fault")),
        lib.and_unit([k["go"]], to("exec")),       # the first EXEC: block 0, lane 0, warp 0, parity 0
        lib.and_unit([k["cta"], (cur_w, 0)], to("exec")),      # the CTA's first EXEC, likewise
        lib.and_unit([k["cta"], (warp_above0, 1)], to("cta")),
        lib.and_unit([k["wa"]], to("wb")),
        lib.and_unit([k["wb"]], to("w3")),
        lib.and_unit([(ends, 1), (after, 1), (nxt_kind, 1)], to("exec"))]
        + [lib.and_unit(over, to("cta")) for over in cta_over])

    def exec_field(name: str, size: int, decided: Group, kept: Group, more: list = ()) -> Group:
        """A field of the next EXEC: decided on the EXEC token that ends the lane's tokens, else kept in `next`;
        0 unless the next token is an EXEC (the code of any other token has 0 there) or `more` units set it."""
        return c.gate(f"out.{name}", size, 0,
                      [lib.and_unit([k["exec"], (after, 1), (dec_kind, 1), (decided, v)], ((v, 1), (0, -1)))
                       for v in range(1, size)]
                      + [lib.and_unit([(ends, 1), (after, 1), (nxt_kind, 1), (kept, v)], ((v, 1), (0, -1)))
                         for v in range(1, size)] + list(more))
    b_out = [exec_field(f"b[{k}]", 2, d, n) for k, (d, n) in enumerate(zip(dec_b, nxt_b))]
    l_out = exec_field("l", L, dec_l, nxt_l)
    p_out = exec_field("p", 2, dec_p, nxt_p)
    # w: the next EXEC's warp, or a cta token's warp (the block's last, then one down each token)
    w_out = exec_field("w", NW, dec_w, nxt_w,
                       [lib.and_unit(over + [(top_warp, v)], ((v, 1), (0, -1))) for over in cta_over for v in range(1, NW)]
                       + [lib.and_unit([k["cta"], (cur_w, v + 1)], ((v, 1), (0, -1))) for v in range(1, NW - 1)])
    # the payload: a write-back's bits (decided by layer ~30, kept), or the next cta token's coordinates
    cta_next = cta_over + [[k["cta"], (warp_above0, 1)]]
    e_out = c.gate("out.e", W, 0, [lib.and_unit([k["wb"], (ptr, e)], ((e, 1), (0, -1))) for e in range(1, W)]
                   + [lib.and_unit([(starts, 1), (fits, 1), (estar, e)], ((e, 1), (0, -1))) for e in range(1, W)])
    pay_out = []
    for i in range(PAY_BITS):
        units = [lib.and_unit([(starts, 1), (value[i], 1)] + ([(fits, 0)] if i >= SMALL_BITS else []), lib.SET),
                 lib.and_unit([k["wa"], (value[PAY_BITS + i], 1)], lib.SET)]
        if 2 * PAY_BITS + i < 32:
            units.append(lib.and_unit([k["wb"], (value[2 * PAY_BITS + i], 1)], lib.SET))
        wb_pay = c.gate(f"wb.pay[{i}]", 2, 0, units)
        pay_out.append(c.gate(f"out.pay[{i}]", 2, 0, [lib.and_unit([(wb_pay, 1)], lib.SET)]
                              + ([lib.and_unit(when + [(cta_pay[i], 1)], lib.SET) for when in cta_next]
                                 if i < len(cta_pay) else [])))
    outs = {"kind": kind_out, "b": b_out, "l": l_out, "w": w_out, "p": p_out, "e": e_out, "pay": pay_out}
    pairs = [(outs[n], code_in[n]) for n in ("kind", "l", "w", "p", "e")]
    pairs += list(zip(b_out, code_in["b"])) + list(zip(pay_out, code_in["pay"]))
    for g, _ in pairs:
        c.output(g)
    inputs = {"kind": kind, "pay": pay, **{f"{r}_pay": g for r, g in wpay.items()}, "x_b": x_b, "x_l": x_l, "x_e": x_e, "x_rm": x_rm, "x_rb": x_rb,
              "x_mem": x_mem, "x_n": x_n, "x_bx": x_bx, "x_by": x_by, "x_cx": x_cx, "x_cy": x_cy, "x_w": x_w,
              "x_p": x_p}
    probes = {"cur_b": b_bits, "cur_l": cur_l, "cur_w": cur_w, "cur_p": cur_p, "cur_cx": cur_cx, "cur_cy": cur_cy,
              "status": status, "results": out.results, "loaded": loaded, "address": addr,
              "cond": out.cond, "fault": fault, "pcs": pc_bits, "exited": exited, "outs": outs}
    return GpuCircuit(spec, c, inputs, code_in, OutputCode(pairs), data_mem, rom_mems, probes)


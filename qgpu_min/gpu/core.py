"""The GPU circuit: every token of a launch runs through it (qgpu_min.circuit IR, compiled by it).

Data flow of one token, in depth order (the planner places each part as early as its inputs allow):

  embedding   the token's fields: kind, payload bits, block/lane/entry, ROM and memory addresses
  ctx         (memory) the block and lane of the last EXEC, read by every token
  ROM         (memories, one per row of layout.rom_rows) read at the current block; written by the
              prompt: a row's 32 bits arrive in three `pay` tokens before its `rom` token (conv taps)
  decode      ROM bits -> one-hot fields for the datapath
  registers   (memory, rows lane*16 + r) read through the block's read ports; written by the W3 token
              of a write-back, whose 32 bits arrive over WA, WB, W3 (conv taps)
  datapath    datapath.py: pre slots, memory address and data
  data memory (memory) loads, stores, and the prompt's array words (`pay` x3 + `mem`)
  datapath    post slots, branch condition
  warp table  (memory, one row per lane: pc, exited) updated by EXEC
  scheduler   the next EXEC (same block, next active lane; or a new step at the lowest pc) or HALT
  outbox      (memories) the EXEC's slot results and load, read by the write-back tokens
  output      the code of the next token: WA/WB/W3 of the next write-back entry, the scheduler's
              decision, or FAULT

Every memory is initialised by the first token (init), through its 'now' source; values assembled from
earlier tokens use an alternative source (ir.MemOp.alternatives), present only on the tokens that
carry them, so both kinds of write share a memory.

v1 limits (GpuSpec): one warp of up to 4 threads, one CTA, a 1-D block; word LD/ST; the datapath's ALU
opcodes; ROM of spec.blocks blocks, spec.mem_words words of memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..circuit import lib
from ..circuit.compile import OutputCode
from ..circuit.ir import CONST, Circuit, Group, Word, const_bit, decode_view, onehot_bits, view
from .datapath import BlockFields, SlotFields, lane_datapath, post_slots
from .layout import (ATOM_OPS, KINDS, MEM_KINDS, PAY_BITS, RECORD_REG, SMALL_BITS, TERM_KINDS, WB_PAYLOADS,
                     GpuSpec, field_offsets, rom_rows)

# the atomic ALU's op one-hot follows layout.ATOM_OPS: lib.alu ops, with EXCH as the extra word (B itself)
ATOM_ALU = tuple(op.lower() for op in ATOM_OPS if op != "EXCH")
assert ATOM_OPS[-1] == "EXCH", "the extra word comes after lib.alu's ops in the op one-hot"

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


def _zero_on_init(kind: Group, n: int) -> list[Group]:
    """'now' source of a word that is 0 on the init token and absent on every other token."""
    return [decode_view(kind, 3, lambda e: 0 if KINDS[e] == "init" else ABSENT, f"init0[{i}]") for i in range(n)]


def _payload_alternatives(pay: list[Group], taps: tuple[int, ...]) -> list[tuple[int, Group, int]]:
    """Field i of a 32-bit row from payload bit i % PAY_BITS of the token taps[i // PAY_BITS] back."""
    return [(i, pay[i % PAY_BITS], taps[i // PAY_BITS]) for i in range(32)]


def _word_of_onehot(g: Group, name: str) -> Word:
    """A small one-hot value as a 32-bit word (views: free)."""
    bits = onehot_bits(g, max(1, (g.size - 1).bit_length()), name)
    return bits + [const_bit(0)] * (32 - len(bits))


def build(spec: GpuSpec = GpuSpec()) -> GpuCircuit:
    fmt = spec.fmt
    c = Circuit("gpu")
    rows = rom_rows(spec)
    n_rom = len(rows)
    L, B, W = spec.lanes, spec.blocks, spec.wb_entries

    # ---- embedding fields -------------------------------------------------------------------------
    kind = c.input("kind", len(KINDS))
    pay = [c.input(f"pay[{i}]", 3) for i in range(PAY_BITS)]        # prompt payload (bit, or absent)
    # write-back payloads, one group per token role, so a source is present only on its own role's token
    # (the register file's assembled source must be absent on a w1, whose value comes through 'now')
    wpay = {r: [c.input(f"{r}pay[{i}]", 3) for i in range(n)] for r, n in WB_PAYLOADS.items()}
    x_b, x_l, x_e = c.input("x_b", B), c.input("x_l", L), c.input("x_e", W)
    x_rom = c.input("x_rom", n_rom * B + 2)          # (row m, block b) = m * B + b; then none, init-all
    x_mem = c.input("x_mem", spec.mem_words + 1)     # a word address, or none
    x_n = c.input("x_n", L + 1)                      # threads of the launch
    code_in = {"kind": c.input("code_kind", len(KINDS)), "b": c.input("code_b", B), "l": c.input("code_l", L),
               "e": c.input("code_e", W), "pay": [c.input(f"code_pay[{i}]", 2) for i in range(PAY_BITS)]}
    is_init = _kind_is(kind, "init")

    # ---- context: the current EXEC's block and lane; the launch shape ----------------------------
    cur_b, cur_l = c.access(c.memory("ctx", 1, (B, L)), _row0_when(kind, "exec", "init"), [x_b, x_l],
                            [_const_row(1, 0)])[0]
    (cur_n,) = c.access(c.memory("launch", 1, (L + 1,)), _row0_when(kind, "launch", "init"), [x_n],
                        [_const_row(1, 0)])[0]

    # ---- ROM ------------------------------------------------------------------------------------
    rom: dict[str, list[Group]] = {}
    rom_mems = {}
    none_rom, all_rom = n_rom * B, n_rom * B + 1
    for m, name in enumerate(rows):
        mem = c.memory(f"rom.{name}", B, (2,) * 32)
        rom_mems[name] = mem
        waddr = decode_view(x_rom, B + 2, lambda e, m=m: B + 1 if e == all_rom else B if e == none_rom
                            else (e % B if e // B == m else B), f"rom.{name}.w")
        rom[name] = c.access(mem, waddr, _zero_on_init(kind, 32), [cur_b],
                             alternatives=_payload_alternatives(pay, (3, 2, 1)))[0]

    def field_of(row: str, fname: str, size: int) -> Group:
        lo, nb = field_offsets(rows[row])[fname]
        return lib.onehot_of_bits(c, rom[row][lo:lo + nb], size, f"{row}.{fname}")

    slots = [SlotFields(field_of(f"slot{k}", "op", len(fmt.alu_names(k))),
                        *(field_of(f"slot{k}", o, len(fmt.sources(k, o))) for o in "abc"),
                        rom[f"imm{k}"], field_of(f"slot{k}", "sp", fmt.specials)) for k in range(fmt.slots)]
    fields = BlockFields(slots, field_of("ctl", "mema", len(fmt.sources("mem", "a"))), rom["memimm"],
                         field_of("ctl", "memd", len(fmt.sources("mem", "b"))),
                         field_of("ctl", "cond", len(fmt.sources("cond", "c"))))
    mem_kind = field_of("ctl", "mem", len(MEM_KINDS))
    term = field_of("ctl", "term", len(TERM_KINDS))
    taken, not_taken = field_of("ctl", "taken", B), field_of("ctl", "not_taken", B)
    atom_op = field_of("ctl", "atom", len(ATOM_OPS))
    read_reg = [field_of("reads", f"r{i}", spec.regs) for i in range(fmt.reads)]
    wb_reg = [field_of("wbreg", f"reg{e}", spec.regs) for e in range(W)]
    wb_count = field_of("wbsrc", "count", W + 1)
    wb_src = [field_of("wbsrc", f"src{e}", len(spec.wb_sources)) for e in range(W)]

    # ---- register file: rows lane * regs + r ----------------------------------------------------------
    R = spec.regs
    ends = _kind_is(kind, "w3", "w1")      # the token that completes a write-back entry writes the register
    is_w1 = _kind_is(kind, "w1")
    units = [lib.and_unit([(is_init, 1)], ((L * R + 1, 1), (L * R, -1)))]
    for l in range(L):
        for e in range(W):
            for r in range(R):      # r15's row is the scratch of an atomic's record (layout.RECORD_REG)
                units.append(lib.and_unit([(ends, 1), (cur_l, l), (x_e, e), (wb_reg[e], r)],
                                          ((l * R + r, 1), (L * R, -1))))
    reg_waddr = c.gate("regs.w", L * R + 2, L * R, units)
    reg_raddr = [c.gate(f"regs.r{i}", L * R, 0, [lib.and_unit([(cur_l, l), (read_reg[i], r)], ((l * R + r, 1), (0, -1)))
                                                   for l in range(L) for r in range(R) if l or r])
                 for i in range(fmt.reads)]
    scratch_raddr = decode_view(cur_l, L * R, lambda l: l * R + RECORD_REG, "regs.scratch")
    # 'now' source: 0 on init, a w1's sign-extended small value; the alternative: a w3's three tokens
    reg_now = [c.gate(f"regs.now[{i}]", 3, ABSENT,
                      [lib.and_unit([(is_init, 1)], ((0, 1), (ABSENT, -1)))]
                      + [lib.and_unit([(is_w1, 1), (wpay["w1"][min(i, SMALL_BITS - 1)], v)], ((v, 1), (ABSENT, -1)))
                         for v in (0, 1)]) for i in range(32)]
    assembled = [(i, wpay[r][i - lo], tap) for r, lo, tap in (("wa", 0, 2), ("wb", PAY_BITS, 1), ("w3", 2 * PAY_BITS, 0))
                 for i in range(lo, min(lo + PAY_BITS, 32))]
    *regs, scratch = c.access(c.memory("regs", L * R, (2,) * 32), reg_waddr, reg_now,
                              reg_raddr + [scratch_raddr], alternatives=assembled)
    # a W3 whose entry is the record (register r15) writes the assembled word to memory too
    record = c.gate("record", 2, 0, [lib.and_unit([(ends, 1), (x_e, e), (wb_reg[e], RECORD_REG)], lib.SET)
                                     for e in range(W)])

    # ---- specials (v1: one warp, one CTA, a 1-D block) ----------------------------------------------
    zero, one = [const_bit(0)] * 32, [const_bit(1)] + [const_bit(0)] * 31
    lane_word, n_word = _word_of_onehot(cur_l, "lane"), _word_of_onehot(cur_n, "ntid")
    specials = [lane_word, zero, n_word, one, zero, zero, one, one, lane_word, zero, lane_word][:fmt.specials]

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
    word_at = lib.onehot_of_bits(c, addr[2:2 + (spec.mem_words - 1).bit_length()], spec.mem_words, "mem.word")
    is_exec = _kind_is(kind, "exec")
    accesses = decode_view(mem_kind, 2, lambda e: int(MEM_KINDS[e] != "none"), "accesses")
    outside = [addr[0], addr[1]] + addr[2 + (spec.mem_words - 1).bit_length():]
    fault = c.gate("fault", 2, 0, lib.step_units([(b, 1, 1) for b in outside] + [(accesses, 1, 40), (is_exec, 1, 40)], 81))
    stores = [(is_exec, 1), (mem_kind, MEM_KINDS.index("ST")), (fault, 0)]
    records = [(record, 1), (fault, 0)]     # the datapath recomputes the EXEC's address: no register changed yet
    N = spec.mem_words
    is_mem_tok = _kind_is(kind, "mem")
    data_waddr = c.gate("mem.w", N + 2, N,
                        [lib.and_unit([(is_init, 1)], ((N + 1, 1), (N, -1)))]
                        + [lib.and_unit([(is_mem_tok, 1), (x_mem, a)], ((a, 1), (N, -1))) for a in range(N)]
                        + [lib.and_unit(stores + [(word_at, a)], ((a, 1), (N, -1))) for a in range(N)]
                        + [lib.and_unit(records + [(word_at, a)], ((a, 1), (N, -1))) for a in range(N)])
    store_now = [c.gate(f"mem.v[{i}]", 3, ABSENT,
                        [lib.and_unit(stores + [(out.store_data[i], v)], ((v, 1), (ABSENT, -1))) for v in (0, 1)]
                        + [lib.and_unit(records + [(scratch[i], v)], ((v, 1), (ABSENT, -1))) for v in (0, 1)]
                        + [lib.and_unit([(is_init, 1)], ((0, 1), (ABSENT, -1)))]) for i in range(32)]
    data_mem = c.memory("data", N, (2,) * 32)
    (loaded,) = c.access(data_mem, data_waddr, store_now, [word_at],
                         alternatives=_payload_alternatives(pay, (3, 2, 1)))
    post_slots(c, fmt, fields, out, out.extra["values"], loaded, "lane")
    loaded = box["ld"]
    # an atomic's new word: op(old, B), kept in the outbox for its record write-back
    to_outbox("atom", lib.alu(c, atom_op, loaded, out.store_data, ATOM_ALU, (out.store_data,), "atom",
                              clamp_shifts=False))

    # ---- warp table: this lane's next pc and exit ------------------------------------------------------
    tk = {k: (term, TERM_KINDS.index(k)) for k in TERM_KINDS}
    pc_units = []
    for v in range(1, B):
        pc_units.append(lib.and_unit([(is_exec, 1), tk["JMP"], (taken, v)], ((v, 1), (0, -1))))
        pc_units.append(lib.and_unit([(is_exec, 1), tk["BR"], (out.cond, 1), (taken, v)], ((v, 1), (0, -1))))
        pc_units.append(lib.and_unit([(is_exec, 1), tk["BR"], (out.cond, 0), (not_taken, v)], ((v, 1), (0, -1))))
        pc_units.append(lib.and_unit([(is_exec, 1), tk["BAR"], (cur_b, v - 1)], ((v, 1), (0, -1))))
    pc_new = c.gate("pc.new", B, 0, pc_units)
    exited_new = c.gate("exited.new", 2, 0, [lib.and_unit([(is_exec, 1), tk["EXIT"]], lib.SET)])
    wt_waddr = c.gate("lanes.w", L + 2, L, [lib.and_unit([(is_init, 1)], ((L + 1, 1), (L, -1)))]
                      + [lib.and_unit([(is_exec, 1), (fault, 0), (cur_l, l)], ((l, 1), (L, -1))) for l in range(L)])
    table = c.access(c.memory("lanes", L, (B, 2)), wt_waddr, [pc_new, exited_new],
                     [_const_row(L, j) for j in range(L)])
    pcs, exited = [t[0] for t in table], [t[1] for t in table]

    # ---- scheduler --------------------------------------------------------------------------------
    live = [c.gate(f"live{j}", 2, 0, [lib.and_unit(
        [(decode_view(cur_n, 2, lambda e, j=j: int(j < e), f"n>{j}"), 1), (exited[j], 0)], lib.SET)]) for j in range(L)]
    # cand_j: lane j > current lane, live, still at the current block: it runs next in this warp step
    cand = [c.gate(f"cand{j}", 2, 0, [lib.and_unit(
        [(decode_view(cur_l, 2, lambda e, j=j: int(e < j), f"l<{j}"), 1), (live[j], 1), (pcs[j], v), (cur_b, v)],
        lib.SET) for v in range(B)]) for j in range(L)]
    next_in_step = c.gate("next.lane", L + 1, L, [lib.and_unit(
        [(cand[j], 1)] + [(cand[i], 0) for i in range(j)], ((j, 1), (L, -1))) for j in range(L)])
    # a new step: the first live lane at the lowest pc (key = pc * lanes + lane, compared in binary)
    pc_bits = [onehot_bits(pcs[j], (B - 1).bit_length(), f"pc{j}") for j in range(L)]

    def before(i: int, j: int) -> Group:   # key_i < key_j
        ti = [(pc_bits[j][k], 1, 1 << k) for k in range(len(pc_bits[j]))] + \
             [(pc_bits[i][k], 1, -(1 << k)) for k in range(len(pc_bits[i]))]
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
    go_or_exec = _kind_is(kind, "exec", "go")
    continues = c.gate("continues", 2, 0, [lib.and_unit([(is_exec, 1), (next_in_step, j)], lib.SET) for j in range(L)])
    dec_kind = c.gate("dec.kind", 2, 0, [lib.and_unit([(continues, 1)], lib.SET)]
                      + [lib.and_unit([(continues, 0), (first[i], 1)], lib.SET) for i in range(L)])   # 1 = exec
    dec_b = c.gate("dec.b", B, 0, [lib.and_unit([(continues, 1), (cur_b, v)], ((v, 1), (0, -1)))
                                   for v in range(1, B)]
                   + [lib.and_unit([(continues, 0), (first[i], 1), (pcs[i], v)], ((v, 1), (0, -1)))
                      for i in range(L) for v in range(1, B)])
    dec_l = c.gate("dec.l", L, 0, [lib.and_unit([(continues, 1), (next_in_step, j)], ((j, 1), (0, -1)))
                                   for j in range(1, L)]
                   + [lib.and_unit([(continues, 0), (first[j], 1)], ((j, 1), (0, -1))) for j in range(1, L)])
    nxt_kind, nxt_b, nxt_l = c.access(c.memory("next", 1, (2, B, L)), _row0_when(kind, "exec", "go", "init"),
                                      [dec_kind, dec_b, dec_l], [_const_row(1, 0)])[0]

    # ---- outbox and write-back pointer --------------------------------------------------------------
    ptr_value = c.gate("ptr.v", W + 1, 0, [lib.and_unit([(ends, 1), (x_e, e)], ((e + 1, 1), (0, -1))) for e in range(W)])
    (ptr,) = c.access(c.memory("ptr", 1, (W + 1,)), _row0_when(kind, "exec", "w3", "w1", "init"), [ptr_value],
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
    early = [s for s in spec.wb_sources if s != last]
    src_early = decode_view(src, len(early) + 1, lambda e: early.index(spec.wb_sources[e])
                            if spec.wb_sources[e] in early else len(early), "wb.src.early")
    partial = lib.mux_onehot(c, src_early, [box[s] for s in early] + [[const_bit(0)] * 32], "wb.partial")
    is_last = decode_view(src, 2, lambda e: int(spec.wb_sources[e] == last), "wb.src.last")
    value = lib.mux_word(c, is_last, box[last], partial, "wb.value")
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
    kind_out = c.gate("out.kind", len(KINDS), K["halt"], [
        lib.and_unit([(starts, 1), (fits, 0)], to("wa")),
        lib.and_unit([(starts, 1), (fits, 1)], to("w1")),
        lib.and_unit([k["exec"], (after, 1), (dec_kind, 1)], to("exec")),
        lib.and_unit([k["exec"], (fault, 1)], to("fault")),
        lib.and_unit([k["go"], (dec_kind, 1)], to("exec")),
        lib.and_unit([k["wa"]], to("wb")),
        lib.and_unit([k["wb"]], to("w3")),
        lib.and_unit([(ends, 1), (after, 1), (nxt_kind, 1)], to("exec"))])
    b_out = c.gate("out.b", B, 0, [lib.and_unit([k["exec"], (after, 1), (dec_b, v)], ((v, 1), (0, -1))) for v in range(1, B)]
                   + [lib.and_unit([k["go"], (dec_b, v)], ((v, 1), (0, -1))) for v in range(1, B)]
                   + [lib.and_unit([(ends, 1), (after, 1), (nxt_b, v)], ((v, 1), (0, -1))) for v in range(1, B)])
    l_out = c.gate("out.l", L, 0, [lib.and_unit([k["exec"], (after, 1), (dec_l, v)], ((v, 1), (0, -1))) for v in range(1, L)]
                   + [lib.and_unit([k["go"], (dec_l, v)], ((v, 1), (0, -1))) for v in range(1, L)]
                   + [lib.and_unit([(ends, 1), (after, 1), (nxt_l, v)], ((v, 1), (0, -1))) for v in range(1, L)])
    e_out = c.gate("out.e", W, 0, [lib.and_unit([k["wb"], (ptr, e)], ((e, 1), (0, -1))) for e in range(1, W)]
                   + [lib.and_unit([(starts, 1), (fits, 1), (estar, e)], ((e, 1), (0, -1))) for e in range(1, W)])
    pay_out = []
    for i in range(PAY_BITS):
        units = [lib.and_unit([(starts, 1), (value[i], 1)] + ([(fits, 0)] if i >= SMALL_BITS else []), lib.SET),
                 lib.and_unit([k["wa"], (value[PAY_BITS + i], 1)], lib.SET)]
        if 2 * PAY_BITS + i < 32:
            units.append(lib.and_unit([k["wb"], (value[2 * PAY_BITS + i], 1)], lib.SET))
        pay_out.append(c.gate(f"out.pay[{i}]", 2, 0, units))
    outs = {"kind": kind_out, "b": b_out, "l": l_out, "e": e_out, "pay": pay_out}
    pairs = [(kind_out, code_in["kind"]), (b_out, code_in["b"]), (l_out, code_in["l"]), (e_out, code_in["e"])]
    pairs += list(zip(pay_out, code_in["pay"]))
    for g, _ in pairs:
        c.output(g)
    inputs = {"kind": kind, "pay": pay, **{f"{r}_pay": g for r, g in wpay.items()}, "x_b": x_b, "x_l": x_l, "x_e": x_e, "x_rom": x_rom,
              "x_mem": x_mem, "x_n": x_n}
    probes = {"cur_b": cur_b, "cur_l": cur_l, "results": out.results, "loaded": loaded, "address": addr,
              "cond": out.cond, "fault": fault, "pcs": pcs, "exited": exited, "outs": outs}
    return GpuCircuit(spec, c, inputs, code_in, OutputCode(pairs), data_mem, rom_mems, probes)


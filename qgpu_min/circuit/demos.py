"""End-to-end demos: a RAM and an ALU compiled into Qwen3.5 layers, driven token by token.

Token protocol (one circuit token per forward pass; the model's own argmax is fed back):
  BEGIN            initialise every memory (write every row at once); emits END
  IN_p_v           operand byte p (0..7) := v (0..255); bytes 0..3 form word a, 4..7 word b; emits END
  WRITE_r          RAM[r] := a (r in 0..15); emits END
  READ_r           result := RAM[r]; emits OUT0 with the result's byte 0
  ALU_op           result := op(a, b); emits OUT0 with the result's byte 0
  OUT<i>_v         (fed back) emits OUT<i+1> with byte i+1 of the result, or END after byte 3
  END              emits END
Memories: operand bytes (layer 0, 8 read ports), RAM (layer 1, 16 words), the last result (layer 2, 1 word);
the fused ALU (lib.alu, 2 MLP layers) selects among 15 ops and the RAM read. 3 circuit layers. Every token
carries its memory addresses, op and output selector as embedding fields, so the circuit itself only
reads, computes and writes.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qgpu_min.model.forward import Model, State

from . import lib
from .compile import OutputCode
from .ir import CONST, Circuit, Group, Word, view
from .merge import Built, build_merged
from .tokens import CircuitTokens

ALU_OPS = lib.ALU_OPS
EMIT = ("in", "out0", "out1", "out2", "out3", "end")
RAM_ROWS = 16


def _const_addr(size: int, row: int) -> Group:
    return view(CONST, tuple(0 if e == row else None for e in range(size)), f"row{row}")


def _nibble_out(c: Circuit, emit_g: Group, last: Word, shift: int, name: str) -> Group:
    """Nibble (bits shift..shift+3 of byte j) of `last`, where emit = out<j>; 0 for other emits."""
    units = []
    for j in range(4):
        bits = last[8 * j + shift: 8 * j + shift + 4]
        for v in range(1, 16):
            units.append(lib.and_unit([(emit_g, 1 + j)] + [(bits[i], (v >> i) & 1) for i in range(4)],
                                      ((v, 1), (0, -1))))
    return c.gate(name, 16, 0, units)


@dataclass
class Demo:
    circuit: Circuit
    tokens: CircuitTokens
    out_code: OutputCode


def demo_circuit() -> Demo:
    c = Circuit("demo")
    op = c.input("op", len(ALU_OPS) + 1)            # the last option selects the RAM read
    opw = c.input("opw", 8 + 2)
    ibyte = [c.input(f"ibyte[{i}]", 2) for i in range(8)]
    ramw = c.input("ramw", RAM_ROWS + 2)
    ramr = c.input("ramr", RAM_ROWS)
    resw = c.input("resw", 1 + 2)
    emit_g = c.input("emit", len(EMIT))
    code = [c.input("code_kind", len(EMIT)), c.input("code_hi", 16), c.input("code_lo", 16)]

    opmem = c.memory("operands", 8, (2,) * 8)
    byts = c.access(opmem, opw, ibyte, [_const_addr(8, p) for p in range(8)])
    a = [bit for byte in byts[:4] for bit in byte]
    b = [bit for byte in byts[4:] for bit in byte]
    ram = c.memory("ram", RAM_ROWS, (2,) * 32)
    ramread = c.access(ram, ramw, a, [ramr])[0]
    result = lib.alu(c, op, a, b, ALU_OPS, (ramread,), "result")  # the extra option: the RAM read
    resmem = c.memory("result", 1, (2,) * 32)
    last = c.access(resmem, resw, result, [_const_addr(1, 0)])[0]
    hi = _nibble_out(c, emit_g, last, 4, "out_hi")
    lo = _nibble_out(c, emit_g, last, 0, "out_lo")
    for g in (emit_g, hi, lo):
        c.output(g)

    names: list[str] = []
    rows: dict[str, list[int]] = {k: [] for k in ("op", "opw", "byte", "ramw", "ramr", "resw", "emit",
                                                   "kind", "hi", "lo")}

    def tok(name: str, op_i: int = 0, opw_i: int = 8, byte: int = 0, ramw_i: int = RAM_ROWS, ramr_i: int = 0,
            resw_i: int = 1, emit_i: int = 5, kind: int = 0, hi_i: int = 0, lo_i: int = 0) -> None:
        names.append(name)
        for k, v in zip(rows, (op_i, opw_i, byte, ramw_i, ramr_i, resw_i, emit_i, kind, hi_i, lo_i)):
            rows[k].append(v)

    tok("BEGIN", opw_i=9, ramw_i=RAM_ROWS + 1, resw_i=2)
    for p in range(8):
        for v in range(256):
            tok(f"IN_{p}_{v}", opw_i=p, byte=v)
    for r in range(RAM_ROWS):
        tok(f"WRITE_{r}", ramw_i=r)
    for r in range(RAM_ROWS):
        tok(f"READ_{r}", op_i=len(ALU_OPS), ramr_i=r, resw_i=0, emit_i=1)
    for i, name in enumerate(ALU_OPS):
        tok(f"ALU_{name}", op_i=i, resw_i=0, emit_i=1)
    for j in range(4):
        for v in range(256):
            tok(f"OUT{j}_{v}", emit_i=j + 2 if j < 3 else 5, kind=1 + j, hi_i=v >> 4, lo_i=v & 15)
    tok("END", kind=5)
    fields = {op: rows["op"], opw: rows["opw"], ramw: rows["ramw"], ramr: rows["ramr"], resw: rows["resw"],
              emit_g: rows["emit"], code[0]: rows["kind"], code[1]: rows["hi"], code[2]: rows["lo"]}
    byte_vals = np.asarray(rows["byte"])
    for i, g in enumerate(ibyte):
        fields[g] = (byte_vals >> i) & 1
    toks = CircuitTokens(names, {g: np.asarray(v, np.int64) for g, v in fields.items()})
    return Demo(c, toks, OutputCode([(emit_g, code[0]), (hi, code[1]), (lo, code[2])]))


def build_demo(base_dir: str | Path, out_dir: str | Path) -> Built:
    """Compile the demo circuit for the base checkpoint's shapes and write the merged checkpoint."""
    d = demo_circuit()
    return build_merged(d.circuit, d.tokens, d.out_code, base_dir, out_dir)


def run_tokens(model: Model, state: State, ids: list[int]) -> int:
    """Feed ids; the argmax over the whole vocabulary after the last one."""
    logits = model.prefill(state, ids)
    return int(np.argmax(logits))


def generate(model: Model, built: Built, prompt: list[str], max_new: int = 8) -> list[str]:
    """Feed the prompt tokens, then let the model pick (greedy, whole vocabulary) until END."""
    names = built.tokens.names
    ids = [built.base_vocab + built.tokens.index(n) for n in prompt]
    state = model.new_state()
    nxt = run_tokens(model, state, ids)
    out = []
    for _ in range(max_new):
        i = nxt - built.base_vocab
        out.append(names[i] if 0 <= i < len(names) else f"<text {nxt}>")
        if out[-1] == "END" or out[-1].startswith("<text"):
            break
        nxt = run_tokens(model, state, [nxt])
    return out


def word_tokens(word: int, first_byte: int = 0) -> list[str]:
    """IN tokens loading a 32-bit word into operand bytes first_byte..first_byte+3."""
    return [f"IN_{first_byte + i}_{(word >> (8 * i)) & 255}" for i in range(4)]


def expected_output(word: int) -> list[str]:
    return [f"OUT{i}_{(word >> (8 * i)) & 255}" for i in range(4)] + ["END"]

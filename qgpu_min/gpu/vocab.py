"""The GPU's token vocabulary: every token, its embedding fields, its output code, and its name.

A token is a tuple: ("init", w), ("pay", v), ("rom", m, b), ("clear", b), ("mem", a), ("launch", bx, by) (the block
shape), ("grid", gx, gy), ("go",), ("exec", b, l, w, p) (block, lane, warp, barrier parity), ("wa", v),
("wb", v), ("w3", e, v), ("w1", e, v), ("cta", x, y, w) (CTA (x, y) begins; clears warp w), ("halt",),
("fault",). Its embedding sets every
input group of the circuit (core.build): the fields it carries, defaults elsewhere; its code groups say
which token it is, so the circuit's output code picks it by argmax.
"""
from __future__ import annotations

from functools import cached_property

import numpy as np

from .core import ABSENT, GpuCircuit
from .layout import KINDS, PAY_BITS, SMALL_BITS, WB_PAYLOADS, GpuSpec, rom_rows

Token = tuple


def all_tokens(spec: GpuSpec) -> list[Token]:
    n_rom = len(rom_rows(spec))
    toks: list[Token] = [("init", w) for w in range(spec.warps)]
    toks += [("pay", v) for v in range(1 << PAY_BITS)]
    toks += [("rom", m, b) for m in range(n_rom) for b in range(spec.blocks)]
    toks += [("clear", b) for b in range(1, spec.blocks)]
    toks += [("mem", a) for a in range(spec.mem_words)]
    toks += [("launch", x, y) for x, y in _shapes(spec.threads)]
    toks += [("grid", x, y) for x, y in _shapes(spec.ctas)]
    toks += [("go",)]
    toks += [("exec", b, l, w, p) for b in range(spec.blocks) for w in range(spec.warps) for l in range(spec.lanes)
             for p in (0, 1)]
    toks += [("wa", v) for v in range(1 << PAY_BITS)] + [("wb", v) for v in range(1 << PAY_BITS)]
    toks += [("w3", e, v) for e in range(spec.wb_entries) for v in range(256)]
    toks += [("w1", e, v) for e in range(spec.wb_entries) for v in range(1 << SMALL_BITS)]
    toks += [("cta", x - 1, y - 1, w) for x, y in _shapes(spec.ctas) for w in range(spec.warps)]
    toks += [("halt",), ("fault",)]
    return toks


def _shapes(most: int) -> list[tuple[int, int]]:
    """(x, y) with x * y <= most: the 2-D shapes of at most `most` elements."""
    return [(x, y) for y in range(1, most + 1) for x in range(1, most // y + 1)]


def cta_payload(x: int, y: int, spec: GpuSpec) -> int:
    """The payload bits of a cta token's code: its coordinates, x in the low bits."""
    return x | y << spec.cta_bits


def token_name(t: Token) -> str:
    kind = t[0]
    if kind == "exec":
        return f"EXEC b={t[1]} w={t[3]} l={t[2]} p={t[4]}"
    if kind == "cta":
        return f"CTA x={t[1]} y={t[2]} w={t[3]}"
    if kind in ("launch", "grid"):
        return f"{kind.upper()} {t[1]}x{t[2]}"
    if kind in ("w3", "w1"):
        return f"{kind.upper()} e={t[1]} v={t[2]}"
    if kind == "rom":
        return f"ROM m={t[1]} b={t[2]}"
    if len(t) == 2:
        return f"{kind.upper()} {t[1]}"
    return kind.upper()


def _binary_fields(groups: list, v: int) -> dict:
    """{bit group k: bit k of v}."""
    return {g: v >> k & 1 for k, g in enumerate(groups)}


def _bits(v: int, n: int = PAY_BITS) -> list[int]:
    return [(v >> i) & 1 for i in range(n)]


class Vocab:
    """Token <-> id, and the circuit input values of every token (arrays over the vocabulary)."""

    def __init__(self, gc: GpuCircuit) -> None:
        self.gc = gc
        self.spec = gc.spec
        self.tokens = all_tokens(gc.spec)
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.n_rom = len(rom_rows(gc.spec))   # once: fields() runs for every token of the vocabulary

    def id(self, t: Token) -> int:
        try:
            return self.ids[t]
        except KeyError:
            raise ValueError(f"no GPU token {t!r}") from None

    def fields(self, t: Token) -> dict:
        """{input group: element} for one token."""
        spec, inp, code = self.spec, self.gc.inputs, self.gc.codes
        n_rom = self.n_rom
        kind = t[0]
        f = {inp["kind"]: KINDS.index(kind), inp["x_l"]: 0, inp["x_e"]: 0,
             inp["x_rm"]: n_rom, inp["x_n"]: 0, inp["x_w"]: 0,
             inp["x_bx"]: 0, inp["x_by"]: 0, inp["x_cx"]: 0, inp["x_cy"]: 0,
             inp["x_p"]: 0, code["kind"]: KINDS.index(kind), code["l"]: 0, code["w"]: 0, code["p"]: 0,
             code["e"]: 0}
        for g in inp["x_mem"] + inp["x_b"] + inp["x_rb"] + code["b"]:
            f[g] = 0
        pay, cpay = [ABSENT] * PAY_BITS, [0] * PAY_BITS
        wpay = {r: [ABSENT] * n for r, n in WB_PAYLOADS.items()}
        if kind == "init":       # every ROM row of block 0
            f[inp["x_rm"]] = n_rom + 1
            f[inp["x_w"]] = t[1]
        elif kind == "pay":
            pay = _bits(t[1])
        elif kind == "rom":
            f[inp["x_rm"]] = t[1]
            f.update(_binary_fields(inp["x_rb"], t[2]))
        elif kind == "clear":
            f[inp["x_rm"]] = n_rom + 1
            f.update(_binary_fields(inp["x_rb"], t[1]))
        elif kind == "mem":
            f.update({g: t[1] >> k & 1 for k, g in enumerate(inp["x_mem"])})
        elif kind == "launch":
            f[inp["x_n"]], f[inp["x_bx"]], f[inp["x_by"]] = t[1] * t[2], t[1], t[2]
        elif kind == "grid":
            f[inp["x_cx"]], f[inp["x_cy"]] = t[1] - 1, t[2] - 1
        elif kind == "cta":
            f[inp["x_cx"]], f[inp["x_cy"]] = t[1], t[2]
            f[inp["x_w"]] = f[code["w"]] = t[3]
            cpay = _bits(cta_payload(t[1], t[2], spec))
        elif kind == "exec":
            f.update(_binary_fields(inp["x_b"], t[1]))
            f.update(_binary_fields(code["b"], t[1]))
            f[inp["x_l"]] = f[code["l"]] = t[2]
            f[inp["x_w"]] = f[code["w"]] = t[3]
            f[inp["x_p"]] = f[code["p"]] = t[4]
        elif kind in ("wa", "wb"):
            wpay[kind] = cpay = _bits(t[1])
        elif kind in ("w3", "w1"):
            f[inp["x_e"]] = f[code["e"]] = t[1]
            cpay = _bits(t[2])
            wpay[kind] = cpay[:WB_PAYLOADS[kind]]
        for i in range(PAY_BITS):
            f[inp["pay"][i]], f[code["pay"][i]] = pay[i], cpay[i]
        for r, bits in wpay.items():
            for i, b in enumerate(bits):
                f[inp[f"{r}_pay"][i]] = b
        return f

    @cached_property
    def table(self) -> dict:
        """{input group: int array over the vocabulary}: the embedding fields of every token."""
        rows = [self.fields(t) for t in self.tokens]
        return {g: np.array([r[g] for r in rows], np.int64) for g in rows[0]}

    def of_code(self, code: dict) -> Token:
        """The token whose code is `code` ({'kind', 'b', 'l', 'e', 'pay' (list)} element values)."""
        kind = KINDS[code["kind"]]
        v = sum(b << i for i, b in enumerate(code["pay"]))
        b = sum(bit << k for k, bit in enumerate(code["b"]))
        t = {"exec": ("exec", b, code["l"], code["w"], code["p"]), "wa": ("wa", v), "wb": ("wb", v),
             "w3": ("w3", code["e"], v), "w1": ("w1", code["e"], v),
             "cta": ("cta", v & ((1 << self.spec.cta_bits) - 1), v >> self.spec.cta_bits, code["w"])}.get(kind, (kind,))
        if t not in self.ids:
            raise ValueError(f"the circuit produced code {code}, which names no token")
        own = self.fields(t)
        codes = self.gc.codes
        if any(own[codes[n]] != code[n] for n in ("kind", "l", "w", "p", "e")) or \
                [own[g] for g in codes["pay"]] != list(code["pay"]) or [own[g] for g in codes["b"]] != list(code["b"]):
            raise ValueError(f"the circuit produced code {code}, which is not exactly the code of {token_name(t)}")
        return t

"""PTX parser: the text clang (14, 19, 22) and nvcc emit, turned into plain data for the lowering.

`parse_ptx(text)` returns a `PtxModule`: module directives, global variables and every defined
function (`.entry` kernels and `.func` device functions) with its parameters, register and variable
declarations and a body of `Instr` and `Label` items. Every `Instr` keeps its source line and text so
that later stages can name them in errors. An instruction's opcode is its first dotted component and
the rest are mods (`mul.wide.s32` -> `mul`, `('wide', 's32')`); type suffixes differ between compilers
(`ld.param.u32` from clang 14, `ld.param.b32` from clang 22), so compare them by `type_width`.

Operands: Reg, SReg, Imm, FloatImm, Sym, Mem, Vec, and Pair for nvcc's two-destination form
`%r1|%p1` (shfl.sync and setp write a value and a predicate). `call` has operands
(Vec of return params or None, Sym(function), Vec of argument params). Jump tables
(`.branchtargets`, used by `brx.idx`) go to `Function.branch_targets`. `.loc`, `.file`, `.pragma`,
`.section` and comments are skipped. `select_kernel` picks a kernel by plain, mangled or demangled name,
with template arguments (`scale<3>`) or without them where that is unambiguous.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from qgpu_min.errors import QgpuError


class PtxParseError(QgpuError):
    """The PTX text is malformed or uses a construct the parser does not know; names the line."""


class KernelSelectError(QgpuError):
    """No kernel (or more than one) matches the requested name; lists the available kernels."""


# ---------------------------------------------------------------------------------------------
# Data model (docs/interfaces.md §1)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reg:
    name: str  # '%r1', '%rd2', '%p1'


@dataclass(frozen=True)
class SReg:
    name: str  # '%tid.x', '%ntid.y', '%laneid', 'WARP_SZ', ...


@dataclass(frozen=True)
class Imm:
    value: int


@dataclass(frozen=True)
class FloatImm:
    bits: int  # the IEEE bit pattern of 0fXXXXXXXX (width 32) or 0dXXXXXXXXXXXXXXXX (width 64)
    width: int = 32


@dataclass(frozen=True)
class Sym:
    name: str  # a variable, parameter, label or function name


@dataclass(frozen=True)
class Mem:
    base: Reg | Sym | None  # None: an absolute address [offset]
    offset: int = 0


@dataclass(frozen=True)
class Vec:
    items: tuple


@dataclass(frozen=True)
class Pair:
    """nvcc's `%r1|%p1`: an instruction's value destination and its predicate destination."""

    first: Reg
    second: Reg | Sym  # Sym('_') when the predicate is discarded


@dataclass(frozen=True)
class Instr:
    opcode: str
    mods: tuple[str, ...]
    operands: tuple
    pred: tuple[str, bool] | None  # (predicate register, negated)
    line: int
    text: str


@dataclass(frozen=True)
class Label:
    name: str
    line: int


@dataclass(frozen=True)
class VarDecl:
    space: str  # 'shared' | 'local' | 'global' | 'const' | 'param' (call-site params inside a body)
    name: str
    elem_bytes: int
    count: int  # 1 for a scalar; 0 for an unsized extern array (dynamic shared memory)
    align: int
    init: list[int] | None
    line: int
    type: str = "b8"


@dataclass(frozen=True)
class RegDecl:
    """`.reg .b32 %r<10>;` -> RegDecl('%r', 'b32', 10); `.reg .pred %p;` -> count None."""

    prefix: str
    type: str
    count: int | None
    line: int


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # 'u32', 'b64', 'b8' (byte arrays for by-value structs), ...
    bytes: int


@dataclass
class Function:
    name: str
    demangled: str
    is_kernel: bool
    params: list[Param]
    returns: list[Param]
    body: list[Instr | Label]
    decls: list[VarDecl]
    line: int
    regs: list[RegDecl] = field(default_factory=list)
    # jump tables: `$L_brx_0: .branchtargets L1, L2;` -> {'$L_brx_0': ('L1', 'L2')}, used by brx.idx
    branch_targets: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass
class PtxModule:
    version: str
    target: str
    address_size: int
    functions: dict[str, Function]
    globals: list[VarDecl]

    @property
    def kernels(self) -> list[Function]:
        return [f for f in self.functions.values() if f.is_kernel]


# ---------------------------------------------------------------------------------------------
# Types
# ---------------------------------------------------------------------------------------------

_TYPE_WIDTHS = {
    "pred": 1,
    **{f"{k}{w}": w for k in "bsu" for w in (8, 16, 32, 64)},
    "b128": 128,
    "f16": 16,
    "bf16": 16,
    "f16x2": 32,
    "bf16x2": 32,
    "tf32": 32,
    "f32": 32,
    "f64": 64,
}


def type_width(mod: str) -> int | None:
    """Bit width of a PTX type name ('s32' -> 32, 'pred' -> 1); None if `mod` is not a type."""
    return _TYPE_WIDTHS.get(mod.lstrip("."))


# ---------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------

_TOKEN_RE = re.compile(
    r"""
    (?P<nl>\n)
  | (?P<ws>[ \t\r\f\v]+)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<string>"[^"\n]*")
  | (?P<number>[0-9][0-9A-Za-z_.]*)
  | (?P<name>[%A-Za-z_$.][A-Za-z0-9_$.]*)
  | (?P<punct>[;,{}\[\]()+\-@!|:<>=])
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class _Tok:
    kind: str  # 'number' | 'name' | 'string' | 'punct'
    text: str
    line: int
    start: int
    end: int


def _tokenize(text: str) -> list[_Tok]:
    toks, line, pos = [], 1, 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            snippet = text[pos : pos + 20].split("\n")[0]
            raise PtxParseError(f"PTX line {line}: unexpected character {text[pos]!r} in {snippet!r}")
        kind, tok = m.lastgroup, m.group()
        if kind in ("number", "name", "string", "punct"):
            toks.append(_Tok(kind, tok, line, m.start(), m.end()))
        line += tok.count("\n")
        pos = m.end()
    return toks


# ---------------------------------------------------------------------------------------------
# Token cursor
# ---------------------------------------------------------------------------------------------


class _Cursor:
    """A position in the token list with the small lookahead helpers the grammar needs."""

    def __init__(self, toks: list[_Tok], source: str):
        self.toks, self.i, self.source = toks, 0, source
        self.plain_regs: set[str] = set()  # registers declared without '%' (inline asm: `.reg .pred p;`)

    def at_end(self) -> bool:
        return self.i >= len(self.toks)

    def peek(self, k: int = 0) -> _Tok | None:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def peek_text(self, k: int = 0) -> str | None:
        t = self.peek(k)
        return t.text if t else None

    def next(self) -> _Tok:
        if self.at_end():
            last = self.toks[-1].line if self.toks else 1
            raise PtxParseError(f"PTX line {last}: unexpected end of input")
        t = self.toks[self.i]
        self.i += 1
        return t

    def accept(self, text: str) -> bool:
        if self.peek_text() == text:
            self.i += 1
            return True
        return False

    def expect(self, text: str) -> _Tok:
        t = self.next()
        if t.text != text:
            raise self.error(t, f"expected {text!r}, found {t.text!r}")
        return t

    def line_text(self, line: int) -> str:
        lines = self.source.split("\n")
        return lines[line - 1].strip() if 0 < line <= len(lines) else ""

    def error(self, tok: _Tok, msg: str) -> PtxParseError:
        return PtxParseError(f"PTX line {tok.line}: {msg}: {self.line_text(tok.line)!r}")

    def skip_statement(self) -> None:
        """Skip to just past the next ';' (used for directives we ignore)."""
        while self.next().text != ";":
            pass

    def skip_line(self) -> None:
        """Skip the rest of the current token's line: `.loc` and `.file` have no ';'."""
        line = self.next().line
        while not self.at_end() and self.peek().line == line:
            self.i += 1

    def skip_directive(self) -> None:
        """Skip a directive we ignore: debug info, pragmas, sections."""
        word = self.peek_text()
        if word in (".loc", ".file"):
            self.skip_line()
        elif word == ".section":
            self.i += 2  # `.section .debug_xxx`, then an optional braced body
            if self.accept("{"):
                depth = 1
                while depth:
                    depth += {"{": 1, "}": -1}.get(self.next().text, 0)
        else:
            self.skip_statement()


# ---------------------------------------------------------------------------------------------
# Numbers, names, operands
# ---------------------------------------------------------------------------------------------

_INT_RE = re.compile(r"(0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)[uU]?")
_FLOAT_RE = re.compile(r"0([fF][0-9a-fA-F]{8}|[dD][0-9a-fA-F]{16})")
_DECIMAL_FLOAT_RE = re.compile(r"[0-9]+\.[0-9]*([eE][0-9]+)?")
_SREG_RE = re.compile(
    r"%(tid|ntid|ctaid|nctaid|clusterid|nclusterid|cluster_ctaid|cluster_nctaid)(\.[xyz])?"
    r"|%(laneid|warpid|nwarpid|smid|nsmid|gridid|clock|clock64|clock_hi|globaltimer\w*"
    r"|lanemask_(eq|le|lt|ge|gt)|envreg\d+|pm\d+(_64)?|total_smem_size|dynamic_smem_size"
    r"|aggr_smem_size|cluster_ctarank|cluster_nctarank|is_explicit_cluster)"
)
_SPECIAL_NAMES = {"WARP_SZ"}


def _expect_name(cur: _Cursor, what: str) -> _Tok:
    tok = cur.next()
    if tok.kind != "name" or tok.text.startswith("."):
        raise cur.error(tok, f"expected {what}, found {tok.text!r}")
    return tok


def _parse_int(cur: _Cursor, tok: _Tok, negative: bool = False) -> int:
    m = _INT_RE.fullmatch(tok.text)
    if m is None:
        raise cur.error(tok, f"malformed integer {tok.text!r}")
    digits = m.group(1)
    if digits[:2] in ("0x", "0X", "0b", "0B"):
        value = int(digits, 0)
    elif len(digits) > 1 and digits[0] == "0":
        value = int(digits, 8)  # PTX octal, as in C
    else:
        value = int(digits)
    return -value if negative else value


def _parse_number(cur: _Cursor, tok: _Tok, negative: bool) -> Imm | FloatImm:
    m = _FLOAT_RE.fullmatch(tok.text)
    if m:
        bits = int(m.group(1)[1:], 16)
        width = 32 if m.group(1)[0] in "fF" else 64
        if negative:
            bits ^= 1 << (width - 1)
        return FloatImm(bits, width)
    if _DECIMAL_FLOAT_RE.fullmatch(tok.text):  # PTX reads decimal float literals as f64
        value = -float(tok.text) if negative else float(tok.text)
        return FloatImm(struct.unpack("<Q", struct.pack("<d", value))[0], 64)
    return Imm(_parse_int(cur, tok, negative))


def _name_operand(cur: _Cursor, name: str) -> Reg | SReg | Sym:
    if name in _SPECIAL_NAMES or _SREG_RE.fullmatch(name):
        return SReg(name)
    if name.startswith("%") or name in cur.plain_regs:
        return Reg(name)
    return Sym(name)


def _parse_address(cur: _Cursor) -> Mem:
    """`[%r1]`, `[%r1+4]`, `[%rd1+-4]`, `[sym+8]`, `[0x100]`; the '[' is already consumed."""
    tok = cur.next()
    base: Reg | Sym | None
    offset = 0
    if tok.kind == "name":
        base = _name_operand(cur, tok.text)
        if isinstance(base, SReg):
            raise cur.error(tok, f"special register {tok.text} used as an address")
    elif tok.kind == "number":
        base, offset = None, _parse_int(cur, tok)
    else:
        raise cur.error(tok, f"malformed address near {tok.text!r}")
    while cur.peek_text() in ("+", "-"):
        sign = -1 if cur.next().text == "-" else 1
        if cur.accept("-"):
            sign = -sign
        offset += sign * _parse_int(cur, cur.next())
    cur.expect("]")
    return Mem(base, offset)


def _parse_vector(cur: _Cursor) -> Vec:
    """`{%r1, %r2}`; the '{' is already consumed. `_` (a sink) becomes Sym('_')."""
    items = []
    while True:
        items.append(_parse_operand(cur))
        if cur.accept("}"):
            return Vec(tuple(items))
        cur.expect(",")


def _parse_operand(cur: _Cursor):
    tok = cur.next()
    if tok.text == "[":
        return _parse_address(cur)
    if tok.text == "{":
        return _parse_vector(cur)
    if tok.text == "-" and cur.peek() and cur.peek().kind == "number":
        return _parse_number(cur, cur.next(), negative=True)
    if tok.kind == "number":
        return _parse_number(cur, tok, negative=False)
    if tok.kind == "name" and not tok.text.startswith("."):
        op = _name_operand(cur, tok.text)
        if cur.accept("|"):
            second = _name_operand(cur, cur.next().text)
            if not (isinstance(op, Reg) and (isinstance(second, Reg) or second == Sym("_"))):
                raise cur.error(tok, "malformed register pair")
            return Pair(op, second)
        if cur.peek_text() in ("+", "-") and isinstance(op, Sym):
            raise cur.error(tok, f"symbol arithmetic '{tok.text}{cur.peek_text()}...' is not supported")
        return op
    raise cur.error(tok, f"unexpected {tok.text!r} in an operand")


# ---------------------------------------------------------------------------------------------
# Instructions
# ---------------------------------------------------------------------------------------------


def _split_opcode(cur: _Cursor, tok: _Tok) -> tuple[str, tuple[str, ...]]:
    if tok.kind != "name" or tok.text.startswith((".", "%")):
        raise cur.error(tok, f"expected an instruction, found {tok.text!r}")
    parts = tok.text.split(".")
    if not all(parts):
        raise cur.error(tok, f"malformed opcode {tok.text!r}")
    return parts[0], tuple(parts[1:])


def _parse_paren_list(cur: _Cursor) -> Vec:
    cur.expect("(")
    items = []
    if not cur.accept(")"):
        while True:
            items.append(_parse_operand(cur))
            if cur.accept(")"):
                break
            cur.expect(",")
    return Vec(tuple(items))


def _parse_call_operands(cur: _Cursor) -> tuple:
    """`call.uni (retval0), fn, (param0, param1);` or `call.uni fn, (param0);` or `call fn;`."""
    ret = _parse_paren_list(cur) if cur.peek_text() == "(" else None
    if ret is not None:
        cur.expect(",")
    fn_tok = _expect_name(cur, "a function name in call")
    if fn_tok.text.startswith("%"):
        raise cur.error(fn_tok, "indirect calls (through a function pointer) are not supported")
    args = _parse_paren_list(cur) if cur.accept(",") else Vec(())
    return (ret, Sym(fn_tok.text), args)


def _parse_instr(cur: _Cursor) -> Instr:
    first = cur.peek()
    pred = None
    if cur.accept("@"):
        negated = cur.accept("!")
        ptok = cur.next()
        if not isinstance(_name_operand(cur, ptok.text), Reg):
            raise cur.error(ptok, "expected a predicate register after '@'")
        pred = (ptok.text, negated)
    op_tok = cur.next()
    opcode, mods = _split_opcode(cur, op_tok)
    if opcode == "call":
        operands = _parse_call_operands(cur)
    else:
        ops = []
        if cur.peek_text() != ";":
            while True:
                ops.append(_parse_operand(cur))
                if cur.peek_text() == ";":
                    break
                cur.expect(",")
        operands = tuple(ops)
    last = cur.expect(";")
    text = " ".join(cur.source[first.start : last.end].split())
    return Instr(opcode, mods, operands, pred, first.line, text)


# ---------------------------------------------------------------------------------------------
# Declarations: variables, registers, parameters
# ---------------------------------------------------------------------------------------------

_SPACES = {".shared": "shared", ".local": "local", ".global": "global", ".const": "const", ".param": "param"}
_LINKAGE = {".visible", ".extern", ".weak", ".common"}


def _parse_type_and_align(cur: _Cursor) -> tuple[str, int | None]:
    """Consume `.align N`, `.ptr`, state-space and type words; return (type, align).

    Words may come glued together (`.ptr.global.align 1`), as some nvcc versions print them."""
    vtype, align = None, None
    while cur.peek() and cur.peek().text.startswith("."):
        word = cur.next()
        for part in word.text[1:].split("."):
            if part == "align":
                align = _parse_int(cur, cur.next())
            elif part in ("v2", "v4"):
                raise cur.error(word, "vector-typed variables are not supported")
            elif type_width(part) is not None:
                vtype = part
            elif part not in ("ptr", "global", "shared", "local", "const"):
                raise cur.error(word, f"unknown declaration word {word.text!r}")
    if vtype is None:
        tok = cur.peek() or cur.toks[-1]
        raise cur.error(tok, "declaration without a type")
    return vtype, align


def _parse_dims(cur: _Cursor) -> int:
    """`[32]`, `[4][8]`, `[]` -> element count (0 for an unsized array); no brackets -> 1."""
    count = 1
    while cur.accept("["):
        if cur.accept("]"):
            count = 0
            continue
        count *= _parse_int(cur, cur.next())
        cur.expect("]")
    return count


def _parse_init(cur: _Cursor, name_tok: _Tok) -> list[int]:
    """`= 5` or `= {1, 2, 3}` (nested braces flattened); integers only."""
    values: list[int] = []
    depth = 0
    while True:
        tok = cur.next()
        if tok.text == "{":
            depth += 1
        elif tok.text == "}":
            depth -= 1
        elif tok.text == "-":
            values.append(_parse_int(cur, cur.next(), negative=True))
        elif tok.kind == "number":
            imm = _parse_number(cur, tok, negative=False)
            values.append(imm.value if isinstance(imm, Imm) else imm.bits)
        elif tok.text != ",":
            raise cur.error(tok, f"initialiser of {name_tok.text} is not a list of integers ({tok.text!r})")
        if depth == 0 and cur.peek_text() in (";", None):
            return values


def _pad_init(cur: _Cursor, name_tok: _Tok, init: list[int], count: int) -> list[int]:
    """Compilers omit trailing zero elements of an initialiser; restore them."""
    if count and len(init) > count:
        raise cur.error(name_tok, f"{name_tok.text} has {len(init)} initial values for {count} elements")
    return init + [0] * (count - len(init)) if count else init


def _parse_var_decl(cur: _Cursor, space: str) -> VarDecl:
    """After the state-space word: `.align 4 .b8 name[32] = {...};`."""
    vtype, align = _parse_type_and_align(cur)
    name_tok = _expect_name(cur, "a variable name")
    count = _parse_dims(cur)
    init = _parse_init(cur, name_tok) if cur.accept("=") else None
    cur.expect(";")
    if init is not None:
        init = _pad_init(cur, name_tok, init, count)
    elem = max(1, type_width(vtype) // 8)
    return VarDecl(space, name_tok.text, elem, count, align or elem, init, name_tok.line, vtype)


def _parse_reg_decl(cur: _Cursor) -> list[RegDecl]:
    """`.reg .b32 %r<10>;`, `.reg .pred %p;`, `.reg .b32 a, b;` (the '.reg' is consumed)."""
    tok = cur.next()
    if type_width(tok.text) is None:
        raise cur.error(tok, f"unknown register type {tok.text!r}")
    decls = []
    while True:
        name = _expect_name(cur, "a register name")
        count = None
        if cur.accept("<"):
            count = _parse_int(cur, cur.next())
            cur.expect(">")
        decls.append(RegDecl(name.text, tok.text[1:], count, name.line))
        if cur.accept(";"):
            return decls
        cur.expect(",")


def _parse_param(cur: _Cursor) -> Param:
    cur.expect(".param")
    vtype, _ = _parse_type_and_align(cur)
    name = _expect_name(cur, "a parameter name")
    count = _parse_dims(cur)
    return Param(name.text, vtype, max(1, type_width(vtype) // 8) * max(count, 1))


def _parse_param_list(cur: _Cursor) -> list[Param]:
    cur.expect("(")
    params = []
    if not cur.accept(")"):
        while True:
            params.append(_parse_param(cur))
            if cur.accept(")"):
                break
            cur.expect(",")
    return params


# ---------------------------------------------------------------------------------------------
# Functions and the module
# ---------------------------------------------------------------------------------------------

_SKIPPED_DIRECTIVES = {".loc", ".file", ".pragma", ".section"}


def _parse_body(cur: _Cursor, fn: Function) -> None:
    """Statements up to the function's closing brace; nested `{ }` scopes are flattened."""
    depth = 1
    while depth:
        tok = cur.peek()
        if tok is None:
            raise PtxParseError(f"PTX line {fn.line}: function {fn.name} has no closing brace")
        text = tok.text
        if text in ("{", "}"):
            cur.next()
            depth += 1 if text == "{" else -1
        elif text == ".reg":
            cur.next()
            decls = _parse_reg_decl(cur)
            fn.regs.extend(decls)
            cur.plain_regs |= {d.prefix for d in decls if d.count is None and not d.prefix.startswith("%")}
        elif text in _SPACES:
            cur.next()
            fn.decls.append(_parse_var_decl(cur, _SPACES[text]))
        elif text in _SKIPPED_DIRECTIVES:
            cur.skip_directive()
        elif text.startswith("."):
            raise cur.error(tok, f"unknown directive {text!r} in function {fn.name}")
        elif tok.kind == "name" and cur.peek_text(1) == ":" and cur.peek_text(2) == ".branchtargets":
            fn.branch_targets[text] = _parse_branch_targets(cur)
        elif tok.kind == "name" and cur.peek_text(1) == ":":
            cur.next(), cur.next()
            fn.body.append(Label(text, tok.line))
        else:
            fn.body.append(_parse_instr(cur))


def _parse_branch_targets(cur: _Cursor) -> tuple[str, ...]:
    """`name: .branchtargets L1, L2, ...;` (clang's jump tables for brx.idx)."""
    cur.next(), cur.next(), cur.next()
    labels = []
    while True:
        tok = cur.next()
        if tok.kind != "name":
            raise cur.error(tok, f"expected a label in .branchtargets, found {tok.text!r}")
        labels.append(tok.text)
        if cur.accept(";"):
            return tuple(labels)
        cur.expect(",")


def _parse_function(cur: _Cursor, is_kernel: bool) -> Function | None:
    """After `.entry`/`.func`; returns None for a declaration without a body."""
    start = cur.peek()
    returns = _parse_param_list(cur) if cur.peek_text() == "(" else []
    name = _expect_name(cur, "a function name")
    params = _parse_param_list(cur) if cur.peek_text() == "(" else []
    while cur.peek() and cur.peek_text() not in ("{", ";"):
        cur.next()  # performance directives: .maxntid 256, 1, 1 etc.
    if cur.accept(";"):
        return None
    cur.expect("{")
    cur.plain_regs = set()
    fn = Function(name.text, demangle(name.text), is_kernel, params, returns, [], [], start.line)
    _parse_body(cur, fn)
    return fn


def _parse_module_header(cur: _Cursor, header: dict) -> bool:
    """`.version`, `.target`, `.address_size`; True if one was consumed."""
    word = cur.peek_text()
    if word == ".version":
        cur.next()
        header["version"] = cur.next().text
    elif word == ".target":
        cur.next()
        targets = [cur.next().text]
        while cur.accept(","):
            targets.append(cur.next().text)
        header["target"] = ", ".join(targets)
    elif word == ".address_size":
        cur.next()
        tok = cur.next()
        header["address_size"] = _parse_int(cur, tok)
        if header["address_size"] not in (32, 64):
            raise cur.error(tok, f"address size {tok.text} is not 32 or 64")
    else:
        return False
    return True


def parse_ptx(text: str) -> PtxModule:
    """Parse PTX text into a PtxModule. Raises PtxParseError naming the line of anything malformed."""
    cur = _Cursor(_tokenize(text), text)
    header = {"version": "", "target": "", "address_size": 64}  # PTX's default address size is 64
    functions: dict[str, Function] = {}
    globals_: list[VarDecl] = []
    while not cur.at_end():
        if _parse_module_header(cur, header):
            continue
        if cur.peek_text() in _SKIPPED_DIRECTIVES:
            cur.skip_directive()
            continue
        tok = cur.next()
        if tok.text in _LINKAGE:
            continue
        if tok.text in (".entry", ".func"):
            fn = _parse_function(cur, tok.text == ".entry")
            if fn is not None:
                if fn.name in functions:
                    raise cur.error(tok, f"function {fn.name} is defined twice")
                functions[fn.name] = fn
        elif tok.text in _SPACES and tok.text != ".param":
            globals_.append(_parse_var_decl(cur, _SPACES[tok.text]))
        else:
            raise cur.error(tok, f"unexpected {tok.text!r} at module level")
    if not header["version"]:
        raise PtxParseError("PTX line 1: no .version directive: this does not look like PTX")
    return PtxModule(header["version"], header["target"], header["address_size"], functions, globals_)


# ---------------------------------------------------------------------------------------------
# Names: demangling and kernel selection
# ---------------------------------------------------------------------------------------------


def _source_name(mangled: str, i: int) -> tuple[str, int]:
    m = re.match(r"\d+", mangled[i:])
    if m is None:
        raise ValueError("no length")
    n = int(m.group())
    start = i + len(m.group())
    if start + n > len(mangled):
        raise ValueError("short name")
    return mangled[start : start + n], start + n


# Itanium codes of the builtin types, and how c++filt writes an integer literal of each (`Li3E` -> 3,
# `Lj3E` -> 3u); other literal types print as a cast, `(short)3`.
_BUILTIN_TYPES = {
    "v": "void", "b": "bool", "c": "char", "a": "signed char", "h": "unsigned char", "s": "short",
    "t": "unsigned short", "i": "int", "j": "unsigned int", "l": "long", "m": "unsigned long",
    "x": "long long", "y": "unsigned long long", "f": "float", "d": "double",
}
_LITERAL_SUFFIX = {"i": "", "j": "u", "l": "l", "m": "ul", "x": "ll", "y": "ull"}


def _template_type(mangled: str, i: int) -> tuple[str, int]:
    """A simple type inside template arguments: builtin, named (with its own arguments), P/K/R/O-qualified."""
    c = mangled[i]
    if c in _BUILTIN_TYPES:
        return _BUILTIN_TYPES[c], i + 1
    if c in "PRO":
        inner, j = _template_type(mangled, i + 1)
        return inner + {"P": "*", "R": "&", "O": "&&"}[c], j
    if c == "K":
        inner, j = _template_type(mangled, i + 1)
        return inner + " const", j
    if c.isdigit():
        name, j = _source_name(mangled, i)
        if mangled[j : j + 1] == "I":
            args, j = _template_args(mangled, j)
            name += args
        return name, j
    raise ValueError(f"template argument type {c!r} is not demangled")


def _template_arg(mangled: str, i: int) -> tuple[str, int]:
    if mangled[i] != "L":
        return _template_type(mangled, i)
    code = mangled[i + 1]
    m = re.match(r"(n?)(\d+)E", mangled[i + 2 :])
    if code not in _BUILTIN_TYPES or m is None:
        raise ValueError("template literal is not an integer")
    value = ("-" if m.group(1) else "") + m.group(2)
    if code == "b":
        text = {"0": "false", "1": "true"}.get(value, f"(bool){value}")
    elif code in _LITERAL_SUFFIX:
        text = value + _LITERAL_SUFFIX[code]
    else:
        text = f"({_BUILTIN_TYPES[code]}){value}"
    return text, i + 2 + m.end()


def _template_args(mangled: str, i: int) -> tuple[str, int]:
    """`I ... E` starting at mangled[i] == 'I', as c++filt writes it: `ILi3EE` -> '<3>'."""
    args, i = [], i + 1
    while mangled[i] != "E":
        arg, i = _template_arg(mangled, i)
        args.append(arg)
    text = ", ".join(args)
    return f"<{text}{' ' if text.endswith('>') else ''}>", i + 1


def _skip_template_args(mangled: str, i: int) -> int:
    """Skip `I ... E` (nested) starting at mangled[i] == 'I', whatever the arguments are."""
    depth = 0
    while i < len(mangled):
        c = mangled[i]
        if c == "I":
            depth += 1
        elif c == "E":
            depth -= 1
            if depth == 0:
                return i + 1
        elif c.isdigit():  # a length-prefixed name inside the arguments may contain 'I'/'E'
            _, i = _source_name(mangled, i)
            continue
        elif c == "L":  # a literal, `Li3E`: its digits are a value, not a name's length
            i = mangled.index("E", i)
        i += 1
    raise ValueError("unterminated template arguments")


def demangle(name: str, template_args: bool = False) -> str:
    """Name of an Itanium-mangled function: `_Z4manyPiPjij` -> 'many', `_ZN2ns3fooEv` -> 'ns::foo'.

    A function's static variable reads as c++filt writes it without the parameter types:
    `_ZZ10block_scanPiiE4temp` -> 'block_scan::temp'. Parameter types are not recovered. Template arguments are dropped (`_Z5scaleILi3EEvPii` -> 'scale'),
    or with `template_args` kept as c++filt writes them ('scale<3>') where they are integer literals or
    simple types; names that are not mangled, or not understood, come back unchanged.
    """
    if not name.startswith("_Z"):
        return name
    local = re.fullmatch(r"_ZZ(.+)E(\d+)(\w+)", name)    # a function's static variable: `_ZZ4histPiE4bins`
    if local and len(local.group(3)) == int(local.group(2)):
        return f"{demangle('_Z' + local.group(1), template_args)}::{local.group(3)}"
    try:
        i = 2
        if name[i : i + 1] == "L":
            i += 1
        nested = name[i : i + 1] == "N"
        if nested:
            i += 1
            while name[i] in "rVKRO":  # cv- and ref-qualifiers of a member function
                i += 1
        parts: list[str] = []
        while True:
            part, i = _source_name(name, i)
            if name[i : i + 1] == "I" and template_args:
                args, i = _template_args(name, i)
                part += args
            elif name[i : i + 1] == "I" and nested:  # arguments of a qualifier: Foo<int>::bar
                i = _skip_template_args(name, i)
            parts.append(part)
            if not nested or name[i] == "E":
                return "::".join(parts)
    except (ValueError, IndexError, KeyError):
        return demangle(name) if template_args else name


def _describe(fns: list[Function]) -> str:
    if not fns:
        return "none"
    return ", ".join(f"{demangle(f.name, True)} ({f.name})" if f.demangled != f.name else f.name for f in fns)


def _squeeze(name: str) -> str:
    """A name without spaces, so 'scale< 3 >' and 'pair<int,int>' match c++filt's spelling."""
    return re.sub(r"\s+", "", name)


def _names_of(fn: Function, template_args: bool) -> set[str]:
    """The names a kernel answers to: qualified and unqualified, with or without template arguments."""
    full = _squeeze(demangle(fn.name, template_args))
    depth, last = 0, 0
    for j, c in enumerate(full):  # the last '::' outside template arguments starts the unqualified name
        depth += {"<": 1, ">": -1}.get(c, 0)
        if depth == 0 and full.startswith("::", j):
            last = j + 2
    return {full, full[last:]}


def select_kernel(module: PtxModule, name: str | None) -> Function:
    """The kernel called `name`: mangled, plain or demangled, with template arguments ('scale<3>') or
    without them when that names one kernel; the only kernel when name is None."""
    kernels = module.kernels
    if name is None:
        if len(kernels) == 1:
            return kernels[0]
        what = "no kernels" if not kernels else f"{len(kernels)} kernels"
        raise KernelSelectError(
            f"the PTX has {what}; choose one with --kernel NAME. Available kernels: {_describe(kernels)}")
    exact = [k for k in kernels if k.name == name]
    if exact:
        return exact[0]
    wanted = _squeeze(name)
    found = [k for k in kernels if wanted in _names_of(k, "<" in wanted)]
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise KernelSelectError(
            f"kernel name {name!r} is ambiguous (overloads or template instantiations): {_describe(found)}; "
            f"pass the name with its template arguments (as listed) or the mangled name")
    raise KernelSelectError(f"no kernel named {name!r}. Available kernels: {_describe(kernels)}")

"""The calculator's expression language: a tokenizer and a recursive-descent parser to a small tree.

Grammar (lowest precedence first; binary operators are left-associative, as in Python)::

    expr    := term (('+' | '-') term)*
    term    := unary (('*' | '@' | '//' | '%') unary)*
    unary   := ('-' | '+') unary | primary
    primary := INTEGER | list | NAME '(' [expr (',' expr)* [',']] ')' | '(' expr ')'
    list    := '[' item (',' item)* [','] ']'          item := ['-' | '+'] INTEGER | list

INTEGER is decimal (``1_000`` allowed), ``0x``/``0o``/``0b``. A minus sign directly before an integer
literal is part of the literal (``-3`` is a number, not an operation); before anything else (``-(3)``,
``--3``, ``-[1, 2]``) it is negation, which the GPU computes. List items are literals only, at most two
levels deep (a matrix), rectangular and not empty. The parser checks syntax and literals only; function
names, arities and shapes are the operations' business (ops.py), checked over the whole tree before
anything runs. ``/`` and ``**`` are refused with advice (use ``//``; multiply), as are fractions.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

from ..machine.isa import INT32_MAX, INT32_MIN
from .errors import CalcError



# ---- tree --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Number:
    value: int
    pos: int


@dataclass(frozen=True)
class ListLiteral:
    items: tuple            # ints, or tuples of ints (rows of a matrix)
    pos: int


@dataclass(frozen=True)
class Unary:
    op: str                 # '-' (the only one that does something)
    operand: "Node"
    pos: int


@dataclass(frozen=True)
class Binary:
    op: str                 # '+', '-', '*', '@', '//', '%'
    left: "Node"
    right: "Node"
    pos: int                # of the operator


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple
    pos: int                # of the name


Node = Union[Number, ListLiteral, Unary, Binary, Call]


# ---- tokens ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Token:
    kind: str               # 'int', 'name', 'op' (punctuation too), 'end'
    text: str
    pos: int


_INT = r"0[xX][0-9a-fA-F]+(?:_[0-9a-fA-F]+)*|0[oO][0-7]+(?:_[0-7]+)*|0[bB][01]+(?:_[01]+)*|\d+(?:_\d+)*"
_SCANNER = re.compile(rf"(?P<space>\s+)|(?P<int>{_INT})|(?P<name>[A-Za-z_]\w*)"
                      r"|(?P<op>//|\*\*|[-+*/%@()\[\],])")
_NUMBER_TAIL = re.compile(r"[\w.]+")        # what makes '1.5', '1e3', '12abc' one bad number, not two tokens

# Tokens that are not in the language but that an author of Python or NumPy writes; each gets advice.
_ADVICE = {
    "/": "'/' is true division, which gives fractions; use // for integer (floor) division",
    "**": "powers are not supported; multiply instead (x * x)",
}


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        m = _SCANNER.match(text, pos)
        if m is None:
            raise CalcError(f"unexpected character {text[pos]!r}", pos, text)
        kind = m.lastgroup
        if kind == "int":
            tail = _NUMBER_TAIL.match(text, m.end())
            if tail:
                bad = text[pos:tail.end()]
                raise CalcError(f"{bad!r} is not an integer: the calculator works with 32-bit integers only", pos,
                                text)
        if kind == "op" and m.group() in _ADVICE:
            raise CalcError(_ADVICE[m.group()], pos, text)
        if kind != "space":
            tokens.append(Token(kind, m.group(), pos))
        pos = m.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


def _int_value(token: Token) -> int:
    return int(token.text.replace("_", ""), 0) if token.text[:2].lower() in ("0x", "0o", "0b") \
        else int(token.text.replace("_", ""))


def check_int32(value: int, pos: int, text: str | None = None) -> int:
    """Input values must be int32: refusing them beats silently wrapping what the user wrote."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise CalcError(f"{value} is outside the 32-bit integer range [{INT32_MIN}, {INT32_MAX}]", pos, text)
    return value


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


# ---- parser ------------------------------------------------------------------------------------
_ADDITIVE = ("+", "-")
_MULTIPLICATIVE = ("*", "@", "//", "%")
_CLOSING = {"(": ")", "[": "]"}


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0

    # helpers
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def advance(self) -> Token:
        t = self.tokens[self.i]
        self.i += 1
        return t

    def error(self, problem: str, pos: int) -> CalcError:
        return CalcError(problem, pos, self.text)

    def found(self) -> str:
        return "the end of the expression" if self.tok.kind == "end" else repr(self.tok.text)

    def is_op(self, *ops: str) -> bool:
        return self.tok.kind == "op" and self.tok.text in ops

    def close(self, opener: Token) -> None:
        want = _CLOSING[opener.text]
        if not self.is_op(want):
            raise self.error(f"expected {want!r} to close the {opener.text!r} at column {opener.pos + 1}, "
                             f"found {self.found()}", self.tok.pos)
        self.advance()

    # grammar
    def parse(self) -> Node:
        if self.tok.kind == "end":
            raise self.error("the expression is empty", 0)
        node = self.expr()
        if self.tok.kind != "end":
            raise self.error(f"unexpected {self.found()} after a complete expression", self.tok.pos)
        return node

    def expr(self) -> Node:
        node = self.term()
        while self.is_op(*_ADDITIVE):
            op = self.advance()
            node = Binary(op.text, node, self.term(), op.pos)
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.is_op(*_MULTIPLICATIVE):
            op = self.advance()
            node = Binary(op.text, node, self.unary(), op.pos)
        return node

    def unary(self) -> Node:
        if self.is_op("-", "+"):
            sign = self.advance()
            if sign.text == "-" and self.tok.kind == "int":      # -3: a negative literal, not an operation
                return Number(-_int_value(self.advance()), sign.pos)
            operand = self.unary()
            return operand if sign.text == "+" else Unary("-", operand, sign.pos)
        return self.primary()

    def primary(self) -> Node:
        t = self.tok
        if t.kind == "int":
            self.advance()
            return Number(_int_value(t), t.pos)
        if t.kind == "name":
            return self.call()
        if self.is_op("("):
            self.advance()
            if self.is_op(")"):
                raise self.error("empty parentheses: expected an expression inside", t.pos)
            node = self.expr()
            self.close(t)
            return node
        if self.is_op("["):
            return ListLiteral(self.list_items(), t.pos)
        raise self.error(f"expected a number, a list, a function call or '(', found {self.found()}", t.pos)

    def call(self) -> Call:
        name = self.advance()
        if not self.is_op("("):
            raise self.error(f"{name.text!r} is not a number or a function call: there are no variables; "
                             f"write the values themselves, or call a function as {name.text}(...)", name.pos)
        opener = self.advance()
        args: list[Node] = []
        while not self.is_op(")"):
            args.append(self.expr())
            if not self.is_op(","):
                break
            self.advance()
        self.close(opener)
        return Call(name.text, tuple(args), name.pos)

    def list_items(self) -> tuple:
        """A list literal's items; checks that it is a number list or a rectangular matrix, not empty."""
        opener = self.advance()
        items: list = []
        where: list[int] = []
        while not self.is_op("]"):
            where.append(self.tok.pos)
            items.append(self.list_item())
            if self.is_op(*_ADDITIVE, *_MULTIPLICATIVE):
                raise self.error(f"list items must be integer literals (or rows of them), found {self.found()} "
                                 f"after one; compute outside the list instead, e.g. [1, 2] + [3, 4]", self.tok.pos)
            if not self.is_op(","):
                break
            self.advance()
        self.close(opener)
        if not items:
            raise self.error("an empty list: a list needs at least one number", opener.pos)
        rows = [isinstance(x, tuple) for x in items]
        if any(rows) and not all(rows):
            k = rows.index(not rows[0])
            raise self.error("a list mixes numbers and lists: a matrix is a list of rows of numbers, "
                             "like [[1, 2], [3, 4]]", where[k])
        if all(rows):
            for k, row in enumerate(items):
                if any(isinstance(x, tuple) for x in row):
                    raise self.error("lists nest at most two deep (a matrix: a list of rows of numbers)", where[k])
                if len(row) != len(items[0]):
                    raise self.error(f"ragged matrix: row {k + 1} has {_count(len(row), 'number')} but row 1 has "
                                     f"{len(items[0])}; every row must have the same length", where[k])
        return tuple(items)

    def list_item(self):
        t = self.tok
        if self.is_op("["):
            return self.list_items()
        sign = 1
        if self.is_op("-", "+"):
            sign = -1 if self.advance().text == "-" else 1
        if self.tok.kind != "int":
            raise self.error(f"list items must be integer literals (or rows of them), found {self.found()}; "
                             f"compute outside the list instead, e.g. [1, 2] + [3, 4]", self.tok.pos)
        return check_int32(sign * _int_value(self.advance()), t.pos, self.text)


def parse(text: str) -> Node:
    """The tree of an expression; a CalcError names the column and the problem."""
    return _Parser(text).parse()

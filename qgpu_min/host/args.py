"""Command-line kernel arguments and launch dimensions.

Kernel arguments are positional, in the kernel's parameter order (DESIGN §1):
  - a pointer parameter takes an array literal `[1, -2, 0x30]` or `zeros(N)`;
  - a scalar parameter takes an integer: decimal, hex (`0x1F`), binary (`0b101`), optionally negative.
Every value lies in [-2^31, 2^32); launch() stores it as the word with those low bits, so `0xFFFFFFFF`
for an `int` reads as -1 and -1 for an `unsigned` as 2^32-1 (and checks narrower ranges for
`char`/`short` arrays).
`--grid` and `--block` take `N` or `X,Y`.

Malformed text raises click.BadParameter naming the argument and what was expected; arguments that do
not fit the kernel's parameters (count or kind) raise click.UsageError showing the kernel's signature.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

import click
from ..machine.isa import MEM_WORDS

LOW, HIGH = -(2**31), 2**32  # accepted values: LOW <= v < HIGH
_INT = r"[+-]?(?:0[xX][0-9a-fA-F]+|0[bB][01]+|[0-9]+)"
_INT_RE = re.compile(rf"\s*({_INT})\s*")
_ZEROS_RE = re.compile(r"\s*zeros\s*\(\s*([0-9]+)\s*\)\s*")
_ARRAY_RE = re.compile(r"\s*\[(.*)\]\s*", re.DOTALL)
EXPECTED = "an array literal like [1,2,3], zeros(N), or an integer like 5, -7 or 0xFF"

Value = int | list[int]


class Param(Protocol):
    """What the parser needs of a kernel parameter (host.launch's CompiledKernel.params entries)."""
    name: str
    kind: str  # 'ptr' | 'scalar' | 'unknown' (PTX without source: the argument decides)
    signed: bool


# More significant digits than any 32-bit value has (after leading zeros): refused before int() sees them,
# which would reject >4300 decimal digits with a bare ValueError and print huge hex values whole.
_MAX_DIGITS = {16: 8, 2: 32, 10: 10}


def _short(text: str) -> str:
    text = text.strip()
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}...({len(text)} characters)"


def _natural_text(digits: str, hint: str, what: str) -> int:
    """Decimal digits (already matched) as an int, refusing more digits than a 32-bit value needs."""
    if len(digits.lstrip("0")) > _MAX_DIGITS[10]:
        raise click.BadParameter(f"{_short(digits)} is too large: {what}", param_hint=hint)
    return int(digits)


def _int(text: str, hint: str) -> int:
    m = _INT_RE.fullmatch(text)
    if not m:
        raise click.BadParameter(f"{_short(text)} is not an integer (decimal, 0x hex or 0b binary)",
                                 param_hint=hint)
    digits = m.group(1).lstrip("+-")
    base = {"0x": 16, "0b": 2}.get(digits[:2].lower(), 10)  # int(, 0) would reject decimal "007"
    body = digits[2:] if base != 10 else digits
    if len(body.lstrip("0")) > _MAX_DIGITS[base]:
        raise click.BadParameter(f"{_short(text)} is outside the 32-bit range [-2^31, 2^32)", param_hint=hint)
    value = int(body, base) * (-1 if m.group(1).startswith("-") else 1)
    if not LOW <= value < HIGH:
        raise click.BadParameter(f"{value} is outside the 32-bit range [-2^31, 2^32)", param_hint=hint)
    return value


def parse_value(text: str, hint: str = "--arg") -> Value:
    """One `--arg` text: an int (scalar) or a list of ints (array). Checks syntax and range only."""
    m = _ZEROS_RE.fullmatch(text)
    if m:
        count = _natural_text(m.group(1), hint, f"zeros(N) takes N in 1..{MEM_WORDS}")
        if not 1 <= count <= MEM_WORDS:
            raise click.BadParameter(f"zeros({count}): the length must be 1..{MEM_WORDS} "
                                     f"(the machine's memory holds {MEM_WORDS} words)", param_hint=hint)
        return [0] * count
    m = _ARRAY_RE.fullmatch(text)
    if m:
        body = m.group(1)
        if not body.strip():
            raise click.BadParameter("an empty array [] has no words to point to; give at least one element",
                                     param_hint=hint)
        items = body.split(",")
        if len(items) > MEM_WORDS:
            raise click.BadParameter(f"the array has {len(items)} elements; the machine's memory holds "
                                     f"{MEM_WORDS} words", param_hint=hint)
        return [_int(item, f"{hint} element [{k}]") for k, item in enumerate(items)]
    if _INT_RE.fullmatch(text):
        return _int(text, hint)
    raise click.BadParameter(f"{_short(text)} is not {EXPECTED}", param_hint=hint)


def format_param(p: Param) -> str:
    if p.kind == "unknown":
        return f"? {p.name}"
    base = "int" if p.signed else "unsigned"
    return f"{base}* {p.name}" if p.kind == "ptr" else f"{base} {p.name}"


def signature(kernel_name: str, params: Sequence[Param]) -> str:
    return f"{kernel_name}({', '.join(format_param(p) for p in params)})"


def bind_args(values: Sequence[Value], params: Sequence[Param], kernel_name: str) -> list[Value]:
    """Check parsed values against the kernel's parameters: the count and kinds must fit."""
    sig = signature(kernel_name, params)
    if len(values) != len(params):
        raise click.UsageError(f"kernel {sig} takes {len(params)} argument{'s' * (len(params) != 1)} "
                               f"(one --arg each, in order), got {len(values)}")
    for k, (value, p) in enumerate(zip(values, params), start=1):
        hint = f"--arg #{k} ({p.name})"
        if p.kind == "ptr" and not isinstance(value, list):
            raise click.BadParameter(f"{format_param(p)} is a pointer: give an array literal like [1,2,3] or "
                                     f"zeros(N), not the integer {value} (kernel {sig})", param_hint=hint)
        if p.kind == "scalar" and isinstance(value, list):
            raise click.BadParameter(f"{format_param(p)} is a scalar: give an integer, not an array "
                                     f"(kernel {sig})", param_hint=hint)
    return list(values)


def parse_dim(text: str, option: str) -> tuple[int, int]:
    """`N` or `X,Y` (positive integers) for --grid / --block; a missing Y is 1."""
    parts = text.split(",")
    if len(parts) > 2 or not all(re.fullmatch(r"\s*[0-9]+\s*", p) for p in parts):
        raise click.BadParameter(f"{_short(text)}: expected N or X,Y with positive integers, e.g. 4 or 8,2",
                                 param_hint=option)
    dims = [_natural_text(p.strip(), option, "a grid or block dimension has at most 10 digits") for p in parts]
    dims += [1] * (2 - len(parts))
    if min(dims) < 1:
        raise click.BadParameter(f"{text!r}: every dimension must be at least 1", param_hint=option)
    return dims[0], dims[1]

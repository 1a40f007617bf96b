"""Parsing of `--arg`, `--grid`, `--block` (qgpu_min/host/args.py)."""
from __future__ import annotations

from types import SimpleNamespace

import click
import numpy as np
import pytest

from qgpu_min.host.args import bind_args, parse_dim, parse_value, signature
from qgpu_min.host.launch import default_block


@pytest.mark.parametrize("text, value", [
    ("5", 5), ("-7", -7), ("+3", 3), ("0x1F", 31), ("-0x10", -16), ("0b101", 5), ("007", 7), (" 12 ", 12),
    ("-2147483648", -(2**31)), ("4294967295", 2**32 - 1),
    ("[1,2,3]", [1, 2, 3]), ("[ -1 , 0xff,0 ]", [-1, 255, 0]), ("[7]", [7]),
    ("zeros(3)", [0, 0, 0]), ("zeros( 1 )", [0]),
])
def test_parse_value(text: str, value) -> None:
    assert parse_value(text) == value


@pytest.mark.parametrize("text, message", [
    ("4294967296", "outside the 32-bit range"),
    ("-2147483649", "outside the 32-bit range"),
    ("[1, 4294967296]", "element [1]"),
    ("[]", "empty array"),
    ("[1,,2]", "element [1]"),
    ("[1,2", "is not an array literal"),
    ("1.5", "is not an array literal"),
    ("abc", "is not an array literal"),
    ("zeros(0)", "length must be 1..1024"),
    ("zeros(5000)", "length must be 1..1024"),
    ("zeros(-1)", "is not an array literal"),
    ("", "is not an array literal"),
])
def test_parse_value_errors(text: str, message: str) -> None:
    with pytest.raises(click.BadParameter) as e:
        parse_value(text, "--arg #2")
    assert message in e.value.format_message()
    assert "--arg #2" in e.value.format_message()


@pytest.mark.parametrize("text, dims", [("4", (4, 1)), ("8,2", (8, 2)), (" 3 , 5 ", (3, 5)), ("32", (32, 1))])
def test_parse_dim(text: str, dims) -> None:
    assert parse_dim(text, "--block") == dims


@pytest.mark.parametrize("text", ["0", "4,0", "-1", "a", "1,2,3", "", "2.5", "4,"])
def test_parse_dim_errors(text: str) -> None:
    with pytest.raises(click.BadParameter) as e:
        parse_dim(text, "--grid")
    assert "--grid" in e.value.format_message()


PARAMS = [SimpleNamespace(name="a", kind="ptr", signed=True), SimpleNamespace(name="out", kind="ptr", signed=False),
          SimpleNamespace(name="n", kind="scalar", signed=True)]


def test_bind_args_passes_values() -> None:
    values = [[0xFFFFFFFF, -5], [-1, 7], 0x80000000]
    assert bind_args(values, PARAMS, "k") == values


def test_bind_args_unknown_kind() -> None:
    """Parameters of PTX without source have no type: either kind of argument goes."""
    params = [SimpleNamespace(name="p0", kind="unknown", signed=True)] * 2
    assert bind_args([[1], 2], params, "k") == [[1], 2]


def test_bind_args_count() -> None:
    with pytest.raises(click.UsageError) as e:
        bind_args([[1], [2]], PARAMS, "k")
    assert "k(int* a, unsigned* out, int n) takes 3 arguments" in e.value.format_message()
    assert "got 2" in e.value.format_message()


@pytest.mark.parametrize("values, hint, message", [
    ([5, [1], 3], "--arg #1 (a)", "is a pointer"),
    ([[1], [1], [3]], "--arg #3 (n)", "is a scalar"),
])
def test_bind_args_kind(values, hint: str, message: str) -> None:
    with pytest.raises(click.BadParameter) as e:
        bind_args(values, PARAMS, "k")
    text = e.value.format_message()
    assert hint in text and message in text and signature("k", PARAMS) in text


def test_default_block() -> None:
    """The CLI and the library share it: one thread per element of the largest array, at most the limit."""
    assert default_block([[1, 2, 3], [0], 3], 32) == (3, 1)
    assert default_block([np.zeros((4, 5), np.int32), [1]], 32) == (20, 1)
    assert default_block([[0] * 100, 3], 32) == (32, 1)
    assert default_block([3, 4], 32) == (1, 1)

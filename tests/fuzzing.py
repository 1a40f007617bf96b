"""What the fuzz tests share: a bounded, reproducible run in the default suite and a long random one under
`-m slow`, and the one assertion every refusal must pass (a QgpuError or click error naming its input)."""
from __future__ import annotations

import re
from typing import NamedTuple

import click
import pytest
from hypothesis import HealthCheck, settings, strategies as st

from qgpu_min.errors import QgpuError

class Budget(NamedTuple):
    examples: int
    repeatable: bool  # the quick run is derandomized, so CI is repeatable; the long run draws afresh


def budgets(quick: int, long: int):
    """Parametrize a test by its budget: `quick` examples in the default suite, `long` under -m slow."""
    return pytest.mark.parametrize("budget", [pytest.param(Budget(quick, True), id="quick"),
                                              pytest.param(Budget(long, False), id="long", marks=pytest.mark.slow)])


def fuzz_settings(budget: Budget) -> settings:
    return settings(max_examples=budget.examples, deadline=None, database=None, derandomize=budget.repeatable,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])


def assert_names(error: BaseException, *names: str) -> None:
    """A refusal is one of ours and names the file or argument it is about."""
    assert isinstance(error, (QgpuError, click.ClickException)), f"{type(error).__name__}: {error}"
    text = error.format_message() if isinstance(error, click.ClickException) else str(error)
    if isinstance(error, click.BadParameter) and error.param_hint:
        text = f"{error.param_hint}: {text}"
    assert any(n in text for n in names), f"{text!r} names none of {names}"


# JSON values of every kind, nested a little; floats include NaN and infinities (json reads and writes them)
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                                   max_size=4),
                    max_leaves=12)


def mutate_bytes(data: bytes, draw) -> bytes:
    """One to four edits of `data`: flip, set, insert or delete a byte, truncate, or duplicate a span."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "repeat"]))
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        if kind == "flip" and out:
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and out:
            out[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete" and out:
            del out[at:at + draw(st.integers(1, 8))]
        elif kind == "truncate":
            del out[at:]
        elif kind == "repeat":
            out[at:at] = out[at:at + draw(st.integers(1, 16))]
    return bytes(out)


def mutate_text(text: str, draw, vocabulary: list[str] | None = None) -> str:
    """One to three line-level or token-level edits of source text: delete, duplicate or swap lines, or put
    one of the text's own tokens (or `vocabulary`'s) in place of another."""
    lines = text.split("\n")
    tokens = vocabulary or sorted(set(re.findall(r"[%$\w.]+|[^\s\w]", text)))
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["delete", "duplicate", "swap", "token", "token", "token"]))
        if kind == "delete" and len(lines) > 1:
            del lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        elif kind == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        else:
            found = list(re.finditer(r"[%$\w.]+|[^\s\w]", lines[i]))
            if found:
                m = draw(st.sampled_from(found))
                lines[i] = lines[i][:m.start()] + draw(st.sampled_from(tokens)) + lines[i][m.end():]
    return "\n".join(lines)

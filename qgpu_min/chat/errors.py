"""CalcError: everything the calculator refuses, as one QgpuError the chat can hand back to the model."""
from __future__ import annotations

from ..errors import QgpuError


EXCERPT = 72      # characters of the expression quoted around the column of an error


class CalcError(QgpuError):
    """A problem with an expression or its evaluation. ``position`` is the 0-based offset in the expression
    the problem is at (None when it is not about one place); the message names it as a 1-based column and,
    when the expression is known, quotes it with a caret under that column."""

    def __init__(self, problem: str, position: int | None = None, text: str | None = None) -> None:
        self.problem = problem
        self.position = position
        self.text = text
        super().__init__(self._message())

    def _message(self) -> str:
        if self.position is None:
            return self.problem
        where = f"at column {self.position + 1}: {self.problem}"
        if self.text is None or "\n" in self.text:
            return where
        lo = max(0, self.position - EXCERPT // 2)           # a long expression: the part around the column
        hi = min(len(self.text), lo + EXCERPT)
        left, right = ("..." if lo else ""), ("..." if hi < len(self.text) else "")
        return f"{where}\n  {left}{self.text[lo:hi]}{right}\n  {' ' * (len(left) + self.position - lo)}^"

    def within(self, text: str) -> CalcError:
        """The same error quoting the whole expression (raised deep down, where only a position is known)."""
        return self if self.text is not None else CalcError(self.problem, self.position, text)

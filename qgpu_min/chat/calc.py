"""The chat's calculator: an expression in, a number/list/matrix out, every operation computed on the GPU.

    >>> evaluate("[1, 2, 3] @ [4, 5, 6]", backend="interp").text
    '32'

The language (expr.py): integer literals (negative, hex, ``1_000``), lists ``[1, 2, 3]``, matrices as lists
of rows ``[[1, 2], [3, 4]]``, the operators ``+ - * // % @`` with Python's precedence (``* @ // %`` bind
tighter than ``+ -``; unary minus tighter still), parentheses, and the functions in ``OPERATIONS``
(ops.py: one line each, e.g. ``describe_operations()`` for a tool description).

Semantics, where a choice was made:

- ``//`` and ``%`` are Python's floor division and modulo (``-7 // 2 == -4``, ``-7 % 2 == 1``), not C's
  truncation, because the expressions read as Python; division or modulo by zero is a CalcError.
- ``histogram(x, bins)`` counts the values 0..bins-1; values outside that range are not counted.
- ``popcount`` counts the bits of the 32-bit two's-complement word (``popcount(-1) == 32``); ``gcd`` is
  non-negative, ``gcd(0, 0) == 0``.
- Integers are 32-bit. A literal outside [-2^31, 2^31) is refused; results wrap around as int32 (as
  NumPy's int32 arithmetic does): ``2147483647 + 1 == -2147483648``.

Every operation, even ``2 + 3``, is one launch of a CUDA kernel (kernels/*.cu) through ``qgpu_min.launch``
on the chosen backend; a nested expression runs one launch per operation, each result going into the
next launch. The host never computes a result: nothing is folded, and only literals (including a minus
sign written before a number) are values without a launch. Before the first launch the whole expression
is checked (names, arities, shapes); before each launch, that its arrays fit the machine (1024 words of
memory for all arrays, shared and local memory; CTAs of at most 32 threads; at most 64 CTAs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

from .errors import CalcError
from .expr import Binary, ListLiteral, Node, Number, Unary, check_int32, parse
from .launcher import Launcher
from .ops import BINARY, FUNCTIONS, OPERATIONS, UNARY, Operation, Shape, describe_operations

Value = Union[int, list]

__all__ = ["evaluate", "CalcResult", "CalcError", "OPERATIONS", "describe_operations", "parse"]


@dataclass(frozen=True)
class CalcResult:
    value: Value                    # int, list[int] or list[list[int]]
    text: str                       # the value as it would be quoted: '32', '[1, 3, 6]', '[[1, 2], [3, 4]]'
    launches: tuple[dict, ...]      # one per kernel launch, in the order they ran: {"op", "kernel", "grid",
                                    # "block", "backend", "tokens": {"prompt", "generated"}} (launcher.record)

    @property
    def prompt_tokens(self) -> int:
        return sum(x["tokens"]["prompt"] for x in self.launches)

    @property
    def generated_tokens(self) -> int:
        return sum(x["tokens"]["generated"] for x in self.launches)


def evaluate(text: str, *, backend: str = "circuit", model: str | None = None, mode: str = "fp32",
             quant: str | None = None, device: str = "cpu") -> CalcResult:
    """Evaluate an expression, computing every operation on the GPU of ``backend`` ('circuit': the GPU in
    the weights; 'interp': the reference interpreter; 'model': the merged checkpoint in folder ``model``),
    with ``mode`` 'fp32' or 'bf16' activations on the model backends. Raises CalcError (a QgpuError) for
    anything it cannot evaluate, naming the column and the problem."""
    if not isinstance(text, str):
        raise CalcError(f"the expression must be a string, like '[1, 2, 3] @ [4, 5, 6]', not {type(text).__name__}")
    try:
        tree = parse(text)
        _check(tree)                                    # all of it, before anything is launched
        gpu = Launcher(backend, model, mode, quant, device)
        value = _evaluate(tree, gpu)
    except CalcError as e:
        raise e.within(text) from e.__cause__
    result = value.tolist()
    return CalcResult(result, repr(result), tuple(gpu.launches))


# ---- the walk -----------------------------------------------------------------------------------
def _operation(node: Node) -> Operation:
    if isinstance(node, Binary):
        return BINARY[node.op]
    if isinstance(node, Unary):
        return UNARY[node.op]
    op = FUNCTIONS.get(node.name)
    if op is None:
        raise CalcError(f"unknown function {node.name!r}; the functions are {', '.join(FUNCTIONS)}", node.pos)
    least, most = op.arity
    if len(node.args) < least or (most is not None and len(node.args) > most):
        want = ("" if least == most else "at least ") + ("1 argument" if least == 1 else f"{least} arguments")
        raise CalcError(f"{op.usage} takes {want}, got {len(node.args)}", node.pos)
    return op


def _operands(node: Node) -> tuple:
    return (node.left, node.right) if isinstance(node, Binary) else \
        (node.operand,) if isinstance(node, Unary) else node.args


def _check(node: Node) -> Shape:
    """The shape of the node's value, checking literals, names, arities and shapes without running anything."""
    if isinstance(node, Number):
        check_int32(node.value, node.pos)
        return ()
    if isinstance(node, ListLiteral):
        return np.shape(node.items)
    op = _operation(node)
    return op.shape([_check(x) for x in _operands(node)], node.pos)


def _evaluate(node: Node, gpu: Launcher) -> np.ndarray:
    if isinstance(node, (Number, ListLiteral)):
        return np.array(node.value if isinstance(node, Number) else node.items, dtype=np.int32)
    op = _operation(node)
    args = [_evaluate(x, gpu) for x in _operands(node)]
    op.shape([a.shape for a in args], node.pos)         # again, now that every length is known
    return op.run(gpu, args, node.pos)

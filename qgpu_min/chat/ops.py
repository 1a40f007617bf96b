"""The calculator's operations: one table entry each, with its shape rule and the kernel launch that computes it.

A value is an int32 NumPy array: 0-d (a number), 1-d (a list) or 2-d (a matrix). A shape is its shape
tuple, where a dimension may be None before running (the length of a histogram depends on a value).
``shape`` checks an operation's operands and gives its result's shape, raising CalcError; it runs over
the whole expression before the first launch, and again on the actual values before each launch.
``run`` only lays out the launch: the result is what the kernel left in its output array.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..machine.isa import INT32_MAX, INT32_MIN, MEM_WORDS
from .errors import CalcError
from .launcher import Launcher, one_cta, per_cell, per_element

Shape = tuple
ShapeRule = Callable[[list, int], Shape]                              # operand shapes, position -> result shape
Runner = Callable[[Launcher, list, int], np.ndarray]                  # launcher, operand values, position -> value


@dataclass(frozen=True)
class Operation:
    usage: str                      # how it is written, e.g. 'a // b', 'histogram(x, bins)'
    description: str                # one line, for the chat's tool description
    arity: tuple                    # (least, most) operands; most None: any number
    shape: ShapeRule
    run: Runner


def describe(shape: Shape) -> str:
    if shape == ():
        return "a number"
    if len(shape) == 1:
        return "a list" if shape[0] is None else f"a list of {shape[0]}"
    return f"a {shape[0]}x{shape[1]} matrix"


def _flat(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.int32).reshape(-1)


def _size(shape: Shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


# ---- shape rules --------------------------------------------------------------------------------
def _elementwise_shape(usage: str) -> ShapeRule:
    def rule(shapes: list, pos: int) -> Shape:
        a, b = shapes
        if a == () or b == ():
            return b if a == () else a
        if len(a) == len(b) and all(x is None or y is None or x == y for x, y in zip(a, b)):
            return tuple(y if x is None else x for x, y in zip(a, b))
        raise CalcError(f"{usage}: the shapes do not match ({describe(a)} and {describe(b)}); elementwise "
                        f"operations need two of the same shape, or one number", pos)
    return rule


def _same_shape(shapes: list, pos: int) -> Shape:
    return shapes[0]


def _matmul_shape(shapes: list, pos: int) -> Shape:
    a, b = shapes
    if a == () or b == ():
        raise CalcError(f"@ multiplies lists and matrices, got {describe(a)} and {describe(b)}; multiply by a "
                        f"number with *", pos)
    inner_a, inner_b = a[-1], b[0]
    if inner_a is not None and inner_b is not None and inner_a != inner_b:
        raise CalcError(f"@ of {describe(a)} and {describe(b)}: the inner sizes differ ({inner_a} and {inner_b}); "
                        f"a @ b needs as many columns (or elements) in a as rows (or elements) in b", pos)
    return a[:-1] + b[1:]


def _list_shape(name: str) -> ShapeRule:
    def rule(shapes: list, pos: int) -> Shape:
        if len(shapes[0]) != 1:
            raise CalcError(f"{name} takes a list, got {describe(shapes[0])}", pos)
        return shapes[0]
    return rule


def _reduce_shape(name: str) -> ShapeRule:
    """One list or matrix (all its elements), or (max, min) several numbers, as Python's max(3, 5)."""
    def rule(shapes: list, pos: int) -> Shape:
        if len(shapes) == 1 and shapes[0] != ():
            return ()
        if len(shapes) > 1 and all(s == () for s in shapes):
            return ()
        several = " or several numbers" if name != "sum" else ""
        got = ", ".join(describe(s) for s in shapes)
        raise CalcError(f"{name} takes one list or matrix{several}, got {got}", pos)
    return rule


def _histogram_shape(shapes: list, pos: int) -> Shape:
    x, bins = shapes
    if len(x) != 1:
        raise CalcError(f"histogram(x, bins): x must be a list, got {describe(x)}", pos)
    if bins != ():
        raise CalcError(f"histogram(x, bins): bins must be a number, got {describe(bins)}", pos)
    return (None,)


# ---- runners ------------------------------------------------------------------------------------
def _elementwise(file: str, kernel: str, usage: str, checks_zero: bool = False) -> Runner:
    """out = a OP b elementwise; a number operand is passed as one element read by every thread (step 0)."""
    def run(gpu: Launcher, args: list, pos: int) -> np.ndarray:
        a, b = args
        shape = a.shape if a.ndim else b.shape
        n = _size(shape)
        arrays = [_flat(a), _flat(b), np.zeros(n, np.int32)]
        if checks_zero:
            arrays.append(np.zeros(1, np.int32))
        out = gpu.run(file, kernel, arrays + [n, int(a.ndim > 0), int(b.ndim > 0)], per_element(n), usage, pos)
        if checks_zero and out["zero_div"][0]:
            raise CalcError(f"{usage}: division by zero", pos)
        return out["out"].reshape(shape)
    return run


def _unary(file: str, kernel: str, usage: str) -> Runner:
    def run(gpu: Launcher, args: list, pos: int) -> np.ndarray:
        (x,) = args
        n = _size(x.shape)
        out = gpu.run(file, kernel, [_flat(x), np.zeros(n, np.int32), n], per_element(n), usage, pos)
        return out["out"].reshape(x.shape)
    return run


def _matmul(usage: str) -> Runner:
    def run(gpu: Launcher, args: list, pos: int) -> np.ndarray:
        a, b = args
        if a.ndim == 1 and b.ndim == 1:      # a dot product: atomics over the products, no matrix bookkeeping
            n = a.size
            out = gpu.run("reduce.cu", "calc_dot", [_flat(a), _flat(b), np.zeros(1, np.int32), n], one_cta(n),
                          usage, pos)
            return out["out"].reshape(())
        m, k = a.shape if a.ndim == 2 else (1, a.size)      # a list is one row on the left,
        p = b.shape[1] if b.ndim == 2 else 1                 # one column on the right
        out = gpu.run("matmul.cu", "calc_matmul", [_flat(a), _flat(b), np.zeros(m * p, np.int32), m, k, p],
                      per_cell(m, p), usage, pos)
        return out["C"].reshape(a.shape[:-1] + b.shape[1:])
    return run


_IDENTITY = {"calc_sum": 0, "calc_max": INT32_MIN, "calc_min": INT32_MAX}


def _reduce(kernel: str, usage: str) -> Runner:
    def run(gpu: Launcher, args: list, pos: int) -> np.ndarray:
        # several numbers (max(3, 5)) are gathered into one list for the kernel: moved, not computed
        x = _flat(args[0]) if len(args) == 1 else np.array([int(v) for v in args], np.int32)
        out = gpu.run("reduce.cu", kernel, [x, np.array([_IDENTITY[kernel]], np.int32), x.size],
                      one_cta(x.size), usage, pos)
        return out["out"].reshape(())
    return run


def _sort(gpu: Launcher, args: list, pos: int) -> np.ndarray:
    x = _flat(args[0])
    width = 1 << max(0, (x.size - 1).bit_length())          # the network's inputs; a thread per comparator
    out = gpu.run("sort.cu", "calc_sort", [x, x.size, width], one_cta(max(1, width // 2)), "sort(x)", pos)
    return out["data"]


def _cumsum(gpu: Launcher, args: list, pos: int) -> np.ndarray:
    x = _flat(args[0])
    # the kernel takes the length of each thread's chunk with the launch shape: one thread per chunk
    block = min(x.size, gpu.threads("scan.cu", "calc_cumsum", [x], "cumsum(x)", pos))
    chunk = -(-x.size // block)
    out = gpu.run("scan.cu", "calc_cumsum", [x, x.size, chunk], one_cta(x.size), "cumsum(x)", pos)
    return out["data"]


def _histogram(gpu: Launcher, args: list, pos: int) -> np.ndarray:
    x, bins = _flat(args[0]), int(args[1])
    if bins < 1:
        raise CalcError(f"histogram(x, bins): bins must be at least 1, got {bins}", pos)
    if bins > MEM_WORDS:        # before allocating the counts: the launch check would refuse it anyway
        raise CalcError(f"histogram(x, bins): {bins} bins do not fit the GPU's {MEM_WORDS} words of memory", pos)
    out = gpu.run("histogram.cu", "calc_histogram", [x, np.zeros(bins, np.int32), x.size, bins],
                  per_element(x.size), "histogram(x, bins)", pos)
    return out["counts"]


# ---- the tables ---------------------------------------------------------------------------------
def _binary(usage: str, description: str, run: Runner, shape: ShapeRule | None = None) -> Operation:
    return Operation(usage, description, (2, 2), shape or _elementwise_shape(usage), run)


BINARY: dict[str, Operation] = {
    "+": _binary("a + b", "elementwise sum of two lists/matrices of the same shape, or with a number",
                 _elementwise("elementwise.cu", "calc_add", "a + b")),
    "-": _binary("a - b", "elementwise difference (same shapes, or with a number)",
                 _elementwise("elementwise.cu", "calc_sub", "a - b")),
    "*": _binary("a * b", "elementwise product (same shapes, or with a number), not the dot product: that is @",
                 _elementwise("elementwise.cu", "calc_mul", "a * b")),
    "//": _binary("a // b", "floor division as in Python, rounding toward minus infinity (-7 // 2 == -4), "
                            "elementwise, dividing by 0 is an error",
                  _elementwise("divide.cu", "calc_floordiv", "a // b", checks_zero=True)),
    "%": _binary("a % b", "remainder as in Python, with the sign of b (-7 % 2 == 1, 7 % -2 == -1), "
                          "elementwise, modulo 0 is an error",
                 _elementwise("divide.cu", "calc_mod", "a % b", checks_zero=True)),
    "@": _binary("a @ b", "dot product of two lists, or matrix-vector, vector-matrix, matrix-matrix product",
                 _matmul("a @ b"), _matmul_shape),
}

UNARY: dict[str, Operation] = {
    "-": Operation("-x", "negation, elementwise (a minus sign written directly before a number is part of the number)",
                   (1, 1), _same_shape, _unary("elementwise.cu", "calc_neg", "-x")),
}

FUNCTIONS: dict[str, Operation] = {
    "sum": Operation("sum(x)", "sum of all elements of a list or matrix", (1, 1), _reduce_shape("sum"),
                     _reduce("calc_sum", "sum(x)")),
    "max": Operation("max(x)", "largest element of a list or matrix, or of several numbers: max(a, b, ...)",
                     (1, None), _reduce_shape("max"), _reduce("calc_max", "max(x)")),
    "min": Operation("min(x)", "smallest element of a list or matrix, or of several numbers: min(a, b, ...)",
                     (1, None), _reduce_shape("min"), _reduce("calc_min", "min(x)")),
    "sort": Operation("sort(x)", "the list sorted in ascending order", (1, 1), _list_shape("sort"), _sort),
    "cumsum": Operation("cumsum(x)", "running totals of a list: [x0, x0+x1, x0+x1+x2, ...]", (1, 1),
                        _list_shape("cumsum"), _cumsum),
    "histogram": Operation("histogram(x, bins)", "how many elements of the list equal 0, 1, ..., bins-1 (a list "
                                                 "of bins counts), values outside 0..bins-1 are not counted",
                           (2, 2), _histogram_shape, _histogram),
    "gcd": Operation("gcd(a, b)", "greatest common divisor (>= 0, gcd(0, 0) == 0) of two numbers, or "
                                  "elementwise of lists (same shapes, or with a number)",
                     (2, 2), _elementwise_shape("gcd(a, b)"), _elementwise("bits.cu", "calc_gcd", "gcd(a, b)")),
    "popcount": Operation("popcount(x)", "number of 1 bits of each 32-bit value (two's complement: "
                                         "popcount(-1) == 32), elementwise", (1, 1), _same_shape,
                          _unary("bits.cu", "calc_popcount", "popcount(x)")),
    "dot": Operation("dot(a, b)", "the same as a @ b", (2, 2), _matmul_shape, _matmul("dot(a, b)")),
}

# Every operation by how it is written, and its one-line description: what the chat's tool description is
# made from (descriptions have no ';': the tool joins them with it).
TABLE: dict[str, Operation] = {op.usage: op for op in (*BINARY.values(), *UNARY.values(), *FUNCTIONS.values())}
OPERATIONS: dict[str, str] = {usage: op.description for usage, op in TABLE.items()}

RULES = ("Numbers are 32-bit integers (no fractions); results wrap around as int32. Lists are written [1, 2, 3], "
         "matrices as lists of rows [[1, 2], [3, 4]]. * // % bind tighter than + -, as in Python; @ binds like *. "
         f"Each operation runs as one GPU launch, whose arrays must fit the GPU's {MEM_WORDS} words of memory.")


def describe_operations() -> str:
    """The operations and rules as the chat's tool description: one line per operation."""
    width = max(len(u) for u in OPERATIONS)
    lines = [f"{usage:<{width}}  {description}" for usage, description in OPERATIONS.items()]
    return "\n".join(lines + ["", RULES])

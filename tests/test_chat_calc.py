"""The chat's calculator (qgpu_min/chat): the parser and its errors, every operation against NumPy through the
real launch path on the interpreter, a few expressions on the GPU in the weights, and that every result comes
out of a launch (a fake launch changes the answers; nothing is computed on the host)."""
from __future__ import annotations

import zlib
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from qgpu_min.chat.calc import OPERATIONS, CalcError, evaluate
from qgpu_min.errors import QgpuError
from qgpu_min.chat.expr import Binary, Call, ListLiteral, Number, Unary, parse
from qgpu_min.chat.ops import describe_operations
from qgpu_min.host import launch as host_launch
from qgpu_min.host.launch import LaunchResult

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1


def ev(text: str):
    return evaluate(text, backend="interp")


def lit(x) -> str:
    """An array or int as the calculator's literal."""
    return repr(np.asarray(x).tolist())


def wrap(v) -> np.ndarray:
    """Python integers to int32, wrapping as the GPU does."""
    return np.asarray((np.asarray(v, dtype=object) + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int64)


# ---- the parser ----------------------------------------------------------------------------------
def test_tree_precedence_and_positions() -> None:
    assert parse("1 + 2 * 3") == Binary("+", Number(1, 0), Binary("*", Number(2, 4), Number(3, 8), 6), 2)
    assert parse("-sum([1, -2])") == Unary("-", Call("sum", (ListLiteral((1, -2), 5),), 1), 0)
    assert parse("- 3") == Number(-3, 0)                   # a signed literal, not an operation
    assert parse("-(3)") == Unary("-", Number(3, 2), 0)    # negation: a launch
    assert parse("[[1, 2], [3, 4]]") == ListLiteral(((1, 2), (3, 4)), 0)
    assert parse("a(1, 2,)") == Call("a", (Number(1, 2), Number(2, 5)), 0)   # names are checked later


@pytest.mark.parametrize("text, value", [
    ("2 + 3 * 4", 14), ("(2 + 3) * 4", 20), ("10 - 2 - 3", 5), ("2 * 3 // 4", 1), ("100 // 7 % 3", 2),
    ("-2 * 3", -6), ("-(2 + 3) * 2", -10), ("2 - -3", 5), ("--3", 3), ("+4", 4),
    ("[1, 2] @ [3, 4] + 1", 12), ("1 + [1, 2] @ [3, 4] * 2", 23), ("0x10 + 0b11 - 0o7", 12), ("1_000 * 2", 2000),
    ("-2147483648", INT_MIN), ("sum([1, 2, 3]) * 2 - max(4, 9) // 2", 8),
])
def test_precedence(text: str, value: int) -> None:
    assert ev(text).value == value


@pytest.mark.parametrize("text, column, says", [
    ("mean([1, 2])", 1, "unknown function 'mean'"),
    ("sum([1], [2])", 1, "sum(x) takes 1 argument, got 2"),
    ("gcd(4)", 1, "gcd(a, b) takes 2 arguments, got 1"),
    ("max()", 1, "takes at least 1 argument, got 0"),
    ("[[1, 2], [3]]", 10, "ragged matrix: row 2 has 1 number but row 1 has 2"),
    ("[1, [2]]", 5, "mixes numbers and lists"),
    ("[[[1]]]", 2, "at most two deep"),
    ("[]", 1, "empty list"),
    ("[1, 2] + [1, 2, 3]", 8, "shapes do not match (a list of 2 and a list of 3)"),
    ("[[1, 2], [3, 4]] - [1, 2]", 18, "shapes do not match (a 2x2 matrix and a list of 2)"),
    ("[1, 2] @ [1, 2, 3]", 8, "inner sizes differ (2 and 3)"),
    ("[[1, 2]] @ [[1, 2]]", 10, "inner sizes differ (2 and 1)"),
    ("[1, 2] @ 3", 8, "@ multiplies lists and matrices"),
    ("sort(5)", 1, "sort takes a list, got a number"),
    ("cumsum([[1], [2]])", 1, "cumsum takes a list, got a 2x1 matrix"),
    ("histogram([1, 2], [3])", 1, "bins must be a number"),
    ("max([1], [2])", 1, "max takes one list or matrix or several numbers"),
    ("sum(5)", 1, "sum takes one list or matrix"),
    ("1.5 + 2", 1, "'1.5' is not an integer"),
    ("2 * 1e3", 5, "'1e3' is not an integer"),
    ("7 / 2", 3, "use // for integer (floor) division"),
    ("2 ** 3", 3, "powers are not supported"),
    ("(1 + 2", 7, "expected ')' to close the '(' at column 1, found the end of the expression"),
    ("sum([1, 2)", 10, "expected ']' to close the '[' at column 5, found ')'"),
    ("1 +", 4, "expected a number, a list, a function call or '('"),
    ("1 2", 3, "unexpected '2' after a complete expression"),
    ("3 $ 4", 3, "unexpected character '$'"),
    ("", 1, "the expression is empty"),
    ("()", 1, "empty parentheses"),
    ("x + 1", 1, "there are no variables"),
    ("[1, 2 + 3]", 7, "list items must be integer literals"),
    ("[1, sum([2])]", 5, "list items must be integer literals"),
    ("4294967296", 1, "4294967296 is outside the 32-bit integer range"),
    ("1 + -2147483649", 5, "-2147483649 is outside the 32-bit integer range"),
    ("[0, 2147483648]", 5, "2147483648 is outside the 32-bit integer range"),
])
def test_errors_name_the_column_and_the_problem(text: str, column: int, says: str, monkeypatch) -> None:
    launches = _count_launches(monkeypatch)
    with pytest.raises(CalcError) as info:
        ev(text)
    e = info.value
    assert says in e.problem and e.position == column - 1
    assert str(e).startswith(f"at column {column}: ")
    if text:
        assert str(e).splitlines()[1:] == [f"  {text}", "  " + " " * (column - 1) + "^"]
    assert launches == [], "an expression that cannot be evaluated launches nothing"


def test_errors_are_checked_over_the_whole_expression_before_any_launch(monkeypatch) -> None:
    launches = _count_launches(monkeypatch)
    with pytest.raises(CalcError, match="unknown function 'foo'"):
        ev("sum([1, 2]) + [1, 2] @ [3, 4] + foo(3)")
    with pytest.raises(CalcError, match="shapes do not match"):
        ev("sort([3, 1]) + cumsum([1, 2, 3])")
    assert launches == []


def test_calc_error_is_a_qgpu_error_and_quotes_a_long_expression_around_the_column() -> None:
    assert issubclass(CalcError, QgpuError)
    text = "sum(" + lit(np.arange(60)) + ") + foo(1)"
    with pytest.raises(CalcError) as info:
        ev(text)
    quoted, caret = str(info.value).splitlines()[1:]
    assert quoted.startswith("  ...") and "foo(1)" in quoted and len(quoted) < 90
    assert quoted[caret.index("^"):].startswith("foo")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789-+*/%@()[], .xabsumcrt_", max_size=30))
def test_any_text_parses_or_is_a_calc_error(text: str) -> None:
    try:
        parse(text)
    except CalcError as e:
        assert e.position is not None and 0 <= e.position <= len(text)


@pytest.mark.parametrize("text, says", [
    ("1 // 0", "a // b: division by zero"),
    ("[4, 5] % [1, 0]", "a % b: division by zero"),
    ("7 // (3 - 3)", "a // b: division by zero"),             # a zero the GPU computed
    ("histogram([1, 2], 0)", "bins must be at least 1, got 0"),
    ("histogram([1, 2], 1 - 5)", "bins must be at least 1, got -4"),
    ("histogram([1], 5000)", "5000 bins do not fit the GPU's 1024 words"),
])
def test_errors_found_while_running(text: str, says: str) -> None:
    with pytest.raises(CalcError) as info:
        ev(text)
    assert says in info.value.problem and str(info.value).startswith("at column ")


@pytest.mark.parametrize("text", [
    "sort(" + lit(np.arange(1100)) + ")",
    lit(np.arange(400)) + " + " + lit(np.arange(400)),          # 400 + 400 in, 400 out
    "cumsum(" + lit(np.arange(1010)) + ")",                   # and 32 words of shared memory
])
def test_too_big_for_the_machine_is_refused_before_launching(text: str, monkeypatch) -> None:
    launches = _count_launches(monkeypatch)
    with pytest.raises(CalcError, match="is too big for the GPU: the launch needs \\d+ words of memory .* over the "
                                        "machine's 1024 words"):
        ev(text)
    assert launches == []


def test_backend_and_mode_are_checked() -> None:
    with pytest.raises(CalcError, match="unknown backend 'gpu'; choose one of interp, circuit, model"):
        evaluate("2 + 3", backend="gpu")
    with pytest.raises(CalcError, match="unknown mode 'fp16'"):
        evaluate("2 + 3", backend="circuit", mode="fp16")
    with pytest.raises(CalcError, match="backend 'model' needs the merged checkpoint's folder"):
        evaluate("2 + 3", backend="model")
    with pytest.raises(CalcError, match="the expression must be a string"):
        evaluate(5, backend="interp")


# ---- every operation against NumPy, on the interpreter -------------------------------------------
def _ints(rng: np.random.Generator, shape, full: bool = False) -> np.ndarray:
    """Small values mostly (readable failures), the whole int32 range when ``full`` (wrap-around)."""
    if full:
        x = rng.integers(INT_MIN, INT_MAX, size=shape, endpoint=True)
        x.flat[: min(2, x.size)] = [INT_MIN, INT_MAX][: min(2, x.size)]
        return x
    return rng.integers(-60, 61, size=shape)


def _nonzero(x: np.ndarray) -> np.ndarray:
    x = np.array(x)
    x[x == 0] = 7
    return x


def _elementwise(python: Callable[[int, int], int], nonzero_b: bool = False) -> Callable:
    """Cases for an elementwise operator: list op list, with a number on either side, numbers, matrices."""
    def cases(rng: np.random.Generator, full: bool):
        b_of = _nonzero if nonzero_b else (lambda v: v)
        n = int(rng.integers(1, 40))
        for a_shape, b_shape in [((n,), (n,)), ((n,), ()), ((), (n,)), ((), ()), ((3, 4), (3, 4)), ((2, 5), ())]:
            a, b = _ints(rng, a_shape, full), b_of(_ints(rng, b_shape, full))
            want = np.vectorize(python, otypes=[object])(a.astype(object), b.astype(object))
            yield a, b, wrap(want)
    return cases


def _binary_case(op: str, python: Callable[[int, int], int], nonzero_b: bool = False):
    return lambda rng, full: ((f"{lit(a)} {op} {lit(b)}", want)
                              for a, b, want in _elementwise(python, nonzero_b)(rng, full))


def _gcd_case(rng, full):
    import math
    for a, b, want in _elementwise(math.gcd)(rng, full):
        yield f"gcd({lit(a)}, {lit(b)})", want


def _matmul_cases(name: str) -> Callable:
    def cases(rng, full):
        m, k, p = (int(v) for v in rng.integers(1, 9, size=3))
        for a_shape, b_shape in [((k,), (k,)), ((m, k), (k,)), ((k,), (k, p)), ((m, k), (k, p)), ((1, 1), (1, 1))]:
            a, b = _ints(rng, a_shape, full), _ints(rng, b_shape, full)
            want = np.asarray(a, np.int32) @ np.asarray(b, np.int32)          # int32 wraps, as the GPU
            yield (f"{lit(a)} @ {lit(b)}" if name == "@" else f"dot({lit(a)}, {lit(b)})"), want
    return cases


def _unary_cases(text: Callable[[str], str], numpy: Callable[[np.ndarray], np.ndarray]) -> Callable:
    def cases(rng, full):
        for shape in [(), (int(rng.integers(1, 70)),), (3, 5)]:
            x = _ints(rng, shape, full)
            yield text(lit(x)), numpy(x)
    return cases


def _reduce_cases(name: str, numpy: Callable[[np.ndarray], int]) -> Callable:
    def cases(rng, full):
        for shape in [(1,), (int(rng.integers(2, 200)),), (4, 7)]:
            x = _ints(rng, shape, full)
            yield f"{name}({lit(x)})", numpy(x)
        if name != "sum":                                           # several numbers: max(3, 9, -2)
            x = _ints(rng, (int(rng.integers(2, 6)),), full)
            yield f"{name}({', '.join(map(str, x.tolist()))})", numpy(x)
    return cases


def _list_cases(name: str, numpy: Callable[[np.ndarray], np.ndarray]) -> Callable:
    def cases(rng, full):
        for n in (1, 2, 5, 32, 33, int(rng.integers(34, 300))):
            x = _ints(rng, (n,), full)
            yield f"{name}({lit(x)})", numpy(x)
    return cases


def _histogram_cases(rng, full):
    for n, bins in [(1, 1), (10, 3), (int(rng.integers(20, 300)), int(rng.integers(1, 40)))]:
        x = rng.integers(-3, bins + 3, size=n)                     # some values out of range: not counted
        yield f"histogram({lit(x)}, {bins})", np.bincount(x[(x >= 0) & (x < bins)], minlength=bins)


def _popcount(x: np.ndarray) -> np.ndarray:
    return np.vectorize(lambda v: bin(int(v) & 0xFFFFFFFF).count("1"), otypes=[np.int64])(x)


CASES: dict[str, Callable] = {
    "a + b": _binary_case("+", lambda a, b: a + b),
    "a - b": _binary_case("-", lambda a, b: a - b),
    "a * b": _binary_case("*", lambda a, b: a * b),
    "a // b": _binary_case("//", lambda a, b: a // b, nonzero_b=True),
    "a % b": _binary_case("%", lambda a, b: a % b, nonzero_b=True),
    "a @ b": _matmul_cases("@"),
    "dot(a, b)": _matmul_cases("dot"),
    "-x": _unary_cases(lambda s: f"-({s})", lambda x: wrap(-x.astype(object))),
    "sum(x)": _reduce_cases("sum", lambda x: int(np.sum(np.asarray(x, np.int32), dtype=np.int32))),
    "max(x)": _reduce_cases("max", lambda x: int(np.max(x))),
    "min(x)": _reduce_cases("min", lambda x: int(np.min(x))),
    "sort(x)": _list_cases("sort", np.sort),
    "cumsum(x)": _list_cases("cumsum", lambda x: np.cumsum(np.asarray(x, np.int32), dtype=np.int32)),
    "histogram(x, bins)": _histogram_cases,
    "gcd(a, b)": _gcd_case,
    "popcount(x)": _unary_cases(lambda s: f"popcount({s})", _popcount),
}


def test_every_operation_is_tested_and_described() -> None:
    assert set(CASES) == set(OPERATIONS)
    text = describe_operations()
    for usage, description in OPERATIONS.items():
        assert isinstance(description, str) and description and not set("\n;") & set(description)
        assert f"{usage}  " in text and description in text


def _seed(*parts) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode())


@pytest.mark.parametrize("full", [False, True], ids=["small", "int32"])
@pytest.mark.parametrize("usage", list(CASES))
def test_operation_matches_numpy(usage: str, full: bool) -> None:
    rng = np.random.default_rng(_seed(usage, full))
    for text, want in CASES[usage](rng, full):
        r = ev(text)
        assert np.array_equal(np.asarray(r.value), np.asarray(want)), text[:200]
        assert np.shape(r.value) == np.shape(want), text[:200]
        assert len(r.launches) == 1                             # one kernel per operation
        assert r.text == repr(r.value)


@pytest.mark.parametrize("text, value", [
    ("-7 // 2", -4), ("7 // -2", -4), ("-7 % 2", 1), ("7 % -2", -1), ("-8 // 2", -4), ("-8 % 2", 0),
    ("-2147483648 // -1", INT_MIN), ("-2147483648 % -1", 0), ("-2147483648 // 1", INT_MIN),
    ("2147483647 + 1", INT_MIN), ("-2147483648 - 1", INT_MAX), ("65536 * 65536", 0), ("-(-2147483648)", INT_MIN),
    ("gcd(0, 0)", 0), ("gcd(-12, 18)", 6), ("gcd(-2147483648, 0)", INT_MIN), ("popcount(-1)", 32),
    ("popcount(-2147483648)", 1), ("histogram([-1, 3, 3, 7], 4)", [0, 0, 0, 2]), ("sort([5])", [5]),
    ("max(-3, -9)", -3), ("min([[4, 2], [7, -1]])", -1), ("[[1, 2], [3, 4]] * 2", [[2, 4], [6, 8]]),
])
def test_edge_values(text: str, value) -> None:
    assert ev(text).value == value


@pytest.mark.parametrize("n", [1, 4, 5, 33, 100])
def test_kernels_pass_memcheck(n: int, monkeypatch) -> None:
    """Every kernel on the checked interpreter: no access out of bounds, no read of unwritten shared memory,
    no shared-memory race, no divergent barrier."""
    real = host_launch.launch
    monkeypatch.setattr(host_launch, "launch", lambda *a, **kw: real(*a, memcheck=True, **kw))
    rng = np.random.default_rng(_seed("memcheck", n))
    x, y = lit(rng.integers(-50, 50, n)), lit(rng.integers(1, 50, n))
    m = lit(rng.integers(-9, 9, (3, n)))
    for text in [f"sort({x})", f"cumsum({x})", f"sum({x})", f"max({x})", f"min({x})", f"{x} @ {y}", f"{m} @ {x}",
                 f"{x} @ {lit(rng.integers(-9, 9, (n, 3)))}", f"{x} + {y}", f"{x} - 3", f"{x} * {y}",
                 f"{x} // {y}", f"{x} % {y}", f"gcd({x}, {y})", f"popcount({x})", f"-{x}", f"histogram({x}, 20)"]:
        ev(text)


# sizes near the memory limit: the largest list each fits (its arrays, + shared memory and thread frames)
LARGE = {"sort(X)": (1000, np.sort), "cumsum(X)": (990, lambda x: np.cumsum(x, dtype=np.int32)),
         "sum(X)": (1020, lambda x: int(np.sum(x, dtype=np.int32))), "max(X)": (1020, lambda x: int(np.max(x))),
         "histogram(X, 16)": (1000, lambda x: np.bincount(x[(x >= 0) & (x < 16)], minlength=16)),
         "popcount(X)": (510, _popcount), "X - 3": (510, lambda x: x - 3), "X @ X": (511, lambda x: int(x @ x))}


@pytest.mark.slow
@pytest.mark.parametrize("text", list(LARGE))
def test_large_lists_near_the_memory_limit(text: str) -> None:
    n, numpy = LARGE[text]
    x = np.random.default_rng(_seed(text, n)).integers(-20, 40, size=n)
    r = ev(text.replace("X", lit(x)))
    assert np.array_equal(np.asarray(r.value), numpy(x))
    with pytest.raises(CalcError, match="is too big for the GPU"):
        ev(text.replace("X", lit(np.resize(x, n + 40))))


# ---- results come from the launches --------------------------------------------------------------
def _count_launches(monkeypatch) -> list:
    """Record each launch the calculator makes (kernel name), running the real one."""
    real, seen = host_launch.launch, []

    def counting(kernel, args, **kw):
        seen.append(kernel.name)
        return real(kernel, args, **kw)
    monkeypatch.setattr(host_launch, "launch", counting)
    return seen


def _fake_launch(monkeypatch, fill: int) -> list:
    """The launch replaced by one that runs nothing and returns every array filled with ``fill`` (the
    division-by-zero flag cleared)."""
    seen = []

    def fake(kernel, args, grid=(1, 1), block=None, backend="interp", **kw):
        seen.append(kernel.name)
        arrays = {p.name: np.full(np.asarray(a).shape, 0 if p.name == "zero_div" else fill, np.int32)
                  for p, a in zip(kernel.params, args) if p.kind == "ptr"}
        return LaunchResult(kernel.name, tuple(grid), tuple(block), backend, arrays)
    monkeypatch.setattr(host_launch, "launch", fake)
    return seen


def _example(usage: str) -> str:
    text, _ = next(iter(CASES[usage](np.random.default_rng(1), False)))
    return text


@pytest.mark.parametrize("usage", list(OPERATIONS))
def test_every_result_is_what_the_launch_returned(usage: str, monkeypatch) -> None:
    """With a launch that computes nothing and returns 7s, every operation answers 7s: the host computed none."""
    text = _example(usage)
    want = np.asarray(ev(text).value)
    seen = _fake_launch(monkeypatch, 7)
    got = ev(text)
    assert seen and len(got.launches) == len(seen)
    assert np.array_equal(np.asarray(got.value), np.full(want.shape, 7)), text


def test_nested_expressions_feed_each_launch_the_last_result(monkeypatch) -> None:
    """Every result one more than the GPU computed."""
    real = host_launch.launch

    def off_by_one(kernel, args, **kw):
        r = real(kernel, args, **kw)
        for name in ("out", "C", "data", "counts"):
            if name in r.arrays:
                r.arrays[name] = r.arrays[name] + 1
        return r
    monkeypatch.setattr(host_launch, "launch", off_by_one)
    assert ev("2 + 3").value == 6
    assert ev("(2 + 3) * 4").value == (5 + 1) * 4 + 1
    assert ev("sum([1, 2, 3]) * 2 - 1").value == ((6 + 1) * 2 + 1 - 1) + 1
    assert ev("cumsum(sort([3, 1, 2]))").value == [2 + 1, 2 + 3 + 1, 2 + 3 + 4 + 1]


def test_one_launch_per_operation_and_none_for_literals(monkeypatch) -> None:
    seen = _count_launches(monkeypatch)
    r = ev("sum([1, 2, 3]) * 2 - -1")
    assert r.value == 13 and seen == ["calc_sum", "calc_mul", "calc_sub"]
    assert [x["kernel"] for x in r.launches] == seen and {x["backend"] for x in r.launches} == {"interp"}
    assert [x["op"] for x in r.launches] == ["sum(x)", "a * b", "a - b"]
    assert r.launches[0]["grid"] == [1, 1] and r.launches[0]["block"] == [3, 1]
    assert r.launches[0]["tokens"] == {"prompt": 0, "generated": 0}          # the interpreter costs no tokens
    seen.clear()
    assert ev("[1, -2, 3]").value == [1, -2, 3] and ev("-5").launches == () and seen == []
    assert ev("2 + 3").launches[0]["kernel"] == "calc_add" and seen == ["calc_add"]   # even 2 + 3 runs a kernel


def test_launch_shapes_stay_in_the_machine(monkeypatch) -> None:
    for text in ["sum(" + lit(np.arange(900)) + ")", lit(np.ones((30, 30), int)) + " @ " + lit(np.arange(30)),
                 "sort(" + lit(np.arange(300)[::-1]) + ")", lit(np.arange(300)) + " * 3"]:
        for x in ev(text).launches:
            assert x["block"][0] * x["block"][1] <= 32 and x["grid"][0] * x["grid"][1] <= 64


# ---- on the GPU in the weights -------------------------------------------------------------------
@pytest.mark.parametrize("text, value, kernel", [
    ("[1, 2, 3] @ [4, 5, 6]", 32, "calc_dot"),
    ("-7 // 2", -4, "calc_floordiv"),
    ("cumsum([3, -1, 4])", [3, 2, 6], "calc_cumsum"),
])
def test_on_the_gpu_in_the_weights(text: str, value, kernel: str) -> None:
    r = evaluate(text)                                  # backend="circuit" by default
    assert r.value == value
    (x,) = r.launches
    assert x["kernel"] == kernel and x["backend"] == "circuit"
    assert r.prompt_tokens == x["tokens"]["prompt"] > 0 and r.generated_tokens == x["tokens"]["generated"] > 0

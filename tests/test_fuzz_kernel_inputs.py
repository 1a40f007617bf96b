"""Fuzzing what users type and paste: `--arg`, `--grid` and `--block` texts, PTX (mutations of real compiler
output) and CUDA source reaching the compiler. A parse either gives exactly the value the text means or a
click error naming the option; a mutated kernel either compiles and then launches on the interpreter (under a
step limit) to a result or a QgpuError, or is refused at compile time with a QgpuError. Never another
exception and never a hang."""
from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from hypothesis import given, strategies as st

from fuzzing import assert_names, budgets, fuzz_settings, mutate_bytes, mutate_text
from qgpu_min.errors import QgpuError
from qgpu_min.host.args import HIGH, LOW, parse_dim, parse_value
from qgpu_min.host.launch import compile_kernel, launch
from qgpu_min.machine.isa import MEM_WORDS

HERE = Path(__file__).parent
ARG_PIECES = st.lists(st.sampled_from(list("[]0123456789xXbBaAfF,-+ \t()zeros")
                                     + ["zeros(", "0x", "0b", "\n", "é", "\x00"]), max_size=30).map("".join)


def _formatted(value: int, draw) -> str:
    """`value` written as a user might: decimal, hex or binary, leading zeros, a sign, spaces."""
    base = draw(st.sampled_from([10, 16, 2]))
    digits = {10: str, 16: lambda v: format(v, draw(st.sampled_from(["x", "X"]))), 2: lambda v: format(v, "b")}[base](
        abs(value))
    prefix = {10: "", 16: draw(st.sampled_from(["0x", "0X"])), 2: draw(st.sampled_from(["0b", "0B"]))}[base]
    sign = "-" if value < 0 else draw(st.sampled_from(["", "+"]))
    pad = " " * draw(st.integers(0, 2))
    return f"{pad}{sign}{prefix}{'0' * draw(st.integers(0, 3))}{digits}{pad}"


@budgets(500, 20000)
def test_arg_values_parse_to_what_they_say(budget):
    @fuzz_settings(budget)
    @given(st.data())
    def check(data):
        if data.draw(st.booleans()):
            value = data.draw(st.integers(LOW, HIGH - 1))
            assert parse_value(_formatted(value, data.draw)) == value
        else:
            values = data.draw(st.lists(st.integers(LOW, HIGH - 1), min_size=1, max_size=6))
            text = "[" + ",".join(_formatted(v, data.draw) for v in values) + "]"
            assert parse_value(text) == values

    check()


@budgets(1000, 50000)
def test_arbitrary_arg_and_dimension_texts(budget):
    """Any text: a value in range (an int or 1..MEM_WORDS of them) or a BadParameter naming the option."""
    @fuzz_settings(budget)
    @given(st.one_of(ARG_PIECES, st.text(max_size=30),
                     st.integers(0, 6000).map(lambda n: "9" * n),
                     st.integers(0, 3000).map(lambda n: f"zeros({'7' * n})")))
    def check(text):
        try:
            value = parse_value(text)
        except click.BadParameter as e:
            assert_names(e, "--arg")
        else:
            items = value if isinstance(value, list) else [value]
            assert 1 <= len(items) <= MEM_WORDS and all(LOW <= v < HIGH for v in items)
        try:
            x, y = parse_dim(text, "--grid")
        except click.BadParameter as e:
            assert_names(e, "--grid")
        else:
            assert x >= 1 and y >= 1 and re.fullmatch(r"\s*\d+\s*(,\s*\d+\s*)?", text)

    check()


# ---- kernels ------------------------------------------------------------------------------------------------

# tokens a mutation may put in: the source's own, plus extreme numbers and neighbours of real opcodes
EXTRA_TOKENS = ["0", "-1", "4294967295", "4294967296", "99999999999999999999", "0x7fffffff", "1000000", ".u64", ".s8",
                ".pred", "bra", "ret", "bar.sync", "%tid.x", "%ctaid.y", "%r1", "%rd1", "%p1", "[", "]", "{", "}", ";"]


def _args(kernel, draw) -> list:
    return [draw(st.lists(st.integers(-3, 40), min_size=1, max_size=8)) if p.kind == "ptr" or
            (p.kind == "unknown" and draw(st.booleans())) else draw(st.integers(-3, 40)) for p in kernel.params]


def _compile_and_launch(source: str, kernel_name: str | None, draw) -> None:
    """Compile; when that works, launch on the interpreter with small random arguments under a step limit."""
    try:
        kernel = compile_kernel(source, kernel_name)
    except QgpuError as e:
        assert str(e)
        return
    args = _args(kernel, draw)
    grid = (draw(st.integers(1, 2)), 1)
    block = (draw(st.integers(1, 8)), draw(st.integers(1, 2)))
    try:
        result = launch(kernel, args, grid=grid, block=block, step_limit=20_000)
    except QgpuError as e:
        assert str(e)
        return
    assert set(result.arrays) == {p.name for p, a in zip(kernel.params, args) if isinstance(a, list)}


def _entries(ptx: str) -> tuple[list[str], list[tuple[int, int]]]:
    """The file's lines and each kernel's line range (from `.entry` to its closing brace at column 0)."""
    lines = ptx.split("\n")
    starts = [i for i, line in enumerate(lines) if ".entry" in line]
    return lines, [(s, next(j for j in range(s, len(lines)) if lines[j] == "}")) for s in starts]


@pytest.mark.parametrize("sample", ["kernels_clang14.ptx", "kernels_nvcc.ptx"])
@budgets(60, 3000)
def test_mutated_ptx(sample, budget):
    ptx = (HERE / "ptx_samples" / sample).read_text()
    lines, ranges = _entries(ptx)
    tokens = sorted(set(re.findall(r"[%$\w.]+|[^\s\w]", ptx))) + EXTRA_TOKENS

    @fuzz_settings(budget)
    @given(st.data())
    def check(data):
        begin, end = data.draw(st.sampled_from(ranges))
        name = re.search(r"\.entry\s+([\w$]+)", lines[begin]).group(1)
        body = mutate_text("\n".join(lines[begin + 1:end]), data.draw, tokens)
        text = "\n".join(lines[:begin + 1] + [body] + lines[end:])
        _compile_and_launch(text, name, data.draw)

    check()


CUDA_SAMPLES = ["vec_add.cu", "collatz.cu", "histogram_shared.cu", "warp_scan.cu", "branch_chain.cu"]


@budgets(6, 300)
def test_mutated_cuda(budget):
    sources = [(HERE / "kernels" / n).read_text() for n in CUDA_SAMPLES if (HERE / "kernels" / n).exists()]
    assert sources
    tokens = ["0", "-1", "4294967295", "1e30", "threadIdx.x", "blockDim.x", "__syncthreads()", "while", "if", "[", "]",
              "(", ")", "{", "}", ";", "*", "int", "unsigned", "char", "long long", "float", "return", "break"]

    @fuzz_settings(budget)
    @given(st.data())
    def check(data):
        source = data.draw(st.sampled_from(sources))
        _compile_and_launch(mutate_text(source, data.draw, tokens), None, data.draw)

    check()


@budgets(40, 2000)
def test_damaged_ptx_files(tmp_path, budget):
    """Byte damage to a .ptx file (bad UTF-8 included): refused naming a problem, or compiled and launched."""
    raw = (HERE / "ptx_samples" / "kernels_clang14.ptx").read_bytes()
    f = tmp_path / "damaged.ptx"

    @fuzz_settings(budget)
    @given(st.data())
    def check(data):
        f.write_bytes(mutate_bytes(raw, data.draw))
        _compile_and_launch(str(f), data.draw(st.sampled_from(["_Z4vaddPKiS0_Pii", "_Z6reducePKiPi", None])),
                            data.draw)

    check()

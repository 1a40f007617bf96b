"""Every suite kernel, exact against its NumPy reference, from clang's PTX (zig clang, 32-bit) and nvcc's
(64-bit), through the reference interpreter.

Default run: each kernel per compiler at two launch shapes (its first and its last). `-m slow`: every
other launch shape, and system clang as a third compiler when one is on PATH.
"""
from __future__ import annotations

import functools
import shutil
import zlib

import numpy as np
import pytest

from compilers import skip_if_missing
from kernel_suite import CASES, Case, Shape, Unordered, words
from qgpu_min.host.launch import CompiledKernel, compile_kernel, launch

COMPILERS = ("zig", "nvcc")
# Kernels that cannot run exactly yet, by case id: (why, the failure expected, the compilers concerned
# or None for all). Not strict, so a fix shows as XPASS; any other failure still fails.
KNOWN_GAPS: dict = {}  # none at present
SLOW_COMPILERS = COMPILERS + (("clang",) if shutil.which("clang") or shutil.which("clang++") else ())


@functools.cache
def _compiled(case: Case, compiler: str):
    return compile_kernel(case.path, kernel=case.kernel, compiler=compiler)


def _seed(case: Case, shape: Shape) -> int:
    return zlib.crc32(f"{case.id}/{shape}".encode())


def run_case(case: Case, compiler: str, shape: Shape, kernel: CompiledKernel | None = None, **options) -> None:
    """Launch the case's kernel (``kernel``: another lowering of it, e.g. to a narrower block format) and
    compare every pointer parameter with the NumPy reference. ``options`` go to launch (backend, check...)."""
    skip_if_missing(compiler)
    args = case.make(np.random.default_rng(_seed(case, shape)), shape)
    kernel = kernel if kernel is not None else _compiled(case, compiler)
    kinds = ["ptr" if isinstance(a, np.ndarray) else "scalar" for a in args]
    assert [p.kind for p in kernel.params] == kinds, "the suite's arguments do not match the kernel's parameters"
    result = launch(kernel, [a.copy() if isinstance(a, np.ndarray) else a for a in args],
                    grid=shape.grid, block=shape.block, **options)
    expected = case.expect([a.copy() if isinstance(a, np.ndarray) else a for a in args], shape)
    for index, param in enumerate(kernel.params):
        if param.kind != "ptr":
            continue
        got = words(result.arrays[param.name])
        want = expected.get(index, args[index])  # arrays the kernel must not write come back unchanged
        where = f"{case.id} [{compiler}, {shape}] parameter {param.name}"
        if isinstance(want, Unordered):
            k = want.prefix
            np.testing.assert_array_equal(np.sort(got[:k]), np.sort(words(want.values[:k])), err_msg=where)
            np.testing.assert_array_equal(got[k:], words(want.values[k:]), err_msg=where)
        else:
            np.testing.assert_array_equal(got, words(want), err_msg=where)


def _marks(case: Case, compiler: str) -> list:
    if case.id not in KNOWN_GAPS:
        return []
    reason, raises, compilers = KNOWN_GAPS[case.id]
    if compilers is not None and compiler not in compilers:
        return []
    return [pytest.mark.xfail(reason=reason, raises=raises, strict=False)]


def _params(compilers, shapes_of):
    return [pytest.param(case, compiler, shape, id=f"{case.id}-{compiler}-{shape}",
                         marks=_marks(case, compiler))
            for case in CASES for compiler in compilers for shape in shapes_of(case)]


def _default_shapes(case: Case) -> tuple[Shape, ...]:
    return tuple(dict.fromkeys((case.shapes[0], case.shapes[-1])))


@pytest.mark.parametrize("case, compiler, shape", _params(COMPILERS, _default_shapes))
def test_kernel(case: Case, compiler: str, shape: Shape) -> None:
    run_case(case, compiler, shape)


@pytest.mark.slow
@pytest.mark.parametrize("case, compiler, shape",
                         [p for p in _params(SLOW_COMPILERS, lambda c: c.shapes)
                          if not (p.values[1] in COMPILERS and p.values[2] in _default_shapes(p.values[0]))])
def test_kernel_all_shapes(case: Case, compiler: str, shape: Shape) -> None:
    run_case(case, compiler, shape)


def test_suite_size() -> None:
    """The issue asks for at least 40 kernels, each in its own or a shared .cu file."""
    assert len(CASES) >= 40
    assert all(case.path.exists() for case in CASES)
    assert set(KNOWN_GAPS) <= {case.id for case in CASES}

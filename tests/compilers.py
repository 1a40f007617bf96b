"""Which CUDA compilers the tests can use on this machine (shared by the test files)."""
import functools

import pytest

from qgpu_min.cuda.compiler import CompilerNotFoundError, find_compiler


@functools.cache
def missing(name: str) -> str | None:
    """Why compiler `name` cannot be used here, or None when it can."""
    try:
        find_compiler(name)
    except CompilerNotFoundError as e:
        return str(e)
    return None


def skip_if_missing(name: str) -> None:
    """Skip the running test when compiler `name` is not available."""
    reason = missing(name)
    if reason:
        pytest.skip(f"{name} is not available: {reason}")


def needs(name: str) -> pytest.MarkDecorator:
    """A mark that skips a test when compiler `name` is not available."""
    return pytest.mark.skipif(missing(name) is not None, reason=f"{name} is not available: {missing(name)}")

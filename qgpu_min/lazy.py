"""Package exports that load on first use (PEP 562), so importing a package costs nothing until one of its
names is used: the CLI starts without NumPy, the model or the circuit compiler."""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

Exports = dict[str, tuple[str, str]]        # public name -> (module, attribute)


def lazy_exports(package: str, exports: Exports) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` serving ``exports``; relative module names are taken
    relative to ``package``."""
    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = exports[name]
        value = getattr(importlib.import_module(module, package), attribute)
        setattr(sys.modules[package], name, value)      # later lookups do not come here
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__

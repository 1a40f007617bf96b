"""The chat mode's parts (issue #9). So far the calculator the model calls: ``evaluate(expression)``, every
operation computed by a CUDA kernel on the GPU (calc.py). Names load on first use, like the package's."""
from __future__ import annotations

from ..lazy import lazy_exports

_EXPORTS = {
    "evaluate": (".calc", "evaluate"),
    "CalcResult": (".calc", "CalcResult"),
    "CalcError": (".errors", "CalcError"),
    "OPERATIONS": (".ops", "OPERATIONS"),
    "describe_operations": (".ops", "describe_operations"),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)

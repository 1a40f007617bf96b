"""Qwen3.5 text model runtime: NumPy + the C core, no torch. See docs/model.md.

The names below load on first use, so a submodule that needs neither NumPy nor the C core (``modes``,
``fetch``) imports without them.
"""
from ..lazy import lazy_exports

__all__ = ["Model", "State", "load_model", "model_from_tensors"]
__getattr__, __dir__ = lazy_exports(__name__, {name: (".forward", name) for name in __all__})

"""Chat (docs/chat.md): Qwen calls the GPU in its weights. Exported here: ``ask(question, model_dir)`` for one
question, ``open_conversation(model_dir)`` for a conversation (session.py), and the calculator of normal mode,
``evaluate(expression)``, every operation a CUDA kernel launched on the GPU (calc.py). Names load on first
use, like the package's."""
from __future__ import annotations

from ..lazy import lazy_exports

_EXPORTS = {
    "ask": (".session", "ask"),
    "open_conversation": (".session", "open_conversation"),
    "Conversation": (".session", "Conversation"),
    "evaluate": (".calc", "evaluate"),
    "CalcResult": (".calc", "CalcResult"),
    "CalcError": (".errors", "CalcError"),
    "OPERATIONS": (".ops", "OPERATIONS"),
    "describe_operations": (".ops", "describe_operations"),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)

"""Qwen3.5 text model runtime: NumPy + the C core, no torch. See docs/model.md."""
from .forward import Model, State, load_model, model_from_tensors  # noqa: F401

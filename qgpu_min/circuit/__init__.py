"""The circuit compiler: exact programs as Qwen3.5 Gated DeltaNet + SwiGLU layers (see docs/circuit.md).

    c = Circuit("adder"); a, b = c.input_word("a"), c.input_word("b")
    for g in lib.add(c, a, b): c.output(g)
    p = plan(c, BaseShape()); layers = emit(p)       # schedule + layout, then Qwen3.5 layer weights
    values, state = simulate(c, {...})               # exact integer reference
"""
from ..lazy import lazy_exports

# name -> its module; loaded on first use, so `qgpu-min --help` does not compile anything
_HOMES = {
    ".compile": ["BaseShape", "LayerWeights", "Mute", "OutputCode", "Plan", "add_mute", "check_exact_weights",
                 "emit", "plan"],
    ".ir": ["Circuit", "CircuitError", "Group", "bit_not", "const_bit", "const_word"],
    ".margin": ["static_check", "text_gate_check"],
    ".sim": ["simulate"],
}
__all__ = sorted(name for names in _HOMES.values() for name in names)
__getattr__, __dir__ = lazy_exports(__name__, {name: (module, name) for module, names in _HOMES.items()
                                               for name in names})

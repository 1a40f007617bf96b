"""The circuit compiler: exact programs as Qwen3.5 Gated DeltaNet + SwiGLU layers (see docs/circuit.md).

    c = Circuit("adder"); a, b = c.input_word("a"), c.input_word("b")
    for g in lib.add(c, a, b): c.output(g)
    p = plan(c, BaseShape()); layers = emit(p)       # schedule + layout, then Qwen3.5 layer weights
    values, state = simulate(c, {...})               # exact integer reference
"""
from .compile import BaseShape, LayerWeights, Mute, OutputCode, Plan, add_mute, check_exact_weights, emit, plan
from .ir import Circuit, CircuitError, Group, bit_not, const_bit, const_word
from .margin import static_check, text_gate_check
from .sim import simulate

__all__ = ["BaseShape", "Circuit", "CircuitError", "Group", "LayerWeights", "Mute", "OutputCode", "Plan",
           "add_mute", "bit_not", "check_exact_weights", "const_bit", "const_word", "emit", "plan",
           "simulate", "static_check", "text_gate_check"]

"""The tools Qwen may call in a chat, and running them on the GPU.

normal mode: `gpu_calc(expression)`, the calculator (chat/calc.py): ready-made kernels for an expression
  such as `[1, 2, 3] @ [4, 5, 6]`.
advanced mode: `run_cuda(source, args, grid, block)`: Qwen writes the kernel; it is compiled and launched
  like `qgpu-min run` would, and compile or launch errors go back to Qwen to fix.

Every result is computed by a launch on the GPU the session names (the GPU in the merged model, the
circuit-only GPU or the interpreter); a tool never computes a value itself. Any failure, a malformed call
included, comes back as the tool's answer, text starting with "error:".
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..errors import QgpuError
from .toolcall import ToolCall

CALC, CUDA = "gpu_calc", "run_cuda"
MODES = ("normal", "advanced")
STEP_LIMIT = 20_000        # warp steps: a chat's kernel that loops for ever fails in seconds, not hours


@dataclass(frozen=True)
class Gpu:
    """Where launches run: backend 'model' (the merged checkpoint `model`, its Qwen layers quantized at load
    when `quant`, their dense products on `device`), 'circuit' or 'interp'."""
    backend: str = "circuit"
    model: str | None = None
    mode: str = "fp32"
    quant: str | None = None
    device: str = "cpu"


@dataclass
class ToolResult:
    name: str
    arguments: dict
    ok: bool
    text: str                                   # what goes back to Qwen inside <tool_response>
    value: object = None                        # the GPU's result (int, list, {array: list})
    launches: list[dict] = field(default_factory=list)
    source: str | None = None                   # run_cuda: the kernel that ran


def tool_specs(mode: str) -> list[dict]:
    """The `tools` list for the chat template (OpenAI function shape, as Qwen's templates expect)."""
    if mode == "normal":
        from .calc import OPERATIONS
        ops = "; ".join(f"{name}: {text}" for name, text in OPERATIONS.items())
        return [_spec(CALC, "Compute an integer expression exactly on the GPU inside this model. Integers are "
                            f"32-bit. Supported: {ops}.",
                      {"expression": ("string", "the expression, e.g. [1, 2, 3] @ [4, 5, 6] or sum([4, 8, 15])")})]
    if mode == "advanced":
        return [_spec(CUDA, "Compile a CUDA C kernel (integers only; warps of 4 threads; at most 32 threads per "
                            "block, 64 blocks, 1024 words of memory) and run it on the GPU inside this model. "
                            "Returns every array argument after the launch.",
                      {"source": ("string", "the CUDA source with one __global__ kernel"),
                       "args": ("array", "one per kernel parameter, in order: an array literal like [1,2,3] or "
                                         "zeros(N) for a pointer, an integer for a scalar"),
                       "grid": ("string", "blocks in the grid: N or X,Y (default 1)"),
                       "block": ("string", "threads per block: N or X,Y (default: one per element)")},
                      required=("source", "args"))]
    raise QgpuError(f"chat mode {mode!r}: choose one of {', '.join(MODES)}")


def _spec(name: str, description: str, params: dict[str, tuple[str, str]], required: tuple[str, ...] | None = None):
    properties = {k: {"type": t, "description": d, **({"items": {"type": "string"}} if t == "array" else {})}
                  for k, (t, d) in params.items()}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": list(required or params)}}}


def run_tool(call: ToolCall, mode: str, gpu: Gpu) -> ToolResult:
    """Run one call; every failure becomes an error result for the model, never an exception."""
    if call.error:
        return _error(call, call.error)
    runners = {"normal": {CALC: _calc}, "advanced": {CUDA: _cuda}}[mode]
    if call.name not in runners:
        return _error(call, f"unknown function {call.name!r}; available: {', '.join(runners)}")
    try:
        return runners[call.name](call, gpu)
    except QgpuError as e:
        return _error(call, str(e))


def _error(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(call.name, call.arguments, False, f"error: {message}")


def _argument(call: ToolCall, name: str, kind: type, default=None):
    if name not in call.arguments:
        if default is not None:
            return default
        raise QgpuError(f"{call.name} needs the argument {name!r}")
    value = call.arguments[name]
    if kind is str and isinstance(value, (int, list)):
        value = json.dumps(value)
    if not isinstance(value, kind):
        raise QgpuError(f"{call.name}: argument {name!r} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def _calc(call: ToolCall, gpu: Gpu) -> ToolResult:
    from .calc import evaluate
    expression = _argument(call, "expression", str)
    r = evaluate(expression, backend=gpu.backend, model=gpu.model, mode=gpu.mode, quant=gpu.quant, device=gpu.device)
    return ToolResult(call.name, call.arguments, True, r.text, r.value, list(r.launches))


def _cuda(call: ToolCall, gpu: Gpu) -> ToolResult:
    import click

    from ..host.args import bind_args, parse_dim, parse_value
    from ..host.launch import compile_kernel, launch
    from .launcher import backend_options
    source = _argument(call, "source", str)
    texts = _argument(call, "args", list)
    try:
        values = [parse_value(str(t), f"args[{k}]") for k, t in enumerate(texts)]
        grid = parse_dim(str(call.arguments.get("grid", "1")), "grid")
        block = parse_dim(str(call.arguments["block"]), "block") if call.arguments.get("block") else None
    except click.ClickException as e:
        raise QgpuError(e.format_message()) from None
    kernel = compile_kernel(source)
    try:
        args = bind_args(values, kernel.params, kernel.name)
    except click.ClickException as e:
        raise QgpuError(e.format_message()) from None
    options = backend_options(gpu.backend, gpu.model, gpu.mode, gpu.quant, gpu.device)
    r = launch(kernel, args, grid=grid, block=block, step_limit=STEP_LIMIT, backend=gpu.backend, **options)
    arrays = {name: [int(x) for x in v.reshape(-1)] for name, v in r.arrays.items()}
    info = {"kernel": r.kernel, "grid": list(r.grid), "block": list(r.block), "backend": r.backend,
            "tokens": {k: int(v) for k, v in r.tokens.items()}}
    return ToolResult(call.name, call.arguments, True, json.dumps(arrays), arrays, [info], source)

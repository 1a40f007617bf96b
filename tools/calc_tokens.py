"""The chat calculator's launches in tokens: every operation on inputs of 4 values, the prompt and generated
tokens of each launch it makes on the GPU in the weights, counted by an interpreter replay of the protocol
(gpu/check.expected_tokens, program.prompt_parts: what `--check` compares against), no model run.

    python3 tools/calc_tokens.py [--json]

Issue #35's bar: every operation's launch for inputs of 4 values <= 300 prompt + 60 generated tokens.
`kept` is the prompt a launch feeds when its program's load part is kept (gpu/model.load_state).
"""
from __future__ import annotations

import argparse
import json

from qgpu_min.chat import calc
from qgpu_min.chat import launcher as chat_launcher
from qgpu_min.gpu.check import expected_tokens
from qgpu_min.gpu.layout import GpuSpec
from qgpu_min.gpu.program import block_format, prompt_parts
from qgpu_min.host import launch as host_launch

SPEC = GpuSpec()
# one expression per operation, 4 values an input (two for the scalar ones)
EXPRESSIONS = {
    "a + b": "[1, -2, 3, 40] + [5, 6, -7, 8]", "a - b": "[1, -2, 3, 40] - [5, 6, -7, 8]",
    "a * b": "[1, -2, 3, 40] * [5, 6, -7, 8]", "a // b": "[-7, 100, 9, 1000] // [2, 7, -4, 3]",
    "a % b": "[-7, 100, 9, 1000] % [2, 7, -4, 3]", "a @ b": "[1, 2, 3, 4] @ [5, 6, 7, 8]",
    "-x": "-[1, -2, 3, 40]", "sum(x)": "sum([1, -2, 3, 40])", "max(x)": "max([1, -2, 3, 40])",
    "min(x)": "min([1, -2, 3, 40])", "sort(x)": "sort([5, -2, 9, 0])", "cumsum(x)": "cumsum([1, -2, 3, 40])",
    "histogram(x, bins)": "histogram([0, 1, 1, 3], 4)", "gcd(a, b)": "gcd([12, 35, 81, 0], [18, 14, 27, 5])",
    "popcount(x)": "popcount([1, -1, 255, 1024])", "dot(a, b)": "dot([1, 2, 3, 4], [5, 6, 7, 8])",
}


def launches(expression: str) -> list[dict]:
    """Each launch the expression makes: its kernel and tokens (interpreter replay, the GPU's format)."""
    seen: list[dict] = []
    real, real_for_backend = host_launch.launch, chat_launcher.for_backend
    fmt = block_format(SPEC)

    def counting(kernel, args, grid=(1, 1), block=None, backend="interp", step_limit=None, **kw):
        result = real(kernel, args, grid, block, backend, step_limit, **kw)
        k = host_launch.for_format(kernel, fmt)
        image = host_launch.build_image(k, args, result.block)
        load, run = prompt_parts(image.program, image.memory, result.block, SPEC, result.grid)
        generated = sum(1 for _ in expected_tokens(image.program, image.memory, result.block, SPEC, None, result.grid))
        seen.append({"kernel": k.name, "grid": list(result.grid), "block": list(result.block),
                     "prompt": len(load) + len(run), "kept": len(run), "generated": generated})
        return result
    # the calculator plans and lowers as for the circuit backend, and its launches run on the interpreter
    host_launch.launch = counting
    chat_launcher.for_backend = lambda file, kernel, backend: real_for_backend(file, kernel, "circuit")
    try:
        calc.evaluate(expression, backend="interp")
    finally:
        host_launch.launch, chat_launcher.for_backend = real, real_for_backend
    return seen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = {op: launches(EXPRESSIONS[op]) for op in calc.OPERATIONS}
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'operation':<20}{'kernel':<18}{'prompt':>8}{'kept':>7}{'generated':>11}")
    for op, ls in rows.items():
        for x in ls:
            print(f"{op:<20}{x['kernel']:<18}{x['prompt']:>8}{x['kept']:>7}{x['generated']:>11}")
    worst = max((x for ls in rows.values() for x in ls), key=lambda x: x["prompt"] + x["generated"])
    print(f"largest launch: {worst['kernel']} {worst['prompt']} prompt + {worst['generated']} generated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

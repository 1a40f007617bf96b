"""Where a launch's tokens go, block by block (`qgpu-min compile K.cu --tokens --arg ...`).

The prompt is the one program.prompt_parts sends: each ROM word (three payload tokens and its `rom` token)
belongs to its block, each memory word to the memory image, and init, clear, launch, grid and go to the
launch's control; each is in the load part (sent once per program, gpu/model.load_state) or the launch part.
The generated tokens are the ones the protocol prescribes for this launch (check.expected_tokens, an
interpreter replay: the list `--check` compares against): EXEC and write-back tokens belong to the block of
their warp step; CTA, HALT and FAULT to the control. Nothing runs on the model.
"""
from __future__ import annotations

from collections import Counter

from ..machine.isa import Program
from .check import expected_tokens
from .layout import GpuSpec
from .program import prompt_parts
from .vocab import Token

WRITE_BACK = ("wa", "wb", "w3", "w1")
CONTROL = "control"
MEMORY = "memory"


def _prompt_owners(tokens: list[Token]) -> Counter:
    """Prompt tokens by owner: a block's index, MEMORY or CONTROL (payload tokens go to the word they spell)."""
    out: Counter = Counter()
    pending = 0
    for t in tokens:
        if t[0] == "pay":
            pending += 1
            continue
        owner = t[2] if t[0] == "rom" else MEMORY if t[0] == "mem" else t[1] if t[0] == "clear" else CONTROL
        out[owner] += pending + 1
        pending = 0
    if pending:
        raise ValueError("a prompt ended inside a word")
    return out


def token_budget(program: Program, memory: list[int], block: tuple[int, int], grid: tuple[int, int],
                 spec: GpuSpec, step_limit: int | None = None) -> dict:
    """The launch's tokens by owner (see the module docstring): {"blocks": [{"block", "load", "launch",
    "exec", "write_back"}], "memory": {...}, "control": {...}, "prompt": {"load", "launch", "total"},
    "generated": {"exec", "write_back", "control", "total"}}."""
    load, run = prompt_parts(program, memory, block, spec, grid)
    in_load, in_run = _prompt_owners(load), _prompt_owners(run)
    gen: Counter = Counter()
    for token, info in expected_tokens(program, memory, block, spec, step_limit, grid):
        kind = "exec" if token[0] == "exec" else "write_back" if token[0] in WRITE_BACK else CONTROL
        gen[(info.block if kind != CONTROL else CONTROL, kind)] += 1

    def row(owner) -> dict:
        return {"load": in_load[owner], "launch": in_run[owner], "exec": gen[(owner, "exec")],
                "write_back": gen[(owner, "write_back")]}
    blocks = [{"block": b, **row(b)} for b in range(len(program.blocks))]
    control = {"load": in_load[CONTROL], "launch": in_run[CONTROL], "generated": gen[(CONTROL, CONTROL)]}
    generated = {"exec": sum(b["exec"] for b in blocks), "write_back": sum(b["write_back"] for b in blocks),
                 "control": control["generated"]}
    generated["total"] = sum(generated.values())
    return {"blocks": blocks, "memory": {"load": in_load[MEMORY], "launch": in_run[MEMORY]}, "control": control,
            "prompt": {"load": len(load), "launch": len(run), "total": len(load) + len(run)},
            "generated": generated}


def format_budget(b: dict, title: str) -> str:
    lines = [title, f"{'':<14}{'prompt: load':>13}{'launch':>8}{'generated: EXEC':>17}{'write-back':>12}"]
    for r in b["blocks"]:
        lines.append(f"{'B' + str(r['block']):<14}{r['load']:>13}{r['launch']:>8}{r['exec']:>17}{r['write_back']:>12}")
    m, c = b["memory"], b["control"]
    lines.append(f"{'memory image':<14}{m['load']:>13}{m['launch']:>8}")
    lines.append(f"{'control':<14}{c['load']:>13}{c['launch']:>8}{c['generated']:>17}")
    p, g = b["prompt"], b["generated"]
    lines.append(f"total: prompt {p['total']} (load {p['load']}, launch {p['launch']}), generated {g['total']} "
                 f"(EXEC {g['exec']}, write-back {g['write_back']}, control {g['control']})")
    return "\n".join(lines)

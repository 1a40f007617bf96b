"""Does the order of a launch's prompt words matter to the GPU in the weights? This feeds each launch's prompt
in today's order (gpu/program.prompt_parts) and in other orders of its words, each into a fresh state, and
compares the states after the prompt (every DeltaNet and conv array, bit for bit) and the first token the
model then chooses. Equal states mean equal launches: everything after the prompt is a function of that
state and the tokens the model itself chooses.

Orders:
- `legacy`: the order every launch used before 2026-12-05 (gpu/program.py at db17ed9): init tokens, a clear
  for every block with a zero word in the bound ROM, every nonzero ROM word in row-then-block order
  (argument words in place), the memory words, the shapes, go. The slow-suite record of
  docs/gpu_slow_suite.md ran with it; equal states carry that record over to today's order.
- `shuffled`: the clears in a random order, then the words (three `pay` tokens and their `rom`/`mem` token)
  in a random order but the last (the conv window of the tokens after the prompt reaches back to it).

    python3 tools/prompt_order_check.py                       # every suite case at every shape that fits
    python3 tools/prompt_order_check.py -k powmod --mode bf16
    python3 tools/prompt_order_check.py --shards 2 --shard 0  # half of the launches (one core each)
    python3 tools/prompt_order_check.py --shuffles 0 --skip docs/gpu_prompt_order_done.txt   # the rest

Exit status 1 when any state differs.
"""
from __future__ import annotations

import argparse
import copy
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from qgpu_min.gpu.backend import SPEC, compiled  # noqa: E402
from qgpu_min.gpu.program import _word_tokens, block_format, launch_shape, prompt_parts, rom_image  # noqa: E402
from qgpu_min.gpu.vocab import Token  # noqa: E402
from qgpu_min.host.launch import build_image, for_format  # noqa: E402


def legacy_prompt(program, memory: list[int], block: tuple[int, int], grid: tuple[int, int]) -> list[Token]:
    """The prompt as gpu/program.prompt built it before the load/launch split (db17ed9)."""
    grid, block = launch_shape(grid, block, SPEC)
    warps = (block[0] * block[1] + SPEC.lanes - 1) // SPEC.lanes
    toks: list[Token] = [("init", w) for w in reversed(range(warps))]
    image = rom_image(program, SPEC)
    toks += [("clear", b) for b in range(1, len(program.blocks)) if not all(words[b] for words in image.values())]
    for m, (_, words) in enumerate(image.items()):
        toks += [t for b, w in enumerate(words) if w for t in _word_tokens(w) + [("rom", m, b)]]
    toks += [t for a, w in enumerate(memory) if w and a < SPEC.mem_words for t in _word_tokens(w) + [("mem", a)]]
    return toks + [("launch", *block)] + ([("grid", *grid)] if grid != (1, 1) else []) + [("go",)]


def shuffled_prompt(prompt: list[Token], rng: random.Random) -> list[Token]:
    """The same tokens with the clears in a random order and the words (pay pay pay rom|mem) in another; the
    protocol's frame stays: init tokens first, then every clear, then the words, then the shape tokens (a clear
    right after a word's pay tokens would take their bits through its conv taps)."""
    head = [t for t in prompt if t[0] == "init"]
    clears = [t for t in prompt if t[0] == "clear"]
    tail = [t for t in prompt if t[0] in ("launch", "grid", "go")]
    starts = [i for i, t in enumerate(prompt) if t[0] in ("rom", "mem")]
    words = [prompt[i - 3:i + 1] for i in starts]
    assert all(t[0] == "pay" for w in words for t in w[:3]), "a word is three pay tokens and its rom/mem token"
    rng.shuffle(clears)
    body, last = words[:-1], words[-1:]      # the last word stays: the conv window reaches it from the shapes
    rng.shuffle(body)
    return head + clears + [t for w in body + last for t in w] + tail


def states_equal(a, b) -> str | None:
    """None when every recurrent and conv array is the same bits, else where the first difference is."""
    for name in ("recurrent", "conv"):
        x, y = getattr(a, name), getattr(b, name)
        if x.keys() != y.keys():
            return f"{name}: layers {sorted(x)} vs {sorted(y)}"
        for layer in x:
            if x[layer].tobytes() != y[layer].tobytes():
                return f"{name}[{layer}] differs"
    return None


def _feed(model, state, tokens: list[Token], cg):
    return model.prefill(state, [cg.token_id(t) for t in tokens]) if tokens else None


def compare(cg, mode: str, a: list[Token], b: list[Token]) -> str | None:
    """None when prompts a and b leave the model in the same state (so the same launch follows), else where
    they differ. Their common first tokens are fed once; of their common last tokens only the first four are
    fed to each (the conv window is 4 tokens): if the states are equal there, the same tokens fed into the
    same state keep them equal to the end. Otherwise both are fed to the end and compared there."""
    model = cg.model(mode)
    p = 0
    while p < min(len(a), len(b)) - 1 and a[p] == b[p]:
        p += 1
    s = 0
    while s < min(len(a), len(b)) - p - 1 and a[-1 - s] == b[-1 - s]:
        s += 1
    start = model.new_state()
    _feed(model, start, a[:p], cg)
    sa, sb = copy.deepcopy(start), copy.deepcopy(start)
    cut = min(4, s)
    _feed(model, sa, a[p:len(a) - s + cut], cg)
    _feed(model, sb, b[p:len(b) - s + cut], cg)
    if states_equal(sa, sb) is None:
        return None
    la, lb = _feed(model, sa, a[len(a) - s + cut:], cg), _feed(model, sb, b[len(b) - s + cut:], cg)
    diff = states_equal(sa, sb)
    if diff is None and la is not None and int(np.argmax(la)) != int(np.argmax(lb)):
        diff = "first generated token differs"
    return diff


def launches(pattern: str | None):
    from kernel_suite import CASES
    from test_gpu_suite import _fits_shape
    from test_kernel_suite import _compiled, _seed
    fmt = block_format(SPEC)
    # every case's first shape, then every case's second...: a run stopped early has covered every case
    pairs = sorted(((i, case, shape) for case in CASES
                    for i, shape in enumerate(s for s in case.shapes if _fits_shape(s))), key=lambda x: x[0])
    for _, case, shape in pairs:
        name = f"{case.id}-{shape}"
        if pattern and pattern not in name:
            continue
        args = case.make(np.random.default_rng(_seed(case, shape)), shape)
        kernel = for_format(_compiled(case, "zig"), fmt)
        image = build_image(kernel, [a.copy() if isinstance(a, np.ndarray) else a for a in args], shape.block)
        yield name, image.program, image.memory, tuple(shape.block), tuple(shape.grid)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", help="only launches whose id (case-gGxH-bXxY) contains this")
    ap.add_argument("--mode", choices=["fp32", "bf16", "both"], default="both")
    ap.add_argument("--shuffles", type=int, default=1, help="random orders per launch (default 1)")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--shard", type=int, default=0)
    ap.add_argument("--skip", type=Path, action="append", default=[],
                    help="a log of an earlier run (launches it reports with no difference are not run again), "
                         "or a file of launch ids, one a line")
    args = ap.parse_args(argv)
    cg = compiled(SPEC)
    modes = ["fp32", "bf16"] if args.mode == "both" else [args.mode]
    checked = bad = 0
    t0 = time.time()
    # a log line of a launch with nothing differing so far, or a bare launch id (docs/gpu_prompt_order_done.txt)
    done = {line.split(":")[0].strip() for log in args.skip for line in log.read_text().splitlines()
            if (" 0 differ" in line and "equal so far" in line) or (line.strip() and ":" not in line)}
    for n, (name, program, memory, block, grid) in enumerate(launches(args.k)):
        if n % args.shards != args.shard or name in done:
            continue
        load, run = prompt_parts(program, memory, block, SPEC, grid)
        today = load + run
        orders = {"legacy": legacy_prompt(program, memory, block, grid)}
        rng = random.Random(name)
        orders.update({f"shuffled{i}": shuffled_prompt(today, rng) for i in range(args.shuffles)})
        for mode in modes:
            for label, prompt in orders.items():
                if sorted(prompt) != sorted(today) and label != "legacy":
                    raise AssertionError(f"{name}: the {label} order lost tokens")
                diff = compare(cg, mode, today, prompt)
                checked += 1
                if diff:
                    bad += 1
                    print(f"DIFFERS {name} {mode} {label}: {diff}", flush=True)
        print(f"{name}: {len(today)} prompt tokens, {len(orders)} orders x {len(modes)} modes equal so far "
              f"({checked} compared, {bad} differ, {time.time() - t0:.0f} s)", flush=True)
    print(f"{checked} prompt orders compared with today's, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

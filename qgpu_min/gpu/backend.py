"""The 'circuit' and 'model' backends: a launch run by the GPU compiled into Qwen3.5 layers, either the
circuit-only model ('circuit') or a checkpoint built by `qgpu-min build`, the GPU in front of Qwen3.5
('model', `model=DIR`).

The host tokenizes the bound program and the memory image (program.prompt), the model generates the run
(model.run_launch), and the result is the data memory decoded from the DeltaNet state. With check=True
every generated token and, at every step, registers and memory are compared with the interpreter
(check.py); trace=callable receives each generated token's readable name.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

from ..host.backend import BackendRun, LaunchError
from ..machine.interp import MemoryFault, StepLimitError
from ..machine.isa import LANES, Program
from ..machine.isa import DEFAULT_STEP_LIMIT
from ..model.modes import DEVICES, QUANTS
from .layout import GpuSpec
from .model import TooManyTokens, current_cta
from .model import run_launch as run_model
from .model import run_launches as run_models
from .program import block_format as _block_format
from .program import check_supported, launch_shape, prompt_parts
from .vocab import Token, token_name

SPEC = GpuSpec()
_COMPILED: dict = {}      # spec -> CompiledGpu, for the life of the process
TOKENS_PER_LANE_STEP = 1 + 3 * SPEC.wb_entries


def compiled(spec: GpuSpec = SPEC, progress: Callable[[str], None] | None = None):
    """The compiled GPU (the cache under the user's cache directory when available)."""
    if spec not in _COMPILED:
        try:
            from .cache import load_or_compile
        except ImportError:
            from .model import compile_gpu as load_or_compile
        _COMPILED[spec] = load_or_compile(spec) if progress is None else load_or_compile(spec, progress=progress)
    return _COMPILED[spec]


def _warp_steps(generated: list[Token]) -> int:
    """Warp steps in a generated run: an exec at a new block or warp, or at a lane not after the previous one."""
    steps, last = 0, None
    for t in generated:
        if t[0] == "cta":
            last = None
        elif t[0] == "exec":
            if last is None or (t[1], t[3]) != (last[1], last[3]) or t[2] <= last[2]:
                steps += 1
            last = t
    return steps


_MERGED: dict = {}        # (checkpoint folder, quant, device) -> MergedGpu, for the life of the process


def _checked_options(backend: str, mode: str, options: dict, allowed: str) -> None:
    if options:
        raise LaunchError(f"backend {backend!r} takes {allowed}, not {', '.join(sorted(options))}")
    if mode not in ("fp32", "bf16"):
        raise LaunchError(f"mode {mode!r}: choose fp32 or bf16")


def run_launch(program: Program, memory: list[int], grid: tuple[int, int], block: tuple[int, int],
               step_limit: int | None, mode: str = "fp32", check: bool = False,
               trace: Callable[[str], None] | None = None, progress: Callable[[str], None] | None = None,
               **options: Any) -> BackendRun:
    """progress(message), when given, hears about long steps before the launch (the first-use compile)."""
    _checked_options("circuit", mode, options, "mode, check, trace and progress")
    grid, block = launch_shape(grid, block, SPEC)
    check_supported(program, SPEC)
    return _launch(compiled(SPEC, progress), program, memory, grid, block, step_limit, mode, check, trace)


def run_launches(launches: list[tuple[Program, list[int]]], grid: tuple[int, int], block: tuple[int, int],
                 step_limit: int | None, mode: str = "fp32", progress: Callable[[str], None] | None = None,
                 check: bool = False, **options: Any) -> list[BackendRun]:
    """Several launches on the circuit-only GPU, on the step engine's threads (model.run_launches); each result
    is the one run_launch gives for that launch alone."""
    _checked_options("circuit", mode, options, "mode and progress (a batch is not checked or traced)")
    _unchecked(check)
    grid, block = launch_shape(grid, block, SPEC)
    for program, _ in launches:
        check_supported(program, SPEC)
    return _batch(compiled(SPEC, progress), launches, grid, block, step_limit, mode)


def run_launch_model(program: Program, memory: list[int], grid: tuple[int, int], block: tuple[int, int],
                     step_limit: int | None, model: str | None = None, mode: str = "fp32", check: bool = False,
                     trace: Callable[[str], None] | None = None, progress: Callable[[str], None] | None = None,
                     quant: str | None = None, device: str = "cpu", **options: Any) -> BackendRun:
    """The launch through a merged checkpoint (`model`: its folder), every Qwen layer included; quant="int8":
    its Qwen layers quantized at load (the GPU's layers stay exact); device="cuda": the Qwen layers' dense
    products on an NVIDIA GPU (forward.load_model)."""
    _checked_options("model", mode, options, "model, mode, quant, device, check, trace and progress")
    grid, block = launch_shape(grid, block, SPEC)
    check_supported(program, SPEC)
    return _launch(merged(model, quant, progress, device), program, memory, grid, block, step_limit, mode, check,
                   trace)


def run_launches_model(launches: list[tuple[Program, list[int]]], grid: tuple[int, int], block: tuple[int, int],
                       step_limit: int | None, model: str | None = None, mode: str = "fp32",
                       progress: Callable[[str], None] | None = None, quant: str | None = None,
                       device: str = "cpu", check: bool = False, **options: Any) -> list[BackendRun]:
    """Several launches (a bound program and a memory image each) through a merged checkpoint, decoded
    together (model.run_launches: one pass over the weights per step for all of them); each result is the
    one run_launch_model gives for that launch alone."""
    _checked_options("model", mode, options,
                     "model, mode, quant, device and progress (a batch is not checked or traced)")
    _unchecked(check)
    grid, block = launch_shape(grid, block, SPEC)
    for program, _ in launches:
        check_supported(program, SPEC)
    return _batch(merged(model, quant, progress, device), launches, grid, block, step_limit, mode)


def _unchecked(check: bool) -> None:
    if check:
        raise LaunchError("a batch of launches is not checked: --check replays one launch at a time")


def _batch(cg, launches: list[tuple[Program, list[int]]], grid: tuple[int, int], block: tuple[int, int],
           step_limit: int | None, mode: str) -> list[BackendRun]:
    """The launches tokenized, run together by model.run_launches, and each one's result."""
    parts = [prompt_parts(program, memory, block, SPEC, grid) for program, memory in launches]
    with _step_limit_named(step_limit):
        runs = run_models(cg, [load + rest for load, rest in parts], mode, _token_limit(step_limit, grid),
                          [len(load) for load, _ in parts])
    return [_backend_run(cg, load + rest, run, memory, mode, False)
            for (load, rest), run, (_, memory) in zip(parts, runs, launches)]


def merged(model: str | None, quant: str | None = None, progress: Callable[[str], None] | None = None,
           device: str = "cpu"):
    """The merged checkpoint in `model` (a MergedGpu), loaded once per process (and per quant and device)."""
    if not model:
        raise LaunchError("backend 'model' needs the merged checkpoint's folder (--model DIR, from `qgpu-min build`)")
    if quant is not None and quant not in QUANTS:
        raise LaunchError(f"quant {quant!r}: choose {' or '.join(QUANTS)} (or none)")
    if device not in DEVICES:
        raise LaunchError(f"device {device!r}: choose {' or '.join(DEVICES)}")
    if quant is not None and device != "cpu":
        raise LaunchError(f"quant {quant!r} runs on the CPU only, not with device {device!r}")
    key = (str(Path(model).resolve()), quant, device)
    if key not in _MERGED:
        from .merged import load_merged
        if progress is not None:
            how = " (Qwen layers quantized to int8)" if quant else " (the Qwen layers' products on CUDA)" \
                if device != "cpu" else ""
            progress(f"loading the merged checkpoint {model}{how} ...")
        _MERGED[key] = load_merged(model, SPEC, quant, device)
    return _MERGED[key]


def _token_limit(step_limit: int | None, grid: tuple[int, int]) -> int:
    """Generated tokens a launch may take: the step limit's warp steps at their most tokens, plus CTA tokens."""
    return (step_limit or DEFAULT_STEP_LIMIT) * LANES * TOKENS_PER_LANE_STEP + grid[0] * grid[1] * SPEC.warps + 1


@contextmanager
def _step_limit_named(step_limit: int | None) -> Iterator[None]:
    """The model running past the token limit, reported as the step limit, where the model was."""
    try:
        yield
    except TooManyTokens as e:
        raise StepLimitError(f"{getattr(e, 'in_batch', '')}"
                             f"the launch did not halt within the step limit of {step_limit or DEFAULT_STEP_LIMIT} "
                             f"warp steps: the model was at block B{e.block}, warp {e.warp}, lane {e.lane} "
                             f"(CTA {e.cta})", e.block) from None


def _launch(cg, program: Program, memory: list[int], grid: tuple[int, int], block: tuple[int, int],
            step_limit: int | None, mode: str, check: bool, trace: Callable[[str], None] | None) -> BackendRun:
    """Tokenize, let the model generate the run (checked token by token when asked), decode the result."""
    load, rest = prompt_parts(program, memory, block, SPEC, grid)
    checker = None
    if check:
        from .check import Checker, expected_tokens
        checker = Checker(cg, expected_tokens(program, memory, block, SPEC, step_limit, grid))

    def on_token(i: int, t: Token, state) -> None:
        if trace is not None:
            trace(token_name(t))
        if checker is not None:
            checker(i, t, state)
    # where a call reads the state: the engine decodes the tokens before it in one call (handing None)
    on_token.next_state_read = checker.next_state_read if checker is not None else lambda i: None
    with _step_limit_named(step_limit):
        # --check also checks that the model's argmax over its whole vocabulary is the GPU token the protocol
        # prescribes (without it a merged checkpoint's launch reads only the GPU's rows of the LM head)
        run = run_model(cg, load + rest, mode, max_generated=_token_limit(step_limit, grid),
                        on_token=on_token if checker is not None or trace is not None else None,
                        load_len=len(load), full_vocab=check)
    return _backend_run(cg, load + rest, run, memory, mode, check)


def _backend_run(cg, toks: list[Token], run, memory: list[int], mode: str, check: bool) -> BackendRun:
    """The launch's result from the model's run: a fault token is an error naming where; else the data memory
    read from the state, the token counts and the trace."""
    spec = SPEC
    last = next((t for t in reversed(run.generated) if t[0] == "exec"), None)
    if run.generated[-1][0] == "fault":
        where = (f"block B{last[1]}, lane {last[2]} of warp {last[3]} in CTA {current_cta(run.generated)}" if last
                 else "the first step")
        raise MemoryFault(f"memory access outside the GPU's {spec.mem_words} words or misaligned at {where} "
                          f"(generated token {len(run.generated) - 1})")
    words = run.memory + list(memory[spec.mem_words:])
    tokens = {"prompt": len(toks), "generated": len(run.generated)}
    extra = {"mode": mode, "layers": len(cg.layers), "checked": check, "prompt_reused": run.reused,
             "trace": {"prompt": [token_name(t) for t in toks], "generated": [token_name(t) for t in run.generated],
                       "prompt_ids": [cg.token_id(t) for t in toks],
                       "generated_ids": [cg.token_id(t) for t in run.generated]}}
    return BackendRun(words, _warp_steps(run.generated), [], tokens, extra)


run_launch.block_format = lambda: _block_format(SPEC)     # launch() lowers kernels for this format
run_launch_model.block_format = run_launch.block_format
run_launch.many = run_launches                # launch_many's batch form (host/launch.py)
run_launch_model.many = run_launches_model

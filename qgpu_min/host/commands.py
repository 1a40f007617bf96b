"""`qgpu-min run` and `qgpu-min compile`: a CUDA file in, array contents or the machine program out.

Errors the user can cause (QgpuError: invalid CUDA, unsupported PTX, a program or launch over the
machine's limits, a memory fault, the step limit) print `error: <message>` and exit 1, no traceback.
Malformed options exit 2 through click's usage errors.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import click

from ..cli import user_errors
from ..machine.isa import DEFAULT_STEP_LIMIT, MAX_THREADS_PER_CTA
from ..model.modes import DEVICES, MODES, QUANTS
from .args import bind_args, parse_dim, parse_value

BACKENDS = ("interp", "model", "circuit")
# DESIGN §1: a run answers from the GPU in the weights; the interpreter (the oracle --check replays) stays
# one option away.
DEFAULT_BACKEND = "circuit"

SOURCE = click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
KERNEL = click.option("--kernel", metavar="NAME",
                      help="Kernel to use (plain or mangled name); needed only when the file has several.")
COMPILER = click.option("--compiler", metavar="C",
                        help="'clang', 'zig', 'nvcc' or a compiler's path (default: $QGPU_CUDA_COMPILER, then "
                             "clang++/clang on PATH, the ziglang wheel, nvcc).")


def _dim(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, int] | None:
    return None if value is None else parse_dim(value, f"--{param.name}")


def _warn(warnings: list[str]) -> None:
    """The lowering's warnings (the kernel still runs) on stderr, so --json stdout stays one object."""
    for w in warnings:
        click.echo(f"warning: {w}", err=True)


def _model_options(backend: str, mode: str | None, check: bool, trace: bool, model_dir: str | None,
                   quant: str | None = None, device: str = "cpu") -> dict:
    """The options of the GPU backends; given to the interpreter they are a usage error."""
    if backend == "interp":
        given = [name for name, on in (("--mode", mode), ("--check", check), ("--trace", trace),
                                       ("--model", model_dir), ("--quant", quant),
                                       ("--device", device != "cpu")) if on]
        if given:
            raise click.UsageError(f"{', '.join(given)} apply to --backend circuit or model, not interp")
        return {}
    if (backend == "model") != bool(model_dir):
        raise click.UsageError("--backend model needs --model DIR (a checkpoint from `qgpu-min build`)"
                               if model_dir is None else "--model DIR goes with --backend model")
    if quant and backend != "model":
        raise click.UsageError("--quant applies to --backend model (the Qwen layers of a merged checkpoint)")
    if device != "cpu" and backend != "model":
        raise click.UsageError("--device applies to --backend model (the Qwen layers' products; the circuit-only "
                               "GPU's layers are sparse and run on the CPU)")
    if device != "cpu" and quant:
        raise click.UsageError("--quant runs on the CPU only; leave out --device cuda or --quant")
    # progress on stderr, so --json stdout stays one object: the first use compiles the GPU (seconds)
    out = {"mode": mode or "fp32", "check": check, "progress": lambda message: click.echo(message, err=True)}
    if trace:
        out["trace"] = lambda name: click.echo(name)
    if model_dir:
        out["model"] = model_dir
    if quant:
        out["quant"] = quant
    if device != "cpu":
        out["device"] = device
    return out


def _ints(values) -> list[int]:
    return [int(v) for v in values]


@click.command()
@SOURCE
@click.option("--arg", "arg_texts", multiple=True, metavar="VALUE",
              help="One kernel argument, in parameter order: [1,2,3] or zeros(N) for a pointer, an integer "
                   "(5, -7, 0xFF) for a scalar. Repeat for each parameter.")
@click.option("--args-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), metavar="FILE",
              help="Several launches: one per line of FILE, each line the arguments as --arg takes them, separated "
                   "by spaces (# starts a comment). With --backend model they decode together, one pass over the "
                   "weights per step; each result is the one the launch gets alone.")
@KERNEL
@click.option("--grid", callback=_dim, metavar="N|X,Y", default="1", show_default=True, help="CTAs in the grid.")
@click.option("--block", callback=_dim, metavar="N|X,Y",
              help=f"Threads per CTA (at most {MAX_THREADS_PER_CTA}). Default: one thread per element of the "
                   f"largest array argument, at most {MAX_THREADS_PER_CTA}.")
@click.option("--backend", type=click.Choice(BACKENDS), default=DEFAULT_BACKEND, show_default=True,
              help="circuit: the GPU compiled into Qwen3.5 layers (no base model; compiled on first use and "
                   "cached). interp: the reference interpreter (what --check replays). model: a checkpoint "
                   "from `qgpu-min build`, the GPU in front of Qwen3.5 (--model DIR).")
@click.option("--model", "model_dir", type=click.Path(file_okay=False, exists=True), metavar="DIR",
              help="model: the merged checkpoint's folder (printed by `qgpu-min build`).")
@click.option("--quant", type=click.Choice(QUANTS), help="model: the checkpoint's Qwen layers and LM head "
              "quantized to int8 at load (Q8: a scale per 32 weights; half the bytes to read); the GPU's layers and "
              "its tokens' logits stay exact.")
@click.option("--device", type=click.Choice(DEVICES), default="cpu", show_default=True,
              help="model: where the Qwen layers' dense products run; cuda needs an NVIDIA GPU and nvcc (the "
                   "GPU's layers are sparse and stay on the CPU).")
@click.option("--mode", type=click.Choice(MODES), help="circuit/model: activations in fp32 "
              "(default) or rounded to bf16 after every op, as torch does.")
@click.option("--check", is_flag=True, help="circuit/model: replay on the interpreter and compare every "
              "generated token, register and memory word; the first difference is an error.")
@click.option("--trace", is_flag=True, help="circuit/model: print the launch's generated tokens, one per line "
              "(with --json: a 'trace' object with the token ids and names).")
@click.option("--memcheck", is_flag=True, help="Run the launch on the checked interpreter first: an access "
              "outside the array or variable it belongs to, a read of unwritten shared or local memory, a "
              "shared-memory race between warps or a divergent __syncthreads() is an error naming the source "
              "line, the array and element, and the thread (docs/memcheck.md).")
@COMPILER
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of `name = [..]` lines.")
@click.option("--step-limit", type=click.IntRange(min=1), metavar="N",
              help=f"Stop with an error after N warp steps (default {DEFAULT_STEP_LIMIT}).")
@user_errors
def run(source: Path, arg_texts: tuple[str, ...], args_file: Path | None, kernel: str | None, grid: tuple[int, int],
        block: tuple[int, int] | None, backend: str, model_dir: str | None, quant: str | None, device: str,
        mode: str | None,
        check: bool, trace: bool, memcheck: bool,
        compiler: str | None, as_json: bool, step_limit: int | None) -> None:
    """Compile a CUDA kernel (.cu or .ptx, or load a saved .qgpu program) and launch it on the machine.

    \b
    Example:
      qgpu-min run examples/dot.cu --arg '[1,2,3]' --arg '[4,5,6]' --arg 'zeros(1)' --arg 3
    runs it on the GPU in the weights and prints every array parameter after the launch, e.g.
    `out = [32]` (--backend interp: on the reference interpreter).
    """
    from .launch import launch, launch_many

    if args_file is not None:
        if arg_texts:
            raise click.UsageError("give the arguments with --arg or with --args-file, not both")
        if check or trace or memcheck:
            raise click.UsageError("--check, --trace and --memcheck run one launch at a time: not with --args-file")
    # syntax first, so a typo is reported before the (slow) compiler runs
    arg_sets = _args_file(args_file) if args_file else [list(arg_texts)]
    values = [[parse_value(text, f"{where}--arg #{k}") for k, text in enumerate(texts, start=1)]
              for where, texts in zip(_line_names(args_file, len(arg_sets)), arg_sets)]
    compiled = _kernel(source, kernel, compiler)
    _warn(compiled.warnings)
    args = [bind_args(v, compiled.params, compiled.name) for v in values]
    options = _model_options(backend, mode, check, trace and not as_json, model_dir, quant, device)
    if args_file is None:
        results = [launch(compiled, args[0], grid=grid, block=block, backend=backend, step_limit=step_limit,
                          memcheck=memcheck, **options)]
    else:
        results = launch_many(compiled, args, grid=grid, block=block, backend=backend, step_limit=step_limit,
                              **options)
    for result in results:
        _warn(result.warnings)
    if as_json:
        out = [_result_json(r, compiled, backend, trace) for r in results]
        click.echo(json.dumps(out[0] if args_file is None else {"launches": out}))
        return
    for k, result in enumerate(results, start=1):
        if args_file is not None:
            click.echo(f"# launch {k}")
        for name, v in result.arrays.items():
            click.echo(f"{name} = [{', '.join(map(str, _ints(v)))}]")


_ARG_TOKEN = re.compile(r"\[[^\]]*\]|\S+")


def _args_file(path: Path) -> list[list[str]]:
    """The --arg texts of each launch line of an --args-file (blank lines and # comments skipped)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise click.BadParameter(f"{path}: cannot be read as text ({e})", param_hint="--args-file") from None
    sets = [_ARG_TOKEN.findall(line.split("#", 1)[0]) for line in lines]
    sets = [s for s in sets if s]
    if not sets:
        raise click.BadParameter(f"{path}: no launch in it (one line of arguments per launch)",
                                 param_hint="--args-file")
    return sets


def _line_names(args_file: Path | None, count: int) -> list[str]:
    """Where each launch's arguments come from, for error messages."""
    return [""] if args_file is None else [f"{args_file} launch {k}: " for k in range(1, count + 1)]


def _result_json(result, compiled, backend: str, trace: bool) -> dict:
    return {
        "kernel": result.kernel,
        "grid": list(result.grid), "block": list(result.block),
        "arrays": {name: _ints(v) for name, v in result.arrays.items()},
        "tokens": {"prompt": int(result.tokens["prompt"]), "generated": int(result.tokens["generated"])},
        "backend": result.backend,
        "compiler": compiled.compiler,
        "warnings": compiled.warnings + result.warnings,
        **({"mode": result.extra.get("mode"), "checked": bool(result.extra.get("checked"))}
           if backend != "interp" else {}),
        **({"trace": result.extra["trace"]} if trace and "trace" in result.extra else {}),
    }


def _kernel(source: Path, kernel: str | None, compiler: str | None):
    """The kernel of a .cu or .ptx file (compiled), or of a saved program (.qgpu: loaded, no compiler)."""
    from .saved import SUFFIX, SavedProgramError, load_program
    if source.suffix != SUFFIX:
        from .launch import compile_kernel
        return compile_kernel(source, kernel=kernel, compiler=compiler)
    k = load_program(source)
    if kernel is not None and kernel not in (k.name, k.entry):
        raise SavedProgramError(f"{source}: holds kernel {k.name!r}, not {kernel!r}")
    return k


@click.command("compile")
@SOURCE
@KERNEL
@COMPILER
@click.option("--ptx", "show_ptx", is_flag=True, help="Print the compiler's PTX instead of the machine program.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE.qgpu",
              help="Save the compiled kernel (its PTX and interface; docs/usage.md) for `qgpu-min run "
                   "FILE.qgpu` and qgpu_min.load_program, which need no CUDA compiler.")
@click.option("--tokens", "show_tokens", is_flag=True,
              help="Print where one launch's tokens go on the GPU in the weights, block by block: the prompt "
                   "(load part, launch part) and the generated tokens (from an interpreter replay; no model "
                   "runs). Needs the launch: --arg for each parameter, --block, --grid as for run.")
@click.option("--arg", "arg_texts", multiple=True, metavar="VALUE", help="--tokens: one kernel argument, as for run.")
@click.option("--grid", callback=_dim, metavar="N|X,Y", default="1", show_default=True,
              help="--tokens: CTAs in the grid.")
@click.option("--block", callback=_dim, metavar="N|X,Y", help="--tokens: threads per CTA (default as for run).")
@click.option("--json", "as_json", is_flag=True, help="--tokens: one JSON object.")
@user_errors
def compile_cmd(source: Path, kernel: str | None, compiler: str | None, show_ptx: bool, output: Path | None,
                show_tokens: bool, arg_texts: tuple[str, ...], grid: tuple[int, int], block: tuple[int, int] | None,
                as_json: bool) -> None:
    """Compile a CUDA kernel and print the machine program: blocks, instructions, registers, memory map.
    SOURCE may be a saved program (.qgpu) too."""
    from .saved import SUFFIX, SavedProgramError, save_program

    if (arg_texts or as_json or block is not None or grid != (1, 1)) and not show_tokens:
        raise click.UsageError("--arg, --block, --grid and --json go with --tokens")
    if show_tokens and (show_ptx or output is not None):
        raise click.UsageError("--tokens prints the launch's tokens: not with --ptx or -o")
    if show_tokens:
        values = [parse_value(text, f"--arg #{k}") for k, text in enumerate(arg_texts, start=1)]
        compiled = _kernel(source, kernel, compiler)
        _warn(compiled.warnings)
        _print_tokens(compiled, bind_args(values, compiled.params, compiled.name), grid, block, as_json)
        return

    if show_ptx:  # straight from the compiler, so it shows even where the lowering would fail
        if source.suffix == SUFFIX:
            click.echo(_kernel(source, kernel, compiler).ptx, nl=False)
            return
        from ..cuda.compiler import compile_to_ptx

        click.echo(compile_to_ptx(source, compiler).text, nl=False)
        return
    from .launch import format_kernel

    if output is not None and output.suffix != SUFFIX:     # before the compiler runs
        raise SavedProgramError(f"{output}: a saved program's name ends in {SUFFIX}")
    compiled = _kernel(source, kernel, compiler)
    _warn(compiled.warnings)
    if output is not None:
        save_program(compiled, output)
        click.echo(f"saved kernel {compiled.name} ({len(compiled.program.blocks)} blocks) to {output}")
        return
    click.echo(format_kernel(compiled))


def _print_tokens(compiled, args: list, grid: tuple[int, int], block: tuple[int, int] | None, as_json: bool) -> None:
    """compile --tokens: the launch's tokens by block (gpu/token_budget.py)."""
    from ..gpu.backend import SPEC
    from ..gpu.program import block_format, check_supported, launch_shape
    from ..gpu.token_budget import format_budget, token_budget
    from .launch import build_image, default_block, for_format

    k = for_format(compiled, block_format(SPEC))
    grid, block = launch_shape(grid, block or default_block(args), SPEC)
    check_supported(k.program, SPEC)
    image = build_image(k, args, block)
    budget = token_budget(image.program, image.memory, block, grid, SPEC)
    if as_json:
        click.echo(json.dumps({"kernel": compiled.name, "grid": list(grid), "block": list(block), **budget}))
        return
    click.echo(format_budget(budget, f"kernel {compiled.name}: the tokens of one launch on the GPU in the weights "
                                     f"(block {block[0]}x{block[1]}, grid {grid[0]}x{grid[1]})"))

"""CLI: `qgpu-min selftest` and `qgpu-min circuit-report`."""
from __future__ import annotations

import sys
import warnings

import click


@click.command("selftest")
@click.option("--quick", is_flag=True, help="A fast subset: 200 operand pairs instead of 2000, shorter sequences.")
@click.option("--seed", default=0, show_default=True, help="Seed of the random operands.")
def selftest_command(quick: bool, seed: int) -> None:
    """Check the circuit compiler: every library op exact through the compiled weights (fp32 and bf16),
    static margins, memory, and silence on text tokens. Ends with 'N passed, M failed'."""
    from .selftest import run_selftest

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # exp overflow inside silu(-inf side) is the intent
        results = run_selftest(quick=quick, seed=seed)
    failed = 0
    for name, ok, detail in results:
        failed += not ok
        click.echo(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")
    click.echo(f"{len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


@click.command("circuit-report")
@click.option("--no-mul", is_flag=True, help="Skip mul.lo (the slowest to compile).")
@click.option("--lanes", is_flag=True, help="Also measure 4-lane register-file + ALU datapaths (for the GPU).")
@click.option("--gpu", is_flag=True, help="Report the GPU in the weights instead: layers, units and heads per "
              "layer, peak residual dims, vocabulary, ROM and memory sizes, and the layer map.")
@click.option("--json", "as_json", is_flag=True, help="With --gpu: print one JSON object.")
def circuit_report_command(no_mul: bool, lanes: bool, gpu: bool, as_json: bool) -> None:
    """Print the cost of every library op (MLP layers, units, heads, residual dims) and of the demo circuit;
    with --gpu, the cost and layer map of the GPU compiled into the weights."""
    if as_json and not gpu:
        raise click.UsageError("--json applies to --gpu")
    if gpu:
        if no_mul or lanes:
            raise click.UsageError("--no-mul and --lanes apply to the library table, not --gpu")
        import json

        from ..gpu.report import as_json as report_json, format_report, gpu_report

        report = gpu_report()
        click.echo(json.dumps(report_json(report)) if as_json else format_report(report))
        return
    from .compile import plan
    from .demos import demo_circuit
    from .ir import Gate
    from .lib import ALU_OPS
    from .report import cost_table, format_table, lanes_cost

    click.echo(format_table(cost_table(include_mul=not no_mul)))
    if lanes:
        no_shift = tuple(o for o in ALU_OPS if o not in ("shl", "shr", "sra"))
        click.echo("\n" + format_table([lanes_cost(4, no_shift, 1), lanes_cost(4, no_shift, 2),
                                         lanes_cost(4, ALU_OPS, 1), lanes_cost(4, ALU_OPS, 2)]))
    d = demo_circuit()
    p = plan(d.circuit, keep=[ig for _, ig in d.out_code.pairs])
    units = {L: 0 for L in range(p.n_layers)}
    for op in p.ops:
        if isinstance(op, Gate):
            units[p.layer_of[id(op)]] += len(op.units)
    click.echo(f"\ndemo circuit (RAM + 15-op ALU + output code): {p.n_layers} circuit layers, "
               f"{len(p.used_dims())} residual dims, gate units per layer {list(units.values())}")

"""The ``simtrain`` command line: a thin edge over the library (typer + rich).

Exit status: 0 ok, 2 bad input (scenario, options), 1 anything else (with a message, never
a traceback).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from simtrain.engine.sim import SimulationDeadlock
from simtrain.errors import ScenarioError
from simtrain.units import fmt_bytes, fmt_seconds

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="Simulate distributed training steps: how long, where the time goes, what if.",
)
err = Console(stderr=True)


def _fail(message: str, code: int) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _summary_table(summary: dict[str, Any]) -> Table:
    table = Table(title=f"simtrain · {summary.get('scenario', '')}", show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    rows = [
        ("GPUs", f"{summary['num_gpus']} × {summary['gpu']}"),
        ("step time", fmt_seconds(summary["step_time_s"])),
        ("tokens/s", f"{summary['tokens_per_s']:,.0f}"),
        ("MFU", f"{summary['mfu']:.1%}"),
        ("HFU", f"{summary['hfu']:.1%}"),
        ("compute (per GPU)", fmt_seconds(summary["compute_s"])),
        ("communication (per GPU)", fmt_seconds(summary["comm_s"])),
        ("exposed communication", fmt_seconds(summary["exposed_comm_s"])),
        ("bytes all-reduced per GPU", fmt_bytes(summary["comm_bytes_per_gpu"])),
        ("parameters", f"{summary['parameters'] / 1e9:.3f} B"),
        ("microbatches per step", str(summary["micro_batches"])),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


@app.command(
    epilog=(
        "Examples:\n\n"
        "  simtrain run scenarios/quickstart.yaml\n\n"
        "  simtrain run scenarios/ddp_buckets.yaml --set parallelism.ddp.bucket_cap_mb=100\n\n"
        "  simtrain run scenarios/quickstart.yaml --json --no-report"
    )
)
def run(
    scenario: Annotated[Path, typer.Argument(help="scenario YAML file")],
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="override a field: dotted.key=value (repeatable)"),
    ] = None,
    report: Annotated[
        Path | None, typer.Option(help="HTML report path [default: reports/NAME.html]")
    ] = None,
    no_report: Annotated[bool, typer.Option("--no-report", help="do not write a report")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="print nothing but errors")] = False,
) -> None:
    """Simulate one training step of SCENARIO: summary table and an HTML Gantt report."""
    from simtrain.report.html import render_report, write_report
    from simtrain.scenario import load_scenario
    from simtrain.simulate import simulate

    try:
        loaded = load_scenario(scenario, set_ or [])
        result = simulate(loaded)
    except ScenarioError as exc:
        raise _fail(str(exc), 2) from None
    except SimulationDeadlock as exc:
        raise _fail(str(exc), 1) from None
    summary = result.summary
    if not no_report:
        path = report or Path("reports") / f"{loaded.name}.html"
        html = render_report(summary, result.timeline, title=f"simtrain · {loaded.name}",
                             scenario_yaml=_yaml_text(scenario),
                             server_of=result.cluster.server_of)
        summary["report"] = str(write_report(path, html))
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    elif not quiet:
        out = Console()
        out.print(_summary_table(summary))
        if "report" in summary:
            out.print(f"report: {summary['report']}")


def _yaml_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


@app.command()
def presets() -> None:
    """List the cluster, model and GPU presets a scenario can name."""
    from simtrain.hardware.gpus import GPUS
    from simtrain.hardware.topology import CLUSTER_PRESETS
    from simtrain.workload.model import MODEL_PRESETS

    out = Console()
    for title, names in (("cluster presets", CLUSTER_PRESETS), ("model presets", MODEL_PRESETS),
                         ("GPUs", GPUS)):
        out.print(f"[bold]{title}:[/] {', '.join(sorted(names))}")


def main() -> None:
    """Console entry point; turns unexpected exceptions into one line and exit 1."""
    try:
        app()
    except (KeyboardInterrupt, BrokenPipeError):
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the edge: one line, not a traceback
        if os.environ.get("SIMTRAIN_DEBUG"):
            raise
        err.print(f"[bold red]internal error:[/] {type(exc).__name__}: {exc} "
                  "(set SIMTRAIN_DEBUG=1 to see the traceback)", highlight=False)
        sys.exit(1)


if __name__ == "__main__":
    main()

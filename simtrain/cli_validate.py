"""``simtrain validate``: compare simtrain with published runs (registered on the main app)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from simtrain.cli_errors import fail
from simtrain.errors import ScenarioError

EPILOG = (
    "Examples:\n\n"
    "  simtrain validate\n\n"
    "  simtrain validate --suite megatron-2020 --suite nccl --jobs 2\n\n"
    "  simtrain validate --suite mcore-2024-h100 --json > mcore.json\n\n"
    "  simtrain validate --suite megatron-bridge --row '*qwen3*'\n\n"
    "Error = predicted / published - 1 (signed); MAPE = mean |error| per suite and metric. "
    "Exit status: 0 ok (whatever the errors), 2 bad input, 1 anything else."
)


# The --dir option of the commands that read suite files (validate, calibrate).
SuiteDir = Annotated[Path | None, typer.Option(
    "--dir", help="folder of the suite YAML files (default: scenarios/validation)")]


def validate(
    suite: Annotated[list[str] | None, typer.Option(
        "--suite", "-s", help="a suite file name under --dir (e.g. mcore-2024-h100) or nccl; "
                              "repeat for several (default: all)")] = None,
    directory: SuiteDir = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=0,
                                      help="simulate this many rows at once, in worker "
                                           "processes (0: one per CPU)")] = 0,
    granularity: Annotated[str | None, typer.Option(
        "--granularity", help="override every row's sim.granularity: op, layer or stage")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print rows and per-suite summary "
                                                         "as JSON")] = False,
    row: Annotated[list[str] | None, typer.Option(
        "--row", "-r", help="only the rows whose id matches this shell pattern (e.g. "
                            "'*b200*'); repeat for several")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
    full_steps: Annotated[bool, typer.Option(
        "--full-steps", help="simulate every microbatch of long steps instead of "
                             "extrapolating from three short runs (simtrain.steady_state)")
    ] = False,
) -> None:
    """Simulate published training runs and NCCL measurements; print the error of each row."""
    from simtrain.validation import all_suites, count_rows, run_suites, summarize

    err = Console(stderr=True)
    if directory is not None and not directory.is_dir():
        raise fail(f"cannot read suite folder {directory}: not a directory")
    known = all_suites(directory)
    chosen = list(dict.fromkeys(suite or known))
    unknown = [s for s in chosen if s not in known]
    if unknown:
        raise fail(f"unknown suite {unknown[0]!r}; expected one of: {', '.join(known)}")
    if granularity is not None and granularity not in GRANULARITIES:
        raise fail(f"--granularity {granularity!r}: expected one of {', '.join(GRANULARITIES)}")
    workers = jobs or os.cpu_count() or 1
    started = time.perf_counter()
    try:
        total = sum(count_rows(s, directory, row) for s in chosen)
        show = not quiet and not as_json
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), TimeRemainingColumn(), console=err, transient=True,
                      disable=not show) as bar:
            task = bar.add_task("validating", total=total)

            def advance(name: str, row_id: str) -> None:
                bar.update(task, advance=1, description=f"{name} · {row_id}")

            rows = run_suites(chosen, directory, jobs=workers, granularity=granularity,
                              progress=advance, only=row, steady=not full_steps)
    except ScenarioError as exc:
        raise fail(str(exc)) from None
    summary = summarize(rows)
    wall = time.perf_counter() - started
    if as_json:
        payload = {"rows": [r.as_dict() for r in rows], "summary": summary,
                   "wall_s": round(wall, 3)}
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        return
    out = Console()
    if not out.is_terminal:  # piped: do not squeeze the tables into 80 columns
        out = Console(width=160)
    for name in chosen:
        out.print(_rows_table(name, [r for r in rows if r.suite == name]))
    out.print(_summary_table(summary))
    out.print(wall_line(wall, len(rows), workers))


def wall_line(seconds: float, rows: int, workers: int) -> str:
    """The closing line of a validate run: its wall time, rows and worker processes."""
    minutes, rest = divmod(seconds, 60.0)
    shown = f"{int(minutes)} min {rest:.1f} s" if minutes else f"{rest:.1f} s"
    return (f"wall time {shown} ({rows} rows, {workers} worker "
            f"process{'es' if workers != 1 else ''})")


GRANULARITIES = ("op", "layer", "stage")


METRIC_LABELS = {"iteration_time_ms": "step (ms)", "tflops_per_gpu": "TFLOP/s/GPU",
                 "busbw_gbps": "busbw (GB/s)", "tokens_per_s_per_gpu": "tokens/s/GPU"}


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1%}"


def _rows_table(name: str, rows: list[Any]) -> Table:
    table = Table(title=f"validation · {name}")
    table.add_column("row", no_wrap=True)
    table.add_column("metric", no_wrap=True)
    for column in ("published", "predicted", "error"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("note")
    for r in rows:
        predicted = "skipped" if r.predicted is None else f"{r.predicted:,.1f}"
        colour = ("dim" if r.error is None else "green" if abs(r.error) <= 0.1
                  else "yellow" if abs(r.error) <= 0.25 else "red")
        needs = r.extra.get("needs") if r.skipped.startswith("not expressible") else None
        note = (f"not expressible: {', '.join(needs)} (see --json)" if needs
                else r.skipped if r.skipped.startswith(("simulation failed", "not expressible",
                                                        "not comparable"))
                else f"not representable: {r.skipped}" if r.skipped
                else "known miss (see --json)" if r.note and r.suite == "nccl" else r.note)
        table.add_row(r.id, METRIC_LABELS.get(r.metric, r.metric), f"{r.published:,.1f}",
                      predicted, f"[{colour}]{_pct(r.error)}[/]", note)
    return table


def _summary_table(summary: list[dict[str, Any]]) -> Table:
    table = Table(title="validation · summary (error = predicted / published - 1)")
    for column in ("suite", "metric", "rows", "expressible", "MAPE", "mean error",
                   "worst row"):
        table.add_column(column, justify="left" if column in ("suite", "metric", "worst row")
                         else "right")
    for s in summary:
        mape = "—" if s["mape"] is None else f"{s['mape']:.1%}"
        worst = "—" if s["worst"] is None else f"{s['worst']} ({_pct(s['worst_error'])})"
        table.add_row(s["suite"], METRIC_LABELS.get(s["metric"], s["metric"]),
                      str(s["total"]), str(s["rows"]), mape, _pct(s["mean_error"]), worst)
    return table


def register(app: typer.Typer) -> None:
    """Add the command to the main app."""
    app.command("validate", epilog=EPILOG)(validate)

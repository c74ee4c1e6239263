"""Several jobs on one cluster at the command line: ``simtrain run`` of a jobs scenario, and
``simtrain placements`` (a what-if of placements). Registered on the main CLI app."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from simtrain.cli_errors import fail
from simtrain.engine.sim import SimulationDeadlock
from simtrain.errors import ScenarioError
from simtrain.jobs.spec import is_jobs_file
from simtrain.report.jobs import JOB_COLUMNS, job_rows

PLACEMENTS_EPILOG = (
    "Examples:\n\n"
    "  simtrain placements scenarios/two_jobs.yaml\n\n"
    "  simtrain placements scenarios/two_jobs.yaml --try pack --try 'a=spread;b=pack'\n\n"
    "  simtrain placements scenarios/two_jobs.yaml --json"
)


def run_jobs(path: Path, overrides: list[str], *, report: Path | None, no_report: bool,
             assets: str, trace: Path | None, as_json: bool, quiet: bool) -> None:
    """``simtrain run`` of a jobs scenario: jobs table, combined report and trace."""
    from simtrain.jobs import load_jobs, simulate_jobs
    from simtrain.report.html import write_report
    from simtrain.report.jobs import render_jobs_report

    try:
        result = simulate_jobs(load_jobs(path, overrides))
    except ScenarioError as exc:
        raise fail(str(exc), 2) from None
    except SimulationDeadlock as exc:
        raise fail(str(exc), 1) from None
    summary = result.summary
    name = result.scenario.name
    if not no_report:
        html = render_jobs_report(result, title=f"simtrain · {name}",
                                  scenario_yaml=_text(path), overrides=overrides,
                                  assets=assets)
        summary["report"] = str(write_report(report or Path("reports") / f"{name}.html", html))
    if trace is not None:
        from simtrain.report.trace import chrome_trace, write_trace

        events = chrome_trace(result.timeline, graph=result.graph,
                              server_of=result.cluster.server_of)
        summary["trace"] = str(write_trace(trace, events))
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
        return
    if quiet:
        return
    out = Console()
    table = Table(title=f"simtrain · {name} · {len(result.scenario.jobs)} jobs on "
                        f"{summary['num_gpus']:,} of {summary['cluster_gpus']:,} × "
                        f"{summary['gpu']}")
    table.add_column("job", style="bold")
    for heading, _, how in JOB_COLUMNS:
        table.add_column(heading, justify="left" if how == "text" else "right")
    for row in job_rows(summary["jobs"]):
        table.add_row(*row)
    out.print(table)
    out.print(f"links shared by jobs: {summary['shared_links']:,} · fidelity: "
              f"{summary['fidelity_note']}", highlight=False)
    for note in summary["notes"]:
        out.print(f"note: {note}", highlight=False)
    for key in ("report", "trace"):
        if key in summary:
            out.print(f"{key}: {summary[key]}")


def placements(
    scenario: Annotated[Path, typer.Argument(help="jobs scenario YAML file")],
    try_: Annotated[list[str] | None, typer.Option(
        "--try", help="a placement: 'as written', pack, spread, or JOB=PLACEMENT[;...] "
                      "(repeatable) [as written, pack, spread]")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="override a field: dotted.key=value (repeatable)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON (for scripts)")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="print nothing but "
                                                             "errors")] = False,
) -> None:
    """Run a jobs scenario under several placements: each job's step together and alone."""
    from simtrain.study.placement import DEFAULT_TRIES, what_if

    if not is_jobs_file(scenario):
        raise fail(f"{scenario}: not a scenario with jobs (a jobs: mapping of job name -> "
                   "job); see docs/jobs.md", 2)
    progress = None if quiet or as_json else (
        lambda label: Console(stderr=True).print(f"simulating: {label}", highlight=False))
    try:
        rows = what_if(scenario, try_ or DEFAULT_TRIES, set_ or [], progress)
    except ScenarioError as exc:
        raise fail(str(exc), 2) from None
    except SimulationDeadlock as exc:
        raise fail(str(exc), 1) from None
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    if not quiet:
        Console().print(_placements_table(scenario.stem, rows))


def _placements_table(name: str, rows: list[dict[str, Any]]) -> Table:
    from simtrain.units import fmt_seconds

    best = min(r["step_time_s"] for r in rows)
    table = Table(title=f"simtrain · {name} · placements (slowdown: against the job alone "
                        "on the same GPUs)")
    table.add_column("placement", style="bold")
    jobs = list(rows[0]["jobs"])
    for job in jobs:
        table.add_column(f"{job}: GPUs")
        table.add_column(f"{job}: step", justify="right")
        table.add_column(f"{job}: slowdown", justify="right")
    table.add_column("last job ends", justify="right")
    table.add_column("shared links", justify="right")
    for row in rows:
        cells = [row["placement"]]
        for job in jobs:
            j = row["jobs"][job]
            cells += [j["gpus"], fmt_seconds(j["step_time_s"]), f"{j['slowdown']:.3f}×"]
        mark = " (best)" if row["step_time_s"] == best and len(rows) > 1 else ""
        cells += [fmt_seconds(row["step_time_s"]) + mark, f"{row['shared_links']:,}"]
        table.add_row(*cells)
    return table


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def register(app: typer.Typer) -> None:
    """Add ``simtrain placements`` to ``app``."""
    app.command(epilog=PLACEMENTS_EPILOG)(placements)

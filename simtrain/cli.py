"""The ``simtrain`` command line: a thin edge over the library (typer + rich).

Exit status: 0 ok, 2 bad input (scenario, options), 1 anything else (with a message, never
a traceback).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from simtrain.cli_errors import fail as _fail
from simtrain.cli_options import JsonOption, QuietOption, ReportAssetsOption, SetOption
from simtrain.engine.sim import SimulationDeadlock
from simtrain.errors import ScenarioError
from simtrain.report.rows import plural

if TYPE_CHECKING:
    from simtrain.simulate import SimulationResult

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="Simulate distributed training steps: how long, where the time goes, what if.",
    epilog=(
        "Examples:\n\n"
        "  simtrain run scenarios/quickstart.yaml\n\n"
        "  simtrain run scenarios/pp_1f1b.yaml --trace step.json.gz\n\n"
        "  simtrain compare a.yaml b.yaml\n\n"
        "  simtrain topology dgx-h100 --nodes 4\n\n"
        "Exit status: 0 ok, 2 bad input, 1 anything else."
    ),
)
err = Console(stderr=True)


def _summary_table(summary: dict[str, Any]) -> Table:
    """The run's key numbers: the ``cli`` metrics of :mod:`simtrain.report.schema`."""
    from simtrain.report.schema import label, number, shown_in

    table = Table(title=f"simtrain · {summary.get('scenario', '')}", show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    for metric in shown_in("cli"):
        value = number(summary, metric.key)
        if value is None:
            continue
        text = metric.fmt(value)
        if metric.key == "num_gpus" and summary.get("gpu"):
            text = f"{text} × {summary['gpu']}"
        table.add_row(label(metric, summary), text)
    return table




def _simulate(path: Path, overrides: list[str], report: Path | None = None,
              with_report: bool = False, assets: str = "inline") -> SimulationResult:
    """Load and simulate; bad input exits 2, a deadlocked step exits 1 (after writing the
    step up to the hang to ``report`` or reports/NAME.html when ``with_report``)."""
    from simtrain.scenario import load_scenario
    from simtrain.simulate import simulate

    try:
        return simulate(load_scenario(path, overrides))
    except ScenarioError as exc:
        raise _fail(str(exc), 2) from None
    except SimulationDeadlock as exc:
        message = str(exc)
        if with_report and exc.result is not None:
            name = exc.result.scenario.name
            html = _report_html(exc.result, f"simtrain · {name} · deadlocked", _yaml_text(path),
                                assets=assets)
            written = write_report_file(report or Path("reports") / f"{name}.html", html)
            message += f" (report of the step up to the hang: {written})"
        raise _fail(message, 1) from None


def write_report_file(path: Path, html: str) -> Path:
    """Write an HTML report (creating folders); returns the path written."""
    from simtrain.report.html import write_report

    return write_report(path, html)


def _report_html(result: SimulationResult, title: str, yaml_text: str | None,
                 overrides: list[str] | None = None, assets: str = "inline") -> str:
    from simtrain.report.html import render_report
    from simtrain.report.topology import topology_figure, topology_table_html

    cluster = result.cluster
    return render_report(
        result.summary, result.timeline, title=title, scenario_yaml=yaml_text,
        server_of=cluster.server_of, graph=result.graph, links=cluster.links,
        topology=topology_figure(cluster, title=f"Topology: {cluster.num_gpus} × "
                                 f"{cluster.gpu_spec.name}"),
        topology_table=topology_table_html(cluster),
        hbm_bytes=cluster.gpu_spec.hbm_bytes,
        subtitle=_subtitle(result, overrides or []),
        assets=assets,
    )


def _subtitle(result: SimulationResult, overrides: list[str]) -> str:
    """The scenario's description, then what ran: GPUs, servers and the parallel degrees
    above 1 (always from the run itself). The description is the file's own words, so
    when ``--set`` changed the scenario it says so and lists the overrides: "on one DGX
    A100" must not stand unqualified over a run switched to H100s."""
    cluster = result.cluster
    description = result.scenario.description
    parts = []
    if description and overrides:
        parts.append(f"{description} (the file's description; this run changed it with "
                     f"--set {', '.join(overrides)})")
    elif description:
        parts.append(description)
    elif overrides:
        parts.append(f"with --set {', '.join(overrides)}")
    where = (f"ran: {cluster.num_gpus:,} × {cluster.gpu_spec.name} in "
             f"{plural(cluster.num_servers, 'server')}")
    plan = result.summary.get("parallelism")
    if isinstance(plan, dict):
        degrees = " × ".join(f"{k.upper()}{v}" for k, v in plan.items()
                             if isinstance(v, int) and not isinstance(v, bool) and v > 1)
        if degrees:
            where += f", {degrees}"
    return " · ".join([*parts, where])


@app.command(
    epilog=(
        "Examples:\n\n"
        "  simtrain run scenarios/quickstart.yaml\n\n"
        "  simtrain run scenarios/ddp_buckets.yaml --set parallelism.ddp.bucket_cap_mb=100\n\n"
        "  simtrain run scenarios/ddp_buckets.yaml --trace step.json.gz   (open in Perfetto)\n\n"
        "  simtrain run scenarios/quickstart.yaml --json --no-report"
    )
)
def run(
    scenario: Annotated[Path, typer.Argument(help="scenario YAML file")],
    set_: SetOption = None,
    report: Annotated[
        Path | None, typer.Option(help="HTML report path [default: reports/NAME.html]")
    ] = None,
    no_report: Annotated[bool, typer.Option("--no-report", help="do not write a report")] = False,
    report_assets: ReportAssetsOption = "inline",
    trace: Annotated[
        Path | None,
        typer.Option(help="write a Chrome/Perfetto trace (.json or .json.gz)"),
    ] = None,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Simulate one training step of SCENARIO: summary table and an HTML Gantt report."""
    from simtrain.report.html import check_assets, write_report

    try:
        check_assets(report_assets)
    except ValueError as exc:
        raise _fail(f"--report-assets: {exc}", 2) from None
    from simtrain.cli_jobs import is_jobs_file, run_jobs
    if is_jobs_file(scenario):  # several jobs sharing the cluster (docs/jobs.md)
        return run_jobs(scenario, set_ or [], report=report, no_report=no_report,
                        assets=report_assets, trace=trace, as_json=as_json, quiet=quiet)
    with _status("simulating", quiet or as_json):
        result = _simulate(scenario, set_ or [], report, with_report=not no_report,
                           assets=report_assets)
    loaded = result.scenario
    summary = result.summary
    if not no_report:
        path = report or Path("reports") / f"{loaded.name}.html"
        with _status("writing the report", quiet or as_json):
            html = _report_html(result, f"simtrain · {loaded.name}", _yaml_text(scenario),
                                set_ or [], assets=report_assets)
            summary["report"] = str(write_report(path, html))
    if trace is not None:
        from simtrain.report.trace import chrome_trace, write_trace

        with _status("writing the trace", quiet or as_json):
            events = chrome_trace(result.timeline, graph=result.graph,
                                  server_of=result.cluster.server_of,
                                  dtype=loaded.training.dtype,
                                  grad_dtype=loaded.parallelism.ddp.grad_dtype)
            summary["trace"] = str(write_trace(trace, events))
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    elif not quiet:
        out = Console()
        out.print(_summary_table(summary))
        for note in summary.get("notes") or ():
            out.print(f"note: {note}", highlight=False)
        for key in ("report", "trace"):
            if key in summary:
                out.print(f"{key}: {summary[key]}")


@app.command(
    epilog=(
        "Examples:\n\n"
        "  simtrain compare scenarios/ddp_buckets.yaml scenarios/ddp_buckets_pcie.yaml\n\n"
        "  simtrain compare a.yaml b.yaml c.yaml --set training.micro_batch_size=2\n\n"
        "  simtrain compare a.yaml b.yaml --json --no-report"
    )
)
def compare(
    scenarios: Annotated[list[Path], typer.Argument(help="two or more scenario YAML files")],
    set_: SetOption = None,
    report: Annotated[
        Path, typer.Option(help="HTML report with aligned Gantt charts")
    ] = Path("reports/compare.html"),
    no_report: Annotated[bool, typer.Option("--no-report", help="do not write a report")] = False,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Run several scenarios and show their summaries side by side, with differences."""
    from simtrain.report.compare import (
        ComparedRun,
        differences,
        fmt_delta,
        metric_label,
        render_compare,
        unique_names,
    )
    from simtrain.report.html import fmt_value, write_report

    if len(scenarios) < 2:
        raise _fail("compare needs at least two scenario files", 2)
    results = []
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                  console=err, transient=True, disable=quiet or as_json) as progress:
        job = progress.add_task("simulating", total=len(scenarios))
        for path in scenarios:
            progress.update(job, description=f"simulating {path.name}")
            results.append(_simulate(path, set_ or []))
            progress.advance(job)
    names = unique_names([r.scenario.name for r in results], lambda i: scenarios[i].name)
    diffs = differences([r.summary for r in results])
    out_json: dict[str, Any] = {
        "scenarios": names,
        "files": [str(p) for p in scenarios],
        "summaries": [r.summary for r in results],
        "differences": {k: [{"value": d.value, "delta": d.delta, "relative": d.relative}
                            for d in row] for k, row in diffs.items()},
    }
    if not no_report:
        with _status("writing the report", quiet or as_json):
            runs = [ComparedRun(n, r.summary, r.timeline, r.cluster.server_of, r.graph)
                    for n, r in zip(names, results, strict=True)]
            out_json["report"] = str(write_report(report, render_compare(runs)))
    if as_json:
        sys.stdout.write(json.dumps(out_json, indent=2) + "\n")
        return
    if quiet:
        return
    table = Table(title="simtrain · compare")
    table.add_column("metric", style="bold")
    for n in names:
        table.add_column(n, justify="right")
    for n in names[1:]:
        table.add_column(f"Δ {n}", justify="right")
    summaries = [r.summary for r in results]
    for key, row in diffs.items():
        values = [fmt_value(key, d.value) if d.value is not None else "n/a" for d in row]
        table.add_row(metric_label(key, summaries), *values,
                      *(fmt_delta(key, d) for d in row[1:]))
    out = Console()
    out.print(table)
    if "report" in out_json:
        out.print(f"report: {out_json['report']}")


@contextmanager
def _status(what: str, silent: bool) -> Iterator[None]:
    """A spinner on stderr while something runs (terminals only; never in scripts)."""
    if silent or not err.is_terminal:
        yield
        return
    with err.status(f"{what}…"):
        yield


def _yaml_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _register_extensions() -> None:
    """Commands that live in their own modules (collective, sweep, plan, validate, calibrate,
    ingest, topology and presets)."""
    from simtrain.cli_calibrate import register as register_calibrate
    from simtrain.cli_collective import register as register_collective
    from simtrain.cli_ingest import register as register_ingest
    from simtrain.cli_jobs import register as register_jobs
    from simtrain.cli_plan import register as register_plan
    from simtrain.cli_sweep import register as register_sweep
    from simtrain.cli_topology import register as register_topology
    from simtrain.cli_validate import register as register_validate

    register_collective(app)
    register_sweep(app)
    register_plan(app)
    register_validate(app)
    register_calibrate(app)
    register_ingest(app)
    register_topology(app)
    register_jobs(app)


_register_extensions()


def main() -> None:
    """Console entry point; turns unexpected exceptions into one line and exit 1."""
    from typer.exceptions import TyperException

    try:
        code = app(standalone_mode=False)
    except TyperException as exc:  # a bad option or argument: one line, exit 2
        status = getattr(exc, "exit_code", 2)
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        if message.strip():  # (a bare "simtrain" has printed its help already)
            ctx = getattr(exc, "ctx", None)
            where = f"{ctx.command_path} --help" if ctx is not None else "simtrain --help"
            _fail(f"{message} (see {where})", status)
        sys.exit(status)
    except typer.Abort:
        sys.exit(130)
    except (KeyboardInterrupt, BrokenPipeError):
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the edge: one line, not a traceback
        if os.environ.get("SIMTRAIN_DEBUG"):
            raise
        err.print(f"[bold red]internal error:[/] {type(exc).__name__}: {exc} "
                  "(set SIMTRAIN_DEBUG=1 to see the traceback)", highlight=False)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()

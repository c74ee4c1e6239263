"""``simtrain sweep SWEEP.yaml``: run a parameter sweep (registered on the main CLI app)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

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
from simtrain.cli_options import QuietOption, ReportAssetsOption
from simtrain.errors import ScenarioError

if TYPE_CHECKING:
    from simtrain.study.run import SweepResult

EPILOG = (
    "Examples:\n\n"
    "  simtrain sweep scenarios/sweeps/quickstart_layers.yaml\n\n"
    "  simtrain sweep scenarios/sweeps/quickstart_layers.yaml --workers 2 --out reports/s1\n\n"
    "  simtrain sweep SWEEP.yaml --executor dask --scheduler tcp://host:8786\n\n"
    "  simtrain sweep SWEEP.yaml --executor dask          (a local Dask cluster)\n\n"
    "  simtrain sweep SWEEP.yaml --json --no-report\n\n"
    "An interrupted sweep (Ctrl-C, kill, crash) resumes where it stopped: run the same "
    "command again. Exit status: 0 ok (invalid points are results, not errors), 2 bad "
    "sweep file or options, 1 anything else, 130 interrupted."
)


def sweep(
    sweep_file: Annotated[Path, typer.Argument(help="sweep YAML: base scenario + axes")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="results folder "
                                             "(default: reports/SWEEP_NAME)")] = None,
    executor: Annotated[str, typer.Option(help="local (processes), dask or serial")] = "local",
    workers: Annotated[int | None, typer.Option("--workers", "-j", help="worker processes "
                                                "(default: all cores)")] = None,
    scheduler: Annotated[str | None, typer.Option(
        help="Dask scheduler address, e.g. tcp://host:8786 (default: a local cluster)")] = None,
    batch: Annotated[int | None, typer.Option("--batch-size", help="points per task "
                                              "(default: automatic)")] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="forget finished points and "
                                        "start over")] = False,
    no_report: Annotated[bool, typer.Option("--no-report", help="skip the HTML report")] = False,
    report_assets: ReportAssetsOption = "inline",
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
    quiet: QuietOption = False,
) -> None:
    """Run every point of a sweep; write results.parquet/.csv, journal.jsonl, report.html."""
    from simtrain.study.executors import make_executor
    from simtrain.study.journal import JournalBusy
    from simtrain.study.run import run_sweep
    from simtrain.study.spec import load_sweep

    err = Console(stderr=True)

    try:
        from simtrain.report.html import check_assets

        check_assets(report_assets)
        spec = load_sweep(sweep_file)
        if batch is not None and batch < 1:
            raise ValueError(f"--batch-size must be at least 1, got {batch}")
        if workers is not None and workers < 1:
            raise ValueError(f"--workers must be at least 1, got {workers}")
        runner = make_executor(executor, workers=workers, scheduler=scheduler)
    except (ScenarioError, ValueError) as exc:
        raise fail(str(exc).replace("\n", " "), 2) from None
    except (RuntimeError, OSError) as exc:  # dask missing, scheduler unreachable
        raise fail(str(exc).replace("\n", " "), 1) from None
    folder = out or Path("reports") / spec.name
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                        MofNCompleteColumn(), TextColumn("{task.fields[bad]}"),
                        TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                        console=err, disable=quiet or not err.is_terminal)
    state = {"bad": 0}

    def on_start(total: int, done: int) -> None:
        progress.add_task(spec.name, total=total, completed=done, bad="")

    def on_point(record: dict[str, Any]) -> None:
        if record["status"] != "ok":
            state["bad"] += 1
        progress.update(progress.task_ids[0], advance=1,
                        bad=f"{state['bad']} invalid" if state["bad"] else "")

    try:
        with progress:
            result = run_sweep(spec, folder, executor=runner, batch=batch, fresh=fresh,
                               report=not no_report, report_assets=report_assets,
                               on_start=on_start, on_point=on_point)
    except ScenarioError as exc:
        raise fail(str(exc), 2) from None
    except JournalBusy as exc:
        raise fail(str(exc), 1) from None
    except KeyboardInterrupt:
        raise fail(f"interrupted; finished points are kept in {folder / 'journal.jsonl'}: "
                   "run the same command again to resume", 130) from None
    except Exception as exc:  # a worker died, the scheduler went away, a disk filled up
        raise fail(f"{type(exc).__name__}: {exc}; finished points are kept in "
                   f"{folder / 'journal.jsonl'}: run the same command again to resume",
                   1) from None
    finally:
        runner.close()
    if as_json:
        sys.stdout.write(json.dumps(_as_json(result), indent=2, default=str) + "\n")
    elif not quiet:
        Console().print(_table(result))


def _brief(result: SweepResult, row: dict[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    metric = result.spec.objective.metric
    return {"index": row["index"], "point_id": row["point_id"],
            "values": {k: row[k] for k in result.spec.axes}, metric: row.get(metric)}


def _as_json(result: SweepResult) -> dict[str, Any]:
    spec = result.spec
    return {
        "sweep": spec.name, "points": len(spec), "ran": result.ran, "reused": result.reused,
        **result.counts, "wall_s": round(result.wall_s, 3),
        "objective": {"metric": spec.objective.metric, "goal": spec.objective.goal},
        "best": _brief(result, result.best), "worst": _brief(result, result.worst),
        "files": {k: str(v) for k, v in result.files.items()},
        "rows": result.rows,
    }


def _table(result: SweepResult) -> Table:
    spec, counts = result.spec, result.counts
    table = Table(title=f"simtrain sweep · {spec.name}", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row("points", f"{len(spec):,} ({result.ran:,} run now, {result.reused:,} "
                  "from the journal)")
    table.add_row("results", f"{counts['ok']:,} ok, {counts['invalid']:,} invalid, "
                  f"{counts['failed']:,} failed")
    table.add_row("wall time", f"{result.wall_s:.1f} s")
    metric = spec.objective.metric
    for label, row in (("best", result.best), ("worst", result.worst)):
        if row is not None:
            where = ", ".join(f"{k}={row[k]}" for k in spec.axes)
            table.add_row(f"{label} {metric}",
                          f"#{row['index']} {where}: {row.get(metric):.6g}")
    reasons = [r for r in result.rows if r["status"] != "ok"][:3]
    for r in reasons:
        table.add_row(f"{r['status']} #{r['index']}", str(r.get("error")))
    for name, path in result.files.items():
        table.add_row(name, str(path))
    return table


def register(app: typer.Typer) -> None:
    """Add the command to the main app."""
    app.command("sweep", epilog=EPILOG)(sweep)


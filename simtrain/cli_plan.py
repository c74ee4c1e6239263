"""``simtrain plan``: search the parallel plans of a training job (registered on the main app)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from simtrain.cli_errors import fail
from simtrain.cli_options import QuietOption, ReportAssetsOption
from simtrain.errors import ScenarioError

EPILOG = (
    "Examples:\n\n"
    "  simtrain plan --model llama3-70b --cluster dgx-h100 --nodes 128 --tokens 2T "
    "--seq-len 8192 --global-batch 1024\n\n"
    "  simtrain plan --model llama3-8b --cluster dgx-h100 --nodes 16,32,64 --tokens 15T "
    "--seq-len 8192 --global-batch-tokens 4M --top 3 --report reports/plan.html\n\n"
    "  simtrain plan PLAN.yaml --json\n\n"
    "A plan file has model, cluster (nodes: N or a list), training (tokens, seq_len, "
    "global_batch or global_batch_tokens) and an optional search section; flags override "
    "it (docs/planning.md). Exit status: 0 ok, 2 bad input, 1 anything else."
)

PHASES = {"check": "checking plans", "simulate": "simulating (upper bound)",
          "final": "final runs (flow network)"}


def plan(
    plan_file: Annotated[Path | None, typer.Argument(help="plan YAML (optional when the "
                                                     "flags say it all)")] = None,
    model: Annotated[str | None, typer.Option(help="model preset, e.g. llama3-70b")] = None,
    cluster: Annotated[str | None, typer.Option(help="cluster preset, e.g. dgx-h100")] = None,
    nodes: Annotated[str | None, typer.Option(help="node count, or several: 64,128")] = None,
    tokens: Annotated[str | None, typer.Option(help="tokens to train on, e.g. 2T")] = None,
    seq_len: Annotated[int | None, typer.Option("--seq-len", help="tokens per sequence")
                       ] = None,
    global_batch: Annotated[int | None, typer.Option(
        "--global-batch", help="sequences per optimizer step")] = None,
    global_batch_tokens: Annotated[str | None, typer.Option(
        "--global-batch-tokens", help="tokens per optimizer step, e.g. 4M")] = None,
    top: Annotated[int | None, typer.Option(help="plans to rank [default: 5]")] = None,
    final_network: Annotated[str | None, typer.Option(
        "--final-network", help="flow (contention) or analytic for the top plans' "
                                "final runs [default: flow]")] = None,
    final_top: Annotated[int | None, typer.Option(
        "--final-top", help="plans re-simulated with the final network [default: --top]")
                         ] = None,
    rank_by: Annotated[str | None, typer.Option(
        "--rank-by", help="time (time-to-train), cost, pareto (time vs cost vs memory "
                          "headroom) or p99 (jittered final steps; needs a variability "
                          "section) [default: time]")] = None,
    price: Annotated[float | None, typer.Option(
        "--price", help="price per GPU-hour, for the cost column")] = None,
    checkpoint_interval: Annotated[str | None, typer.Option(
        "--checkpoint-interval", help="seconds of work between checkpoints, e.g. 30min "
                                      "[default: Daly's optimum]")] = None,
    explain: Annotated[bool, typer.Option(
        "--explain", help="list the rejected candidates by reason, one example each")
                       ] = False,
    executor: Annotated[str, typer.Option(help="local (processes) or serial")] = "local",
    workers: Annotated[int | None, typer.Option("--workers", "-j", help="worker processes "
                                                "(default: all cores)")] = None,
    report: Annotated[Path | None, typer.Option(help="write an HTML report with the top "
                                                "plans' Gantt charts")] = None,
    charts: Annotated[int, typer.Option(help="Gantt charts in the report")] = 3,
    report_assets: ReportAssetsOption = "inline",
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
    quiet: QuietOption = False,
) -> None:
    """Search parallel plans (tp, pp, cp, dp, ep, ZeRO, micro batch, recompute, schedule)
    that fit in memory; rank them by throughput with time-to-train and GPU-hours."""
    from simtrain.study.executors import make_executor
    from simtrain.study.plan import plan_spec, search

    err = Console(stderr=True)

    try:
        data = _merge(plan_file, model=model, cluster=cluster, nodes=nodes, tokens=tokens,
                      seq_len=seq_len, global_batch=global_batch,
                      global_batch_tokens=global_batch_tokens, top=top,
                      final_network=final_network, final_top=final_top, rank_by=rank_by,
                      price_per_gpu_hour=price, checkpoint_interval=checkpoint_interval)
        if plan_file is not None and data is None:
            data = _read_plan(plan_file)
        try:
            spec = plan_spec(data or {}, name=plan_file.stem if plan_file else "plan")
        except ValueError as exc:
            if plan_file is None:
                raise
            raise _located(plan_file, str(exc)) from None
        if workers is not None and workers < 1:
            raise ValueError(f"--workers must be at least 1, got {workers}")
        if charts < 0:
            raise ValueError(f"--charts must be >= 0, got {charts}")
        from simtrain.report.html import check_assets

        check_assets(report_assets)
        if executor not in ("local", "serial"):
            raise ValueError(f"--executor must be local or serial, got {executor!r}")
    except (ScenarioError, ValueError) as exc:
        raise fail(str(exc).replace("\n", " "), 2) from None
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("eta"),
                        TimeRemainingColumn(), console=err,
                        disable=quiet or as_json or not err.is_terminal)
    tasks: dict[str, TaskID] = {}

    def on_progress(phase: str, done: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = progress.add_task(PHASES.get(phase, phase), total=total)
        progress.update(tasks[phase], completed=done, total=total)

    runner = make_executor(executor, workers=workers)
    try:
        with progress:
            result = search(spec, executor=runner, progress=on_progress,
                            keep=charts if report is not None else 0)
        if report is not None:
            from simtrain.study.plan_report import write_plan_report

            write_plan_report(result, report, charts=charts, assets=report_assets)
    except (ScenarioError, ValueError) as exc:
        raise fail(str(exc).replace("\n", " "), 2) from None
    except KeyboardInterrupt:
        raise fail("interrupted", 130) from None
    finally:
        runner.close()
    doc = result.as_json()
    if report is not None:
        doc["report"] = str(report)
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
        return
    # a pipe or file gets the table unwrapped; a terminal its own width
    out = Console(width=None if sys.stdout.isatty() else 240)
    if explain:
        out.print(_rejections(doc))
    if not result.ranked:
        raise fail(f"no plan fits: {result.why_nothing()}", 1)
    if quiet:
        return
    out.print(_table(doc))
    counts = doc["counts"]
    out.print(f"{counts['enumerated']:,} candidates: {counts['invalid']:,} invalid, "
              f"{counts['oom']:,} out of memory, {counts['pruned']:,} pruned by the bound, "
              f"{counts['simulated']:,} simulated ({counts['failed']:,} failed) in "
              f"{doc['search_wall_s']:.1f} s", highlight=False)
    if report is not None:
        out.print(f"report: {report}")


def _merge(plan_file: Path | None, **flags: Any) -> dict[str, Any] | None:
    """The plan mapping from the file and the flags (None: the file alone, unchanged)."""
    given = {k: v for k, v in flags.items() if v is not None}
    if plan_file is None and not given:
        raise ValueError("give a plan file or --model, --cluster, --nodes, --tokens, "
                         "--seq-len and --global-batch")
    if plan_file is not None and not given:
        return None
    data: dict[str, Any] = {}
    if plan_file is not None:
        data = _read_plan(plan_file)
    for section in ("model", "cluster", "training", "search"):
        data[section] = dict(data.get(section) or {})
    if "model" in given:
        data["model"] = {"preset": given["model"]}
        data.setdefault("name", given["model"])
    if "cluster" in given:
        data["cluster"] = {"preset": given["cluster"], "nodes": data["cluster"].get("nodes", 1)}
    if "nodes" in given:
        try:
            data["cluster"]["nodes"] = [int(n) for n in str(given["nodes"]).split(",")]
        except ValueError:
            raise ValueError(f"--nodes must be a count or a comma-separated list of counts, "
                             f"got {given['nodes']!r}") from None
    train = data["training"]
    for key in ("tokens", "seq_len"):
        if key in given:
            train[key] = given[key]
    if "global_batch" in given:
        train.pop("global_batch_tokens", None)
        train["global_batch"] = given["global_batch"]
    if "global_batch_tokens" in given:
        train.pop("global_batch", None)
        train["global_batch_tokens"] = given["global_batch_tokens"]
    for key in ("top", "final_network", "final_top", "rank_by"):
        if key in given:
            data["search"][key] = given[key]
    for key in ("price_per_gpu_hour", "checkpoint_interval"):
        if key in given:
            data["goodput"] = {**(data.get("goodput") or {}), key: given[key]}
    if not data["search"]:
        del data["search"]
    return data


_LINES: dict[str, dict[tuple[str | int, ...], int]] = {}  # plan file -> lines by key path


def _read_plan(path: Path) -> dict[str, Any]:
    """A plan file's mapping, read through the bounded YAML reader (lines kept for errors)."""
    from simtrain.yamlfile import read_file

    doc = read_file(path, "plan file")
    if not isinstance(doc.data, dict):
        raise ScenarioError("expected a mapping with model, cluster and training",
                            source=str(path), line=1)
    _LINES[str(path)] = doc.lines
    return doc.data


def _located(path: Path, message: str) -> ScenarioError:
    """A plan_spec error on ``path`` with the line of the key it names ("training.tokens: ...",
    "unknown key 'x'", "search.top must ..."), or of its section."""
    import re

    lines = _LINES.get(str(path), {})
    match = re.match(r"(?:unknown key '([^']+)'|([a-z_]+(?:\.[a-z_]+)*))", message)
    line = None
    if match:
        parts = tuple((match[1] or match[2]).split("."))
        for end in range(len(parts), 0, -1):
            if parts[:end] in lines:
                line = lines[parts[:end]]
                break
    return ScenarioError(message, source=str(path), line=line)


def _table(doc: dict[str, Any]) -> Table:
    from simtrain.study.plan_result import HEAD, format_rows, shown_columns

    table = Table(title=f"simtrain plan · {doc['plan']} · {doc['tokens']:.3g} tokens · "
                        f"ranked by {doc['rank_by']}")
    rows = format_rows(doc["ranked"])
    keep = shown_columns(rows)
    for i in keep:
        table.add_column(HEAD[i], justify="left" if i == 1 else "right")
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    return table


def _rejections(doc: dict[str, Any]) -> Table:
    table = Table(title="rejected candidates by reason")
    for head in ("reason", "field", "count", "example", "why"):
        table.add_column(head, justify="right" if head == "count" else "left")
    for r in doc["rejected"]:
        table.add_row(r["reason"], r["field"], f"{r['count']:,}", r["example"], r["message"])
    return table


def register(app: typer.Typer) -> None:
    """Add the command to the main app."""
    app.command("plan", epilog=EPILOG)(plan)

"""Run a sweep: expand points, skip those the journal has, run the rest, keep the table.

The journal (``journal.jsonl``) is the durable record; ``results.parquet`` and
``results.csv`` are rebuilt from it atomically at start, every ``table_every_s`` while
running, and at the end; ``report.html`` at the end. Rerunning an interrupted sweep into
the same folder runs only the points without a record (and those recorded as ``failed``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simtrain.errors import ScenarioError
from simtrain.study.executors import Executor, SerialExecutor, batch_size
from simtrain.study.journal import Journal
from simtrain.study.spec import Point, SweepSpec
from simtrain.study.table import build_rows, write_tables
from simtrain.study.worker import Task, relabel, run_batch

Progress = Callable[[dict[str, Any]], None]


@dataclass
class SweepResult:
    """What a sweep run left: rows (index order), counts, files and best/worst rows."""

    spec: SweepSpec
    columns: list[str]
    rows: list[dict[str, Any]]
    ran: int  # points simulated by this run
    reused: int  # points found in the journal
    wall_s: float
    files: dict[str, Path] = field(default_factory=dict)
    best: dict[str, Any] | None = None
    worst: dict[str, Any] | None = None

    @property
    def counts(self) -> dict[str, int]:
        out = {"ok": 0, "invalid": 0, "failed": 0}
        for row in self.rows:
            out[row["status"]] = out.get(row["status"], 0) + 1
        return out


def check_axes(spec: SweepSpec, first: Point) -> None:
    """Load the first point so a misspelt axis key fails now, with the loader's message.

    Only structural errors (unknown field, a value where a section is expected) raise; a
    first point that is merely invalid (impossible plan) is left for the sweep to record.
    """
    from simtrain.study.worker import load_point

    source = spec.base_path if spec.base_path is not None else spec.base
    try:
        load_point(source, first.overrides)
    except ScenarioError as exc:
        structural = exc.message.startswith("unknown field") or "not a section" in exc.message
        if not structural:
            return
        axis = next((k for k, _ in first.values
                     if exc.source.startswith(f"--set {k}=")
                     or (exc.field or "").startswith(k)), None)
        if axis is None:
            raise relabel(exc, spec.base_label) from None
        raise spec.error(axis, f"{exc.message}; fix the axis key (it is a dotted scenario "
                         "key, as for --set)") from None


def run_sweep(spec: SweepSpec, out: Path | str, *, executor: Executor | None = None,
              batch: int | None = None, fresh: bool = False, report: bool = True,
              report_assets: str = "inline",
              on_start: Callable[[int, int], None] | None = None,
              on_point: Progress | None = None, table_every_s: float = 2.0) -> SweepResult:
    """Run every point of ``spec`` not yet done in ``out``/journal.jsonl; return the table.

    Done means recorded as ``ok`` or ``invalid``; ``failed`` points run again.

    ``executor`` defaults to in-process serial execution (the CLI passes local processes).
    ``fresh`` discards an existing journal. ``on_start(total, already_done)`` and
    ``on_point(record)`` report progress. Raises ScenarioError for a bad axis key; points
    the scenario rejects are recorded as invalid, never raised. The executor is not closed.
    """
    t0 = time.perf_counter()
    out = Path(out)
    points = spec.points()
    check_axes(spec, points[0])
    out.mkdir(parents=True, exist_ok=True)
    journal_path = out / "journal.jsonl"
    executor = executor or SerialExecutor()
    with Journal(journal_path) as journal:
        if fresh:
            journal.reset()
        known = journal.latest()
        # "failed" (an unexpected exception) is retried: a fixed bug or a transient error;
        # "invalid" is a result and stays.
        todo = [p for p in points
                if p.point_id not in known or known[p.point_id]["status"] == "failed"]
        reused = len(points) - len(todo)
        if on_start is not None:
            on_start(len(points), reused)
        _write(points, journal, out)
        size = batch or batch_size(len(todo), executor.workers)
        batches = [todo[i:i + size] for i in range(0, len(todo), size)]
        args = [(spec.base, spec.base_label, [_task(p) for p in b]) for b in batches]
        last, every = time.monotonic(), table_every_s
        try:
            for records in executor.imap_unordered(run_batch, args):
                journal.append(records)
                for record in records:
                    if on_point is not None:
                        on_point(record)
                if time.monotonic() - last >= every:
                    start = time.monotonic()
                    _write(points, journal, out)
                    last = time.monotonic()
                    # big tables: keep rewriting them under ~10% of the run's time
                    every = max(table_every_s, 10 * (last - start))
        finally:
            columns, rows, tables = _write(points, journal, out)
    files = {"journal": journal_path, **tables}
    result = SweepResult(spec, columns, rows, ran=len(todo), reused=reused, wall_s=0.0,
                         files=files)
    result.best, result.worst = best_and_worst(spec, rows)
    if report:
        from simtrain.study.report import write_sweep_report

        files["report"] = write_sweep_report(result, out / "report.html", report_assets)
    result.wall_s = time.perf_counter() - t0
    return result


def best_and_worst(spec: SweepSpec, rows: Sequence[dict[str, Any]]
                   ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The ok rows with the best and worst objective value (ties: lowest index)."""
    metric, sign = spec.objective.metric, 1 if spec.objective.goal == "min" else -1
    scored = [(sign * float(r[metric]), r["index"], r) for r in rows
              if r["status"] == "ok" and isinstance(r.get(metric), int | float)]
    if not scored:
        return None, None
    best = min(scored, key=lambda t: (t[0], t[1]))[2]
    worst = min(scored, key=lambda t: (-t[0], t[1]))[2]
    return best, worst


def _task(point: Point) -> Task:
    return (point.index, point.point_id, point.as_dict(), point.overrides)


def _write(points: Sequence[Point], journal: Journal, out: Path
           ) -> tuple[list[str], list[dict[str, Any]], dict[str, Path]]:
    """Rebuild the tables from the journal; return (columns, rows, {kind: path})."""
    columns, rows = build_rows(points, journal.latest())
    parquet, csv = write_tables(columns, rows, out)
    return columns, rows, {"parquet": parquet, "csv": csv}

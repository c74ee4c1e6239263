"""Sweeps end to end: invalid points recorded, resume, executors agree, the report."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from simtrain.errors import ScenarioError
from simtrain.study import (
    DaskExecutor,
    LocalExecutor,
    SerialExecutor,
    SweepResult,
    load_sweep,
    run_sweep,
)
from simtrain.study.report import render_sweep_report
from simtrain.study.spec import SweepSpec

ROOT = Path(__file__).resolve().parents[2]


def small_spec(tmp_path: Path) -> SweepSpec:
    """6 points on the quick-start job; 3000 layers do not fit in 80 GB (2 invalid)."""
    sweep = tmp_path / "small.yaml"
    sweep.write_text(f"base: {ROOT / 'scenarios' / 'quickstart.yaml'}\naxes:\n"
                     "  model.num_layers: [1, 2, 3000]\n"
                     "  parallelism.ddp.bucket_cap_mb: [1, 25]\n")
    return load_sweep(sweep)


class CountingExecutor(SerialExecutor):
    """Serial, and remembers which point indices it was asked to run."""

    def __init__(self) -> None:
        self.ran: list[int] = []

    def imap_unordered(self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]]
                       ) -> Iterator[Any]:
        for a in args:
            self.ran.extend(task[0] for task in a[2])
            yield fn(*a)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> SweepResult:
    tmp = tmp_path_factory.mktemp("ref")
    return run_sweep(small_spec(tmp), tmp / "out", report=False)


def test_every_point_gets_a_row_and_invalid_points_say_why(reference: SweepResult) -> None:
    rows = reference.rows
    assert [r["index"] for r in rows] == list(range(6))
    assert reference.counts == {"ok": 4, "invalid": 2, "failed": 0}
    oom = [r for r in rows if r["status"] == "invalid"]
    assert [r["model.num_layers"] for r in oom] == [3000, 3000]
    assert all("out of memory" in r["error"] and r["step_time_s"] is None for r in oom)
    ok = rows[0]
    assert ok["error"] is None and ok["step_time_s"] > 0 and ok["num_gpus"] == 8
    # deeper model, slower step; the best point is the shallow one
    assert rows[2]["step_time_s"] > rows[0]["step_time_s"]
    assert reference.best is not None and reference.best["model.num_layers"] == 1
    assert reference.worst is not None and reference.worst["model.num_layers"] == 2
    table = pq.read_table(reference.files["parquet"])
    assert table.num_rows == 6 and table.column("status").to_pylist().count("invalid") == 2


def test_a_misspelt_axis_fails_before_running_with_the_loaders_hint(tmp_path: Path) -> None:
    sweep = tmp_path / "typo.yaml"
    sweep.write_text(f"base: {ROOT / 'scenarios' / 'quickstart.yaml'}\naxes:\n"
                     "  model.num_layers: [1]\n  parallelism.ddp.bucket_cap: [1, 25]\n")
    with pytest.raises(ScenarioError) as info:
        run_sweep(load_sweep(sweep), tmp_path / "out", executor=CountingExecutor())
    assert str(info.value).startswith(
        f"{sweep}:4: axis parallelism.ddp.bucket_cap: unknown field 'bucket_cap'; "
        "did you mean 'bucket_cap_mb'?")
    assert not (tmp_path / "out").exists()


def test_resume_runs_only_missing_points(tmp_path: Path, reference: SweepResult) -> None:
    spec = small_spec(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    lines = reference.files["journal"].read_text().splitlines(keepends=True)
    done = {r for r, line in enumerate(lines) if r % 2 == 0}  # what a crash left
    (out / "journal.jsonl").write_text("".join(lines[r] for r in sorted(done)) + '{"id": "x')
    counting = CountingExecutor()
    result = run_sweep(spec, out, executor=counting, report=False)
    finished = {int(line.split('"index": ')[1].split(",")[0]) for line in
                (lines[r] for r in done)}
    assert sorted(counting.ran) == sorted(set(range(6)) - finished)
    assert (result.ran, result.reused) == (6 - len(done), len(done))
    assert (out / "results.csv").read_bytes() == reference.files["csv"].read_bytes()
    assert len((out / "journal.jsonl").read_text().splitlines()) == 6
    again = CountingExecutor()
    run_sweep(spec, out, executor=again, report=False)
    assert again.ran == []
    # a point that failed (an unexpected exception, e.g. a bug since fixed) runs again
    last = (out / "journal.jsonl").read_text().splitlines()[-1]
    failed = last.replace('"status": "ok"', '"status": "failed"').replace(
        '"status": "invalid"', '"status": "failed"')
    with open(out / "journal.jsonl", "a") as f:
        f.write(failed + "\n")
    retry = CountingExecutor()
    run_sweep(spec, out, executor=retry, report=False)
    assert retry.ran == [json.loads(last)["index"]]
    assert (out / "results.csv").read_bytes() == reference.files["csv"].read_bytes()
    run_sweep(spec, out, executor=again, report=False, fresh=True)
    assert sorted(again.ran) == list(range(6))


def test_local_processes_and_dask_give_identical_tables(tmp_path: Path,
                                                       reference: SweepResult) -> None:
    spec = small_spec(tmp_path)
    local = LocalExecutor(2)
    try:
        by_local = run_sweep(spec, tmp_path / "local", executor=local, batch=1, report=False)
    finally:
        local.close()
    dask = DaskExecutor(None, workers=2)
    try:
        assert dask.workers == 2
        by_dask = run_sweep(spec, tmp_path / "dask", executor=dask, batch=2, report=False)
    finally:
        dask.close()
    # an existing scheduler, as with --scheduler tcp://host:8786 (here one in this process)
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster:
        remote = DaskExecutor(cluster.scheduler_address)
        try:
            by_address = run_sweep(spec, tmp_path / "address", executor=remote, report=False)
        finally:
            remote.close()
    ref_csv = reference.files["csv"].read_bytes()
    assert by_address.files["csv"].read_bytes() == ref_csv
    assert by_local.files["csv"].read_bytes() == ref_csv
    assert by_dask.files["csv"].read_bytes() == ref_csv
    ref = pq.read_table(reference.files["parquet"])
    assert pq.read_table(by_local.files["parquet"]).equals(ref)
    assert pq.read_table(by_dask.files["parquet"]).equals(ref)


def test_report_has_metric_charts_gantts_and_reasons(tmp_path: Path,
                                                     reference: SweepResult) -> None:
    html = render_sweep_report(reference)
    assert html == render_sweep_report(reference)  # deterministic
    for div in ("sweep-step_time_s", "sweep-mfu", "sweep-peak_memory_gib", "gantt-best",
                "gantt-worst"):
        assert f'id="{div}"' in html
    assert len(re.findall(r"plotly\.js v\d", html)) == 1 and "<script src=" not in html
    assert "out of memory" in html and "Best point (#0)" in html
    assert "Worst point (#3)" in html


def test_report_is_written_with_the_tables(tmp_path: Path, reference: SweepResult) -> None:
    spec = small_spec(tmp_path)
    out = tmp_path / "out"
    shutil.copytree(reference.files["journal"].parent, out)
    result = run_sweep(spec, out, executor=CountingExecutor())
    assert result.ran == 0 and result.files["report"].read_text().startswith("<!DOCTYPE html>")


def test_a_sweep_moves_one_job_of_a_shared_cluster(tmp_path: Path) -> None:
    # tests/jobs/test_shared_fabric.py's hand-derived case: job b on GPUs (1, 9) shares the
    # spine uplinks with job a and is slower than alone; on (1, 2) it crosses no shared
    # link, so its slowdown is exactly 1 and the objective picks it
    a = {"placement": [0, 8], "model": {"preset": "gpt2-small", "num_layers": 2},
         "training": {"global_batch_size": 2, "micro_batch_size": 1, "seq_len": 1024,
                      "dtype": "bf16"},
         "parallelism": {"ddp": {"overlap": False, "grad_dtype": "fp32"}}}
    base = {"name": "maxmin",
            "cluster": {"preset": "dgx-h100", "nodes": 2, "fabric": "fat-tree",
                        "nodes_per_leaf": 1, "oversubscription": 8},
            "comm": {"backend": "ideal", "algorithm": "ring"},
            "compute": {"comm_interference": 0},
            "jobs": {"a": a, "b": {**a, "placement": [1, 9]}}}
    spec = load_sweep({"base": base, "axes": {"jobs.b.placement": ["1,9", "1-2"]},
                       "objective": {"metric": "jobs.b.slowdown", "goal": "min"}})
    result = run_sweep(spec, tmp_path / "out")
    rows = {r["jobs.b.placement"]: r for r in result.rows}
    assert all(r["status"] == "ok" for r in rows.values())
    extra = 4 * 53_561_088 / 25e9 - 4 * 53_561_088 / 50e9  # 4.28488704 ms, as there
    crossing = rows["1,9"]
    assert crossing["jobs.b.step_time_s"] - crossing["jobs.b.step_time_alone_s"] == \
        pytest.approx(extra, rel=1e-6)
    assert rows["1-2"]["jobs.b.slowdown"] == 1.0
    assert rows["1-2"]["jobs.b.gpus"] == "1-2"
    html = (tmp_path / "out" / "report.html").read_text()
    assert "jobs.b.placement = 1-2" in html and "slowdown" in html

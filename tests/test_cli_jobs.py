"""``simtrain run`` of a scenario with jobs, and ``simtrain placements`` (the what-if)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from simtrain.cli import app

runner = CliRunner()

# Two tiny jobs on two DGX H100, one leaf each and one spine: both cross the spine.
TEXT = """\
name: tiny_pair
description: two tiny jobs
cluster: {preset: dgx-h100, nodes: 2, fabric: fat-tree, nodes_per_leaf: 1, oversubscription: 8}
sim: {granularity: stage}
jobs:
  a:
    placement: [0, 8]
    model: {preset: gpt2-small, num_layers: 1}
    training: {global_batch_size: 2, micro_batch_size: 1, seq_len: 256}
  b:
    placement: [1, 9]
    model: {preset: gpt2-small, num_layers: 1}
    training: {global_batch_size: 2, micro_batch_size: 1, seq_len: 256}
"""


def _write(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_pair.yaml"
    path.write_text(TEXT, encoding="utf-8")
    return path


def test_run_prints_per_job_json_and_a_report_grouped_by_job(tmp_path):
    report = tmp_path / "r.html"
    result = runner.invoke(app, ["run", str(_write(tmp_path)), "--json", "--report",
                                 str(report), "--trace", str(tmp_path / "t.json")])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert list(summary["jobs"]) == ["a", "b"]
    assert summary["jobs"]["a"]["gpus"] == "0,8" and summary["jobs"]["b"]["slowdown"] >= 1
    assert summary["num_gpus"] == 4 and summary["fidelity"] == "explicit"
    html = report.read_text(encoding="utf-8")
    assert '<section id="jobs">' in html and "a \\u00b7 node0" in html
    assert (tmp_path / "t.json").is_file()


def test_run_table(tmp_path):
    result = runner.invoke(app, ["run", str(_write(tmp_path)), "--no-report"])
    assert result.exit_code == 0, result.output
    assert "slowdown" in result.stdout and "links shared by jobs" in result.stdout


def test_placements_runs_each_try(tmp_path):
    result = runner.invoke(app, ["placements", str(_write(tmp_path)), "--json", "--try",
                                 "as written", "--try", "pack", "--try", "a=0-1;b=8-9"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["placement"] for r in rows] == ["as written", "pack", "a=0-1;b=8-9"]
    assert rows[1]["jobs"]["a"]["gpus"] == "0-1" and rows[1]["jobs"]["b"]["gpus"] == "2-3"
    assert rows[1]["shared_links"] == 0 and rows[0]["shared_links"] > 0
    table = runner.invoke(app, ["placements", str(_write(tmp_path)), "--try", "pack"])
    assert table.exit_code == 0 and "slowdown" in table.stdout


def test_placements_bad_try_is_exit_2(tmp_path):
    result = runner.invoke(app, ["placements", str(_write(tmp_path)), "--try", "c=pack"])
    assert result.exit_code == 2
    assert "with a job of: a, b" in result.output

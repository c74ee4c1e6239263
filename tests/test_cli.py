"""The command line: the README's main job, JSON output, and exit status 2 on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simtrain.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()

REQUIRED_KEYS = {"num_gpus", "step_time_s", "tokens_per_s", "model_flops_per_step", "mfu",
                 "compute_s", "comm_s", "exposed_comm_s"}


def test_run_quickstart_prints_json_and_writes_an_offline_report(tmp_path):
    report = tmp_path / "q.html"
    result = runner.invoke(app, ["run", str(ROOT / "scenarios/quickstart.yaml"), "--json",
                                 "--report", str(report)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert REQUIRED_KEYS <= summary.keys()
    assert summary["num_gpus"] == 8 and summary["step_time_s"] > 0
    html = report.read_text()
    assert "<script src=" not in html and "quickstart" in html


def test_run_table_output(tmp_path):
    result = runner.invoke(app, ["run", str(ROOT / "scenarios/quickstart.yaml"),
                                 "--report", str(tmp_path / "r.html")])
    assert result.exit_code == 0
    assert "step time" in result.stdout and "exposed communication" in result.stdout


@pytest.mark.parametrize(("text", "expect"), [
    ("cluster: {preset: dgx-a100}\nmodel: {preset: tiny-gpt}\ntraining:\n  global_batch_sise: 8\n",
     ":4: training.global_batch_sise: unknown field"),
    ("cluster:\n  preset: dgx-a100\n  nic_bandwidth: 10 furlongs\nmodel: {preset: tiny-gpt}\n"
     "training: {global_batch_size: 8}\n", ":3: cluster.nic_bandwidth: expected a bandwidth"),
    ("cluster: {preset: dgx-a100, nodes: 2}\nmodel: {preset: tiny-gpt}\n"
     "training: {global_batch_size: 8}\nparallelism:\n  dp: 8\n",
     ":5: parallelism.dp: dp=8 does not match the cluster's 16 GPUs"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, text, expect):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["run", str(path), "--no-report"])
    assert result.exit_code == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output
    assert f"{path}{expect}" in lines[0]


def test_presets_command_lists_names():
    result = runner.invoke(app, ["presets"])
    assert result.exit_code == 0 and "dgx-h100" in result.stdout and "llama3-70b" in result.stdout

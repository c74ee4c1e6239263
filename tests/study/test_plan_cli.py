"""``simtrain plan`` flags for goodput, ranking and explanations; the report's new sections."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from simtrain.cli_plan import register

app = typer.Typer()
register(app)


@app.callback()
def _root() -> None:
    """Keep ``plan`` a subcommand, as on the main app."""


TINY = ["plan", "--model", "tiny-gpt", "--cluster", "dgx-a100", "--nodes", "1",
        "--tokens", "1G", "--seq-len", "512", "--global-batch", "16", "--top", "2",
        "--final-network", "analytic", "--executor", "serial"]


def test_price_gives_a_cost_column_and_explain_lists_rejections() -> None:
    res = CliRunner().invoke(app, [*TINY, "--price", "2.5", "--explain"])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "rejected candidates by reason" in out and "batch" in out
    assert "search step" in out and "final step" in out and "goodput" in out
    assert "cost" in out and "ranked by time" in out


def test_json_has_goodput_rejections_and_both_steps() -> None:
    res = CliRunner().invoke(app, [*TINY, "--json", "--rank-by", "cost", "--final-top",
                                   "1", "--checkpoint-interval", "1h"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["rank_by"] == "cost" and doc["final_top"] == 1
    row = doc["ranked"][0]
    assert row["checkpoint_interval_s"] == 3600.0 and 0 < row["goodput"] <= 1
    assert row["search_step_time_s"] == row["step_time_s"]  # analytic final network
    assert row["effective_gpu_hours"] >= row["gpu_hours"]
    assert doc["rejected"] and all(r["count"] > 0 and r["example"] for r in doc["rejected"])


@pytest.mark.parametrize("args, message", [
    (["--price", "-1"], "price_per_gpu_hour must be a finite number >= 0"),
    (["--checkpoint-interval", "1us"], "shorter than one step"),
    (["--checkpoint-interval", "soon"], "checkpoint_interval"),
    (["--rank-by", "vibes"], "rank_by must be one of"),
    (["--final-top", "0"], "final_top"),
])
def test_bad_goodput_and_ranking_flags_exit_2(args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, [*TINY, *args])
    assert res.exit_code == 2, res.output
    assert message in res.output.replace("\n", "")
    assert "Traceback" not in res.output


def test_negative_failure_rate_in_a_plan_file_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("model: {preset: tiny-gpt}\ncluster: {preset: dgx-a100, nodes: 1}\n"
                    "training: {tokens: 1G, seq_len: 512, global_batch: 16}\n"
                    "goodput: {failures_per_hour: {nic: -0.1}}\n")
    res = CliRunner().invoke(app, ["plan", str(path), "--executor", "serial"])
    assert res.exit_code == 2, res.output
    assert "p.yaml" in res.output and "failures_per_hour.nic" in res.output


def test_report_has_goodput_rejections_and_tradeoff(tmp_path: Path) -> None:
    report = tmp_path / "plan.html"
    res = CliRunner().invoke(app, [*TINY, "--json", "--report", str(report), "--charts",
                                   "1", "--price", "3"])
    assert res.exit_code == 0, res.output
    text = report.read_text()
    for part in ('id="goodput"', 'id="rejected"', 'id="tradeoff"', "Pareto front",
                 "search step", "final step", "Daly", "gantt-plan-1"):
        assert part in text, part


def test_quiet_prints_nothing_and_external_assets_sit_beside_the_report(tmp_path: Path) -> None:
    from simtrain.report.html import plotly_asset_name

    report = tmp_path / "plan.html"
    res = CliRunner().invoke(app, [*TINY, "-q", "--report", str(report), "--charts", "1",
                                   "--report-assets", "external"])
    assert res.exit_code == 0, res.output
    assert res.stdout == ""
    assert f'src="{plotly_asset_name()}"' in report.read_text(encoding="utf-8")
    assert (tmp_path / plotly_asset_name()).is_file()
    bad = CliRunner().invoke(app, [*TINY, "--report-assets", "cdn"])
    assert bad.exit_code == 2 and "got 'cdn'" in bad.output


def test_rank_by_p99_jitters_the_final_runs_and_ranks_by_their_tail(tmp_path: Path) -> None:
    # Start delays of mean 2 ms against steps of a few ms: each final plan gets 3 jittered
    # steps, its p99 is at least its simulated step, and the final order follows the p99.
    path = tmp_path / "p.yaml"
    path.write_text("model: {preset: tiny-gpt}\ncluster: {preset: dgx-a100, nodes: 1}\n"
                    "training: {tokens: 1G, seq_len: 512, global_batch: 16}\n"
                    "variability: {sigma: 0.0, delay_s: 0.002, steps: 3, seed: 1}\n"
                    "search: {top: 3, final_network: analytic, zero: [1], recompute: [none],"
                    " rank_by: p99}\n")
    res = CliRunner().invoke(app, ["plan", str(path), "--executor", "serial", "--json"])
    assert res.exit_code == 0, res.output
    ranked = json.loads(res.stdout)["ranked"]
    p99 = [r["p99_step_s"] for r in ranked]
    assert all(p is not None for p in p99) and p99 == sorted(p99)
    assert all(r["p99_step_s"] >= r["p50_step_s"] >= r["step_time_s"] for r in ranked)
    table = CliRunner().invoke(app, ["plan", str(path), "--executor", "serial"])
    assert "p99 step" in table.stdout


@pytest.mark.parametrize("extra, message", [
    ("search: {rank_by: p99}\n", "add a variability section"),
    ("variability: {steps: 0}\n", "variability.steps"),
    ("variability: {shake: 1}\n", "variability.shake"),
])
def test_bad_variability_in_a_plan_exits_2(tmp_path: Path, extra: str, message: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("model: {preset: tiny-gpt}\ncluster: {preset: dgx-a100, nodes: 1}\n"
                    "training: {tokens: 1G, seq_len: 512, global_batch: 16}\n" + extra)
    res = CliRunner().invoke(app, ["plan", str(path), "--executor", "serial"])
    assert res.exit_code == 2 and message in res.output, res.output

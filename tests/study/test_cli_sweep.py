"""``simtrain sweep``: JSON output, exit codes, messages."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from simtrain.cli_sweep import register

ROOT = Path(__file__).resolve().parents[2]
app = typer.Typer()
register(app)


@app.callback()
def _root() -> None:
    """Keep ``sweep`` a subcommand, as on the main app."""


def _sweep(tmp_path: Path, axes: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"base: {ROOT / 'scenarios' / 'quickstart.yaml'}\naxes:\n{axes}")
    return path


def test_json_output_counts_rows_and_files(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path, "  model.num_layers: [1, 3000]\n")
    result = CliRunner().invoke(app, ["sweep", str(sweep), "--out", str(tmp_path / "o"),
                                      "--executor", "serial", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (doc["points"], doc["ok"], doc["invalid"], doc["ran"]) == (2, 1, 1, 2)
    assert doc["best"]["values"] == {"model.num_layers": 1}
    assert doc["rows"][1]["status"] == "invalid" and "out of memory" in doc["rows"][1]["error"]
    assert set(doc["files"]) == {"journal", "parquet", "csv", "report"}
    assert Path(doc["files"]["report"]).exists()


def test_bad_sweep_exits_2_with_one_line(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path, "  model.num_layer: [1, 2]\n")
    result = CliRunner().invoke(app, ["sweep", str(sweep), "--executor", "serial",
                                      "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "axis model.num_layer: unknown field 'num_layer'; did you mean 'num_layers'?" \
        in result.output.replace("\n", "")


def test_bad_options_exit_2(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path, "  model.num_layers: [1]\n")
    for args, words in ((["--executor", "slurm"], "unknown executor 'slurm'"),
                        (["--scheduler", "tcp://x:1"], "--scheduler needs --executor dask"),
                        (["--batch-size", "0"], "--batch-size must be at least 1")):
        result = CliRunner().invoke(app, ["sweep", str(sweep), *args])
        assert result.exit_code == 2 and words in result.output, result.output


def test_quiet_prints_nothing_and_external_assets_sit_beside_the_report(tmp_path: Path) -> None:
    from simtrain.report.html import plotly_asset_name

    sweep = _sweep(tmp_path, "  model.num_layers: [1, 2]\n")
    out = tmp_path / "o"
    result = CliRunner().invoke(app, ["sweep", str(sweep), "--out", str(out), "--executor",
                                      "serial", "-q", "--report-assets", "external"])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    html = (out / "report.html").read_text(encoding="utf-8")
    assert f'src="{plotly_asset_name()}"' in html and "plotly.js v" not in html
    assert (out / plotly_asset_name()).is_file()
    bad = CliRunner().invoke(app, ["sweep", str(sweep), "--out", str(tmp_path / "b"),
                                   "--executor", "serial", "--report-assets", "cdn"])
    assert bad.exit_code == 2 and "got 'cdn'" in bad.output
    assert not (tmp_path / "b").exists()


def test_a_sweep_ranks_by_the_p99_of_jittered_steps(tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text("cluster: {preset: dgx-a100, nodes: 1}\nmodel: {preset: tiny-gpt}\n"
                    "training: {global_batch_size: 8, micro_batch_size: 1, seq_len: 512}\n"
                    "sim: {granularity: layer, network: analytic,\n"
                    "      variability: {sigma: 0.05, delay_s: 0.001, steps: 2, seed: 4}}\n")
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"base: {base}\naxes:\n  model.num_layers: [1, 2]\n"
                     "objective: {metric: variability.p99_step_s, goal: min}\n")
    result = CliRunner().invoke(app, ["sweep", str(sweep), "--out", str(tmp_path / "o"),
                                      "--executor", "serial", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    p99 = [r["variability.p99_step_s"] for r in doc["rows"]]
    assert all(p > 0 for p in p99)
    # the best point is the one with the lower p99 (rows are in grid order: 1 then 2 layers)
    assert doc["best"]["values"] == {"model.num_layers": 1 if p99[0] <= p99[1] else 2}

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


def test_run_writes_a_trace(tmp_path):
    trace = tmp_path / "step.json.gz"
    result = runner.invoke(app, ["run", str(ROOT / "scenarios/quickstart.yaml"), "--no-report",
                                 "--trace", str(trace), "--quiet", "--set",
                                 "sim.fidelity=explicit"])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    import gzip

    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert sum(e["name"] == "process_name" for e in events) == 8


def _bucket_variant(tmp_path: Path, cap: int) -> Path:
    text = (ROOT / "scenarios/quickstart.yaml").read_text()
    path = tmp_path / f"cap{cap}.yaml"
    path.write_text(text.replace("name: quickstart", f"name: cap{cap}")
                    .replace("bucket_cap_mb: 25", f"bucket_cap_mb: {cap}"))
    return path


def test_compare_reports_the_step_time_difference(tmp_path):
    a, b = _bucket_variant(tmp_path, 25), _bucket_variant(tmp_path, 1)
    report = tmp_path / "cmp.html"
    result = runner.invoke(app, ["compare", str(a), str(b), "--json", "--report", str(report)])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["scenarios"] == ["cap25", "cap1"]
    s0, s1 = (s["step_time_s"] for s in out["summaries"])
    assert s0 != s1
    step = out["differences"]["step_time_s"]
    assert step[1]["delta"] == pytest.approx(s1 - s0)
    assert step[1]["relative"] == pytest.approx((s1 - s0) / s0)
    html = report.read_text()
    assert 'id="gantt-0"' in html and 'id="gantt-1"' in html and "cap1" in html


def test_compare_table_and_set_applies_to_all(tmp_path):
    a, b = _bucket_variant(tmp_path, 25), _bucket_variant(tmp_path, 100)
    result = runner.invoke(app, ["compare", str(a), str(b), "--no-report",
                                 "--set", "training.micro_batch_size=4"])
    assert result.exit_code == 0, result.output
    assert "step time" in result.stdout and "Δ cap100" in result.stdout


def test_compare_bad_input_exits_2(tmp_path):
    result = runner.invoke(app, ["compare", str(ROOT / "scenarios/quickstart.yaml"),
                                 str(tmp_path / "missing.yaml"), "--no-report"])
    assert result.exit_code == 2
    result = runner.invoke(app, ["compare", str(ROOT / "scenarios/quickstart.yaml")])
    assert result.exit_code == 2 and "at least two" in result.stderr


def test_topology_preset_and_scenario(tmp_path):
    result = runner.invoke(app, ["topology", "dgx-h100", "--nodes", "2", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["totals"]["gpus"] == 16
    assert {r["kind"] for r in out["links"]} >= {"nvlink", "ib"}
    report = tmp_path / "topo.html"
    result = runner.invoke(app, ["topology", str(ROOT / "scenarios/custom_topology.yaml"),
                                 "--report", str(report)])
    assert result.exit_code == 0, result.output
    assert "nvlink" in result.stdout and "100.0 GB/s" in result.stdout
    assert 'id="topology-chart"' in report.read_text()


def test_topology_unknown_preset_exits_2():
    result = runner.invoke(app, ["topology", "dgx-z900"])
    assert result.exit_code == 2
    assert "dgx-h100" in result.stderr


def test_help_has_examples():
    for command in ("run", "compare", "topology"):
        result = runner.invoke(app, [command, "--help"])
        assert result.exit_code == 0 and "Examples" in result.stdout, command


def test_run_report_header_names_the_scenario(tmp_path):
    report = tmp_path / "r.html"
    result = runner.invoke(app, ["run", str(ROOT / "scenarios/quickstart.yaml"), "-q",
                                 "--report", str(report)])
    assert result.exit_code == 0 and result.stdout == ""
    html = report.read_text()
    assert 'class="subtitle">GPT-2 small' in html and "8 × a100-80gb in 1 server," in html
    for section in ('id="gantt-chart"', 'id="critical-path-table"', 'id="topology-chart"',
                    'id="memory-chart"'):
        assert section in html, section


def test_presets_json_lists_and_quiet_prints_nothing():
    result = runner.invoke(app, ["presets", "--json"])
    assert result.exit_code == 0, result.output
    lists = json.loads(result.stdout)
    assert set(lists) == {"clusters", "models", "gpus"}
    assert "dgx-h100" in lists["clusters"] and "llama3-70b" in lists["models"]
    quiet = runner.invoke(app, ["presets", "--quiet"])
    assert quiet.exit_code == 0 and quiet.stdout == ""


def test_every_command_has_json_and_quiet():
    # The README promises "--json and --quiet for scripts" on every command.
    import typer.main

    group = typer.main.get_command(app)
    missing = {name: flags for name, cmd in group.commands.items()  # type: ignore[attr-defined]
               if (flags := {"--json", "--quiet"} - {o for p in cmd.params for o in p.opts})}
    assert missing == {}


def test_report_subtitle_says_when_set_changed_the_described_scenario(tmp_path):
    report = tmp_path / "r.html"
    result = runner.invoke(app, ["run", str(ROOT / "scenarios/quickstart.yaml"), "-q",
                                 "--set", "cluster.preset=dgx-h100", "--report", str(report)])
    assert result.exit_code == 0, result.output
    html = report.read_text()
    # The file says "on one DGX A100"; the run is on H100s, and the subtitle says both.
    assert "this run changed it with --set cluster.preset=dgx-h100" in html
    assert "ran: 8 × h100-sxm in 1 server," in html and "1 servers" not in html
    plain = tmp_path / "p.html"
    runner.invoke(app, ["run", str(ROOT / "scenarios/quickstart.yaml"), "-q", "--report",
                        str(plain)])
    assert "changed it with" not in plain.read_text()


def test_topology_says_1_server_not_1_servers():
    result = runner.invoke(app, ["topology", "dgx-a100"])
    assert result.exit_code == 0 and "in 1 server " in result.stdout

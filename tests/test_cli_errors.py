"""Error paths of the command line: a deadlocked run still writes its report."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from simtrain.cli import app

BASE = Path(__file__).parent / "bad_inputs" / "files" / "base.yaml"


def test_a_deadlocked_run_exits_1_and_writes_the_step_up_to_the_hang(tmp_path: Path) -> None:
    report = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["run", str(BASE), "--set", "sim.hangs={3: 0us}",
                                      "--report", str(report), "-q"])
    assert result.exit_code == 1
    message = " ".join(result.output.split())
    assert "rank 3 stopped issuing work" in message and str(report) in message
    html = report.read_text()
    assert "deadlocked" in html  # the title says so
    assert '"name":"hung"' in html and '"name":"blocked"' in html  # marked in the Gantt


def test_no_report_means_no_report_even_on_deadlock(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", str(BASE), "--set", "sim.hangs={3: 0us}",
                                      "--no-report", "-q"])
    assert result.exit_code == 1 and "report of the step" not in result.output

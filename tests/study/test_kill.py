"""A sweep killed with SIGKILL mid-run resumes: only unfinished points run, none is lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from simtrain.study import load_sweep, run_sweep

ROOT = Path(__file__).resolve().parents[2]
POINTS = 16


def _command(sweep: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "simtrain.cli", "sweep", str(sweep), "--out", str(out),
            "--executor", "local", "--workers", "1", "--batch-size", "1", "--no-report",
            "--quiet", *extra]


def test_sigkill_midway_then_resume_completes_the_table(tmp_path: Path) -> None:
    sweep = tmp_path / "layers.yaml"
    sweep.write_text(f"base: {ROOT / 'scenarios' / 'quickstart.yaml'}\naxes:\n"
                     f"  model.num_layers: {{start: 10, stop: {9 + POINTS}, step: 1}}\n")
    out = tmp_path / "out"
    journal = out / "journal.jsonl"
    proc = subprocess.Popen(_command(sweep, out), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and journal.read_bytes().count(b"\n") >= 3:
            break
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its worker processes, no cleanup
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
    survived = journal.read_bytes().count(b"\n")  # complete records; a torn tail is dropped
    assert 3 <= survived < POINTS, "the sweep was not killed midway"

    again = subprocess.run(_command(sweep, out, "--json"), capture_output=True, text=True,
                           timeout=120, check=True)
    report = json.loads(again.stdout)
    assert (report["reused"], report["ran"]) == (survived, POINTS - survived)
    assert report["ok"] == POINTS
    ids = [json.loads(line)["id"] for line in journal.read_text().splitlines()]
    assert len(ids) == POINTS == len(set(ids))  # each point simulated exactly once overall

    reference = run_sweep(load_sweep(sweep), tmp_path / "reference", report=False)
    assert (out / "results.csv").read_bytes() == reference.files["csv"].read_bytes()

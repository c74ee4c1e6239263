"""Golden summaries: every bundled scenario's key numbers, pinned.

A change that moves any of them fails here with a table of what moved. When the move is
intended, regenerate with ``SIMTRAIN_UPDATE_GOLDEN=1 python3 -m pytest tests/test_golden.py``
and say why in the commit message. The simulation is deterministic, so the tolerance only
absorbs floating-point summation order across platforms (relative 1e-6).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from simtrain import simulate
from simtrain.jobs import is_jobs_file, load_jobs, simulate_jobs

ROOT = Path(__file__).resolve().parents[1] / "scenarios"
GOLDEN = Path(__file__).resolve().parent / "golden"
SCENARIOS = sorted(ROOT.glob("*.yaml"))
REL = 1e-6
# The numbers a user reads first (the summary card); each one pinned.
FIELDS = ("step_time_s", "tokens_per_s", "mfu", "hfu", "compute_s", "comm_s",
          "exposed_comm_s", "bubble_fraction", "peak_memory_gib", "tasks")


# Per job of a scenario with jobs (simtrain.jobs): its numbers together and alone.
JOB_FIELDS = ("step_time_s", "step_time_alone_s", "slowdown", "mfu", "exposed_comm_s",
              "peak_memory_gib", "tasks")


def _pinned_jobs(summary: dict[str, Any]) -> dict[str, Any]:
    return {"step_time_s": summary["step_time_s"], "shared_links": summary["shared_links"],
            "tasks": summary["tasks"],
            "jobs": {name: {k: job[k] for k in JOB_FIELDS}
                     for name, job in summary["jobs"].items()}}


def _pinned(summary: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: summary[k] for k in FIELDS}
    out["exposed_comm_by_kind"] = dict(sorted(summary["exposed_comm_by_kind"].items()))
    out["memory_breakdown"] = dict(sorted(summary["memory_breakdown"].items()))
    return out


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def _diff(want: dict[str, Any], got: dict[str, Any]) -> list[str]:
    w, g = _flat(want), _flat(got)
    rows = []
    for key in sorted(set(w) | set(g)):
        a, b = w.get(key), g.get(key)
        if a is None or b is None:
            rows.append(f"  {key:32s} golden={a!r:>14} now={b!r:>14}  (added or removed)")
        elif not math.isclose(a, b, rel_tol=REL, abs_tol=1e-12):
            change = f"{(b - a) / a:+.3%}" if a else "new"
            rows.append(f"  {key:32s} golden={a:>14.6g} now={b:>14.6g}  {change}")
    return rows


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_summary_matches_golden(path: Path) -> None:
    got = (_pinned_jobs(simulate_jobs(load_jobs(path)).summary) if is_jobs_file(path)
           else _pinned(simulate(path).summary))
    file = GOLDEN / f"{path.stem}.json"
    if os.environ.get("SIMTRAIN_UPDATE_GOLDEN"):
        file.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert file.exists(), f"no golden summary for {path.name}; run with SIMTRAIN_UPDATE_GOLDEN=1"
    rows = _diff(json.loads(file.read_text()), got)
    assert not rows, f"{path.name} moved from its golden summary:\n" + "\n".join(rows)


def test_diff_names_every_moved_number() -> None:
    # A 10% move in one field and a vanished key must both show up in the table.
    want = {"step_time_s": 1.0, "memory_breakdown": {"weights": 2.0}, "mfu": 0.5}
    got = {"step_time_s": 1.1, "memory_breakdown": {}, "mfu": 0.5}
    rows = _diff(want, got)
    assert len(rows) == 2
    assert "+10.000%" in rows[1] and "step_time_s" in rows[1]
    assert "memory_breakdown.weights" in rows[0]

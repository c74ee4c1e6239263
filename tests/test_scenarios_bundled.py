"""Every bundled scenario loads and simulates (golden smoke test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simtrain import simulate

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_bundled_scenario_runs(path):
    summary = simulate(path).summary
    assert summary["step_time_s"] > 0
    assert 0 < summary["mfu"] < 1
    assert summary["exposed_comm_s"] <= summary["comm_s"] + 1e-12


def test_pcie_server_is_slower_than_nvswitch_for_the_same_job():
    root = SCENARIOS[0].parent
    nvswitch = simulate(root / "ddp_buckets.yaml").summary
    pcie = simulate(root / "ddp_buckets_pcie.yaml").summary
    assert pcie["comm_s"] > 3 * nvswitch["comm_s"]
    assert pcie["step_time_s"] > nvswitch["step_time_s"]

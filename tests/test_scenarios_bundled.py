"""Every bundled scenario loads and simulates (golden smoke test).

scenarios/large/ (GPT-3 175B on 1,024 GPUs, Llama 3 405B on 16,384) is not run here: it
takes minutes; see the scenario files for how to run it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest

from simtrain import simulate
from simtrain.jobs import is_jobs_file

ROOT = Path(__file__).resolve().parents[1] / "scenarios"
# Scenarios with jobs have their own summary (tests/jobs, tests/test_golden.py).
SCENARIOS = sorted(p for p in ROOT.glob("*.yaml") if not is_jobs_file(p))


@cache
def _summary(name: str) -> dict[str, Any]:
    return simulate(ROOT / f"{name}.yaml").summary


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_bundled_scenario_runs(path):
    summary = _summary(path.stem)
    assert summary["step_time_s"] > 0
    assert 0 < summary["mfu"] < 1
    assert summary["mfu"] <= summary["hfu"] * 1.01
    assert summary["exposed_comm_s"] <= summary["comm_s"] + 1e-12
    assert 0 < summary["peak_memory_gib"] < 80
    assert 0 <= summary["bubble_fraction"] < 1


def test_pcie_server_is_slower_than_nvswitch_for_the_same_job():
    nvswitch = _summary("ddp_buckets")
    pcie = _summary("ddp_buckets_pcie")
    assert pcie["comm_s"] > 3 * nvswitch["comm_s"]
    assert pcie["step_time_s"] > nvswitch["step_time_s"]


def test_pipeline_schedules_trade_bubble_and_memory():
    # p = 4, m = 8: GPipe and 1F1B share the (p - 1)/(m + p - 1) = 3/11 bubble; GPipe keeps
    # all 8 microbatches in flight, 1F1B at most 4; interleaving (v = 2) shrinks the bubble.
    gpipe, one, inter = (_summary(f"pp_{k}") for k in ("gpipe", "1f1b", "interleaved"))
    assert gpipe["step_time_s"] == pytest.approx(one["step_time_s"], rel=0.02)
    assert one["bubble_fraction"] == pytest.approx(3 / 11, abs=0.05)
    assert inter["bubble_fraction"] < 0.85 * one["bubble_fraction"]
    assert gpipe["memory_breakdown"]["activations"] == pytest.approx(
        2 * one["memory_breakdown"]["activations"], rel=0.05)


def test_capability_scenarios_show_their_communication():
    assert _summary("tp_sp_node")["exposed_comm_by_kind"]["tp_comm"] > 0
    assert _summary("moe_mixtral")["exposed_comm_by_kind"]["ep_comm"] > 0
    assert _summary("moe_deepseek")["exposed_comm_by_kind"]["ep_comm"] > 0
    cp = _summary("cp_128k")
    assert cp["exposed_comm_by_kind"].get("cp_comm", 0.0) < 0.01 * cp["step_time_s"]
    fsdp = _summary("fsdp_zero3")
    assert fsdp["memory_breakdown"]["weights"] < 1.5  # 16 GB of bf16 weights / 16


def test_ulysses_and_hsdp_scenarios_show_their_knobs():
    # Ulysses' all-to-alls are not overlapped with attention (ring's passes are).
    assert _summary("cp_ulysses")["exposed_comm_by_kind"]["cp_comm"] > 0
    hsdp = _summary("fsdp_hsdp")["memory_breakdown"]
    # 8.03e9 bf16 parameters sharded over the 8 GPUs of a node: 16.06 GB / 8 = 1.87 GiB;
    # kept gathered (no reshard after forward): the whole 14.96 GiB unsharded.
    assert 1.8 < hsdp["weights"] < 1.95 and hsdp["comm_buffers"] == pytest.approx(
        8 * hsdp["weights"], rel=1e-6)

"""Hybrid fidelity agrees with explicit simulation: same step time (0.5%), same hang."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from simtrain import ScenarioError, load_scenario, simulate
from simtrain.engine.sim import SimulationDeadlock

ROOT = Path(__file__).resolve().parents[1]
SLOW = "{delay: 1ms, slowdown: 1.3}"
# Two data-parallel replicas and tp 2 leave nothing to mirror: twice the nodes (and batch)
# give the pipeline scenarios replicas that stay symmetric.
# Stage granularity keeps the explicit runs short.
WIDER = ["cluster.nodes=4", "training.global_batch_size=32", "sim.granularity=stage"]
STAGE = "sim.granularity=stage"
TINY_MOE: dict[str, Any] = {
    "cluster": {"preset": "dgx-h100", "nodes": 4},
    "model": {"preset": "tiny-moe", "hidden_size": 1024, "num_heads": 8, "num_experts": 8,
              "routing_imbalance": 0.3},
    "training": {"global_batch_size": 64, "seq_len": 512},
    "parallelism": {"tp": 4, "ep": 4, "zero": 1}, "sim": {"granularity": "layer"}}

# Every bundled scenario on a preset cluster with a straggler (a rank whose replica or TP
# index leaves a symmetric remainder), plus hangs and several faults at once.
STRAGGLERS: list[tuple[str, Any, list[str]]] = [
    ("cp_128k", "cp_128k.yaml", [STAGE, f"sim.stragglers={{13: {SLOW}}}"]),
    ("ddp_buckets", "ddp_buckets.yaml", [f"sim.stragglers={{13: {SLOW}}}"]),
    ("ddp_buckets_pcie", "ddp_buckets_pcie.yaml", [f"sim.stragglers={{5: {SLOW}}}"]),
    ("fsdp_zero3", "fsdp_zero3.yaml", [f"sim.stragglers={{1: {SLOW}, 2: {{delay: 2ms}}}}"]),
    ("moe_mixtral", "moe_mixtral.yaml", [STAGE]),  # routing imbalance: one EP block simulated
    ("pp_1f1b", "pp_1f1b.yaml", [*WIDER, f"sim.stragglers={{13: {SLOW}}}"]),
    ("pp_gpipe", "pp_gpipe.yaml", [*WIDER, f"sim.stragglers={{0: {SLOW}, 30: {SLOW}}}"]),
    ("pp_interleaved", "pp_interleaved.yaml", [*WIDER, "sim.stragglers={22: {slowdown: 1.5}}"]),
    ("pp_interleaved_uneven", "pp_interleaved_uneven.yaml",
     [*WIDER, "sim.stragglers={7: {delay: 3ms}}"]),
    ("pp_zb_h1", "pp_zb_h1.yaml", [*WIDER, f"sim.stragglers={{27: {SLOW}}}"]),
    ("pp_zb_h2", "pp_zb_h2.yaml", [*WIDER, f"sim.stragglers={{16: {SLOW}}}"]),
    ("quickstart", "quickstart.yaml", [f"sim.stragglers={{5: {SLOW}}}"]),
    ("tp_sp_node", "tp_sp_node.yaml", [STAGE, "sim.stragglers={0: {slowdown: 1.3}}"]),
    ("tiny_moe", TINY_MOE, [STAGE, f"sim.stragglers={{9: {SLOW}}}"]),
]
HANGS: list[tuple[str, Any, list[str]]] = [
    ("quickstart", "quickstart.yaml", ["sim.hangs={5: 5ms}"]),
    ("fsdp_zero3", "fsdp_zero3.yaml", ["sim.hangs={13: 5ms}"]),
    ("tp_sp_node", "tp_sp_node.yaml", [STAGE, "sim.hangs={5: 2ms}"]),
    ("pp_zb_h2", "pp_zb_h2.yaml", [*WIDER, "sim.hangs={21: 20ms}"]),
    ("pp_interleaved_uneven", "pp_interleaved_uneven.yaml",
     [*WIDER, "sim.hangs={7: 30ms}", "sim.stragglers={7: {delay: 1ms}}"]),
    ("tiny_moe", TINY_MOE, [STAGE, "sim.hangs={30: 2ms}"]),
]


def _source(where: Any) -> Any:
    return ROOT / "scenarios" / where if isinstance(where, str) else where


def _run(where: Any, overrides: list[str]) -> tuple[dict[str, Any], str | None]:
    try:
        return simulate(load_scenario(_source(where), overrides)).summary, None
    except SimulationDeadlock as exc:
        return exc.result.summary, str(exc)


@pytest.mark.parametrize(("where", "overrides"), [c[1:] for c in STRAGGLERS],
                         ids=[c[0] for c in STRAGGLERS])
def test_hybrid_matches_explicit_with_stragglers(where, overrides):
    hybrid, _ = _run(where, overrides)  # sim.fidelity: auto picks hybrid
    explicit, _ = _run(where, [*overrides, "sim.fidelity=explicit"])
    assert (hybrid["fidelity"], explicit["fidelity"]) == ("hybrid", "explicit")
    assert hybrid["step_time_s"] == pytest.approx(explicit["step_time_s"], rel=0.005)
    # Rank averages count each simulated rank for the ranks it stands for.
    for key in ("mfu", "compute_s", "comm_s", "bubble_s"):
        assert hybrid[key] == pytest.approx(explicit[key], rel=0.005, abs=1e-9), key
    assert hybrid["tasks"] < explicit["tasks"]
    why = hybrid["fidelity_why"]
    assert set(why) == {"explicit_ranks", "representative_ranks", "explicit_replicas",
                        "simulated_tp", "why"}


@pytest.mark.parametrize(("where", "overrides"), [c[1:] for c in HANGS],
                         ids=[c[0] for c in HANGS])
def test_hybrid_names_the_same_hang(where, overrides):
    hybrid, hybrid_msg = _run(where, [*overrides, "sim.fidelity=hybrid"])
    explicit, explicit_msg = _run(where, [*overrides, "sim.fidelity=explicit"])
    assert hybrid["fidelity"] == "hybrid" and hybrid_msg and explicit_msg
    stopped = re.compile(r"rank \d+ stopped issuing work at t=[^;]*")
    assert stopped.findall(hybrid_msg) == stopped.findall(explicit_msg) != []
    assert hybrid["step_time_s"] == pytest.approx(explicit["step_time_s"], rel=0.005)
    assert "hybrid fidelity: counted among the" in hybrid_msg


def test_no_symmetric_remainder_falls_back_to_explicit_and_says_so():
    # Two replicas of tp 2: the straggler's replica and a representative are all of them.
    summary = simulate(load_scenario(ROOT / "scenarios/pp_1f1b.yaml",
                                     ["sim.fidelity=hybrid", "sim.granularity=stage",
                                      "sim.stragglers={13: {delay: 1ms}}"])).summary
    assert summary["fidelity"] == "explicit"
    assert summary["fidelity_why"]["fallback"].startswith(
        "hybrid fidelity fell back to explicit: no symmetric remainder")


def test_custom_topology_falls_back_to_explicit_and_says_so():
    summary = simulate(load_scenario(ROOT / "scenarios/custom_topology.yaml",
                                     ["sim.fidelity=hybrid"])).summary
    assert summary["fidelity"] == "explicit"
    assert "custom topology" in summary["fidelity_why"]["fallback"]


def test_symmetric_with_stragglers_stays_an_error():
    with pytest.raises(ScenarioError, match="sim.fidelity: symmetric needs identical"):
        simulate(load_scenario(ROOT / "scenarios/quickstart.yaml",
                               ["sim.fidelity=symmetric", "sim.stragglers={1: {delay: 1ms}}"]))

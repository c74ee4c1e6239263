"""The plan search's step-time bound: each term against hand arithmetic, and the bound
never above the simulated step over many candidates of several models and clusters, in the
search's own mode (analytic network, stage granularity) and with the flow network."""

from __future__ import annotations

from typing import Any

import pytest

from simtrain.hardware.topology import ClusterConfig, build_cluster
from simtrain.parallel.plan import ParallelDims
from simtrain.parallel.templates import Collective, Kernel
from simtrain.scenario import load_scenario
from simtrain.simulate import simulate
from simtrain.study.plan import plan_spec, search
from simtrain.study.plan_bound import (
    Links,
    ScheduleRoute,
    StageTail,
    chain_comm_bytes,
    injection_bandwidth,
    link_limits,
    members_per_server,
    min_collective_seconds,
    step_time_bound,
)
from simtrain.study.plan_candidates import candidate_scenario


def test_a_collective_costs_at_least_the_bytes_a_member_must_move() -> None:
    # 4 ranks, 1 GB, 100 GB/s: each member receives (or sends) 3/4 GB -> 7.5 ms
    for op in ("all_gather", "reduce_scatter", "all_reduce", "all_to_all"):
        assert min_collective_seconds(op, 4, 1e9, 100e9) == pytest.approx(7.5e-3)
    assert min_collective_seconds("all_gather", 1, 1e9, 100e9) == 0.0  # nothing to move
    assert min_collective_seconds("send_recv", 4, 1e9, 100e9) == 0.0  # not counted
    # 256 ranks, 2 per server, 1 GB, NICs of 50 GB/s: a server sends (or receives) the
    # 254/256 GB held outside through its 2 NICs: 0.9921875 / 100 GB/s = 9.921875 ms, above
    # the 255/256 GB / 514 GB/s = 1.94 ms one GPU needs over all its links
    assert min_collective_seconds("reduce_scatter", 256, 1e9, 514e9, 2, 50e9) == \
        pytest.approx(9.921875e-3)
    # every member on one server: only the GPU's links
    assert min_collective_seconds("all_gather", 8, 1e9, 514e9, 8, 50e9) == \
        pytest.approx(7 / 8 / 514)


def test_members_per_server_follow_the_rank_order() -> None:
    servers = tuple(r // 8 for r in range(16))  # 2 servers of 8 GPUs
    # TP4 DP4, tp innermost: rank 0's DP group is 0, 4, 8, 12: two on each server
    megatron = ParallelDims(tp=4, dp=4, order="tp-cp-pp-dp")
    assert members_per_server(megatron, servers, "grad") == 2
    assert members_per_server(megatron, servers, "tp") == 4
    # dp innermost: DP group 0..3 on one server, TP group 0, 4, 8, 12 across both
    inner = ParallelDims(tp=4, dp=4, order="dp-tp-cp-pp")
    assert members_per_server(inner, servers, "grad") == 4
    assert members_per_server(inner, servers, "tp") == 2
    # TP2 DP8 EP2: rank 0's EP group is DP replicas 0 and 1 = ranks 0 and 2, one server
    assert members_per_server(ParallelDims(tp=2, dp=8, ep=2), servers, "ep") == 2
    assert members_per_server(megatron, (), "grad") == 0  # no servers known


def test_a_gpu_moves_bytes_at_most_over_all_its_links_at_once() -> None:
    # DGX H100 GPU: NVLink 450 GB/s to the NVSwitch + PCIe 64 GB/s to its NIC = 514 GB/s
    # (DGX A100: 300 + 32 = 332 GB/s)
    h100 = build_cluster(ClusterConfig(preset="dgx-h100", nodes=2))
    a100 = build_cluster(ClusterConfig(preset="dgx-a100", nodes=2))
    assert injection_bandwidth(h100) == pytest.approx(514e9)
    assert injection_bandwidth(a100) == pytest.approx(332e9)


def test_only_plain_collectives_of_known_groups_sit_on_the_chain() -> None:
    templates = [Kernel("k", "forward", base=1.0),
                 Collective("ag", "tp_comm", "all_gather", "tp", 1e9),   # 3/4 GB at 100 GB/s
                 Collective("a2a", "ep_comm", "all_to_all", "ep", 2e9),  # 1/2 x 2 GB
                 Collective("x", "cp_comm", "all_gather", "cp_a2a", 1e9)]  # unknown size: 0
    assert chain_comm_bytes(templates, ["tp", "ep"]) == {"tp": 1e9, "ep": 2e9}
    assert chain_comm_bytes(templates, ["ep"]) == {"ep": 2e9}


def test_a_tail_counts_the_reduction_past_the_trailing_collectives() -> None:
    # the reduction (0.5 s) may start 0.2 s before the chain ends: 0.3 s, then 0.1 s
    assert StageTail(0.2, 0.5, 0.1).seconds() == pytest.approx(0.4)
    # hidden entirely under the trailing collectives: only the optimizer remains
    assert StageTail(0.2, 0.1, 0.1).seconds() == pytest.approx(0.1)


def test_the_bound_adds_each_stage_tail_after_its_chain() -> None:
    # 2 stages, one chunk, f = 1, b = 2, m = 4: stage 0 ends at >= 12, stage 1 at >= 13,
    # stage 0's last backward after stage 1's: 1 + 12 + 2 = 15 (the old bound)
    times = [[(1.0, 2.0)], [(1.0, 2.0)]]
    assert step_time_bound(times, 4) == pytest.approx(15.0)
    # tails 0.5 (stage 0) and 0.25 (stage 1): stage 1 alone 13.25; stage 0 after the
    # drain 15 + 0.5 = 15.5
    tails = [StageTail(after_s=0.5), StageTail(after_s=0.25)]
    assert step_time_bound(times, 4, tails) == pytest.approx(15.5)
    # virtual stages (two chunks): no drain, each stage its own tail: 1 + 4*(3+3) + 1 = 26
    times = [[(1.0, 2.0), (1.0, 2.0)], [(1.0, 2.0), (1.0, 2.0)]]
    assert step_time_bound(times, 4, [StageTail(), StageTail(after_s=1.0)]) == \
        pytest.approx(26.0)


def test_the_optimizer_and_reduction_terms_match_the_lowering() -> None:
    # GPT-3 2.7B, TP2 DP8 ZeRO 1 on 2 DGX A100 (one stage). The DP group (ranks 0, 2, ...,
    # 14) has 4 members per server: its reduce-scatter of the 1/2 of the parameters a TP
    # rank holds (N) in fp32 costs at least (8-4)/8 x 4N B over 4 NICs of 25 GB/s (above
    # 7/8 x 4N over 332 GB/s); then the optimizer span as simulated, then the parameter
    # all-gather of 2N B at the same rate
    from simtrain.simulate import build_plan
    from simtrain.study.plan_bound import chain_costs, chain_times, stage_tails

    spec = plan_spec({"model": {"preset": "gpt3-2.7b"},
                      "cluster": {"preset": "dgx-a100", "nodes": 2},
                      "training": {"tokens": "1T", "seq_len": 2048, "global_batch": 16}})
    cand = _candidate(tp=2, pp=1, dp=8, zero=1)
    scenario = load_scenario(candidate_scenario(spec, cand))
    cluster = build_cluster(scenario.cluster)
    plan = build_plan(scenario, cluster)
    links = link_limits(cluster)
    costs = chain_costs(scenario, cluster, plan)
    _, overlap = chain_times(costs, plan.dims, links)
    (tail,) = stage_tails(costs, scenario, cluster, plan.dims, links, overlap)
    numel = sum(p.numel for u in plan.units[0][0] for p in u.params)
    per_byte = 4 / 8 / (4 * 25e9)
    assert tail.reduce_s == pytest.approx(per_byte * numel * 4)
    result = simulate(scenario)
    opt = [s for s in result.timeline.spans if s.kind == "optimizer" and s.rank == 0]
    assert tail.after_s == pytest.approx(opt[0].end - opt[0].start + per_byte * numel * 2)
    # the TP collectives' backward bytes (SP: all-gathers and reduce-scatters over 2 GPUs
    # of one server) at 1/2 / 332 GB/s each
    tp_bytes = costs.bwd_bytes[0][0]["tp"]
    assert overlap[0] == pytest.approx(tp_bytes / 2 / 332e9)
    assert Links(332e9).nic == 0.0  # custom clusters: no NIC term


def _candidate(**par: Any) -> Any:
    from simtrain.study.plan_candidates import Candidate

    full = {"tp": 1, "pp": 1, "cp": 1, "dp": 1, "ep": 1, "vpp": 1, "zero": 0,
            "schedule": "1f1b", "recompute": "none", "order": "tp-cp-pp-dp", **par}
    full["sp"] = full["tp"] > 1
    return Candidate(2, full, 1)


# ---- the bound against simulations -------------------------------------------------------

CASES = {
    # model, cluster preset, nodes, global batch, seq len, search axes
    "gpt3-2.7b": ("gpt3-2.7b", "dgx-h100", 2, 16, 2048,
                  {"tp": [2, 8], "pp": [1, 2], "zero": [0, 1, 3],
                   "schedule": ["1f1b", "interleaved"], "vpp": [2],
                   "order": ["tp-cp-pp-dp", "dp-tp-cp-pp"]}),
    "tiny-moe": ("tiny-moe", "dgx-a100", 2, 32, 512,
                 {"tp": [1, 2], "pp": [1, 2], "zero": [0, 3],
                  "recompute": ["selective"]}),
    # every rank order: TP and CP groups across servers, DP groups inside one
    "orders": ("gpt3-2.7b", "dgx-a100", 2, 16, 2048,
               {"tp": [2, 4], "pp": [1, 2], "zero": [1, 2], "order": "all"}),
    # torchtitan per-op checkpointing (recompute: op) on a PCIe cluster
    "pcie": ("gpt3-2.7b", "pcie-a100", 2, 16, 2048, {"tp": [2], "pp": [1, 2], "zero": [0, 3],
                                                   "recompute": ["op"]}),
    "llama-cp": ("llama3-8b", "dgx-h100", 2, 8, 8192,
                 {"tp": [2, 4], "pp": [1, 2], "cp": [1, 2, 4], "zero": [1],
                  "recompute": ["full"]}),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def exhaustive(request: Any) -> Any:
    model, preset, nodes, batch, seq, axes = CASES[request.param]
    spec = plan_spec({"model": {"preset": model}, "cluster": {"preset": preset, "nodes": nodes},
                      "training": {"tokens": "1T", "seq_len": seq, "global_batch": batch},
                      "search": {"final_network": "analytic", "top": 10_000,
                                 "micro_batch": [1], "recompute": ["none"], **axes}})
    return search(spec)


def test_the_bound_is_never_above_the_searched_step(exhaustive: Any) -> None:
    sims = [c for c in exhaustive.candidates if c.status == "simulated"]
    assert len(sims) >= 8 and exhaustive.counts["pruned"] == 0
    for c in sims:
        assert 0 < c.bound_s <= float(c.summary["step_time_s"]) * (1 + 1e-12), c.label
    # the new terms count: some plan's bound is above its compute alone
    assert any(c.bound_s > _compute_bound(exhaustive, c) * (1 + 1e-9) for c in sims)


def test_the_bound_is_never_above_the_flow_network_step(exhaustive: Any) -> None:
    sims = sorted((c for c in exhaustive.candidates if c.status == "simulated"),
                  key=lambda c: c.bound_s / float(c.summary["step_time_s"]))[-6:]
    for c in sims:  # the tightest bounds: the likeliest to cross a flow-network step
        flow = simulate(load_scenario(candidate_scenario(exhaustive.spec, c, "flow")))
        assert c.bound_s <= float(flow.summary["step_time_s"]) * (1 + 1e-12), c.label


def _compute_bound(result: Any, cand: Any) -> float:
    from simtrain.simulate import build_plan
    from simtrain.study.plan_bound import stage_compute_times

    scenario = load_scenario(candidate_scenario(result.spec, cand))
    cluster = build_cluster(scenario.cluster)
    plan = build_plan(scenario, cluster)
    return step_time_bound(stage_compute_times(scenario, cluster, plan), plan.micro_batches)


def test_the_bound_counts_the_microbatches_each_chunk_sees() -> None:
    # 2 stages of 2 chunks, f = 1, b = 2, m = 4. Looping (all microbatches through every
    # chunk): stage 1 waits for stage 0's first forward (1), then 4 x (3 + 3) = 24: 25.
    times = [[(1.0, 2.0), (1.0, 2.0)], [(1.0, 2.0), (1.0, 2.0)]]
    assert step_time_bound(times, 4) == 25.0
    # DualPipe-like: half the microbatches per chunk, fed from both ends (no fill):
    # 4 x (0.5 x 3 + 0.5 x 3) = 12
    halves = ScheduleRoute(((0.5, 0.5), (0.5, 0.5)), several_routes=True)
    assert step_time_bound(times, 4, route=halves) == 12.0
    # one chunk, split backward: no drain term, so 1 + 4 x 3 = 13 (the drain would give
    # 1 + 12 + 2 = 15, as in the tail test above)
    one = [[(1.0, 2.0)], [(1.0, 2.0)]]
    assert step_time_bound(one, 4) == 15.0
    assert step_time_bound(one, 4, route=ScheduleRoute(split_backward=True)) == 13.0

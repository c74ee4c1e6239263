"""Hybrid fidelity's plan: which ranks run explicitly, whom the others mirror, and copies."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.parallel.hybrid import plan_hybrid
from simtrain.parallel.plan import ParallelDims
from simtrain.parallel.symmetry import Symmetry, images, simulated_stage_ranks


def test_a_straggler_runs_its_replica_and_one_tp_peer_explicitly():
    # tp4 pp2 dp4, rank = tp + 4 (pp + 2 dp). Rank 13 = (tp 1, pp 1, dp 1): replica 1 runs
    # explicitly, replica 0 stands for replicas 2 and 3; along tp the straggler's index 1
    # and index 0 (standing for 2 and 3) are simulated.
    d = ParallelDims(tp=4, pp=2, dp=4)
    plan = plan_hybrid(d, {13: "straggler"}, expert_imbalance=False)
    assert not isinstance(plan, str)
    assert plan.symmetry == Symmetry((0, 1, 0, 0), (0, 1, 0, 0))
    assert plan.explicit_ranks == (8, 9, 12, 13)  # dp 1 x tp {0, 1} x pp {0, 1}
    assert plan.representative_ranks == (0, 1, 4, 5)
    assert plan.explicit_replicas == (1,)
    # Rank 0 stands for dp {0, 2, 3} x tp {0, 2, 3} = 9 ranks, rank 1 for dp {0, 2, 3} at
    # tp 1 = 3, rank 8 for tp {0, 2, 3} of replica 1 = 3, the straggler 13 for itself.
    weights = plan.symmetry.weights(d)
    assert (weights[0], weights[1], weights[8], weights[13]) == (9, 3, 3, 1)
    assert sum(weights.values()) == d.world_size
    assert plan.describe()["why"] == "rank 13: straggler"


def test_one_straggler_in_the_16k_llama3_job():
    # scenarios/large/llama3_405b_16k_h100.yaml: TP8 PP16 DP128. 12345 = tp 1 + 8 (pp 7 +
    # 16 dp 96): replica 96 runs explicitly at tp 0 and 1, replica 0 stands for the other
    # 126: 32 + 32 of 16,384 ranks simulated.
    d = ParallelDims(tp=8, pp=16, dp=128)
    plan = plan_hybrid(d, {12345: "straggler"}, expert_imbalance=False)
    assert not isinstance(plan, str)
    assert plan.explicit_replicas == (96,) and plan.symmetry.tp_indices == [0, 1]
    assert len(plan.explicit_ranks) == len(plan.representative_ranks) == 32
    assert 12345 in plan.explicit_ranks
    weights = plan.symmetry.weights(d)
    assert len(weights) == 64 and sum(weights.values()) == 16384
    assert weights[12345] == 1 and weights[0] == 127 * 7  # dp {0, 2..127} x tp {0, 2..7}


def test_expert_parallel_blocks_run_whole():
    # dp 8 in EP blocks of 2: rank 5 (dp 5) is in block 2 = replicas {4, 5}; block 0 =
    # {0, 1} stands for the rest, each replica mirroring the one with its EP index.
    d = ParallelDims(dp=8, ep=2)
    plan = plan_hybrid(d, {5: "hang"}, expert_imbalance=False)
    assert not isinstance(plan, str)
    assert plan.symmetry.mirror_dp == (0, 1, 0, 1, 4, 5, 0, 1)
    assert plan.explicit_ranks == (4, 5) and plan.representative_ranks == (0, 1)


def test_routing_imbalance_alone_keeps_one_block():
    d = ParallelDims(tp=2, dp=8, ep=4)
    plan = plan_hybrid(d, {}, expert_imbalance=True)
    assert not isinstance(plan, str)
    assert plan.symmetry == Symmetry((0, 1, 2, 3, 0, 1, 2, 3), (0, 0))
    assert plan.explicit_ranks == () and "routing imbalance" in plan.describe()["why"]


def test_no_symmetric_remainder_is_said():
    # dp 2, tp 1: the straggler's replica and the representative are every replica.
    reason = plan_hybrid(ParallelDims(dp=2), {1: "straggler"}, expert_imbalance=False)
    assert isinstance(reason, str) and "no symmetric remainder" in reason


def _groups_by_kind(d: ParallelDims, rank: int) -> dict[str, tuple[int, ...]]:
    return {"tp": d.group(rank, "tp"), "dp": d.group(rank, "dp"),
            "grad": d.group(rank, d.grad_dims), "ep": d.ep_group(rank),
            "expert_grad": d.expert_dp_group(rank)}


@settings(max_examples=60, deadline=None)
@given(tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 3]),
       blocks=st.integers(1, 4), ep=st.sampled_from([1, 2]), cp=st.sampled_from([1, 2]),
       picks=st.lists(st.integers(0, 10_000), max_size=3), imbalance=st.booleans())
def test_simulated_groups_and_copies_partition_every_group(tp, pp, blocks, ep, cp, picks,
                                                           imbalance):
    """Each real group (TP, DP, gradient, EP, expert-DP, pipeline pair) is emitted once or is
    exactly one emitted group's copy, and a virtual rank's mirror is in each of its groups."""
    d = ParallelDims(tp=tp, cp=cp, pp=pp, dp=blocks * ep, ep=ep)
    differ = {p % d.world_size: "x" for p in picks}
    plan = plan_hybrid(d, differ, expert_imbalance=imbalance and ep > 1)
    sym = Symmetry.symmetric(d) if not differ and not imbalance else (
        None if isinstance(plan, str) else plan.symmetry)
    if sym is None:
        return
    stages = simulated_stage_ranks(d, sym)
    simulated = {r for ranks in stages for r in ranks}
    md, mt = sym.mirror_dp, sym.mirror_tp

    def mirror(r: int) -> int:
        c = d.coords(r)
        return d.rank(**{**c, "dp": md[c["dp"]], "tp": mt[c["tp"]]})

    for kind in ("tp", "dp", "grad", "ep", "expert_grad"):
        every = {_groups_by_kind(d, r)[kind] for r in range(d.world_size)}
        emitted = {_groups_by_kind(d, r)[kind] for r in simulated}
        covered = list(emitted)
        for g in emitted:
            covered += [tuple(sorted(c)) for c in images(d, g, sym)]
            assert all(mirror(v) in g for v in g), (kind, g)
        assert sorted(covered) == sorted(every), kind
    for s in range(pp - 1):
        every = set(zip(d.stage_ranks(s), d.stage_ranks(s + 1), strict=True))
        emitted = set(zip(stages[s], stages[s + 1], strict=True))
        covered = list(emitted)
        for pair in emitted:
            covered += [tuple(c) for c in images(d, pair, sym)]
        assert sorted(covered) == sorted(every)

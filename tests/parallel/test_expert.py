"""MoE routing: per-rank loads, the all-to-all-v they imply, and what the step pays for them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simtrain import load_scenario, simulate
from simtrain.hardware.topology import build_cluster
from simtrain.parallel.expert import (
    received_bytes,
    route_loads,
    route_splits,
    sent_bytes,
)
from simtrain.simulate import build_graph


def test_thirty_percent_imbalance_gives_the_hot_rank_1_3x_the_mean_receive():
    # ep = 4, layer 0: EP index 0 is hot with 1.3; the others share the rest:
    # (4 - 1.3) / 3 = 0.9 each (mean 1). A balanced dispatch of n = 4000 bytes per rank
    # sends n·load_j/4 to index j: every row is [1300, 900, 900, 900].
    loads = route_loads(0, 4, 0.3, None)
    assert loads == pytest.approx((1.3, 0.9, 0.9, 0.9))
    splits = route_splits(4000.0, loads, "to_experts")
    assert all(row == pytest.approx((1300, 900, 900, 900)) for row in splits)
    # Received over the network (the diagonal stays local): hot 3·1300 = 3900, the others
    # 3·900 = 2700; mean (3900 + 3·2700)/4 = 3000, so the hot rank receives 1.3x the mean.
    # Each sends 4000 minus its own diagonal: hot 2700, the others 3100.
    recv = received_bytes(splits)
    assert recv == pytest.approx((3900, 2700, 2700, 2700))
    assert recv[0] / (sum(recv) / 4) == pytest.approx(1.3)
    assert sent_bytes(splits) == pytest.approx((2700, 3100, 3100, 3100))
    # Including the local share, rank j takes in n·load_j: the hot rank 5200 = 1.3 x 4000.
    total_in = [sum(splits[i][j] for i in range(4)) for j in range(4)]
    assert total_in[0] / (sum(total_in) / 4) == pytest.approx(1.3)


def test_combine_is_the_transpose_and_capacity_drops_before_dispatch():
    loads = route_loads(1, 4, 0.3, 1.1)  # layer 1: index 1 hot, capped at 1.1
    assert loads == pytest.approx((0.9, 1.1, 0.9, 0.9))
    to = route_splits(4000.0, loads, "to_experts")
    back = route_splits(4000.0, loads, "from_experts")
    assert back == tuple(zip(*to, strict=True))
    # Each rank keeps 1000·(0.9 + 1.1 + 0.9 + 0.9) = 3800 of its 4000 bytes: 200 dropped.
    assert [sum(r) for r in to] == pytest.approx([3800] * 4)
    assert sent_bytes(back)[1] == pytest.approx(3 * 1100)  # the hot rank sends back 3300


@given(st.integers(2, 16), st.integers(0, 40), st.floats(0.0, 1.0),
       st.one_of(st.none(), st.floats(1.0, 3.0)))
def test_routing_moves_at_most_the_balanced_bytes(ep, layer, imbalance, cf):
    loads = route_loads(layer, ep, imbalance, cf)
    splits = route_splits(1.0, loads, "to_experts")
    assert sum(map(sum, splits)) <= ep * (1.0 + 1e-9)  # dropping only removes bytes
    if cf is None:
        assert sum(loads) == pytest.approx(ep)
    assert max(received_bytes(splits)) == pytest.approx(
        received_bytes(splits)[layer % ep])  # the hot rank receives most


def _moe(imbalance, hidden=1024, cf=None, granularity="layer"):
    return load_scenario({
        "compute": {"host_kernel_issue": 0, "host_microbatch": 0},
        "cluster": {"preset": "dgx-a100", "nodes": 1},
        "model": {"preset": "tiny-moe", "num_layers": 2, "hidden_size": hidden,
                  "num_heads": 16, "num_kv_heads": 4, "routing_imbalance": imbalance,
                  "capacity_factor": cf},
        "training": {"global_batch_size": 8, "micro_batch_size": 1, "seq_len": 512},
        "parallelism": {"ep": 4, "dp": 8},
        "sim": {"fidelity": "explicit", "granularity": granularity}})


def test_lowered_all_to_alls_carry_each_rank_s_bytes():
    s = _moe(0.3)
    graph = build_graph(s, build_cluster(s.cluster))
    by_name = {t.name: t for t in graph.tasks if t.kind == "ep_comm" and 0 in t.ranks
               and t.meta.get("microbatch") == 0}
    # k·m·h·dt = 2·512·1024·2 = 2 MiB per rank; layer 1's hot EP index is 1.
    n = 2 * 512 * 1024 * 2
    dispatch = by_name["layers.1.mlp.dispatch"]
    assert dispatch.comm.op == "all_to_all_v" and dispatch.ranks == (0, 1, 2, 3)
    recv = received_bytes(dispatch.comm.splits)
    assert recv[1] == pytest.approx(3 * 1.3 * n / 4)
    assert recv[1] / (sum(recv) / 4) == pytest.approx(1.3)  # 3.9 / ((3.9 + 3·2.7)/4)
    # Backward runs the other way: the dispatch's gradient leaves the hot rank.
    bwd = by_name["layers.1.mlp.dispatch.bwd"].comm.splits
    assert sent_bytes(bwd)[1] == pytest.approx(3 * 1.3 * n / 4)
    assert by_name["layers.1.mlp.combine"].comm.splits == bwd


def test_balanced_routing_keeps_the_plain_all_to_all():
    s = _moe(0.0)
    graph = build_graph(s, build_cluster(s.cluster))
    ops = {t.comm.op for t in graph.tasks
           if t.kind == "ep_comm" and not t.name.endswith(".counts")}
    assert ops == {"all_to_all"}  # the routed tokens' (the counts' all-gather aside)


def _dispatch_s(result):
    return next(sp.end - sp.start for sp in result.timeline.spans
                if sp.name == "layers.0.mlp.dispatch" and sp.rank == 0)


def test_the_hot_rank_s_receive_sets_the_all_to_all_time():
    # On one DGX A100 every flow crosses the sender's and the receiver's NVLink port; the
    # hot rank's ingress carries 3 x 1.3·n/4 against 3 x n/4 balanced, so the bandwidth
    # part of the dispatch is 1.3x. The alpha part does not depend on n: doubling n
    # (hidden 1024 -> 2048) isolates the bandwidth part, whose growth is 1.3x balanced.
    bal = [_dispatch_s(simulate(_moe(0.0, h))) for h in (1024, 2048)]
    hot = [_dispatch_s(simulate(_moe(0.3, h))) for h in (1024, 2048)]
    assert (hot[1] - hot[0]) / (bal[1] - bal[0]) == pytest.approx(1.3, rel=1e-6)


def test_imbalance_slows_the_step_and_capacity_claws_it_back():
    even, skew, capped, padded = (simulate(_moe(i, cf=cf)).summary["step_time_s"]
                                  for i, cf in ((0.0, None), (0.3, None), (0.3, 1.0),
                                                (0.0, 1.0)))
    assert even < skew
    # cf 1.0 drops every token over the mean: the hot rank computes the mean load and its
    # ingress is back to 3·n/4, so the step and the all-to-alls cost what balanced ones do
    # (the other ranks compute and send less, but the step waits for the busiest). A
    # capacity-padded dispatch gathers no routing counts (moe.token_count_bytes), so the
    # balanced run to compare with is capped too.
    assert capped == pytest.approx(padded, rel=1e-9)
    assert _dispatch_s(simulate(_moe(0.3, cf=1.0))) == pytest.approx(
        _dispatch_s(simulate(_moe(0.0))), rel=1e-9)


def test_stage_granularity_adds_the_layers_splits():
    s = _moe(0.3, granularity="stage")
    graph = build_graph(s, build_cluster(s.cluster))
    agg = [t for t in graph.tasks if t.kind == "ep_comm" and 0 in t.ranks
           and t.meta.get("microbatch") == 0 and t.meta.get("stage") == 0
           and t.comm.op != "all_gather"]  # the stage's routing counts aside
    fwd = agg[0].comm
    assert fwd.op == "all_to_all_v"
    # Forward: dispatch (to) and combine (from) of layers 0 and 1 (hot 0 and 1), summed
    # pair by pair into one all-to-all-v; index 0 receives what it receives in each.
    n = 2 * 512 * 1024 * 2
    expected = 0.0
    for layer in (0, 1):
        loads = route_loads(layer, 4, 0.3, None)
        for route in ("to_experts", "from_experts"):
            expected += received_bytes(route_splits(n, loads, route))[0]
    assert received_bytes(fwd.splits)[0] == pytest.approx(expected)


# ---- expert tensor parallelism and MoE parallel folding ---------------------------------

def test_default_expert_layout_is_ep_over_data_parallel_replicas():
    from simtrain.parallel.plan import ParallelDims
    d = ParallelDims(tp=2, dp=4, ep=2)  # etp = tp: rank = tp + 2·dp
    assert d.etp == 2
    assert d.ep_group(0) == (0, 2) and d.ep_group(5) == (5, 7)  # dp 0,1 / dp 2,3, same tp
    assert [d.ep_index(r) for r in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert d.expert_dp_group(0) == (0, 4)  # same tp, same EP index, dp 0 and 2


def test_etp_one_folds_the_tp_ranks_into_expert_parallelism():
    from simtrain.parallel.plan import ParallelDims
    # tp 2 x dp 4 = 8 ranks of one stage; etp 1, ep 8: every rank holds 1/8 of the experts
    # at full width, and the EP group is the whole stage in slot order tp + 2·dp.
    d = ParallelDims(tp=2, dp=4, ep=8, etp=1, sp=True)
    assert d.ep_group(3) == tuple(range(8)) and d.ep_index(5) == 5
    assert d.expert_dp_group(5) == (5,)
    # EP spanning CP: tp 2, cp 2, dp 2 (rank = tp + 2·(cp + 2·dp)), etp 2, ep 4: Megatron
    # re-reads the ranks in order, slots = ranks: rank 0's group is 0, 2, 4, 6 (cp 0/1 of
    # dp 0, then of dp 1), and rank 4 (cp 0, dp 1) is EP index 2.
    e = ParallelDims(tp=2, cp=2, dp=2, ep=4)
    assert e.ep_group(0) == (0, 2, 4, 6) and e.ep_index(4) == 2


def test_expert_parallelism_takes_the_cp_ranks_before_the_dp_ones():
    from simtrain.parallel.plan import ParallelDims
    # Megatron-Core (tp-cp-dp-pp; expert groups from the ranks read as tp-ep-dp-pp): tp 2,
    # cp 2, dp 2, ep 2: rank 0's EP group is (0, 2), its CP peer, not its DP peer 4; rank 0's
    # expert data-parallel group is the ranks with the same tp and EP index: 0 and 4.
    d = ParallelDims(tp=2, cp=2, dp=2, ep=2, order="tp-cp-dp-pp")
    assert d.ep_group(0) == (0, 2) and d.ep_group(5) == (5, 7)
    assert d.expert_dp_group(0) == (0, 4)
    # With dp inside cp in the rank order (tp-dp-cp-pp: rank = tp + 2·(dp + 2·cp)) the inner
    # one is again first: rank 0's EP group is its DP peer, rank 2.
    f = ParallelDims(tp=2, cp=2, dp=2, ep=2, order="tp-dp-cp-pp")
    assert f.ep_group(0) == (0, 2) and f.coords(2)["dp"] == 1


@pytest.mark.parametrize(("kwargs", "says"), [
    (dict(tp=2, dp=4, ep=8, etp=2, sp=True), "etp x ep = 2 x 8 = 16 does not divide the 8"),
    (dict(tp=4, dp=3, ep=1, etp=3, sp=True), "etp=3 must divide tp=4"),
    (dict(tp=2, dp=4, ep=8, etp=1), "needs sequence parallelism"),
])
def test_expert_layouts_that_do_not_fit_are_rejected(kwargs, says):
    from simtrain.parallel.plan import ParallelDims
    with pytest.raises(ValueError, match=says):
        ParallelDims(**kwargs)


def test_etp_one_routes_each_tp_rank_s_own_tokens_at_full_expert_width():
    s = load_scenario({
        "compute": {"host_kernel_issue": 0, "host_microbatch": 0},
        "cluster": {"preset": "dgx-a100", "nodes": 1, "gpus_per_node": 4},
        "model": {"preset": "tiny-moe", "num_layers": 1},
        "training": {"global_batch_size": 4, "micro_batch_size": 2, "seq_len": 256},
        "parallelism": {"tp": 2, "sp": True, "ep": 4, "etp": 1}})
    graph = build_graph(s, build_cluster(s.cluster))
    disp = next(t for t in graph.tasks if t.name == "layers.0.mlp.dispatch")
    # m = 2·256 = 512 tokens per TP group; each TP rank routes its 256: k·256·h·2 bytes
    # = 2·256·256·2 = 262,144 over the 4-rank EP group (tp and dp folded).
    assert disp.ranks == (0, 1, 2, 3) and disp.bytes == 2 * 256 * 256 * 2
    from simtrain.simulate import build_plan
    plan = build_plan(s, build_cluster(s.cluster))
    fc1 = next(st.op for u in plan.units[0][0] for st in u.steps
               if getattr(st, "op", None) is not None and st.op.name == "layers.0.mlp.fc1")
    # One local expert (4 / ep 4) at full width 2·512 on the 2·256 routed copies.
    assert fc1.gemm_shape == (512, 1024, 256) and fc1.params[0].numel == 1024 * 256
    assert simulate(s).summary["step_time_s"] > 0


@pytest.mark.parametrize("par", [{"tp": 2, "sp": True, "ep": 8, "etp": 1},
                                 {"tp": 2, "sp": True, "ep": 4, "etp": 1},
                                 {"tp": 1, "cp": 2, "ep": 4}])
def test_folded_expert_layouts_agree_in_both_fidelities(par):
    # EP groups that span TP (etp 1) or CP ranks: the symmetric images of the
    # all-to-alls load the network exactly as the explicit ranks do.
    def step(fidelity):
        return simulate(load_scenario({
            "compute": {"host_kernel_issue": 0, "host_microbatch": 0},
            "cluster": {"preset": "dgx-a100", "nodes": 2},
            "model": {"preset": "tiny-moe", "num_experts": 8, "num_layers": 2},
            "training": {"global_batch_size": 16, "micro_batch_size": 1, "seq_len": 256},
            "parallelism": par, "sim": {"fidelity": fidelity}})).summary["step_time_s"]
    assert step("symmetric") == pytest.approx(step("explicit"), rel=1e-9)


# ---- node-limited routing and a DeepEP-style dispatch -----------------------------------

def test_distinct_nodes_per_token():
    from simtrain.parallel.expert import distinct_nodes
    # k = 8 uniform choices among 8 nodes: 8·(1 - (7/8)^8) = 8·(1 - 0.343609) = 5.25113;
    # DeepSeek-V3's limit of 4 nodes caps it.
    assert distinct_nodes(8, 8, None) == pytest.approx(5.251129, rel=1e-6)
    assert distinct_nodes(8, 8, 4) == 4.0
    assert distinct_nodes(2, 1, None) == 1.0


def test_deepep_splits_by_hand():
    from simtrain.parallel.expert import deepep_splits
    # 4 EP ranks on 2 nodes (g = 2), k = 2, n = 4000 bytes per rank (m·h·dt = 2000).
    # u = 2·(1 - 1/4) = 1.5 nodes per token. Same node: n·load_j/g = 2000; across nodes only
    # rail peers (same local index): m·h·dt·u/2 = 1500; the other pairs 0.
    s = deepep_splits(4000.0, 2, (0, 0, 1, 1), (1.0,) * 4, None, "to_experts")
    assert s[0] == pytest.approx((2000, 2000, 1500, 0)) and s[1][3] == pytest.approx(1500)
    # The network carries 1500 per rank against 2·1000 for a plain all-to-all: u/k = 0.75.
    plain = route_splits(4000.0, (1.0,) * 4, "to_experts")
    assert s[0][2] + s[0][3] == pytest.approx(0.75 * (plain[0][2] + plain[0][3]))
    # Node limit 1: one network copy per token to its single node, m·h·dt/2 = 1000.
    one = deepep_splits(4000.0, 2, (0, 0, 1, 1), (1.0,) * 4, 1, "to_experts")
    assert one[0][2] == pytest.approx(1000)
    # On one node it is the plain all-to-all-v, imbalance included.
    loads = route_loads(0, 4, 0.3, None)
    one_node = deepep_splits(4000.0, 2, (0,) * 4, loads, None, "from_experts")
    for got, want in zip(one_node, route_splits(4000.0, loads, "from_experts"), strict=True):
        assert got == pytest.approx(want)
    with pytest.raises(ValueError, match="same number of EP ranks on every node"):
        deepep_splits(4000.0, 2, (0, 0, 0, 1), (1.0,) * 4, None, "to_experts")


def _two_nodes(dispatcher, limit=None, fidelity="auto"):
    return load_scenario({
        "compute": {"host_kernel_issue": 0, "host_microbatch": 0},
        "cluster": {"preset": "dgx-h100", "nodes": 2},
        "model": {"preset": "tiny-moe", "num_experts": 16, "experts_per_token": 8,
                  "num_layers": 2, "hidden_size": 1024, "num_heads": 8,
                  "routing_node_limit": limit},
        "training": {"global_batch_size": 16, "micro_batch_size": 1, "seq_len": 512},
        "parallelism": {"ep": 16, "moe_dispatcher": dispatcher},
        "sim": {"granularity": "layer", "fidelity": fidelity}})


def test_deepep_dispatch_crosses_the_network_once_per_node():
    plain, deep, limited = (_dispatch_s(simulate(_two_nodes(d, lim)))
                            for d, lim in (("alltoall", None), ("deepep", None),
                                           ("deepep", 1)))
    # EP 16 over 2 nodes, k = 8: a plain all-to-all sends 8·(8/16) copies of each token
    # over IB, DeepEP u = 2·(1 - 2^-8) = 1.99 of which one stays home: ~4x fewer IB bytes;
    # the node limit (1) halves them again, the NVLink forward is unchanged.
    assert deep < 0.5 * plain
    assert limited < deep
    # The node limit alone does not change a plain all-to-all (every pair still averages
    # the same bytes).
    assert _dispatch_s(simulate(_two_nodes("alltoall", 1))) == pytest.approx(plain)
    assert simulate(_two_nodes("deepep", fidelity="explicit")).summary["step_time_s"] == \
        pytest.approx(simulate(_two_nodes("deepep", fidelity="symmetric")).summary[
            "step_time_s"], rel=1e-9)


def test_routing_counts_are_an_nccl_all_gather_except_under_deepep():
    counts = {}
    for d in ("alltoall", "deepep"):
        s = _two_nodes(d)
        counts[d] = [t.comm for t in build_graph(s, build_cluster(s.cluster)).tasks
                     if t.name == "layers.0.mlp.counts" and 0 in t.ranks]
    # One forward gather per MoE layer and micro-batch: 16 ranks x 16 int64 counts =
    # 2,048 bytes (moe.token_count_bytes); DeepEP exchanges them in its dispatch.
    assert [(c.op, c.nbytes) for c in counts["alltoall"]] == [("all_gather", 2048.0)]
    assert counts["deepep"] == []


@given(st.integers(1, 8), st.integers(1, 8), st.integers(1, 8),
       st.one_of(st.none(), st.integers(1, 8)))
def test_deepep_never_sends_more_over_the_network_than_all_to_all(nodes, g, k, limit):
    from simtrain.parallel.expert import deepep_splits
    nodes_of = tuple(i // g for i in range(nodes * g))
    ones = (1.0,) * len(nodes_of)
    deep = deepep_splits(1.0, k, nodes_of, ones, limit, "to_experts")
    plain = route_splits(1.0, ones, "to_experts")

    def network(s):
        return sum(s[i][j] for i in range(len(s)) for j in range(len(s))
                   if nodes_of[i] != nodes_of[j])
    assert network(deep) <= network(plain) * (1 + 1e-9)

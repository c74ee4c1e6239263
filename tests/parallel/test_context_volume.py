"""Context parallelism both ways: ring, all-gather, Ulysses all-to-all and a2a+p2p."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain import ScenarioError, load_scenario, simulate
from simtrain.hardware.topology import build_cluster
from simtrain.parallel.context_volume import (
    CP_ALGORITHMS,
    check_context,
    cp_traffic,
    kv_block_bytes,
    ulysses_buffers,
    ulysses_degree,
)
from simtrain.parallel.plan import ParallelDims
from simtrain.simulate import build_graph

# m = 1024 local tokens, q = o = 512, kv = 128 (GQA: 4 query heads per KV head), bf16.
SHAPE = dict(m=1024, q=512, kv=128, o=512, dt=2)
KV_BLOCK = 2 * 1024 * 2 * 128  # dt·m·2·kv = 524,288 B


def test_ring_passes_cp_minus_one_kv_blocks_and_twice_that_backward():
    # cp = 4: 3 passes of the 524,288 B block = 1,572,864 B; backward K,V + dK,dV: 3,145,728.
    t = cp_traffic("ring", **SHAPE, cp=4, u=1)
    assert kv_block_bytes(1024, 128, 2) == KV_BLOCK
    assert (t.forward, t.backward) == (1_572_864, 3_145_728)


def test_allgather_sends_each_block_to_the_other_ranks_both_ways():
    # K,V all-gather then dK,dV reduce-scatter: 3 blocks of 524,288 B each way.
    t = cp_traffic("allgather", **SHAPE, cp=4, u=1)
    assert (t.forward, t.backward) == (1_572_864, 1_572_864)


def test_ulysses_moves_three_quarters_of_both_buffers_each_way():
    # Before attention Q,K,V: 2·1024·(512 + 2·128) = 1,572,864 B; after, O: 2·1024·512 =
    # 1,048,576 B. An all-to-all over 4 keeps 1/4 local: 3/4 · 2,621,440 = 1,966,080 B, and
    # the backward runs the same two (dO, dQ/dK/dV).
    assert ulysses_buffers(1024, 512, 128, 512, 2) == (1_572_864, 1_048_576)
    t = cp_traffic("a2a", **SHAPE, cp=4, u=4)
    assert (t.forward, t.backward) == (1_966_080, 1_966_080)


def test_ulysses_per_link_volume_is_the_papers_4nh_over_p():
    # Jacobs et al. 2023 Sec. 3.2: MHA (q = kv = o = h) over P ranks moves 4·N·h/P per
    # link for N tokens; per rank (P-1)/P of its 4·(N/P)·h buffer elements. N = 8192,
    # h = 1024, P = 8: 4·8192·1024/8 = 4,194,304 elements, of which 7/8 leave: 3,670,016.
    t = cp_traffic("a2a", m=8192 // 8, q=1024, kv=1024, o=1024, dt=1, cp=8, u=8)
    assert t.forward == 4 * 8192 * 1024 / 8 * 7 / 8 == 3_670_016


def test_hierarchical_is_a2a_over_u_then_ring_over_cp_over_u():
    # u = 2 of cp = 4: a2a 1/2 · 2,621,440 = 1,310,720; ring of 2: 1 pass of the same
    # 524,288 B block (s/2 tokens x kv/2) forward -> 1,835,008; two backward -> 2,359,296.
    t = cp_traffic("a2a+p2p", **SHAPE, cp=4, u=2)
    assert (t.forward, t.backward) == (1_835_008, 2_359_296)
    # The ends of the hierarchy are the pure algorithms.
    assert cp_traffic("a2a+p2p", **SHAPE, cp=4, u=4) == cp_traffic("a2a", **SHAPE, cp=4, u=4)
    assert cp_traffic("a2a+p2p", **SHAPE, cp=4, u=1) == cp_traffic("ring", **SHAPE, cp=4, u=1)


def test_degrees_and_checks():
    assert [ulysses_degree(a, 8, 2) for a in CP_ALGORITHMS] == [1, 1, 8, 2]
    ok = dict(cp=8, tp=2, heads=64, kv_heads_per_rank=4)
    assert check_context("a2a+p2p", 4, **ok) == []
    # 64 heads / tp 2 = 32 per rank (divisible by 8) but 4 KV heads per rank: not by 8.
    (field, msg), = check_context("a2a", None, **ok)
    assert field == "parallelism.cp_algorithm" and "4 KV heads" in msg
    assert "must divide cp=8" in check_context("a2a+p2p", 3, **ok)[0][1]
    assert "needs cp_a2a_size" in check_context("a2a+p2p", None, **ok)[0][1]
    assert check_context("ring", None, **ok) == []
    with pytest.raises(ValueError, match="unknown cp_algorithm"):
        cp_traffic("ulysses", **SHAPE, cp=4, u=4)


def _scenario(par):
    # tiny-gpt: h = 256, 4 heads of 64, 4 KV heads; b = 2, s = 256 on 8 GPUs (dp 2, cp 4).
    return load_scenario({
        "compute": {"host_kernel_issue": 0, "host_microbatch": 0},
        "cluster": {"preset": "dgx-a100", "nodes": 1}, "model": {"preset": "tiny-gpt"},
        "training": {"global_batch_size": 16, "micro_batch_size": 2, "seq_len": 256},
        "parallelism": {"cp": 4, **par}, "sim": {"fidelity": "explicit"}})


def _layer(graph, layer=1):
    return [t for t in graph.tasks if t.kind == "cp_comm" and t.meta.get("microbatch") == 0
            and t.name.startswith(f"layers.{layer}.")]


def _graph(par):
    s = _scenario(par)
    return build_graph(s, build_cluster(s.cluster))


def test_ulysses_lowering_all_to_alls_qkv_and_output_over_the_cp_group():
    # m = b·s/cp = 2·64 = 128 tokens, q = kv = o = 256: Q,K,V 2·128·768 = 196,608 B,
    # O 2·128·256 = 65,536 B; forward and backward (".bwd"), no ring passes.
    tasks = _layer(_graph({"cp_algorithm": "a2a"}))
    sizes = {t.name: t.bytes for t in tasks}
    assert sizes == {"layers.1.attn.qkv_a2a": 196_608, "layers.1.attn.out_a2a": 65_536,
                     "layers.1.attn.qkv_a2a.bwd": 196_608,
                     "layers.1.attn.out_a2a.bwd": 65_536}
    assert {t.comm.op for t in tasks} == {"all_to_all"}
    assert {t.ranks for t in tasks} == {(0, 1, 2, 3), (4, 5, 6, 7)}


def test_hierarchical_lowering_uses_consecutive_a2a_pairs_and_strided_rings():
    # u = 2: all-to-alls over CP ranks {0,1}, {2,3}; rings over {0,2}, {1,3}, one K,V pass
    # of 2·128·2·256 = 131,072 B forward (K,V + dK,dV backward: 262,144 B).
    tasks = _layer(_graph({"cp_algorithm": "a2a+p2p", "cp_a2a_size": 2}))
    a2a = {t.ranks for t in tasks if t.comm.op == "all_to_all"}
    assert a2a == {(0, 1), (2, 3), (4, 5), (6, 7)}
    passes = [t for t in tasks if t.comm.op != "all_to_all"]
    assert {tuple(sorted(t.ranks)) for t in passes} == {(0, 2), (1, 3), (4, 6), (5, 7)}
    assert sorted({t.bytes for t in passes}) == [131_072, 262_144]
    assert all(" kv 0" in t.name for t in passes)  # r - 1 = 1 pass per direction


@pytest.mark.parametrize("par", [{"cp_algorithm": "a2a"},
                                 {"cp_algorithm": "a2a+p2p", "cp_a2a_size": 2}])
def test_lowered_bytes_a_rank_sends_match_the_formula(par):
    # Rank 0's share of layer 1's CP traffic in the task graph = cp_traffic's formula.
    u = 4 if par["cp_algorithm"] == "a2a" else 2
    want = cp_traffic(par["cp_algorithm"], m=128, q=256, kv=256, o=256, dt=2, cp=4, u=u)
    sent = {"forward": 0.0, "backward": 0.0}
    for t in _layer(_graph(par)):
        if 0 not in t.ranks or (t.comm.op != "all_to_all" and t.ranks[0] != 0):
            continue
        share = (u - 1) / u if t.comm.op == "all_to_all" else 1.0
        bwd = ".bwd" in t.name or t.bytes == 262_144
        sent["backward" if bwd else "forward"] += share * t.bytes
    assert sent == {"forward": want.forward, "backward": want.backward}


def test_every_algorithm_does_the_same_attention_flops():
    flops = {a: sum(t.flops for t in _graph({"cp_algorithm": a, "cp_a2a_size": 2}
                                            if a == "a2a+p2p" else {"cp_algorithm": a}).tasks)
             for a in CP_ALGORITHMS}
    assert max(flops.values()) == pytest.approx(min(flops.values()), rel=1e-12)


def test_bad_cp_algorithm_input_is_a_scenario_error():
    with pytest.raises(ScenarioError, match="splits each TP rank's attention heads 8 ways"):
        load_scenario({"cluster": {"preset": "dgx-a100"}, "model": {"preset": "tiny-gpt"},
                       "training": {"global_batch_size": 8},
                       "parallelism": {"cp": 8, "cp_algorithm": "a2a"}})


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4096), st.integers(1, 64), st.integers(1, 64), st.integers(0, 4),
       st.integers(0, 4))
def test_hierarchy_interpolates_between_ring_and_ulysses(m, q, kv, i, j):
    # cp = 2^(i+j), u = 2^i: the traffic is the a2a share plus the ring share, and the
    # ends u = 1 and u = cp are exactly ring and a2a.
    cp, u = 2 ** (i + j), 2 ** i
    shape = dict(m=m, q=q, kv=kv, o=q, dt=2, cp=cp)
    mixed = cp_traffic("a2a+p2p", **shape, u=u)
    ring = cp_traffic("ring", **{**shape, "cp": cp // u}, u=1)
    ulysses = cp_traffic("a2a", **{**shape, "cp": u}, u=u)
    assert mixed.forward == pytest.approx(ring.forward + ulysses.forward, rel=1e-12)
    assert mixed.backward == pytest.approx(ring.backward + ulysses.backward, rel=1e-12)
    assert cp_traffic("a2a+p2p", **shape, u=1) == cp_traffic("ring", **shape, u=1)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]),
       st.data())
def test_split_group_blocks_and_strides_partition_the_group(cp, dp, tp, data):
    # Every member is in exactly one block and one stride group; a block and a stride group
    # meet in exactly one rank (the two levels form a grid).
    d = ParallelDims(tp=tp, cp=cp, dp=dp, cp_a2a=data.draw(st.sampled_from(
        [u for u in (1, 2, 4, 8) if cp % u == 0])))
    for r in range(d.world_size):
        group = d.group(r, "cp")
        blocks = {d.split_group(x, "cp", d.cp_a2a, "block") for x in group}
        strides = {d.split_group(x, "cp", d.cp_a2a, "stride") for x in group}
        assert sorted(x for b in blocks for x in b) == list(group)
        assert sorted(x for s_ in strides for x in s_) == list(group)
        assert all(len(set(b) & set(s_)) == 1 for b in blocks for s_ in strides)


def test_symmetric_fidelity_matches_explicit_under_hierarchical_cp():
    par = {"cp_algorithm": "a2a+p2p", "cp_a2a_size": 2}
    exp = simulate(_scenario(par)).summary
    sym_s = _scenario(par)
    sym_s.sim.fidelity = "symmetric"
    sym = simulate(sym_s).summary
    assert sym["step_time_s"] == pytest.approx(exp["step_time_s"], rel=1e-6)

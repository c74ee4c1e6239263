"""Every primitive x algorithm: the flow simulation matches its alpha-beta closed form.

Fabric: P GPUs on one full-bisection switch (StarFabric), each with its own uplink and
downlink of B bytes/s and alpha seconds GPU to GPU, no other traffic, the ideal backend
(no software latency, line rate). Numbers: n = 64 MB, P = 8, B = 100 GB/s, alpha = 2 us,
so n/B = 0.64 ms.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.comm import costs
from simtrain.comm.algorithms import ALGORITHMS, AlgorithmError, ring_channels
from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph

N, P, B, A = 64e6, 8, 100e9, 2e-6


def run(fabric, op, algorithm, nbytes=N, ranks=None, splits=None):
    ranks = list(range(fabric.num_gpus)) if ranks is None else ranks
    g = TaskGraph(fabric.num_gpus)
    g.collective(op, ranks, nbytes, op, algorithm=algorithm, splits=splits)
    tl = execute(g, fabric)
    return tl.end, tl


# (op, algorithm, closed form at N, P, A, B, hand value in seconds)
CASES = [
    # 14 alpha + 14/8 n/B = 28us + 1.12 ms
    ("all_reduce", "ring", costs.ring_all_reduce_time, 28e-6 + 1.12e-3),
    # one switch uplink per rank: two rings share it, so no gain over one ring
    ("all_reduce", "bidirectional_ring", costs.ring_all_reduce_time, 28e-6 + 1.12e-3),
    # 2 ceil(log2 8) (alpha + n/B) = 6 (2us + 0.64ms) = 3.852 ms
    ("all_reduce", "binomial", costs.binomial_all_reduce_time, 6 * (2e-6 + 0.64e-3)),
    # log2 8 (alpha + n/B) = 3 x 0.642 ms
    ("all_reduce", "recursive_doubling", costs.recursive_doubling_all_reduce_time,
     3 * (2e-6 + 0.64e-3)),
    # 2 log2 8 alpha + 14/8 n/B = 12us + 1.12 ms
    ("all_reduce", "halving_doubling", costs.halving_doubling_all_reduce_time, 12e-6 + 1.12e-3),
    # 7 alpha + 7/8 n/B = 14 us + 0.56 ms
    ("reduce_scatter", "ring", costs.ring_reduce_scatter_time, 14e-6 + 0.56e-3),
    ("reduce_scatter", "halving_doubling", costs.halving_doubling_reduce_scatter_time,
     6e-6 + 0.56e-3),
    ("all_gather", "ring", costs.ring_all_gather_time, 14e-6 + 0.56e-3),
    # two rings share each rank's single switch uplink: the same as one ring here
    ("reduce_scatter", "bidirectional_ring", costs.ring_reduce_scatter_time, 14e-6 + 0.56e-3),
    ("all_gather", "bidirectional_ring", costs.ring_all_gather_time, 14e-6 + 0.56e-3),
    ("all_gather", "recursive_doubling", costs.halving_doubling_reduce_scatter_time,
     6e-6 + 0.56e-3),
    ("all_gather", "halving_doubling", costs.halving_doubling_reduce_scatter_time,
     6e-6 + 0.56e-3),
    # pipelined chain: 7 alpha + n/B = 14us + 0.64 ms
    ("broadcast", "ring", costs.chain_broadcast_time, 14e-6 + 0.64e-3),
    ("reduce", "ring", costs.chain_broadcast_time, 14e-6 + 0.64e-3),
    # 3 (alpha + n/B) = 1.926 ms
    ("broadcast", "binomial", costs.binomial_broadcast_time, 3 * (2e-6 + 0.64e-3)),
    ("reduce", "binomial", costs.binomial_broadcast_time, 3 * (2e-6 + 0.64e-3)),
    # root's uplink carries 7 chunks of n/8: alpha + 7/8 n/B = 2us + 0.56 ms
    ("scatter", "direct", costs.linear_scatter_time, 2e-6 + 0.56e-3),
    ("gather", "direct", costs.linear_scatter_time, 2e-6 + 0.56e-3),
    # 3 alpha + (n/2 + n/4 + n/8)/B = 6us + 0.56 ms
    ("scatter", "binomial", costs.binomial_scatter_time, 6e-6 + 0.56e-3),
    ("gather", "binomial", costs.binomial_scatter_time, 6e-6 + 0.56e-3),
    # alpha + 7/8 n/B
    ("all_to_all", "direct", costs.direct_all_to_all_time, 2e-6 + 0.56e-3),
    # 7 (alpha + n/(8B)) = 7 (2us + 80us) = 574 us
    ("all_to_all", "pairwise", costs.pairwise_all_to_all_time, 7 * (2e-6 + 80e-6)),
]


def test_cases_cover_every_primitive_and_algorithm():
    covered = {(op, alg) for op, alg, _, _ in CASES}
    covered |= {("all_reduce", "tree"), ("all_reduce", "hierarchical"),
                ("all_reduce", "ring_2d"), ("send_recv", "direct"),
                ("barrier", "dissemination"), ("all_to_all_v", "direct"),
                ("all_to_all_v", "pairwise")}
    # in-network reductions: tests/comm/test_in_network.py and test_nvls_tree.py
    covered |= {("all_reduce", "nvls"), ("reduce_scatter", "nvls"), ("all_gather", "nvls"),
                ("all_reduce", "collnet"), ("all_reduce", "nvls_tree")}
    assert covered == {(op, alg) for op, table in ALGORITHMS.items() for alg in table}


@pytest.mark.parametrize(("op", "algorithm", "formula", "by_hand"), CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_flow_simulation_matches_closed_form(star_fabric, op, algorithm, formula, by_hand):
    assert formula(N, P, A, B) == pytest.approx(by_hand, rel=1e-9)
    simulated, _ = run(star_fabric(P, B, A), op, algorithm)
    assert simulated == pytest.approx(by_hand, rel=0.01)


def test_double_binary_tree_across_servers(star_fabric):
    # One GPU per server: pure double binary tree. depth = floor(log2 8) = 3;
    # 2 depth alpha + 2 n/B = 12 us + 1.28 ms.
    simulated, _ = run(star_fabric(P, B, A, gpus_per_server=1), "all_reduce", "tree")
    assert costs.double_binary_tree_all_reduce_time(N, P, A, B) == pytest.approx(1.292e-3)
    assert simulated == pytest.approx(1.292e-3, rel=0.01)


def test_tree_inside_one_server_is_pipelined_chains(star_fabric):
    # NCCL's tree inside a node is a chain. With G/2 = 4 channel pairs of chains rotated to
    # start at every GPU, GPU x receives from x+1 in 7 of the 8 chains (n/8 each): each
    # phase moves 7/8 n through a port. 2 [(P-1) alpha + 7/8 n/B] = 28 us + 1.12 ms.
    simulated, _ = run(star_fabric(P, B, A), "all_reduce", "tree")
    assert simulated == pytest.approx(28e-6 + 1.12e-3, rel=0.01)


def test_hierarchical_all_reduce(star_fabric):
    # 16 ranks as 4 servers x 4 GPUs. Intra RS: 3 alpha + 3/4 n/B; inter AR of n/4 over 4:
    # 6 alpha + 6/4 (n/4)/B; intra AG as RS. = 12 alpha + (0.75 + 0.375 + 0.75) n/B
    # = 24 us + 1.875 x 0.64 ms = 1.224 ms.
    fabric = star_fabric(16, B, A, gpus_per_server=4)
    assert costs.hierarchical_all_reduce_time(N, 4, 4, A, B, A, B) == pytest.approx(1.224e-3)
    assert run(fabric, "all_reduce", "hierarchical")[0] == pytest.approx(1.224e-3, rel=0.01)


def test_ring_2d_all_reduce(star_fabric):
    # 4 x 4 grid, halves in opposite orders. Phase 1: RS over 4 on n/2 in rows and in
    # columns at once; each rank's uplink carries 3/4 n/2 twice = 0.75 n: 3 alpha + 0.75 n/B.
    # Phase 2: AR of n/8 in columns and rows: 6 alpha + 2 x 6/4 x n/8 / B = 6 alpha + 0.375 n/B.
    # Phase 3 = phase 1. Total 12 alpha + 1.875 n/B = 24us + 1.2 ms = 1.224 ms.
    fabric = star_fabric(16, B, A, gpus_per_server=4)
    assert run(fabric, "all_reduce", "ring_2d")[0] == pytest.approx(1.224e-3, rel=0.01)


def test_bidirectional_ring_halves_the_bandwidth_term_on_duplex_links(duplex_ring_fabric):
    # Physical ring with both directions: 2(P-1) alpha + (P-1)/P n/B = 28us + 0.56 ms.
    simulated, _ = run(duplex_ring_fabric(P, B, A), "all_reduce", "bidirectional_ring")
    assert costs.bidirectional_ring_all_reduce_time(N, P, A, B) == pytest.approx(0.588e-3)
    assert simulated == pytest.approx(0.588e-3, rel=0.01)


def test_send_recv_and_barrier(star_fabric):
    # alpha + n/B = 2 us + 0.64 ms; barrier: ceil(log2 8) alpha = 6 us, no bytes.
    assert run(star_fabric(2, B, A), "send_recv", "direct")[0] == pytest.approx(0.642e-3)
    assert run(star_fabric(P, B, A), "barrier", "dissemination", nbytes=0)[0] == pytest.approx(
        costs.dissemination_barrier_time(P, A))


def test_all_to_all_v_moves_exactly_its_splits(star_fabric):
    # Rank 0 sends 30 MB to rank 1 and 10 MB to rank 2, others send 1 MB to each peer.
    # Busiest port: rank 0's uplink, 40 MB: alpha + 40e6/1e11 = 2 us + 0.4 ms.
    splits = [[0, 30e6, 10e6], [1e6, 0, 1e6], [1e6, 1e6, 0]]
    simulated, tl = run(star_fabric(3, B, A), "all_to_all_v", "direct", splits=splits)
    assert simulated == pytest.approx(0.402e-3, rel=0.01)
    assert sum(f.nbytes for f in tl.flows) == pytest.approx(44e6)
    pairwise, _ = run(star_fabric(3, B, A), "all_to_all_v", "pairwise", splits=splits)
    assert pairwise >= simulated


def test_all_reduce_equals_reduce_scatter_plus_all_gather(ring_fabric):
    fabric = ring_fabric(8, bandwidth=5e10, latency=2e-6)
    n = 64e6
    ar = run(fabric, "all_reduce", "ring", n)[0]
    rs = run(fabric, "reduce_scatter", "ring", n)[0]
    ag = run(fabric, "all_gather", "ring", n)[0]
    assert ar == pytest.approx(rs + ag, rel=1e-9)
    # (P-1) alpha + (P-1)/P n/B = 7*2us + 7/8 * 64e6/5e10 = 14e-6 + 1.12e-3 = 1.134e-3 s
    assert rs == pytest.approx(1.134e-3, rel=1e-6)


def test_ring_all_reduce_on_uniform_ring_by_hand(ring_fabric):
    # P = 4, n = 100 MB, B = 10 GB/s, alpha = 5 us: 6 x 5us + 1.5 x 1e8/1e10 = 0.015030 s.
    fabric = ring_fabric(4, bandwidth=1e10, latency=5e-6)
    assert run(fabric, "all_reduce", "ring", 1e8)[0] == pytest.approx(0.015030, rel=0.01)


def test_power_of_two_algorithms_refuse_other_sizes(star_fabric):
    with pytest.raises(AlgorithmError, match="power-of-two group, got 6 ranks; use ring"):
        run(star_fabric(6, B, A), "all_reduce", "halving_doubling")


def test_unknown_algorithm_is_a_clear_error(star_fabric):
    with pytest.raises(AlgorithmError, match="choose one of: auto, ring, tree"):
        run(star_fabric(2, B, A), "all_reduce", "bogus")


def test_multi_server_rings_rotate_exit_gpus_and_stay_on_rail(ring_fabric):
    fabric = ring_fabric(8, bandwidth=1.0, latency=0.0, gpus_per_server=4)
    channels = ring_channels(list(range(8)), fabric)
    assert len(channels) == 4
    # Channel c: server 0 runs [c, c+1, ..] and leaves from local (c-1) mod 4; server 1 runs
    # backwards from local (c-1) to local c, then wraps to server 0's local c.
    assert channels[1] == [1, 2, 3, 0, 4, 7, 6, 5]
    for order in channels:
        assert sorted(order) == list(range(8))
        hops = [(order[i], order[(i + 1) % 8]) for i in range(8)]
        crossing = [(a, b) for a, b in hops if a // 4 != b // 4]
        assert len(crossing) == 2 and all(a % 4 == b % 4 for a, b in crossing)
    assert sorted(order[3] for order in channels) == [0, 1, 2, 3]  # one exit GPU each


@settings(max_examples=25, deadline=None)
@given(p=st.integers(2, 8), n=st.floats(1e3, 1e9), bw=st.floats(1e9, 1e12),
       alpha=st.floats(0.0, 1e-5))
def test_ring_flow_simulation_matches_closed_form_property(p, n, bw, alpha, ring_fabric):
    fabric = ring_fabric(p, bandwidth=bw, latency=alpha)
    simulated = run(fabric, "all_reduce", "ring", n)[0]
    assert simulated == pytest.approx(costs.ring_all_reduce_time(n, p, alpha, bw), rel=1e-6)


@settings(max_examples=20, deadline=None)
@given(op_alg=st.sampled_from([(c[0], c[1]) for c in CASES]), n=st.floats(1e3, 1e9),
       extra=st.floats(1.0, 4.0))
def test_more_bandwidth_is_never_slower_and_bytes_are_conserved(star_fabric, op_alg, n, extra):
    op, alg = op_alg
    slow, tl_slow = run(star_fabric(P, B, A), op, alg, n)
    fast, tl_fast = run(star_fabric(P, B * extra, A), op, alg, n)
    assert fast <= slow * (1 + 1e-9)
    assert sum(f.nbytes for f in tl_fast.flows) == pytest.approx(
        sum(f.nbytes for f in tl_slow.flows))

"""Collective lowerings run on the engine match their alpha-beta closed forms."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.comm.algorithms import (
    lower,
    ring_all_reduce_time,
    ring_channels,
    ring_reduce_scatter_time,
)
from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph


def _collective_time(fabric, op, nbytes, algorithm="auto"):
    g = TaskGraph(fabric.num_gpus)
    g.collective(op, range(fabric.num_gpus), nbytes, op, algorithm=algorithm)
    return execute(g, fabric).end


def test_ring_all_reduce_closed_form_by_hand():
    # P = 4, n = 100 MB, B = 10 GB/s, alpha = 5 us per step.
    # 2(P-1) alpha = 6 * 5us = 30 us; 2(P-1)/P * n/B = 1.5 * 1e8 / 1e10 = 15 ms.
    # Total = 0.015030 s.
    assert ring_all_reduce_time(1e8, 4, 5e-6, 1e10) == pytest.approx(0.015030, rel=1e-12)


def test_ring_all_reduce_on_uniform_ring_matches_formula(ring_fabric):
    # Same numbers as above, simulated as flows on a directed ring of 4 GPUs.
    fabric = ring_fabric(4, bandwidth=1e10, latency=5e-6)
    assert _collective_time(fabric, "all_reduce", 1e8) == pytest.approx(0.015030, rel=0.01)


def test_ring_all_reduce_on_switch_matches_formula(star_fabric):
    # P = 8 on one switch, uplink/downlink 300 GB/s, 1 us GPU->GPU (0.5 us per link).
    # 14 * 1us + 14/8 * 1e9 / 3e11 = 14e-6 + 5.8333e-3 = 5.84733e-3 s.
    fabric = star_fabric(8, bandwidth=3e11, latency=1e-6)
    assert _collective_time(fabric, "all_reduce", 1e9) == pytest.approx(5.84733e-3, rel=0.01)


def test_all_reduce_equals_reduce_scatter_plus_all_gather(ring_fabric):
    fabric = ring_fabric(8, bandwidth=5e10, latency=2e-6)
    n = 64e6
    ar = _collective_time(fabric, "all_reduce", n)
    rs = _collective_time(fabric, "reduce_scatter", n)
    ag = _collective_time(fabric, "all_gather", n)
    assert ar == pytest.approx(rs + ag, rel=1e-9)
    # (P-1) alpha + (P-1)/P n/B = 7*2us + 7/8 * 64e6/5e10 = 14e-6 + 1.12e-3 = 1.134e-3 s
    assert rs == pytest.approx(ring_reduce_scatter_time(n, 8, 2e-6, 5e10), rel=0.01)
    assert rs == pytest.approx(1.134e-3, rel=1e-6)


def test_send_recv_is_alpha_plus_n_over_b(star_fabric):
    # 1 MB over 2 links of 10 GB/s, 1 us end to end: 1e-6 + 1e6/1e10 = 1.01e-4 s.
    fabric = star_fabric(2, bandwidth=1e10, latency=1e-6)
    g = TaskGraph(2)
    g.send_recv(0, 1, 1e6, "p2p")
    assert execute(g, fabric).end == pytest.approx(1.01e-4, rel=1e-9)


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
    # Each local GPU leaves server 0 in exactly one channel: one NIC per channel.
    exits = sorted(order[3] for order in channels)
    assert exits == [0, 1, 2, 3]


def test_unknown_algorithm_is_a_clear_error(ring_fabric):
    with pytest.raises(ValueError, match="choose one of: auto, ring"):
        lower("all_reduce", "bogus", [0, 1], 1.0, ring_fabric(2, 1.0, 0.0))


@settings(max_examples=25, deadline=None)
@given(p=st.integers(2, 8), n=st.floats(1e3, 1e9), bw=st.floats(1e9, 1e12),
       alpha=st.floats(0.0, 1e-5))
def test_ring_flow_simulation_matches_closed_form(p, n, bw, alpha, ring_fabric):
    fabric = ring_fabric(p, bandwidth=bw, latency=alpha)
    simulated = _collective_time(fabric, "all_reduce", n)
    assert simulated == pytest.approx(ring_all_reduce_time(n, p, alpha, bw), rel=1e-6)

"""Flow network: max-min fairness and transfer timing, checked against hand arithmetic."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.engine.network import FlowNetwork, isolated_time, max_min_rates


def test_single_flow_gets_the_bottleneck_rate():
    # Route over links of 10 and 4 B/s: the flow runs at min = 4 B/s.
    assert max_min_rates([(0, 1)], [10.0, 4.0]) == [4.0]


def test_two_flows_share_a_link_equally():
    # Both flows cross link 0 (capacity 10): 5 B/s each.
    assert max_min_rates([(0,), (0, 1)], [10.0, 100.0]) == [5.0, 5.0]


def test_max_min_gives_leftover_to_unconstrained_flow():
    # Flow A uses links 0 (cap 2) and 1 (cap 10); flow B uses only link 1.
    # A is bottlenecked at 2 on link 0; B takes what is left on link 1: 10 - 2 = 8.
    assert max_min_rates([(0, 1), (1,)], [2.0, 10.0]) == [2.0, 8.0]


def test_empty_route_is_instant():
    assert max_min_rates([()], [1.0]) == [float("inf")]


def _run_transfers(capacity, flows):
    """flows: list of (start_time, route, nbytes); returns finish times."""
    env = simpy.Environment()
    net = FlowNetwork(env, [type("L", (), {"bandwidth": c})() for c in capacity])
    finish = [None] * len(flows)

    def starter(i, start, route, nbytes):
        yield env.timeout(start)
        yield net.transfer(route, nbytes)
        finish[i] = env.now

    for i, (start, route, nbytes) in enumerate(flows):
        env.process(starter(i, start, route, nbytes))
    env.run()
    return finish


def test_contention_halves_per_flow_bandwidth():
    # Two 100-byte flows on one 10 B/s link, started together: 5 B/s each -> both end at 20 s.
    assert _run_transfers([10.0], [(0, (0,), 100.0), (0, (0,), 100.0)]) == [
        pytest.approx(20.0),
        pytest.approx(20.0),
    ]


def test_rates_recomputed_when_a_flow_ends():
    # A: 100 B, B: 50 B on a 10 B/s link. Shared at 5 B/s until B ends at t=10 (A has 50 left),
    # then A runs alone at 10 B/s for 5 s: A ends at 15 s.
    a, b = _run_transfers([10.0], [(0, (0,), 100.0), (0, (0,), 50.0)])
    assert b == pytest.approx(10.0)
    assert a == pytest.approx(15.0)


def test_rates_recomputed_when_a_flow_starts():
    # A (100 B) alone at 10 B/s for 4 s (40 B moved), then B (30 B) joins: 5 B/s each.
    # B ends at 4 + 30/5 = 10 s; A has 60 - 30 = 30 B left, alone: 10 + 3 = 13 s.
    a, b = _run_transfers([10.0], [(0, (0,), 100.0), (4, (0,), 30.0)])
    assert b == pytest.approx(10.0)
    assert a == pytest.approx(13.0)


def test_disjoint_links_do_not_interact():
    a, b = _run_transfers([10.0, 10.0], [(0, (0,), 100.0), (0, (1,), 100.0)])
    assert a == pytest.approx(10.0) and b == pytest.approx(10.0)


@settings(max_examples=60, deadline=None)
@given(
    caps=st.lists(st.floats(1.0, 100.0), min_size=1, max_size=5),
    picks=st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=3), min_size=1, max_size=6),
)
def test_max_min_is_feasible_and_every_flow_has_a_saturated_bottleneck(caps, picks):
    routes = [tuple(sorted({p % len(caps) for p in pick})) for pick in picks]
    rates = max_min_rates(routes, caps)
    load = [0.0] * len(caps)
    for route, rate in zip(routes, rates, strict=True):
        for link in route:
            load[link] += rate
    for link, cap in enumerate(caps):
        assert load[link] <= cap * (1 + 1e-9)
    # Max-min optimality: each flow crosses a saturated link where it has the largest rate.
    for route, rate in zip(routes, rates, strict=True):
        assert any(
            load[ln] >= caps[ln] * (1 - 1e-9)
            and all(r <= rate * (1 + 1e-9) for rt, r in zip(routes, rates, strict=True) if ln in rt)
            for ln in route
        )


@settings(max_examples=40, deadline=None)
@given(extra=st.floats(0.0, 100.0), nbytes=st.floats(1.0, 1e6))
def test_more_bandwidth_is_never_slower(extra, nbytes):
    slow = _run_transfers([10.0, 20.0], [(0, (0, 1), nbytes), (0, (1,), nbytes)])
    fast = _run_transfers([10.0 + extra, 20.0], [(0, (0, 1), nbytes), (0, (1,), nbytes)])
    assert max(fast) <= max(slow) * (1 + 1e-9)


def test_coupled_ring_hops_share_one_rate_and_free_what_they_cannot_use() -> None:
    # A two-hop ring: hop A on link 0 (10 B/s), hop B on link 1 (2 B/s, the slow hop); a
    # competing flow X also crosses link 0. Independent flows split link 0 5/5 although
    # the ring can never move faster than hop B's 2 B/s. Coupled (one pipelined ring),
    # the ring runs at 2 on both its links and X gets the other 8 on link 0.
    from simtrain.engine.network import couple

    capacity = [10.0, 2.0]
    independent = max_min_rates([(0,), (1,), (0,)], capacity)
    assert independent == [5.0, 2.0, 5.0]
    merged, weights, members = couple([((0,), 10.0), ((1,), 10.0)], None, [0, 0])
    assert merged == [((0, 1), 10.0)] and weights == [(1.0, 1.0)] and members == [[0, 1]]
    rates = max_min_rates([merged[0][0], (0,)], capacity, weights=[weights[0], None])
    assert rates == [2.0, 8.0]
    # On an idle network coupling changes nothing: the ring ends when its slow hop does,
    # 10 B / 2 B/s = 5 s either way.
    flows = [((0,), 10.0), ((1,), 10.0)]
    assert isolated_time(flows, capacity) == pytest.approx(5.0)
    assert isolated_time(flows, capacity, coupled=[0, 0]) == pytest.approx(5.0)
    # Hops that share a link count twice on it: two hops over link 0 move at 5 each.
    merged, weights, _ = couple([((0,), 1.0), ((0, 1), 1.0)], None, [7, 7])
    assert merged == [((0, 1), 1.0)] and weights == [(2.0, 1.0)]


@settings(max_examples=60, deadline=None)
@given(
    shared=st.lists(st.floats(1.0, 100.0), min_size=1, max_size=4),
    own=st.lists(st.floats(0.5, 200.0), min_size=1, max_size=5),
    weight=st.sampled_from([1.0, 2.0, 3.0]),
)
def test_a_link_only_one_flow_crosses_acts_as_that_flows_cap(shared, own, weight):
    # Flow i crosses every shared link and its own private link of capacity own[i] with
    # weight w: exactly as if it had a cap of own[i] / w on the shared links alone.
    n = len(own)
    capacity = list(shared) + list(own)
    shared_route = tuple(range(len(shared)))
    with_private = [shared_route + (len(shared) + i,) for i in range(n)]
    weights = [(1.0,) * len(shared) + (weight,) for _ in range(n)]
    folded = max_min_rates(with_private, capacity, weights=weights)
    capped = max_min_rates([shared_route] * n, capacity, caps=[c / weight for c in own])
    assert folded == pytest.approx(capped, rel=1e-12)


def test_repeated_flow_sets_reuse_their_rates_and_bad_weights_still_fail():
    # Two identical pairs of flows on a 10 B/s link, the second pair at t = 100 s after the
    # first ended: each pair shares 5 B/s, so 50 B take 10 s, and the second pair's rating
    # (same routes, caps, weights) comes from the memo instead of a new filling.
    env = simpy.Environment()
    net = FlowNetwork(env, [type("L", (), {"bandwidth": 10.0})()])
    ends: list[float] = []

    def pair(start: float):
        yield env.timeout(start)
        done = yield net.transfer_all([((0,), 50.0), ((0,), 50.0)])
        ends.extend(done)

    env.process(pair(0.0))
    env.process(pair(100.0))
    env.run()
    assert ends == [10.0, 10.0, 110.0, 110.0]
    assert len(net._rates) == 1  # one distinct connected set: rated once
    good = (2.0,)
    net.transfer_all([((0,), 1.0)], weights=[good])
    with pytest.raises(ValueError, match="weights must be finite"):
        net.transfer_all([((0,), 1.0)], weights=[(float("nan"),)])

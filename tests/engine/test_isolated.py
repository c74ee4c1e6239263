"""Isolated batches: a batch alone on its links runs as one unit, and expands when joined."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.engine.isolated import Ends, trajectory
from simtrain.engine.network import FlowNetwork, isolated_time, max_min_rates


def _link(bandwidth: float) -> object:
    return type("L", (), {"bandwidth": bandwidth})()


def test_trajectory_ends_the_small_flow_first_then_speeds_up_the_other():
    # 10 B and 30 B on one 2 B/s link: 1 B/s each, the 10 B flow ends at 10 s with 20 B
    # left on the other, which then runs alone at 2 B/s: 10 + 20 / 2 = 20 s.
    path = trajectory([10.0, 30.0], lambda active: max_min_rates([(0,)] * len(active), [2.0]))
    assert path.ends == (10.0, 20.0)
    assert path.last == 20.0
    # At 15 s: the first has ended; the second has 20 - 2 * (15 - 10) = 10 B left at 2 B/s.
    assert path.state_at(15.0) == ([0], [(1, 10.0, 2.0)])
    # At 4 s: nothing has ended; 10 - 4 = 6 B and 30 - 4 = 26 B left, at 1 B/s each.
    assert path.state_at(4.0) == ([], [(0, 6.0, 1.0), (1, 26.0, 1.0)])


def test_trajectory_refuses_an_end_that_is_not_finite():
    with pytest.raises(ValueError, match="out of range"):
        trajectory([1e308], lambda active: [1e-300])


def test_ends_are_read_relative_to_the_batch_start():
    path = trajectory([10.0, 30.0], lambda active: max_min_rates([(0,)] * len(active), [2.0]))
    ends = Ends(100.0, path, 120.0)
    # 100 + 10 for the first; the last ends at the wake that ended the batch.
    assert list(ends) == [110.0, 120.0]
    assert ends[0] == 110.0 and ends[1:] == [120.0] and len(ends) == 2


def _run(capacity: list[float], batches: list[tuple[float, list[tuple[tuple[int, ...], float]]]]
         ) -> list[list[float]]:
    """Each batch (start, [(route, bytes)]) started together at its time; their ends."""
    env = simpy.Environment()
    net = FlowNetwork(env, [_link(c) for c in capacity])
    out: list[list[float]] = [[] for _ in batches]

    def starter(k: int, start: float, flows: list[tuple[tuple[int, ...], float]]):
        yield env.timeout(start)
        out[k] = list((yield net.transfer_all(flows)))

    for k, (start, flows) in enumerate(batches):
        env.process(starter(k, start, flows))
    env.run()
    return out


def test_a_flow_joining_an_isolated_batch_shares_with_what_it_has_left():
    # A (10 B) and B (30 B) start alone on link 0 (2 B/s): 1 B/s each. At t = 5, C (10 B)
    # joins: A has 5 B left, B 25 B; three flows at 2/3 B/s: A ends at 5 + 5 / (2/3) = 12.5
    # with B at 25 - 7.5 * 2/3 = 20 B and C at 10 - 5 = 5 B; at 1 B/s each C ends at
    # 12.5 + 5 = 17.5 with B at 15 B, which alone at 2 B/s ends at 17.5 + 7.5 = 25.
    ends = _run([2.0], [(0.0, [((0,), 10.0), ((0,), 30.0)]), (5.0, [((0,), 10.0)])])
    assert ends[0] == [pytest.approx(12.5), pytest.approx(25.0)]
    assert ends[1] == [pytest.approx(17.5)]


def test_batches_on_disjoint_links_do_not_touch():
    # Link 0 (2 B/s) carries 10 B, link 1 (1 B/s) 10 B started at t = 3: 5 s and 3 + 10 s.
    ends = _run([2.0, 1.0], [(0.0, [((0,), 10.0)]), (3.0, [((1,), 10.0)])])
    assert ends == [[5.0], [13.0]]


flows_st = st.lists(st.tuples(st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True),
                              st.floats(1.0, 1e3)), min_size=1, max_size=6)


@settings(max_examples=25, deadline=None)
@given(flows_st, st.lists(st.floats(1.0, 10.0), min_size=4, max_size=4))
def test_an_isolated_batch_ends_when_isolated_time_says(flows, capacity):
    transfers = [(tuple(route), nbytes) for route, nbytes in flows]
    (ends,) = _run(capacity, [(0.0, transfers)])
    assert max(ends) == pytest.approx(isolated_time(transfers, capacity), rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(flows_st, flows_st, st.floats(0.0, 50.0),
       st.lists(st.floats(1.0, 10.0), min_size=4, max_size=4))
def test_joining_an_isolated_batch_matches_starting_its_flows_one_by_one(first, second, at,
                                                                        capacity):
    # The same flows as single-flow batches cannot run alone once two share a link, so the
    # network runs them flow by flow: the ends must agree with the batched run.
    a = [(tuple(route), nbytes) for route, nbytes in first]
    b = [(tuple(route), nbytes) for route, nbytes in second]
    batched = _run(capacity, [(0.0, a), (at, b)])
    single = _run(capacity, [(0.0, [f]) for f in a] + [(at, [f]) for f in b])
    flat = [e for ends in batched for e in ends]
    assert flat == pytest.approx([e for (e,) in single], rel=1e-9)

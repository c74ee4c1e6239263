"""Flow network: connected sets kept as groups (no walk over links), the rates memo, and
flows that end at the same instant re-rated together."""

from __future__ import annotations

from itertools import chain

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.engine import network
from simtrain.engine.network import FlowNetwork, max_min_rates
from simtrain.engine.units import Batch, Flow


def _links(capacity):
    return [type("L", (), {"bandwidth": c})() for c in capacity]


def _walk(net: FlowNetwork, routes) -> list[Flow]:
    """The active flows connected to ``routes`` through shared links (breadth first over
    the network's link table), in creation order: the oracle the groups replace."""
    found: dict[int, Flow] = {}
    frontier = set(chain.from_iterable(routes))
    seen: set[int] = set()
    while frontier:
        seen |= frontier
        new = [f for link in frontier for f in net._users.get(link, {}).values()
               if f.id not in found]
        for f in new:
            found[f.id] = f
        frontier = {link for f in new for link in f.route} - seen
    return [found[i] for i in sorted(found)]


class _WalkNetwork(FlowNetwork):
    """The network re-rating what a walk over the link table finds (the former code)."""

    def _component(self, live):
        return _walk(self, [f.route for f in live])

    def _rerate(self, ended):
        self._recompute(_walk(self, [f.route for f in ended]))


def _groups_are_components(net: FlowNetwork) -> None:
    active = [f for f in net._flows.values() if isinstance(f, Flow)]
    for flow in active:
        assert flow.group is not None and flow in flow.group
        assert flow.group == _walk(net, [flow.route])


def test_pieces_by_hand():
    # Flows 0 and 2 share link 5, flow 1 is alone on link 7, flow 3 joins 0 via link 6:
    # sets {0, 2, 3} (labelled 0, by its first flow) and {1} (labelled 1).
    env = simpy.Environment()
    net = FlowNetwork(env, _links([1.0] * 9))
    batch = Batch(env.event(), [], 0)
    flows = [Flow(i, route, 1.0, batch, i) for i, route in enumerate([(5, 6), (7,), (5,), (6, 8)])]
    net._add(flows)
    assert net._pieces(flows) == (0, 1, 0, 0)
    assert net._pieces([flows[1]]) == ()  # one set
    assert net._pieces([flows[0], flows[2], flows[3]]) == ()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0, 2.5]),
                          st.lists(st.tuples(st.lists(st.integers(0, 5), min_size=1,
                                                      max_size=3, unique=True),
                                             st.sampled_from([5.0, 10.0, 20.0, 35.5])),
                                   min_size=1, max_size=5)),
                min_size=1, max_size=7))
def test_groups_end_every_flow_bit_for_bit_as_the_walk(run_flows, batches):
    # Sizes from a few values, so flows often end at the same instant (batched ends) and
    # ends split groups; every group must stay its flows' connected set, and every end time
    # must be the walk's to the bit.
    capacity = [10.0, 4.0, 7.0, 10.0, 2.0, 5.0]
    batches = [(t, [(tuple(r), nb) for r, nb in flows]) for t, flows in batches]
    grouped = run_flows(capacity, batches, FlowNetwork, _groups_are_components)
    assert grouped == run_flows(capacity, batches, _WalkNetwork)


def test_flows_ending_at_one_instant_are_rerated_once(monkeypatch, run_flows):
    # Links 0 and 1 (10 B/s each): A and B (10 B) on link 0, C (10 B) and D (40 B) on
    # link 1, E (10 B) on both, all from t=0. Each link holds three flows, so all five run
    # at 10/3 B/s, and A, B, C and E (10 B each) end together at t = 10 / (10/3) = 3: one
    # wake, one re-rating of what is left (D alone: 40 - 10 = 30 B at 10 B/s, ends at 6).
    calls: list[list[int]] = []
    original = FlowNetwork._recompute

    def spy(self, flows, grouped=False):
        calls.append([f.id for f in flows])
        original(self, flows, grouped)

    monkeypatch.setattr(FlowNetwork, "_recompute", spy)
    (a, b, c, d), (e,) = run_flows([10.0, 10.0], [
        (0.0, [((0,), 10.0), ((0,), 10.0), ((1,), 10.0), ((1,), 40.0)]),
        (0.0, [((0, 1), 10.0)])])  # two batches on shared links: flows, not a unit
    assert a == b == c == e == pytest.approx(3.0) and d == pytest.approx(6.0)
    # The start, one re-rating at t=3, none when D ends (nothing was connected to it).
    assert calls == [[0, 1, 2, 3, 4], [3]]


def test_a_memo_hit_gives_the_rates_of_a_fresh_filling():
    env = simpy.Environment()
    capacity = [10.0, 4.0, 7.0]
    net = FlowNetwork(env, _links(capacity))
    routes = ((0, 1), (1, 2), (0,))
    caps = (float("inf"), 1.5, float("inf"))
    first = net._rates_for(routes, caps, None)
    again = net._rates_for(tuple(tuple(r) for r in routes), tuple(caps), (None, None, None))
    assert again is first  # equal inputs (caps, all-None weights canonical): one entry
    assert again == max_min_rates(routes, capacity, caps)


def test_the_memo_is_emptied_when_full(monkeypatch):
    monkeypatch.setattr(network, "_RATES_MEMO", 2)
    env = simpy.Environment()
    net = FlowNetwork(env, _links([10.0, 4.0, 7.0]))
    for link in range(3):
        net._rates_for(((link,),), None, None)
    # The third distinct set found the memo full (2 entries): it was emptied first.
    assert list(net._rates) == [(((2,),), None, None)]

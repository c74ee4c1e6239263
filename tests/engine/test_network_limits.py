"""The flow solver terminates for any finite input and refuses non-finite ones (issue 20)."""

from __future__ import annotations

import math

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.engine.network import FlowNetwork, isolated_time


class _Link:
    def __init__(self, bandwidth: float) -> None:
        self.bandwidth = bandwidth
        self.kind = "nvlink"


# Every finite size, from the smallest subnormal (5e-324) to 1e300 bytes, and capacities
# over 30 orders of magnitude: extremes are where float residue used to stall progress.
sizes = st.one_of(st.just(5e-324), st.just(0.0),
                  st.floats(min_value=0.0, max_value=1e300, allow_nan=False,
                            allow_infinity=False))
capacities = st.floats(min_value=1e-6, max_value=1e24, allow_nan=False, allow_infinity=False)


@st.composite
def flow_sets(draw: st.DrawFn) -> tuple[list[float], list[tuple[float, tuple[int, ...], float]]]:
    links = draw(st.lists(capacities, min_size=1, max_size=4))
    route = st.lists(st.integers(0, len(links) - 1), min_size=1, max_size=3, unique=True)
    flows = draw(st.lists(st.tuples(st.floats(0.0, 10.0), route.map(tuple), sizes),
                          min_size=1, max_size=6))
    return links, flows


def _run_bounded(links: list[float], flows: list[tuple[float, tuple[int, ...], float]]
                 ) -> tuple[list[float | None], int]:
    """Run the flows in SimPy one event at a time; fail if it takes absurdly many events."""
    env = simpy.Environment()
    net = FlowNetwork(env, [_Link(c) for c in links])
    finish: list[float | None] = [None] * len(flows)

    def starter(i: int, start: float, route: tuple[int, ...], nbytes: float):  # noqa: ANN202
        yield env.timeout(start)
        yield net.transfer(route, nbytes)
        finish[i] = env.now

    for i, (start, route, nbytes) in enumerate(flows):
        env.process(starter(i, start, route, nbytes))
    events = 0
    # Each flow costs a handful of events (start, wake, finish); 50 per flow is generous.
    while env.peek() < math.inf:
        env.step()
        events += 1
        assert events < 50 * len(flows) + 50, "the flow network does not make progress"
    return finish, events


@settings(max_examples=150, deadline=None)
@given(flow_sets())
def test_flow_network_terminates_for_any_finite_input(case) -> None:
    links, flows = case
    finish, _ = _run_bounded(links, flows)
    for (start, _route, _nbytes), end in zip(flows, finish, strict=True):
        assert end is not None and math.isfinite(end) and end >= start


@settings(max_examples=150, deadline=None)
@given(flow_sets())
def test_isolated_time_terminates_and_is_finite(case) -> None:
    links, flows = case
    t = isolated_time([(route, nbytes) for _, route, nbytes in flows], links)
    assert math.isfinite(t) and t >= 0


def test_a_subnormal_collective_ends_at_once() -> None:
    # 5e-324 bytes / 1e9 B/s underflows to 0 s: it used to loop forever on the residue.
    assert isolated_time([((0,), 5e-324), ((0, 1), 5e-324)], [1e9, 1e9]) == 0.0
    finish, events = _run_bounded([1e9], [(0.0, (0,), 5e-324), (0.0, (0,), 1.0)])
    assert finish[0] == 0.0 and finish[1] == pytest.approx(1e-9)  # 1 B at 1e9 B/s
    assert events < 20


@pytest.mark.parametrize("nbytes", [math.inf, math.nan, -1.0])
def test_non_finite_or_negative_sizes_are_errors(nbytes: float) -> None:
    with pytest.raises(ValueError, match="finite, non-negative"):
        isolated_time([((0,), nbytes)], [1e9])
    env = simpy.Environment()
    with pytest.raises(ValueError, match="finite, non-negative"):
        FlowNetwork(env, [_Link(1e9)]).transfer((0,), nbytes)


@pytest.mark.parametrize("capacity", [math.inf, math.nan, 0.0, -5.0])
def test_bad_capacities_are_errors(capacity: float) -> None:
    with pytest.raises(ValueError, match="link capacity"):
        FlowNetwork(simpy.Environment(), [_Link(capacity)])
    with pytest.raises(ValueError, match="link capacity"):
        isolated_time([((0,), 1.0)], [capacity])

"""Units of the flow network: a batch joining a running unit ends as flow by flow would."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.engine import units


def test_a_batch_joining_a_running_flow_ends_on_its_own(run_flows):
    # Link 0: 10 B/s, link 1: 10 B/s. A (100 B on link 0) runs alone from t=0; at t=2 it
    # has 80 B left and B (20 B over links 0 and 1) joins it: 5 B/s each, so B ends at
    # 2 + 20/5 = 6 while A has 80 - 4*5 = 60 B left, then alone at 10 B/s: A ends at 12.
    a, b = run_flows([10.0, 10.0], [(0.0, [((0,), 100.0)]), (2.0, [((0, 1), 20.0)])])
    assert a == [pytest.approx(12.0)] and b == [pytest.approx(6.0)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0, 2.5]),
                          st.lists(st.tuples(st.lists(st.integers(0, 4), min_size=1, max_size=3,
                                                      unique=True),
                                             st.floats(1.0, 50.0)),
                                   min_size=1, max_size=4)),
                min_size=1, max_size=6))
def test_joining_units_ends_every_flow_as_flow_by_flow(run_flows, batches):
    capacity = [10.0, 4.0, 7.0, 10.0, 2.0]
    batches = [(t, [(tuple(r), nb) for r, nb in flows]) for t, flows in batches]
    joined = run_flows(capacity, batches)
    saved = units.JOIN_MAX_FLOWS
    units.JOIN_MAX_FLOWS = -1  # never join: every joined unit expands into flows
    try:
        apart = run_flows(capacity, batches)
    finally:
        units.JOIN_MAX_FLOWS = saved
    for x, y in zip(joined, apart, strict=True):
        assert x == pytest.approx(y, rel=1e-9)

"""Max-min sharing: the numpy filling agrees with the heap filling; the network split keeps
its old import path."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.engine.sharing import couple, max_min_rates


def test_vector_filling_by_hand():
    # Links 0 (cap 2) and 1 (cap 10): A crosses both, B and C only link 1. Link 0 limits A
    # to 2; link 1 then has 8 left for B and C: 4 each. Forced through the numpy path.
    routes = [(0, 1), (1,), (1,)]
    assert max_min_rates(routes, [2.0, 10.0], vector=True) == [2.0, 4.0, 4.0]
    assert max_min_rates(routes, [2.0, 10.0], vector=False) == [2.0, 4.0, 4.0]


def test_vector_filling_with_caps_weights_and_an_empty_route():
    # Flow 0 capped at 1 B/s; flow 1 weighted 3 on link 0 (cap 12): after flow 0 takes 1,
    # 11 is left for weight 3 -> 11/3 each; the empty route is instant.
    routes = [(0,), (0,), ()]
    weights = [(1.0,), (3.0,), ()]
    for vector in (True, False):
        rates = max_min_rates(routes, [12.0], [1.0, math.inf, math.inf], weights,
                              vector=vector)
        assert rates[0] == 1.0 and math.isclose(rates[1], 11.0 / 3.0) and rates[2] == math.inf


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 12).flatmap(lambda n_links: st.tuples(
    st.lists(st.floats(1.0, 1e3), min_size=n_links, max_size=n_links),
    st.lists(st.lists(st.integers(0, n_links - 1), min_size=1, max_size=5, unique=True),
             min_size=1, max_size=30),
    st.lists(st.floats(1.0, 4.0), min_size=30, max_size=30))))
def test_vector_and_heap_fillings_agree(case):
    capacity, routes, scale = case
    routes = [tuple(r) for r in routes]
    weights = [tuple(scale[(i + k) % 30] for k in range(len(r))) for i, r in enumerate(routes)]
    caps = [scale[i % 30] * 50.0 for i in range(len(routes))]
    heap = max_min_rates(routes, capacity, caps, weights, vector=False)
    array = max_min_rates(routes, capacity, caps, weights, vector=True)
    assert all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(heap, array, strict=True))


def test_network_module_still_exports_the_sharing_functions():
    from simtrain.engine import network, sharing

    assert network.max_min_rates is sharing.max_min_rates
    assert network.isolated_time is sharing.isolated_time


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 6), max_size=4),
                          st.sampled_from([0.0, 1.0, 5.0]), st.integers(0, 2)),
                min_size=1, max_size=12))
def test_couple_without_weights_counts_as_with_unit_weights(hops):
    # The unweighted count (a Counter) and the weighted loop with every weight 1.0 give
    # the same merged routes, in the same link order, with the same counts and bytes.
    transfers = [(tuple(route), size) for route, size, _ in hops]
    labels = [label for _, _, label in hops]
    ones = [tuple(1.0 for _ in route) for route, _ in transfers]
    assert couple(transfers, None, labels) == couple(transfers, ones, labels)

"""Batched emission (compute_each, collective_each, send_recv_each) leaves the graph's
columns and tables exactly as the same tasks added one by one do."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.engine.taskgraph import TaskGraph, TaskGraphError

COLUMNS = ("kind", "name", "stream", "group", "duration", "flops", "nbytes", "comm", "meta",
           "dep_start", "dep_ids")
TABLES = ("kinds", "names", "stream_names", "groups", "comms", "metas")


def state(g: TaskGraph) -> tuple[object, ...]:
    return (tuple(bytes(getattr(g, c)) for c in COLUMNS),
            tuple(list(getattr(g, t)) for t in TABLES))


# A batch: ("compute", ranks, name, per-rank durations or None, dep picks) or
# ("collective", groups (disjoint pairs or TP-like blocks), op, nbytes, dep picks) or
# ("p2p", pairs, nbytes, dep picks); dep picks index the tasks added before the batch.
batch = st.one_of(
    st.tuples(st.just("compute"), st.sampled_from([(0, 1, 2, 3), (2, 3), (5, 1, 4)]),
              st.sampled_from(["a", "b"]),
              st.one_of(st.none(), st.lists(st.sampled_from([0.0, 1.5, 2.0]), min_size=4,
                                            max_size=4)),
              st.lists(st.lists(st.integers(0, 50), max_size=3), min_size=4, max_size=4)),
    st.tuples(st.just("collective"), st.sampled_from([[(0, 1), (2, 3)], [(4, 5, 6, 7)],
                                                      [(1, 0), (3, 2), (5, 4)]]),
              st.sampled_from(["all_reduce", "all_gather"]), st.sampled_from([8.0, 1e6]),
              st.lists(st.lists(st.integers(0, 50), max_size=3), min_size=3, max_size=3)),
    st.tuples(st.just("p2p"), st.sampled_from([((0, 2), (4, 6)), ((1,), (5,))]),
              st.sampled_from([4.0, 64.0]),
              st.lists(st.lists(st.integers(0, 50), max_size=2), min_size=2, max_size=2)),
)


def emit(g: TaskGraph, b: tuple, batched: bool) -> None:
    n = len(g)
    pick = [sorted({d % n for d in ds}) if n else [] for ds in b[-1]]
    meta = {"microbatch": len(b[1])}
    if b[0] == "compute":
        _, ranks, name, durations, _ = b
        deps = pick[:len(ranks)] + [[]] * (len(ranks) - len(pick))
        each = [1.0] * len(ranks) if durations is None else durations[:len(ranks)]
        if batched:
            g.compute_each(ranks, name, 1.0 if durations is None else each, deps=deps,
                           flops=[2.0 * t for t in each], meta=meta)
        else:
            for r, t, d in zip(ranks, each, deps, strict=True):
                g.compute(r, name, t, deps=d, flops=2.0 * t, meta=meta)
    elif b[0] == "collective":
        _, groups, op, nbytes, _ = b
        deps = pick[:len(groups)]
        if batched:
            g.collective_each(op, groups, nbytes, op, stream="tp", deps=deps, meta=meta)
        else:
            for grp, d in zip(groups, deps, strict=True):
                g.collective(op, grp, nbytes, op, stream="tp", deps=d, meta=meta)
    else:
        _, (srcs, dsts), nbytes, _ = b
        deps = pick[:len(srcs)]
        if batched:
            g.send_recv_each(srcs, dsts, nbytes, "pp", stream="pp", deps=deps, meta=meta)
        else:
            for s, d, dep in zip(srcs, dsts, deps, strict=True):
                g.send_recv(s, d, nbytes, "pp", stream="pp", deps=dep, meta=meta)


@settings(max_examples=60, deadline=None)
@given(st.lists(batch, min_size=1, max_size=8))
def test_batches_build_the_graph_tasks_one_by_one_build(batches: list[tuple]) -> None:
    one, many = TaskGraph(8), TaskGraph(8)
    for b in batches:
        emit(one, b, batched=False)
        emit(many, b, batched=True)
    assert state(many) == state(one)


def test_a_batch_with_copies_shares_the_interned_specs() -> None:
    g = TaskGraph(8)
    copies = [((2, 3),), ((6, 7),)]
    first = g.collective_each("all_reduce", [(0, 1), (4, 5)], 8.0, "ar", deps=[[], []],
                              copies=copies)
    again = g.collective_each("all_reduce", [(0, 1), (4, 5)], 8.0, "ar",
                              deps=[[first], [first + 1]], copies=copies)
    assert [g.comm_spec(t).copies for t in range(4)] == [((2, 3),), ((6, 7),)] * 2
    assert g.comm[again] == g.comm[first] and len(g.comms) == 2
    assert g.deps(again + 1) == (first + 1,)


def test_a_bad_batch_raises_what_one_by_one_raises() -> None:
    g = TaskGraph(4)
    g.collective_each("all_reduce", [(0, 1)], 8.0, "ar", deps=[[]])
    with pytest.raises(TaskGraphError, match="depends on task 5, which was not added"):
        g.collective_each("all_reduce", [(0, 1), (2, 3)], 8.0, "ar", deps=[[0], [5]])
    with pytest.raises(TaskGraphError, match="uses rank 4"):
        g.send_recv_each([0], [4], 8.0, "pp", deps=[[]])
    with pytest.raises(TaskGraphError, match="copy .* does not match the group size 2"):
        g.collective_each("all_reduce", [(0, 1), (2, 3)], 8.0, "ar", deps=[[], []],
                          copies=[(), ((1, 2, 3),)])
    with pytest.raises(TaskGraphError, match="finite duration"):
        g.compute_each((0, 1), "c", float("nan"), deps=[[], []], flops=0.0)
    with pytest.raises(TaskGraphError, match="2 senders for 1 receivers"):
        g.send_recv_each([0, 1], [2], 8.0, "pp", deps=[[], []])

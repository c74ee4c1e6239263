"""The timeline's columns: sorted in place by end, read back as the span table's arrays."""

from __future__ import annotations

import numpy as np
import pytest

from simtrain.engine.taskgraph import TaskGraph
from simtrain.engine.timeline import Span, Timeline


def _graph() -> TaskGraph:
    g = TaskGraph(num_ranks=2)
    g.compute(0, "fwd", 1.0, kind="forward", flops=10.0)  # task 0
    g.collective("all_reduce", (0, 1), 64.0, "ar", kind="tp_comm")  # task 1
    g.compute(1, "bwd", 2.0, kind="backward", flops=20.0)  # task 2
    return g


def _timeline() -> Timeline:
    g = _graph()
    t = Timeline(num_ranks=2, tasks=g.tasks)
    t.record(0, 0.0, 3.0, 0)  # ends last
    t.record_comm_group((0, 1), 1.0, 2.0, 1, {"op": "all_reduce"}, {0: 0.5, 1: 1.0})
    t.add(Span(1, "compute", "optimizer", "free", 0.0, 1.5, 0.0, 5.0))  # a free-form span
    t.record_host(1, 0.0, 2.0, 2)  # ties with the comm spans: after them
    return t


def test_sort_by_end_orders_rows_by_end_ties_in_recording_order() -> None:
    t = _timeline()
    t.sort_by_end()
    got = [(s.rank, s.kind, s.start, s.end) for s in t.spans]
    # by end: free (1.5), comm rank 0, comm rank 1, host (all 2.0, recorded in that order),
    # forward (3.0)
    assert got == [(1, "optimizer", 0.0, 1.5), (0, "tp_comm", 1.0, 2.0), (1, "tp_comm", 1.0, 2.0),
                   (1, "host", 0.0, 2.0), (0, "forward", 0.0, 3.0)]
    assert t.spans[1].meta["waited_s"] == 0.5  # rank 0 arrived at 0.5, the start is 1.0
    assert "waited_s" not in t.spans[2].meta  # rank 1 arrived last: no wait
    t.record(1, 3.0, 5.0, 2)  # the columns are not pinned by the in-place sort
    assert t.end == 5.0


def test_span_table_reads_what_the_span_objects_say() -> None:
    t = _timeline()
    t.sort_by_end()
    table = t.columns()
    spans = t.spans
    assert table.rank.dtype == np.int32 and table.kind.dtype == np.int16
    assert table.rank.tolist() == [s.rank for s in spans]
    assert [table.kinds[k] for k in table.kind.tolist()] == [s.kind for s in spans]
    assert table.bytes.tolist() == [s.bytes for s in spans]
    # comm and host spans count no FLOPs; the forward its task's 10, the free span its own 5
    assert table.flops.tolist() == [5.0, 0.0, 0.0, 0.0, 10.0]
    assert table.start.tolist() == [s.start for s in spans]
    assert {r: rows.tolist() for r, rows in table.by_rank().items()} == {0: [1, 4], 1: [0, 2, 3]}
    assert table.by_rank() is table.by_rank()  # computed once


def test_a_change_after_columns_leaves_the_table_as_it_was() -> None:
    t = _timeline()
    t.sort_by_end()
    table = t.columns()  # views of the columns: a change must copy them first
    t.record(1, 3.0, 5.0, 2)
    t.sort_by_end()
    assert table.end.tolist() == [1.5, 2.0, 2.0, 2.0, 3.0]
    assert t.columns().end.tolist() == [1.5, 2.0, 2.0, 2.0, 3.0, 5.0] and t.end == 5.0
    t.record_comm_group((0, 1), 5.0, 6.0, 1, {"op": "all_reduce"}, {0: 5.0, 1: 5.0})
    assert len(t.columns().rank) == 8 and len(table.rank) == 5


def test_bytes_and_flops_are_read_per_row() -> None:
    t = _timeline()
    t.sort_by_end()
    table = t.columns()
    # rows: free (5 FLOPs), comm rank 0 and 1 (64 bytes, no FLOPs), host, forward (10 FLOPs)
    assert table.column("flops", np.array([4, 0])).tolist() == [10.0, 5.0]
    assert table.column("bytes", np.array([2, 3])).tolist() == [64.0, 0.0]
    with pytest.raises(ValueError, match="'latency'"):
        table.column("latency")

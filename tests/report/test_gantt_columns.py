"""The Gantt chart drawn from columnar spans: the same bars as the per-span code drew."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from simtrain.engine.timeline import Span, Timeline
from simtrain.report.columns import SpanColumns
from simtrain.report.critical import critical_path
from simtrain.report.gantt import gantt_figure
from simtrain.report.html import gantt_ranks
from simtrain.scenario import load_scenario
from simtrain.simulate import simulate

ROOT = Path(__file__).resolve().parents[2]
# Trace data of scenarios/pp_1f1b.yaml's Gantt, keyed by aggregate_above: 5000 draws every
# span, 0 forces the aggregated view. First written by the per-span implementation (commit
# d342ed2, before the columns: the columnar code drew it identically); rewritten when the
# physical host/GEMM model moved pp_1f1b's timeline (its golden summary moved with it), and
# again when compute/communication interference became the default and when the loss
# became its unfused fp32 kernels (1 Dec), and when the GEMM k-loop kept only the tile's
# fill latency and Ampere's GEMM ceiling was refitted (1 Dec, evening).
# Regenerate only for a change meant to alter the chart or the scenario's timeline.
REFERENCE = ROOT / "tests/report/data/gantt_pp_1f1b_traces.json.gz"


@pytest.fixture(scope="module")
def pp_run():  # type: ignore[no-untyped-def]
    return simulate(load_scenario(ROOT / "scenarios/pp_1f1b.yaml"))


@pytest.mark.parametrize("aggregate_above", [5000, 0])
def test_same_traces_as_the_per_span_gantt(pp_run, aggregate_above: int) -> None:  # type: ignore[no-untyped-def]
    with gzip.open(REFERENCE, "rt", encoding="utf-8") as f:
        want = json.load(f)[str(aggregate_above)]
    tl = pp_run.timeline
    path = critical_path(tl, pp_run.graph)
    fig = gantt_figure(tl, server_of=pp_run.cluster.server_of,
                       representatives=gantt_ranks(tl, path), highlight=path.spans,
                       aggregate_above=aggregate_above)
    got = json.loads(fig.to_json())["data"]
    assert [t.get("name") for t in got] == [t.get("name") for t in want]
    assert got == want


def _tl() -> Timeline:
    tl = Timeline(num_ranks=3)
    tl.add(Span(1, "compute", "forward", "f", 0.0, 1.0))
    tl.add(Span(0, "dp", "dp_comm", "a", 0.5, 2.0))
    tl.add(Span(0, "compute", "forward", "f", 1.0, 1.5))
    tl.add(Span(0, "compute", "backward", "b", 0.2, 0.4))
    return tl


def test_columns_hold_the_spans() -> None:
    cols = SpanColumns.from_timeline(_tl())
    assert cols.rank.tolist() == [1, 0, 0, 0]
    assert [cols.streams[i] for i in cols.stream] == ["compute", "dp", "compute", "compute"]
    assert [cols.kinds[i] for i in cols.kind] == ["forward", "dp_comm", "forward", "backward"]
    assert cols.step_end == 2.0 and cols.has_kind("dp_comm") and not cols.has_kind("pp_comm")
    assert SpanColumns.from_timeline(Timeline(num_ranks=1)).step_end == 0.0


def test_rows_spans_in_timeline_or_time_order() -> None:
    cols = SpanColumns.from_timeline(_tl())
    rows = [(0, "compute"), (0, "dp"), (2, "compute"), (1, "compute"), (0, "nope")]
    assert [ix.tolist() for ix in cols.rows_spans(rows)] == [[2, 3], [1], [], [0], []]
    # By start time: span 3 (0.2 s) before span 2 (1.0 s).
    assert [ix.tolist() for ix in cols.rows_spans(rows, by_time=True)][0] == [3, 2]


def test_busy_by_rank() -> None:
    cols = SpanColumns.from_timeline(_tl())
    assert cols.busy_by_rank([0, 2]) == {0: [(0.5, 2.0), (1.0, 1.5), (0.2, 0.4)]}

"""Gantt figure: traces per kind, bar geometry in ms, hover data, row order, rank subsets."""

from __future__ import annotations

import pytest

from simtrain.engine.timeline import Span, Timeline
from simtrain.report.bars import BAR_WIDTH, BUBBLE_NAME, IDLE_NAME, MICROBATCH_NAME
from simtrain.report.gantt import (
    KIND_COLORS,
    gantt_figure,
    rank_labels,
    representative_ranks,
)


def _timeline() -> Timeline:
    tl = Timeline(num_ranks=2)
    tl.add(Span(0, "compute", "forward", "fwd L0", 0.0, 0.002, flops=3e12))
    tl.add(Span(1, "compute", "forward", "fwd L0", 0.0, 0.0025, flops=3e12))
    tl.add(Span(0, "tp", "tp_comm", "allreduce <L0>", 0.002, 0.003, bytes=2**20,
                meta={"algorithm": "ring", "group_size": 8}))
    tl.add(Span(0, "compute", "backward", "bwd L0", 0.003, 0.007, flops=6e12))
    tl.add(Span(1, "dp", "dp_comm", "bucket 0", 0.004, 0.009, bytes=25 * 2**20))
    return tl


def test_one_trace_per_kind_and_one_bar_per_span() -> None:
    tl = _timeline()
    fig = gantt_figure(tl, title="t")
    names = [tr.name for tr in fig.data if tr.name in KIND_COLORS]
    assert names == ["forward", "backward", "dp_comm", "tp_comm"]  # palette order
    assert [tr.name for tr in fig.data if tr.name not in KIND_COLORS] == [IDLE_NAME]
    fig.data = [tr for tr in fig.data if tr.name in KIND_COLORS]
    assert len(set(names)) == len(names)
    assert sum(len(tr.x) for tr in fig.data) == len(tl)
    for tr in fig.data:
        assert tr.orientation == "h"
        assert tr.marker.color == KIND_COLORS[tr.name]


def test_bar_base_and_length_are_start_and_duration_in_ms() -> None:
    fig = gantt_figure(_timeline())
    bwd = next(tr for tr in fig.data if tr.name == "backward")
    assert list(bwd.base) == pytest.approx([3.0])
    assert list(bwd.x) == pytest.approx([4.0])
    dp = next(tr for tr in fig.data if tr.name == "dp_comm")
    assert list(dp.base) == pytest.approx([4.0])
    assert list(dp.x) == pytest.approx([5.0])
    assert "ms" in fig.layout.xaxis.title.text


def test_hover_customdata_has_bytes_flops_and_meta() -> None:
    fig = gantt_figure(_timeline())
    tp = next(tr for tr in fig.data if tr.name == "tp_comm")
    row = " ".join(str(c) for c in tp.customdata[0])
    assert "allreduce &lt;L0&gt;" in row  # names are escaped for plotly's pseudo-HTML
    assert "1.0 MiB" in row
    assert "algorithm: ring" in row
    assert "group size: 8" in row
    assert "1.00 ms" in row  # duration in human units
    assert "FLOP" not in row  # no flops on a comm span
    fwd = next(tr for tr in fig.data if tr.name == "forward")
    assert "3.00 TFLOP" in " ".join(fwd.customdata[0])
    assert "bytes" not in " ".join(fwd.customdata[0])
    assert "customdata[6]" in tp.hovertemplate


def test_row_labels_and_order_rank0_compute_on_top() -> None:
    fig = gantt_figure(_timeline())
    rows = list(fig.layout.yaxis.categoryarray)
    assert rows == [
        "node0/gpu0 · compute",
        "node0/gpu0 · tp",
        "node0/gpu1 · compute",
        "node0/gpu1 · dp",
    ]
    assert fig.layout.yaxis.autorange == "reversed"
    fwd = next(tr for tr in fig.data if tr.name == "forward")
    assert list(fwd.y) == ["node0/gpu0 · compute", "node0/gpu1 · compute"]


def test_server_of_groups_ranks_by_node() -> None:
    tl = Timeline(num_ranks=4)
    for r in range(4):
        tl.add(Span(r, "compute", "forward", "f", 0.0, 1e-3))
    # Ranks interleaved across two nodes: 0,2 on node 0 and 1,3 on node 1.
    fig = gantt_figure(tl, server_of=lambda r: r % 2)
    assert list(fig.layout.yaxis.categoryarray) == [
        "node0/gpu0 · compute",
        "node0/gpu1 · compute",
        "node1/gpu0 · compute",
        "node1/gpu1 · compute",
    ]
    assert rank_labels(range(16))[11] == "node1/gpu3"


def test_ranks_argument_filters() -> None:
    fig = gantt_figure(_timeline(), ranks=[1])
    assert all(label.startswith("node0/gpu1") for label in fig.layout.yaxis.categoryarray)
    assert sum(len(tr.x) for tr in fig.data if tr.name in KIND_COLORS) == 2


def test_subset_when_rows_exceed_max_rows() -> None:
    tl = Timeline(num_ranks=100)
    for r in range(100):
        tl.add(Span(r, "compute", "forward", "f", 0.0, 1e-3))
        tl.add(Span(r, "dp", "dp_comm", "ar", 1e-3, 2e-3, bytes=1.0))
    fig = gantt_figure(tl, title="big", max_rows=20)
    rows = list(fig.layout.yaxis.categoryarray)
    assert len(rows) <= 20
    assert rows[0] == "node0/gpu0 · compute"
    assert rows[-1] == "node12/gpu3 · dp"  # rank 99
    assert "showing 10 of 100 ranks" in fig.layout.title.text
    assert fig.layout.title.text.startswith("big")
    shown = {label for tr in fig.data for label in tr.y}
    assert shown == set(rows)


def test_no_subset_note_when_everything_fits() -> None:
    fig = gantt_figure(_timeline(), title="small")
    assert fig.layout.title.text == "small"


def test_representative_ranks() -> None:
    ranks = list(range(1000))
    picked = representative_ranks(ranks, 64)
    assert len(picked) == 64
    assert picked[0] == 0 and picked[-1] == 999
    assert picked == sorted(set(picked))
    assert representative_ranks([3, 1, 2], 5) == [3, 1, 2]
    assert representative_ranks(ranks, 2) == [0, 999]
    with pytest.raises(ValueError):
        representative_ranks(ranks, 0)


def test_height_scales_with_rows() -> None:
    small = gantt_figure(_timeline())
    assert small.layout.height >= 300
    tl = Timeline(num_ranks=40)
    for r in range(40):
        tl.add(Span(r, "compute", "forward", "f", 0.0, 1e-3))
    assert gantt_figure(tl).layout.height > small.layout.height


def test_empty_timeline() -> None:
    fig = gantt_figure(Timeline(num_ranks=0))
    assert len(fig.data) == 0


def _roles_timeline(n: int = 16) -> Timeline:
    tl = Timeline(num_ranks=n)
    for r in range(n):
        stage = r % 2  # two roles: even and odd ranks run different layers
        tl.add(Span(r, "compute", "forward", f"fwd stage{stage}", 0.0, 1e-3 * (1 + r / 100)))
        tl.add(Span(r, "dp", "dp_comm", "ar", 1e-3, 2e-3))
    return tl


def test_role_representatives_one_per_role() -> None:
    from simtrain.report.gantt import role_representatives

    assert role_representatives(_roles_timeline()) == [0, 1]
    assert role_representatives(_roles_timeline(), ranks=[3, 4, 5]) == [3, 4]


def test_representatives_first_with_a_menu_for_more() -> None:
    tl = _roles_timeline()
    fig = gantt_figure(tl, representatives=[0, 1], max_rows=64)
    visible = [tr for tr in fig.data if tr.visible is not False]
    assert sum(len(tr.x) for tr in visible) == 4  # 2 ranks x 2 streams
    assert sum(len(tr.x) for tr in fig.data) == len(tl)
    assert list(fig.layout.yaxis.categoryarray) == [
        "node0/gpu0 · compute", "node0/gpu0 · dp", "node0/gpu1 · compute", "node0/gpu1 · dp"]
    menu = fig.layout.updatemenus[0]
    assert [b.label for b in menu.buttons] == ["2 representative ranks", "16 ranks"]
    assert len(menu.buttons[1].args[1]["yaxis.categoryarray"]) == 32
    assert "one representative rank per role" in fig.layout.title.text
    # Legend entries once per kind.
    assert sorted(tr.name for tr in fig.data if tr.showlegend is not False) == [
        "dp_comm", "forward"]


def test_aggregation_above_threshold_keeps_time_extent() -> None:
    from simtrain.report.gantt import AGGREGATE_BINS

    tl = Timeline(num_ranks=1)
    n = 3000
    for i in range(n):
        tl.add(Span(0, "compute", "forward", f"op{i}", i * 1e-6, (i + 1) * 1e-6))
    plain = gantt_figure(tl)
    assert sum(len(tr.x) for tr in plain.data) == n
    agg = gantt_figure(tl, aggregate_above=1000)
    bars = agg.data[0]
    assert len(bars.x) <= 2 * AGGREGATE_BINS  # runs are at most 1/BINS of the step long
    assert sum(bars.x) == pytest.approx(3.0)  # ms, nothing lost
    assert "aggregated" in agg.layout.title.text
    assert "3000" not in bars.customdata[0][0] and "×" in bars.customdata[0][0]


def test_highlight_outlines_spans() -> None:
    tl = _timeline()
    crit = [s for s in tl.spans if s.rank == 0 and s.stream == "compute"]
    fig = gantt_figure(tl, highlight=crit)
    outline = fig.data[-1]
    assert outline.name == "critical path"
    assert len(outline.x) == 2  # fwd and bwd are 1 ms apart: two outlines
    assert list(outline.base) == pytest.approx([0.0, 3.0])
    # A strip just below the bars (the y axis is reversed: + is down), never over them,
    # so it neither hides a thin bar nor takes its hover.
    assert outline.offset >= BAR_WIDTH / 2 and outline.width < 1 - BAR_WIDTH
    assert all(tr.width == BAR_WIDTH for tr in fig.data if tr.name in KIND_COLORS)


def test_idle_gaps_are_shaded_and_named_by_cause() -> None:
    # Rank 0 is busy 0-7 ms of the 9 ms step (idle 7-9); rank 1 computes 0-2.5 ms and
    # idles until its bucket at 4 ms (2.5-4).
    fig = gantt_figure(_timeline())
    idle = next(tr for tr in fig.data if tr.name == IDLE_NAME)
    assert list(idle.y) == ["node0/gpu0 · compute", "node0/gpu1 · compute"]
    assert list(idle.base) == pytest.approx([7.0, 2.5])
    assert list(idle.x) == pytest.approx([2.0, 1.5])
    # With pipeline sends the same gaps are the pipeline bubble.
    tl = _timeline()
    tl.add(Span(0, "pp", "pp_comm", "pp F mb0", 0.002, 0.0021))
    names = [tr.name for tr in gantt_figure(tl).data]
    assert BUBBLE_NAME in names and IDLE_NAME not in names


def test_pipeline_bars_carry_microbatch_ids_without_taking_hover() -> None:
    tl = Timeline(num_ranks=2)
    for mb in range(2):
        for layer in range(3):  # three layer spans of one microbatch: one label
            t = mb * 3e-3 + layer * 1e-3
            tl.add(Span(0, "compute", "forward", "layers", t, t + 1e-3,
                        meta={"microbatch": mb, "chunk": 0, "stage": 0}))
    tl.add(Span(0, "pp", "pp_comm", "pp F mb0", 3e-3, 3.1e-3, meta={"microbatch": 0}))
    tl.add(Span(1, "compute", "backward", "layers", 4e-3, 5e-3,
                meta={"microbatch": 1, "chunk": 1, "stage": 1}))
    fig = gantt_figure(tl)
    labels = next(tr for tr in fig.data if tr.name == MICROBATCH_NAME)
    assert list(labels.text) == ["F0", "F1", "B1.1"]
    assert list(labels.base) == pytest.approx([0.0, 3.0, 4.0])
    assert list(labels.x) == pytest.approx([3.0, 3.0, 1.0])
    assert labels.hoverinfo == "skip"
    assert fig.layout.uniformtext.mode == "hide"  # a label shows only where it fits


def test_height_leaves_room_for_every_legend_entry() -> None:
    # One row and every kind: the legend, not the rows, sets the height.
    tl = Timeline(num_ranks=1)
    for i, kind in enumerate(KIND_COLORS):
        tl.add(Span(0, "compute", kind, kind, i * 1e-3, (i + 1) * 1e-3))
    fig = gantt_figure(tl, highlight=tl.spans[:1])
    entries = sum(1 for tr in fig.data if tr.showlegend is not False)
    assert entries == len(KIND_COLORS) + 1  # + the critical path
    assert fig.layout.height >= 22 * (entries + 1) + 60 + 50  # + the margins


def test_menu_adds_ranks_even_when_roles_fill_max_rows() -> None:
    tl = Timeline(num_ranks=64)
    for r in range(64):
        tl.add(Span(r, "compute", "forward", f"fwd stage{r % 8}", 0.0, 1e-3))
        tl.add(Span(r, "dp", "dp_comm", "ar", 1e-3, 2e-3))
    fig = gantt_figure(tl, representatives=list(range(8)), max_rows=16)
    assert len(fig.layout.yaxis.categoryarray) == 16  # the 8 roles, 2 rows each
    more = fig.layout.updatemenus[0].buttons[1]
    assert len(more.args[1]["yaxis.categoryarray"]) == 32  # 8 more ranks behind the menu


def test_group_of_groups_rows_prefixes_labels_and_ends_idle_at_the_groups_end() -> None:
    # Ranks 0 and 2 are job "b", rank 1 job "a"; b ends at 3 ms, a at 10 ms.
    tl = Timeline(num_ranks=3)
    tl.add(Span(0, "compute", "forward", "f", 0.0, 0.001))
    tl.add(Span(1, "compute", "forward", "f", 0.0, 0.002))
    tl.add(Span(2, "compute", "forward", "f", 0.0, 0.003))
    tl.add(Span(1, "compute", "backward", "b", 0.009, 0.010))
    fig = gantt_figure(tl, group_of=lambda r: "a" if r == 1 else "b")
    # groups in order of first appearance (rank 0's "b" first), ranks in order inside
    assert list(fig.layout.yaxis.categoryarray) == [
        "b · node0/gpu0 · compute", "b · node0/gpu2 · compute", "a · node0/gpu1 · compute"]
    idle = next(tr for tr in fig.data if tr.name == IDLE_NAME)
    gaps = sorted(zip(idle.y, idle.base, idle.x, strict=True))
    # rank 0 idles 1..3 ms (its job's end, not the chart's 10 ms); rank 1 from 2 to 9 ms
    assert [(y, round(b, 6), round(x, 6)) for y, b, x in gaps] == [
        ("a · node0/gpu1 · compute", 2.0, 7.0), ("b · node0/gpu0 · compute", 1.0, 2.0)]

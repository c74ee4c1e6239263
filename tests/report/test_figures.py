"""Breakdown figures: overlapped vs exposed comm, memory stack, critical path table, report."""

from __future__ import annotations

import pytest

from simtrain.engine.timeline import Span, Timeline
from simtrain.report.critical import critical_path
from simtrain.report.figures import (
    comm_overlap,
    comm_overlap_figure,
    critical_path_html,
)
from simtrain.report.html import render_report
from simtrain.report.memory import memory_figure


def _timeline() -> Timeline:
    tl = Timeline(num_ranks=2)
    for r in (0, 1):
        tl.add(Span(r, "compute", "backward", "b", 0.0, 4.0))
        tl.add(Span(r, "dp", "dp_comm", "ar", 3.0, 6.0))  # 1 s hidden, 2 s exposed
        tl.add(Span(r, "tp", "tp_comm", "tp", 0.0, 1.0))  # fully hidden
    return tl


def test_comm_overlap_per_group() -> None:
    data = comm_overlap(_timeline())
    assert list(data) == ["dp_comm", "tp_comm"]
    assert data["dp_comm"] == pytest.approx((1.0, 2.0))
    assert data["tp_comm"] == pytest.approx((1.0, 0.0))
    fig = comm_overlap_figure(_timeline())
    assert fig is not None
    assert list(fig.data[0].y) == ["DP / ZeRO", "TP / SP"]
    assert list(fig.data[1].x) == pytest.approx([2000.0, 0.0])


def test_memory_figure_flat_and_nested() -> None:
    assert memory_figure({}) is None
    flat = memory_figure({"memory_breakdown": {"params_gib": 2.0, "activations_bytes": 2**31}},
                         capacity_bytes=80 * 2**30)
    assert flat is not None
    assert [tr.name for tr in flat.data] == ["params", "activations"]
    assert flat.data[1].y[0] == pytest.approx(2.0)
    gib = memory_figure({"memory_breakdown": {"weights": 2.5, "optimizer": 14.7}})
    assert gib is not None and gib.data[0].y[0] == pytest.approx(2.5)
    in_bytes = memory_figure({"memory_breakdown": {"weights": 2.5 * 2**30, "optimizer": 0}})
    assert in_bytes is not None and in_bytes.data[0].y[0] == pytest.approx(2.5)
    nested = memory_figure({"memory_breakdown": {"stage 0": {"params_gib": 1.0},
                                                 "stage 1": {"params_gib": 3.0}}})
    assert nested is not None and list(nested.data[0].y) == [1.0, 3.0]


def test_critical_path_table() -> None:
    doc = critical_path_html(critical_path(_timeline()))
    assert "critical-path-table" in doc and "share of step" in doc
    assert "dp_comm" in doc


def test_report_renders_optional_summary_keys() -> None:
    summary = {"step_time_s": 6.0, "hfu": 0.5, "peak_memory_gib": 61.5, "bubble_s": 0.72,
               "bubble_fraction": 0.12, "parallelism": {"pp": 4},
               "memory_breakdown": {"params_gib": 10.0, "optimizer_gib": 40.0}}
    doc = render_report(summary, _timeline(), title="t")
    # 0.72 s of a 6 s step is 12.0%; with pp = 4 it is called the pipeline bubble.
    for text in (">HFU<", "61.50 GiB", ">pipeline bubble<", "12.0% of step",
                 'id="memory-chart"', 'id="comm-overlap-chart"', 'id="critical-path"'):
        assert text in doc, text
    no_pipeline = render_report({**summary, "parallelism": {"pp": 1}}, _timeline(), title="t")
    assert ">idle (waiting for peers)<" in no_pipeline and "pipeline bubble<" not in no_pipeline
    bare = render_report({"step_time_s": 6.0}, _timeline(), title="t")
    assert 'id="memory-chart"' not in bare and "bubble<" not in bare

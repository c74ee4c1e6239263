"""Sweep report figures: line for one varying axis, heatmap for two, slider for more."""

from __future__ import annotations

from typing import Any

from simtrain.study import report
from simtrain.study.spec import SweepSpec, load_sweep

BASE = {"cluster": {"preset": "dgx-a100"}, "model": {"preset": "gpt2-small"},
        "training": {"global_batch_size": 64, "micro_batch_size": 8}}


def _rows(spec: SweepSpec, bad: set[int] = frozenset()) -> list[dict[str, Any]]:  # type: ignore[assignment]
    return [{"index": p.index, "status": "invalid" if p.index in bad else "ok",
             "step_time_s": None if p.index in bad else 0.001 * (p.index + 1),
             "mfu": None if p.index in bad else 0.5} for p in spec.points()]


def test_one_varying_axis_is_a_line_with_gaps_for_invalid_points() -> None:
    spec = load_sweep({"base": BASE, "axes": {"model.num_layers": [1, 2, 4, 8, 16, 32],
                                              "cluster.nodes": [1]}})
    figures = dict(report.metric_figures(spec, _rows(spec, bad={3})))
    assert set(figures) == {"step_time_s", "mfu"}  # no memory column in these rows
    line = figures["step_time_s"].data[0]
    assert list(line.x) == [1, 2, 4, 8, 16, 32] and line.y[3] is None
    assert line.y[0] == 1.0  # milliseconds
    assert figures["step_time_s"].layout.xaxis.type == "log"


def test_two_axes_make_a_heatmap_rows_are_the_second_axis() -> None:
    spec = load_sweep({"base": BASE, "axes": {"model.num_layers": [1, 2, 3],
                                              "cluster.nic_bandwidth": ["100Gbps", "200Gbps"]}})
    fig = dict(report.metric_figures(spec, _rows(spec, bad={3})[:5]))["step_time_s"]
    (heat,) = fig.data
    assert list(heat.x) == ["1", "2", "3"] and list(heat.y) == ["100Gbps", "200Gbps"]
    assert heat.z[1][0] == 2.0  # layers=1, 200Gbps is point #1
    # point #3 is invalid, #5 has not run yet
    assert heat.z[1][1] is None and heat.text[1][1] == "invalid"
    assert heat.z[1][2] is None and heat.text[1][2] == ""
    assert not fig.layout.sliders


def test_more_axes_get_a_slider_on_one_colour_scale() -> None:
    spec = load_sweep({"base": BASE, "axes": {"a.x": [1, 2], "a.y": [1, 2], "a.z": [1, 2, 3]}})
    fig = dict(report.metric_figures(spec, _rows(spec)))["step_time_s"]
    assert len(fig.data) == 3 and [t.visible for t in fig.data] == [True, False, False]
    assert [s.label for s in fig.layout.sliders[0].steps] == ["a.z=1", "a.z=2", "a.z=3"]
    assert {t.zmin for t in fig.data} == {1.0} and {t.zmax for t in fig.data} == {12.0}


def test_too_many_combinations_collapse_to_the_best_value(monkeypatch: Any) -> None:
    monkeypatch.setattr(report, "MAX_SLIDER_STEPS", 2)
    spec = load_sweep({"base": BASE, "axes": {"a.x": [1, 2], "a.y": [1, 2], "a.z": [1, 2, 3]}})
    fig = dict(report.metric_figures(spec, _rows(spec)))["step_time_s"]
    (heat,) = fig.data
    assert heat.z[0][0] == 1.0  # min over a.z of points 0, 1, 2
    assert "best over the other axes" in fig.layout.title.text

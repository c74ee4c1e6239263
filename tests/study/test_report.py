"""Sweep report figures: line for one varying axis, heatmap for two, slider for more."""

from __future__ import annotations

from typing import Any

import pytest

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
    slider = fig.layout.sliders[0]
    assert [s.label for s in slider.steps] == ["1", "2", "3"]  # the values; the name once:
    assert slider.currentvalue.prefix == "a.z = "
    # Step times 1..12 ms: colours from 0 to the largest, shared by every step.
    assert {t.zmin for t in fig.data} == {0.0} and {t.zmax for t in fig.data} == {12.0}


def test_a_small_spread_gets_a_proportional_colour_scale_and_uniform_gets_none() -> None:
    spec = load_sweep({"base": BASE, "axes": {"a.x": [1, 2], "a.y": [1, 2]}})
    rows = _rows(spec)
    for r in rows:  # 359.4 .. 366.2 ms: a 1.9% spread
        r["step_time_s"] = 0.3594 + 0.0068 * r["index"] / 3
    figures = dict(report.metric_figures(spec, rows))
    (heat,) = figures["step_time_s"].data
    assert heat.zmin == 0.0 and heat.zmax == pytest.approx(366.2)
    assert heat.showscale is not False
    (mfu,) = figures["mfu"].data  # 0.5 everywhere
    assert mfu.showscale is False
    assert "the same at every point (50)" in figures["mfu"].layout.title.text


def test_many_long_slider_values_label_only_every_kth_tick() -> None:
    values = [f"{n}Gbps" for n in range(100, 3100, 100)]  # 30 steps of 7 characters
    spec = load_sweep({"base": BASE, "axes": {"a.x": [1, 2], "a.y": [1, 2],
                                              "cluster.nic_bandwidth": values}})
    fig = dict(report.metric_figures(spec, _rows(spec)))["step_time_s"]
    labels = [s.label for s in fig.layout.sliders[0].steps]
    # 7 x 7 + 16 = 65 px per label, 30 labels = 1950 px on ~900 px: every 3rd tick.
    assert labels[:4] == ["100Gbps", "", "", "400Gbps"] and sum(map(bool, labels)) == 10
    assert [s.name for s in fig.layout.sliders[0].steps] == values


def test_weak_scaling_sweeps_plot_tokens_per_gpu_and_efficiency() -> None:
    # 8 nodes at 16 sequences a node is not weak scaling (it is left out of the lines).
    spec = load_sweep({"base": BASE, "zip": [{"cluster.nodes": [1, 2, 4, 8],
                                              "training.global_batch_size": [64, 128, 256, 128]}],
                       "axes": {"cluster.nic_bandwidth": ["100Gbps", "200Gbps"]}})
    assert report.weak_scaling_dim(spec) == (0, 64.0)
    rows = []
    for p in spec.points():
        nodes = [1, 2, 4, 8][p.index // 2]
        # 8 GPUs a node; 1000 tokens/s per GPU on one node, 10% less per doubling
        rows.append({"index": p.index, "status": "ok", "num_gpus": 8 * nodes,
                     "tokens_per_s": 8 * nodes * 1000 * 0.9 ** (nodes.bit_length() - 1)})
    fig = report.weak_scaling_figure(spec, rows)
    assert fig is not None and len(fig.data) == 4  # two lines (NIC speeds) x two panels
    per_gpu, eff = fig.data[0], fig.data[1]
    assert list(per_gpu.x) == [8, 16, 32] and list(per_gpu.y) == pytest.approx([1000, 900, 810])
    assert list(eff.y) == pytest.approx([100.0, 90.0, 81.0])
    strong = load_sweep({"base": BASE, "axes": {"cluster.nodes": [1, 2]}})
    assert report.weak_scaling_dim(strong) is None


def test_too_many_combinations_collapse_to_the_best_value(monkeypatch: Any) -> None:
    monkeypatch.setattr(report, "MAX_SLIDER_STEPS", 2)
    spec = load_sweep({"base": BASE, "axes": {"a.x": [1, 2], "a.y": [1, 2], "a.z": [1, 2, 3]}})
    fig = dict(report.metric_figures(spec, _rows(spec)))["step_time_s"]
    (heat,) = fig.data
    assert heat.z[0][0] == 1.0  # min over a.z of points 0, 1, 2
    assert "best over the other axes" in fig.layout.title.text

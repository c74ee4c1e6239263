"""Memory over the step: activation shape from the timeline, scale from the memory model."""

from __future__ import annotations

import pytest

from simtrain.engine.timeline import Span, Timeline
from simtrain.report.memory import activation_units, fullest_rank, memory_figure


def _pipeline_rank() -> Timeline:
    # Rank 0: microbatch 0 forward in two layer spans (0-1, 1-2 ms), microbatch 1 forward
    # (2-4 ms, one span), then backward of 0 (two spans, 4-6 ms) and of 1 (6-7 ms).
    # Rank 1: one microbatch, forward 0-1, backward 1-2 (holds at most 1).
    tl = Timeline(num_ranks=2)
    def add(rank: int, kind: str, mb: int, a: float, b: float) -> None:
        tl.add(Span(rank, "compute", kind, f"{kind} stage{rank}", a * 1e-3, b * 1e-3,
                    meta={"microbatch": mb, "chunk": 0}))
    add(0, "forward", 0, 0, 1)
    add(0, "forward", 0, 1, 2)
    add(0, "forward", 1, 2, 4)
    add(0, "backward", 0, 4, 5)
    add(0, "backward", 0, 5, 6)
    add(0, "backward", 1, 6, 7)
    add(1, "forward", 0, 0, 1)
    add(1, "backward", 0, 1, 2)
    return tl


def test_activation_units_follow_forward_and_backward_spans() -> None:
    times, held = activation_units(_pipeline_rank(), 0)
    # After each span end: 0.5, 1, 2 (both microbatches), 1.5, 1, 0.
    assert list(times * 1e3) == pytest.approx([0, 1, 2, 4, 5, 6, 7, 7])
    assert list(held) == pytest.approx([0, 0.5, 1, 2, 1.5, 1, 0, 0])
    assert fullest_rank(_pipeline_rank()) == 0


def test_memory_over_time_is_scaled_to_the_model_peak_on_an_honest_axis() -> None:
    summary = {"memory_breakdown": {"weights": 1.0, "activations": 3.0}}
    fig = memory_figure(summary, 80 * 2**30, _pipeline_rank())
    assert fig is not None
    areas = [tr for tr in fig.data if tr.type == "scatter"]
    assert [tr.name for tr in areas] == ["weights", "activations"]
    # 2 units held at the peak = the model's 3 GiB: 1.5 GiB a microbatch.
    assert max(areas[1].y) == pytest.approx(3.0) and areas[1].y[1] == pytest.approx(0.75)
    assert set(areas[0].y) == {1.0}
    # 4 GiB of 80: the axis ends just above the peak, capacity is named, not drawn.
    assert fig.layout.yaxis.range[1] == pytest.approx(4.0 * 1.12)
    assert "5% of 80.0 GiB HBM" in fig.layout.title.text and not fig.layout.shapes
    near = memory_figure({"memory_breakdown": {"weights": 50.0, "activations": 20.0}},
                         80 * 2**30, _pipeline_rank())
    assert near is not None and near.layout.shapes  # 70 of 80 GiB: the HBM line is drawn

"""Steady-state extrapolation (simtrain.steady_state): the line, its guard, and a step."""

from __future__ import annotations

import pytest

from simtrain.hardware.topology import build_cluster
from simtrain.scenario import load_scenario
from simtrain.simulate import simulate
from simtrain.steady_state import (
    COLLINEAR_RTOL,
    extrapolate,
    sample_points,
    simulated_share,
    steady_step,
)
from simtrain.validation import row_cost


def test_extrapolate_follows_the_line_through_three_points():
    # Points (4, 1.0 s), (6, 1.5 s), (8, 2.0 s): slope (2.0 - 1.0) / (8 - 4) = 0.25 s per
    # microbatch; T(20) = T(6) + (20 - 6) * 0.25 = 1.5 + 3.5 = 5.0 s.
    assert extrapolate((4, 6, 8), (1.0, 1.5, 2.0), 20) == pytest.approx(5.0, rel=1e-15)


def test_extrapolate_refuses_points_off_one_line():
    # T(6) is 1e-8 s off the line through (4, 1.0) and (8, 2.0): 1e-8 / 2.0 = 5e-9 > 1e-9.
    assert extrapolate((4, 6, 8), (1.0, 1.5 + 1e-8, 2.0), 20) is None
    # ... and within the tolerance it is accepted.
    assert extrapolate((4, 6, 8), (1.0, 1.5 + 0.5 * COLLINEAR_RTOL, 2.0), 20) is not None


def test_sample_points_are_two_to_four_pipeline_groups_and_only_where_they_gain():
    assert sample_points(512, 8, "interleaved", 4) == (16, 24, 32)
    assert sample_points(32, 1, "1f1b", 1) == (2, 3, 4)
    # 2 + 3 + 4 = 9 microbatches; 1.5 x 9 = 13.5 > 12: no gain worth three runs.
    assert sample_points(12, 1, "1f1b", 1) is None
    # Not a whole number of pipeline groups of 8.
    assert sample_points(516, 8, "1f1b", 1) is None


def _scenario(microbatches: int) -> dict:
    # Llama-style 4-layer model, FP8 (delayed scaling: weight casts once per step,
    # amortised over the microbatches) on one DGX H100, TP2 PP2 DP2.
    return {
        "name": "steady", "cluster": {"preset": "dgx-h100", "nodes": 1},
        "model": {"preset": "llama3-8b", "num_layers": 4},
        "training": {"global_batch_size": 2 * microbatches, "micro_batch_size": 1,
                     "seq_len": 512, "dtype": "fp8", "fp8": {"recipe": "delayed"}},
        "parallelism": {"tp": 2, "pp": 2, "dp": 2},
        "sim": {"granularity": "layer"},
    }


def test_steady_step_equals_the_full_step():
    scenario = load_scenario(_scenario(28))  # points 4, 6, 8 (18 x 1.5 = 27 <= 28)
    run = steady_step(scenario, build_cluster(scenario.cluster))
    assert run.points == (4, 6, 8) and not run.why_full
    full = simulate(scenario).summary
    assert run.step_s == pytest.approx(full["step_time_s"], rel=1e-9)
    assert run.summary["mfu"] == pytest.approx(full["mfu"], rel=1e-9)
    assert run.summary["micro_batches"] == 28


def test_simulated_share_and_the_row_cost_it_scales():
    # PP2, 28 microbatches: the short runs are 4 + 6 + 8 = 18 of them.
    scenario = load_scenario(_scenario(28))
    assert simulated_share(scenario, build_cluster(scenario.cluster)) == pytest.approx(18 / 28)
    assert row_cost(scenario, steady=True) == pytest.approx(row_cost(scenario) * 18 / 28)
    # 26 microbatches: 1.5 x 18 = 27 > 26, the full step is simulated.
    short = load_scenario(_scenario(26))
    assert simulated_share(short, build_cluster(short.cluster)) == 1.0

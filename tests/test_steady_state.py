"""Steady-state extrapolation (simtrain.steady_state): the line, its guard, and a step."""

from __future__ import annotations

import pytest

from simtrain.hardware.topology import build_cluster
from simtrain.scenario import load_scenario
from simtrain.simulate import simulate
from simtrain.steady_state import (
    COLLINEAR_RTOL,
    extrapolate,
    next_point,
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


def test_sample_points_start_past_the_warm_up_and_only_where_they_gain():
    # Interleaved (vpp 4): groups 2, 3, 4 of pp = 8 microbatches.
    assert sample_points(512, 8, "interleaved", 4) == (16, 24, 32)
    # One chunk per stage: groups 1, 2, 3.
    assert sample_points(32, 1, "1f1b", 1) == (1, 2, 3)
    assert sample_points(128, 2, "1f1b", 1) == (2, 4, 6)
    # At least 14 groups: 14 microbatches on one stage, not 13.
    assert sample_points(14, 1, "1f1b", 1) == (1, 2, 3)
    assert sample_points(13, 1, "1f1b", 1) is None
    assert sample_points(26, 2, "1f1b", 1) is None
    # Not a whole number of pipeline groups of 8.
    assert sample_points(516, 8, "1f1b", 1) is None


def test_next_point_is_one_group_more_and_shorter_than_the_step():
    assert next_point((2, 4, 6), 28, 2, "1f1b", 1) == 8
    assert next_point((16, 24, 32), 512, 8, "interleaved", 4) == 40
    # 3 + 1 = 4 microbatches is the step itself: simulate it in full instead.
    assert next_point((1, 2, 3), 4, 1, "1f1b", 1) is None


def _scenario(microbatches: int, pp: int = 2, seq: int = 512) -> dict:
    # Llama-style 4-layer model, FP8 (delayed scaling: weight casts once per step,
    # amortised over the microbatches) on one DGX H100, TP2 PP2 DP2 (or TP2 DP4).
    return {
        "name": "steady", "cluster": {"preset": "dgx-h100", "nodes": 1},
        "model": {"preset": "llama3-8b", "num_layers": 4},
        "training": {"global_batch_size": 4 // pp * microbatches, "micro_batch_size": 1,
                     "seq_len": seq, "dtype": "fp8", "fp8": {"recipe": "delayed"}},
        "parallelism": {"tp": 2, "pp": pp, "dp": 4 // pp},
        "sim": {"granularity": "layer"},
    }


def test_steady_step_walks_past_a_long_warm_up_and_equals_the_full_step():
    # PP2 1F1B, 28 microbatches (14 groups): 2, 4, 6 are not on one line
    # (the step grows 6.20 ms, then 6.64 ms: at 2 microbatches the pipeline is still
    # warming up), so one group more runs and 4, 6, 8 are.
    scenario = load_scenario(_scenario(28))
    run = steady_step(scenario, build_cluster(scenario.cluster))
    assert run.points == (2, 4, 6, 8) and not run.why_full
    full = simulate(scenario).summary
    assert run.step_s == pytest.approx(full["step_time_s"], rel=1e-9)
    assert run.summary["mfu"] == pytest.approx(full["mfu"], rel=1e-9)
    assert run.summary["micro_batches"] == 28


def test_steady_step_on_one_stage_extrapolates_from_one_two_three_microbatches():
    scenario = load_scenario(_scenario(14, pp=1, seq=256))  # 14 groups of one microbatch
    run = steady_step(scenario, build_cluster(scenario.cluster))
    assert run.points == (1, 2, 3) and not run.why_full
    full = simulate(scenario).summary
    assert run.step_s == pytest.approx(full["step_time_s"], rel=1e-9)


def test_simulated_share_and_the_row_cost_it_scales():
    # PP2, 28 microbatches: the short runs are 2 + 4 + 6 = 12 of them.
    scenario = load_scenario(_scenario(28))
    assert simulated_share(scenario, build_cluster(scenario.cluster)) == pytest.approx(12 / 28)
    assert row_cost(scenario, steady=True) == pytest.approx(row_cost(scenario) * 12 / 28)
    # 26 microbatches: 13 groups of 2, the full step is simulated.
    short = load_scenario(_scenario(26))
    assert simulated_share(short, build_cluster(short.cluster)) == 1.0

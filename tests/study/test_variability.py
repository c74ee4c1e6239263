"""Jittered steps: seeded sampling, percentiles and the share of the tail from sync, by hand."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from simtrain.study.variability import (
    Jitter,
    jittered_cables,
    percentile,
    sample_jitter,
    simulate_steps,
    sync_share,
)

TINY: dict[str, Any] = {
    "cluster": {"preset": "dgx-a100", "nodes": 1}, "model": {"preset": "tiny-gpt"},
    "training": {"global_batch_size": 8, "micro_batch_size": 1, "seq_len": 512},
    "sim": {"granularity": "layer", "network": "analytic"},
    # No host issue cost: the tiny model is launch-bound, and a GPU start delay would then
    # hide behind the host's lead instead of adding to the step (the tail argument below).
    "compute": {"host_kernel_issue": 0.0, "host_microbatch": 0.0},
}


def test_percentile_by_hand() -> None:
    # 1..5: p50 is the middle value 3; p99 = 4 + 0.96 x (5 - 4) = 4.96 (rank 0.99 x 4 = 3.96)
    assert percentile([5, 1, 4, 2, 3], 50) == 3.0
    assert percentile([5, 1, 4, 2, 3], 99) == pytest.approx(4.96)


def test_sync_share_by_hand() -> None:
    # T0 = 1.0, p99 = 1.5, local p99 = 1.1: (1.5 - 1.1) / (1.5 - 1.0) = 0.8
    assert sync_share(1.5, 1.1, 1.0) == pytest.approx(0.8)
    assert sync_share(1.0, 1.0, 1.0) == 0.0  # no tail
    assert sync_share(1.5, 1.6, 1.0) == 0.0  # clipped


def test_sampling_is_seeded_and_never_faster_than_nominal() -> None:
    j = Jitter(sigma=0.05, delay_s=1e-3, seed=7)
    a, b = sample_jitter(j, 64, 3), sample_jitter(j, 64, 3)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    other = sample_jitter(j, 64, 4)
    assert not np.array_equal(a[0], other[0])
    assert (a[0] >= 1.0).all() and (a[1] >= 0.0).all()
    assert np.array_equal(sample_jitter(Jitter(sigma=0.0), 8, 0)[0], np.ones(8))


def test_no_jitter_gives_the_simulated_step_every_time() -> None:
    v = simulate_steps(TINY, Jitter(sigma=0.0, steps=2))
    assert v.steps_s == pytest.approx([v.baseline_s] * 2)
    assert v.p99_s == pytest.approx(v.baseline_s) and v.sync_share == 0.0


def test_start_delays_make_a_synchronous_tail() -> None:
    # every rank of a data-parallel step waits in the gradient all-reduce for the latest
    # one, so each step is T0 plus (at least) the largest of 8 delays, while a rank on its
    # own would be late by its own delay only
    j = Jitter(sigma=0.0, delay_s=2e-3, steps=4, seed=1)
    v = simulate_steps(TINY, j)
    for k, step in enumerate(v.steps_s):
        latest = float(sample_jitter(j, 8, k)[1].max())
        assert step >= v.baseline_s + latest * (1 - 1e-9)
    assert v.p99_s > v.local_p99_s > v.baseline_s
    assert 0.0 < v.sync_share <= 1.0
    assert v.as_dict()["steps"] == 4


@pytest.mark.parametrize("kwargs, message", [
    ({"sigma": -0.1}, "sigma must"), ({"delay_s": float("inf")}, "delay_s must"),
    ({"steps": 0}, "steps must"),
])
def test_bad_jitter_is_a_value_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Jitter(**kwargs)


TWO_NODES: dict[str, Any] = {
    **TINY, "cluster": {"preset": "dgx-a100", "nodes": 2},
    "training": {"global_batch_size": 16, "micro_batch_size": 1, "seq_len": 512},
}


def test_link_jitter_only_slows_steps_and_is_seeded() -> None:
    # No rank jitter: any step above T0 comes from the scale-out cables (the gradient
    # all-reduce crosses them); a divisor exp(0.5|Z|) >= 1 can never speed a step up.
    j = Jitter(sigma=0.0, link_sigma=0.5, steps=3, seed=3)
    v = simulate_steps(TWO_NODES, j)
    assert all(s >= v.baseline_s * (1 - 1e-9) for s in v.steps_s)
    assert max(v.steps_s) > v.baseline_s * 1.001
    assert simulate_steps(TWO_NODES, j).steps_s == v.steps_s
    # the local (per-rank) p99 has no link term: T0 exactly, so the whole tail is sync's
    assert v.local_p99_s == pytest.approx(v.baseline_s) and v.sync_share == 1.0


def test_jittered_cables_are_the_scale_out_ones_once_each() -> None:
    from simtrain.hardware.topology import ClusterConfig, build_cluster

    cables = jittered_cables(build_cluster(ClusterConfig(preset="dgx-a100", nodes=2)))
    # dgx-a100: 8 compute NICs per server on 8 rails -> 16 NIC-leaf cables, and each of the
    # rail leaves to each spine; every one listed once, never an NVLink or PCIe link
    assert len(cables) == len(set(cables)) and all(
        (b, a) not in cables for a, b in cables)
    assert sum(1 for a, b in cables if ".nic" in a or ".nic" in b) == 16


def test_scenario_variability_block_adds_percentiles_to_the_summary() -> None:
    from simtrain.scenario import load_scenario
    from simtrain.simulate import simulate

    data = {**TINY, "sim": {**TINY["sim"], "variability": {
        "sigma": 0.0, "delay_s": 2e-3, "steps": 3, "seed": 1}}}
    summary = simulate(load_scenario(data)).summary
    v = summary["variability"]
    assert v["steps"] == 3 and v["baseline_step_s"] == summary["step_time_s"]
    assert v["p99_step_s"] >= v["p50_step_s"] >= summary["step_time_s"]
    # the same numbers as the study function on the same scenario and seed
    direct = simulate_steps(TINY, Jitter(sigma=0.0, delay_s=2e-3, steps=3, seed=1))
    assert v["p99_step_s"] == pytest.approx(direct.p99_s)


@pytest.mark.parametrize("variability, field", [
    ({"steps": 0}, "sim.variability.steps"), ({"link_sigma": -1}, "sim.variability.link_sigma"),
    ({"sigma": "lots"}, "sim.variability.sigma"), ({"wobble": 1}, "sim.variability.wobble"),
])
def test_bad_variability_block_names_the_field(variability: dict[str, Any], field: str) -> None:
    from simtrain.errors import ScenarioError
    from simtrain.scenario import load_scenario

    with pytest.raises(ScenarioError) as info:
        load_scenario({**TINY, "sim": {**TINY["sim"], "variability": variability}})
    assert field in str(info.value)

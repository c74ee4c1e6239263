"""Jittered steps: seeded sampling, percentiles and the share of the tail from sync, by hand."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from simtrain.study.variability import (
    Jitter,
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
    ({"sigma": -0.1}, "jitter.sigma"), ({"delay_s": float("inf")}, "jitter.delay_s"),
    ({"steps": 0}, "jitter.steps"),
])
def test_bad_jitter_is_a_value_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Jitter(**kwargs)

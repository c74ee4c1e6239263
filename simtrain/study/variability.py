"""Step-time variability: per-rank jitter sampled over N steps, p50/p99, and how much of the
tail comes from synchronisation.

Real steps are not all the simulated one: kernels run a little slower on some GPUs in some
steps (clocks, thermals, memory errors retried) and ranks start late (OS noise, the data
loader, Python). Each step here draws, for every rank, a compute slowdown s = exp(σ·|Z|)
(Z standard normal: a half-lognormal, never faster than the nominal kernels) and a start
delay d ~ Exponential(mean), seeded and deterministic for a seed, and simulates the step
with them as stragglers (``sim.stragglers``). A synchronous step waits for the slowest rank
of each group, so its tail is the tail of a maximum over ranks; without synchronisation a
rank's own step would be about T0·s + d. The share of the tail that synchronisation causes
is (p99 − p99_local) / (p99 − T0), T0 the step without jitter. Per-link jitter is not
modelled (the engine's links have fixed bandwidths).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Jitter:
    """Per-rank, per-step noise: slowdown exp(σ|Z|), start delay of mean ``delay_s``."""

    sigma: float = 0.02
    delay_s: float = 0.0
    steps: int = 20
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("sigma", "delay_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ValueError(f"jitter.{name} must be a finite number >= 0, got {value!r}")
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"jitter.steps must be a positive integer, got {self.steps!r}")


def sample_jitter(jitter: Jitter, num_ranks: int, step: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(slowdowns, delays) of every rank in step ``step``; the same for the same seed."""
    rng = np.random.default_rng([jitter.seed, step])
    slow = np.exp(jitter.sigma * np.abs(rng.standard_normal(num_ranks)))
    delay = rng.exponential(jitter.delay_s, num_ranks) if jitter.delay_s > 0 \
        else np.zeros(num_ranks)
    return slow, delay


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear between order statistics (numpy's default)."""
    return float(np.percentile(np.asarray(values, dtype=float), q))


def sync_share(p99_s: float, local_p99_s: float, baseline_s: float) -> float:
    """(p99 − p99_local) / (p99 − T0), clipped to [0, 1]; 0 when there is no tail."""
    tail = p99_s - baseline_s
    if tail <= 0:
        return 0.0
    return min(1.0, max(0.0, (p99_s - local_p99_s) / tail))


@dataclass(frozen=True)
class Variability:
    """Step times over N jittered steps and where their tail comes from (seconds)."""

    baseline_s: float
    steps_s: list[float]
    local_p99_s: float

    @property
    def p50_s(self) -> float:
        return percentile(self.steps_s, 50)

    @property
    def p99_s(self) -> float:
        return percentile(self.steps_s, 99)

    @property
    def sync_share(self) -> float:
        return sync_share(self.p99_s, self.local_p99_s, self.baseline_s)

    def as_dict(self) -> dict[str, Any]:
        return {"baseline_step_s": self.baseline_s, "p50_step_s": self.p50_s,
                "p99_step_s": self.p99_s, "local_p99_step_s": self.local_p99_s,
                "tail_from_sync": self.sync_share, "steps": len(self.steps_s)}


def simulate_steps(scenario: Mapping[str, Any], jitter: Jitter) -> Variability:
    """Simulate ``scenario`` (a scenario dict) once without and ``jitter.steps`` times with
    jitter; every rank is explicit in the jittered runs (they differ)."""
    from simtrain.scenario import load_scenario
    from simtrain.simulate import simulate

    base = simulate(load_scenario(dict(scenario)))
    t0 = float(base.summary["step_time_s"])
    ranks = base.cluster.num_gpus
    steps, local = [], []
    for k in range(jitter.steps):
        slow, delay = sample_jitter(jitter, ranks, k)
        data = copy.deepcopy(dict(scenario))
        data["sim"] = {**data.get("sim", {}), "fidelity": "explicit", "stragglers": {
            r: {"slowdown": float(slow[r]), "delay": float(delay[r])} for r in range(ranks)}}
        steps.append(float(simulate(load_scenario(data)).summary["step_time_s"]))
        local.extend((t0 * slow + delay).tolist())
    return Variability(t0, steps, percentile(local, 99))

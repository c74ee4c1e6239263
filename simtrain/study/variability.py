"""Step-time variability: per-rank and per-link jitter sampled over N steps, p50/p99, and how
much of the tail comes from synchronisation.

Real steps are not all the simulated one: kernels run a little slower on some GPUs in some
steps (clocks, thermals, memory errors retried), ranks start late (OS noise, the data
loader, Python), and scale-out cables deliver less than their rate in some steps (other
jobs' traffic on shared switches, adaptive-routing collisions, a port retraining). Each step
here draws, for every rank, a compute slowdown s = exp(σ·|Z|) (Z standard normal: a
half-lognormal, never faster than the nominal kernels) and a start delay d ~
Exponential(mean), and for every scale-out cable (InfiniBand/Ethernet) a bandwidth divisor
exp(σ_link·|Z|); seeded and deterministic for a seed. The step is simulated with them as
stragglers (``sim.stragglers``) and slow links (``sim.link_slowdowns``), on top of any the
scenario already has. A synchronous step waits for the slowest rank of each group, so its
tail is the tail of a maximum over ranks; without synchronisation a rank's own step would
be about T0·s + d. The share of the tail that synchronisation causes is
(p99 − p99_local) / (p99 − T0), T0 the step without jitter (link jitter counts as tail that
no single rank owns, so it lands in the synchronisation share).

``sim.variability: {steps, sigma, delay_s, link_sigma, seed}`` in a scenario adds these
numbers to its summary (``variability``), which sweeps rank by (``objective: {metric:
variability.p99_step_s}``) and plans rank by (``rank_by: p99``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, field_validator

if TYPE_CHECKING:
    from simtrain.hardware.topology import Cluster
    from simtrain.scenario import Scenario

# Cable kinds whose bandwidth jitters: the scale-out fabric, shared with other jobs.
JITTERED_LINK_KINDS = ("ib", "ethernet")
MAX_STEPS = 1000  # each jittered step is one explicit simulation


class Jitter(BaseModel):
    """Per-step noise: rank slowdown exp(σ|Z|), start delay of mean ``delay_s``, scale-out
    cable bandwidth divided by exp(``link_sigma``·|Z|); ``steps`` steps from ``seed``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sigma: float = 0.02
    delay_s: float = 0.0
    link_sigma: float = 0.0
    steps: int = 20
    seed: int = 0

    @field_validator("sigma", "delay_s", "link_sigma", mode="before")
    @classmethod
    def _non_negative(cls, value: Any, info: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value) or value < 0:
            raise ValueError(f"{info.field_name} must be a finite number >= 0, "
                             f"got {value!r}")
        return float(value)

    @field_validator("steps", mode="before")
    @classmethod
    def _steps(cls, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_STEPS:
            raise ValueError(f"steps must be an integer in 1..{MAX_STEPS}, got {value!r}")
        return value


def sample_jitter(jitter: Jitter, num_ranks: int, step: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(slowdowns, delays) of every rank in step ``step``; the same for the same seed."""
    rng = np.random.default_rng([jitter.seed, step])
    slow = np.exp(jitter.sigma * np.abs(rng.standard_normal(num_ranks)))
    delay = rng.exponential(jitter.delay_s, num_ranks) if jitter.delay_s > 0 \
        else np.zeros(num_ranks)
    return slow, delay


def sample_link_jitter(jitter: Jitter, num_cables: int, step: int) -> np.ndarray:
    """Bandwidth divisors (>= 1) of ``num_cables`` cables in step ``step`` (own stream)."""
    rng = np.random.default_rng([jitter.seed, step, 1])
    return np.exp(jitter.link_sigma * np.abs(rng.standard_normal(num_cables)))


def jittered_cables(cluster: Cluster) -> list[tuple[str, str]]:
    """The scale-out cables (one per pair of ends, in link order) whose bandwidth jitters."""
    seen: dict[tuple[str, str], None] = {}
    for lk in cluster.links:
        if lk.kind in JITTERED_LINK_KINDS and (lk.dst, lk.src) not in seen:
            seen.setdefault((lk.src, lk.dst), None)
    return list(seen)


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


def simulate_steps(scenario: Scenario | Mapping[str, Any], jitter: Jitter,
                   baseline_s: float | None = None) -> Variability:
    """Simulate ``scenario`` once without (unless ``baseline_s`` is given) and ``jitter.steps``
    times with jitter; every rank is explicit in the jittered runs (they differ)."""
    from simtrain.hardware.topology import build_cluster
    from simtrain.scenario import LinkSlowdown, Scenario, Straggler, load_scenario
    from simtrain.simulate import simulate

    base = scenario if isinstance(scenario, Scenario) else load_scenario(dict(scenario))
    base = base.model_copy(update={"sim": base.sim.model_copy(update={"variability": None})})
    t0 = float(simulate(base).summary["step_time_s"]) if baseline_s is None else baseline_s
    cluster = build_cluster(base.cluster)
    ranks = cluster.num_gpus
    cables = jittered_cables(cluster) if jitter.link_sigma > 0 else []
    given = base.sim.stragglers
    steps, local = [], []
    for k in range(jitter.steps):
        slow, delay = sample_jitter(jitter, ranks, k)
        stragglers = {}
        for r in range(ranks):
            own = given.get(r)
            stragglers[r] = Straggler(
                slowdown=float(slow[r]) * (own.slowdown if own else 1.0),
                delay=float(delay[r]) + (own.delay if own else 0.0))
        links = list(base.sim.link_slowdowns) + [
            LinkSlowdown(between=cable, slowdown=float(f))
            for cable, f in zip(cables, sample_link_jitter(jitter, len(cables), k), strict=True)]
        sim = base.sim.model_copy(update={"fidelity": "explicit", "stragglers": stragglers,
                                          "link_slowdowns": links})
        steps.append(float(simulate(base.model_copy(update={"sim": sim})).summary[
            "step_time_s"]))
        local.extend((t0 * slow + delay).tolist())
    return Variability(t0, steps, percentile(local, 99))

"""Steady-state extrapolation: a long pipeline's step time from three shorter runs.

A step of m microbatches under a pipeline schedule is a warm-up, a run of identical
steady-state periods (one per pipeline group of ``g = pp`` microbatches under 1F1B and
interleaved 1F1B) and a cool-down with the gradient reductions and the optimizer. Adding
g microbatches adds one period and nothing else, and the simulation is deterministic,
so past the warm-up the step time is exactly linear in m:

    T(m) = T(m_b) + (m - m_b) * (T(m_c) - T(m_a)) / (m_c - m_a)

``steady_step`` simulates the step at m_a = 2g, m_b = 3g and m_c = 4g microbatches
(``POINTS``: 2g is past the warm-up on every row measured; at m = g an interleaved MoE row,
Mixtral on PP 4, was still 2.7e-6 off the line), extrapolates to the scenario's m, and
*checks* the premise instead of assuming it: the three times must lie on one line within
``COLLINEAR_RTOL`` (relative to T(m_c)), else the full step is simulated. Measured on 66
extrapolated validation rows, the extrapolated step equals the full one within 3.7e-13.

Kernels run once per step and amortised over its microbatches (FP8 weight casts,
``workload.fp8.cast_kernels``) stay amortised over the real m in the short runs
(``simulate(step_micro_batches=m)``), so each short run's per-microbatch work is the full
step's. Only steps long enough to gain (m at least ``MIN_GAIN`` times the microbatches of
the three runs together) are extrapolated; hung ranks and run-to-run variability always
simulate the full step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from simtrain.hardware.topology import Cluster
from simtrain.parallel.schedule import schedule_problems
from simtrain.scenario import Scenario

POINTS = (2, 3, 4)  # the short runs, in pipeline groups of pp microbatches
# Collinearity the three short runs must meet, relative to the longest one's step time:
# far above float rounding over a step's ~1e5-1e7 additions (~1e-13 measured), far below
# any modelled effect.
COLLINEAR_RTOL = 1e-9
# Extrapolate only when the full step has at least this many times the microbatches of
# the three short runs together (below it the short runs cost nearly as much).
MIN_GAIN = 1.5


@dataclass(frozen=True)
class SteadyStep:
    """A step's time and the summary of the run it came from.

    ``summary`` is the full step's when ``points`` is empty (simulated in full), else the
    longest short run's with its step time, MFU and HFU rescaled to the full step."""

    step_s: float
    summary: dict[str, Any]
    points: tuple[int, ...] = ()  # microbatches of the short runs (empty: full step)
    times: tuple[float, ...] = ()  # their step times
    why_full: str = ""  # why the full step was simulated
    extra: dict[str, Any] = field(default_factory=dict)


def sample_points(m: int, pp: int, schedule: str, vpp: int) -> tuple[int, ...] | None:
    """Microbatch counts of the short runs for a step of ``m`` microbatches, or None when
    the step is too short to gain, is not a whole number of pipeline groups, or the
    schedule cannot run one of the counts."""
    group = max(pp, 1)
    points = tuple(k * group for k in POINTS)
    if m % group or m < MIN_GAIN * sum(points):
        return None
    if any(schedule_problems(schedule, pp, p, vpp) for p in points):
        return None
    return points


def extrapolate(points: Sequence[int], times: Sequence[float], m: int) -> float | None:
    """T(m) on the line through the (microbatches, step time) ``points``; None when they
    are not collinear within ``COLLINEAR_RTOL``."""
    (ma, mb, mc), (ta, tb, tc) = points, times
    slope = (tc - ta) / (mc - ma)
    if abs(ta + (mb - ma) * slope - tb) > COLLINEAR_RTOL * abs(tc):
        return None
    return tb + (m - mb) * slope


def _points_of(scenario: Scenario, cluster: Cluster) -> tuple[int, tuple[int, ...] | None]:
    """(the step's microbatches, the short runs' microbatches or None)."""
    from simtrain.simulate import micro_batches

    par, sim = scenario.parallelism, scenario.sim
    dims = par.dims(cluster.num_gpus)
    m = micro_batches(scenario, cluster)
    if sim.hangs or sim.variability:
        return m, None
    kind = par.schedule if dims.vpp > 1 or par.schedule != "interleaved" else "1f1b"
    return m, sample_points(m, dims.pp, kind, dims.vpp)


def simulated_share(scenario: Scenario, cluster: Cluster) -> float:
    """The share of the step's microbatches ``steady_step`` simulates (1.0: the full step)."""
    m, points = _points_of(scenario, cluster)
    return sum(points) / m if points else 1.0


def _with_micro_batches(scenario: Scenario, m: int, dp: int) -> Scenario:
    train = scenario.training
    return scenario.model_copy(update={"training": train.model_copy(
        update={"global_batch_size": m * dp * train.micro_batch_size})})


def steady_step(scenario: Scenario, cluster: Cluster) -> SteadyStep:
    """The step time of ``scenario`` (memory already checked by the caller, or
    ``sim.ignore_memory`` set), by steady-state extrapolation where it applies."""
    from simtrain.simulate import simulate

    sim = scenario.sim
    dims = scenario.parallelism.dims(cluster.num_gpus)
    m, points = _points_of(scenario, cluster)
    if points is None:
        summary = simulate(scenario).summary
        why = ("hung ranks" if sim.hangs else "run-to-run variability" if sim.variability
               else "too few microbatches to extrapolate")
        return SteadyStep(float(summary["step_time_s"]), summary, why_full=why)
    summaries = [simulate(_with_micro_batches(scenario, p, dims.dp),
                          step_micro_batches=m).summary for p in points]
    times = tuple(float(s["step_time_s"]) for s in summaries)
    step = extrapolate(points, times, m)
    if step is None:
        summary = simulate(scenario).summary
        return SteadyStep(float(summary["step_time_s"]), summary, points, times,
                          why_full="short runs not collinear (no steady state)")
    last = summaries[-1]
    scale = (m / points[-1]) * (times[-1] / step)  # model FLOPs per second, full vs short
    summary = {**last, "step_time_s": step, "micro_batches": m,
               **{k: last[k] * scale for k in ("mfu", "hfu") if last.get(k) is not None}}
    return SteadyStep(step, summary, points, times)

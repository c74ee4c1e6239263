"""The summary's metrics, defined once: key, label, unit, direction and where each is shown.

The CLI's summary table, the HTML report's cards, ``simtrain compare`` and the sweep report
all read :data:`METRICS`; a metric is added or renamed here and nowhere else. Values are SI
(seconds, bytes, fractions); :func:`fmt_metric` turns one into its human form by unit.
The summary also carries structured entries that are not single numbers
(:data:`DETAIL_KEYS`); a test checks that every key ``simulate`` produces is one or the other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from simtrain.units import fmt_bytes, fmt_seconds

Unit = Literal["s", "fraction", "rate", "gib", "bytes", "count", "params"]
Where = Literal["cli", "card", "compare", "sweep"]

# What the time a rank spends with nothing to run is called: in a pipelined job it is the
# pipeline bubble (fill and drain, plus waits for slower stages); without a pipeline it
# can only be waiting for peers (a straggler, a late collective partner).
BUBBLE_LABEL = "pipeline bubble"
IDLE_LABEL = "idle (waiting for peers)"


def fmt_count(value: float) -> str:
    """Large counts with a decimal suffix: 1234567 -> '1.23 M'."""
    for suffix, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.2f} {suffix}"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def fmt_percent(fraction: float) -> str:
    """A fraction as a percentage: 0.4123 -> '41.2%'."""
    return f"{fraction * 100:.1f}%"


FORMATS: dict[str, Callable[[float], str]] = {
    "s": fmt_seconds,
    "fraction": fmt_percent,
    "rate": lambda v: f"{fmt_count(v)}/s",
    "gib": lambda v: f"{v:,.2f} GiB",
    "bytes": fmt_bytes,
    "count": lambda v: f"{int(v):,}",
    "params": lambda v: f"{v / 1e9:.3f} B",
}


@dataclass(frozen=True)
class Metric:
    """One number of the summary. ``better``: which way is an improvement (None: neither)."""

    key: str  # a summary key; dotted for a value inside a nested entry
    label: str
    unit: Unit
    better: Literal["lower", "higher"] | None
    where: frozenset[Where]
    optional: bool = False  # only some runs produce it

    def fmt(self, value: float) -> str:
        return FORMATS[self.unit](value)


def _m(key: str, label: str, unit: Unit, better: Literal["lower", "higher"] | None,
       *where: Where) -> Metric:
    return Metric(key, label, unit, better, frozenset(where))


METRICS: tuple[Metric, ...] = (
    _m("num_gpus", "GPUs", "count", None, "cli", "card", "compare"),
    _m("step_time_s", "step time", "s", "lower", "cli", "card", "compare", "sweep"),
    _m("tokens_per_s", "tokens/s", "rate", "higher", "cli", "card", "compare", "sweep"),
    _m("mfu", "MFU", "fraction", "higher", "cli", "card", "compare", "sweep"),
    _m("hfu", "HFU", "fraction", "higher", "cli", "card", "compare"),
    _m("compute_s", "compute (per GPU)", "s", None, "cli", "card", "compare"),
    _m("comm_s", "communication (per GPU)", "s", "lower", "cli", "card", "compare"),
    _m("exposed_comm_s", "exposed communication", "s", "lower", "cli", "card", "compare"),
    _m("bubble_s", BUBBLE_LABEL, "s", "lower", "card"),
    # The GPUs' wait for the host to issue kernels (simtrain.workload.host).
    _m("host_s", "host wait (per GPU)", "s", "lower", "cli", "card", "compare"),
    _m("host_share", "host wait share of the step", "fraction", "lower", "compare"),
    _m("bubble_fraction", BUBBLE_LABEL, "fraction", "lower", "cli", "compare"),
    _m("peak_memory_gib", "peak memory (per GPU)", "gib", "lower", "cli", "card", "compare",
       "sweep"),
    # With measured per-op tables (compute.tables): the share of compute time they gave.
    Metric("measured_compute.measured_fraction", "compute from measured tables", "fraction",
           None, frozenset({"cli"}), optional=True),
    # With sim.variability: step times over N jittered steps (simtrain.study.variability).
    Metric("variability.p50_step_s", "p50 step (jittered)", "s", "lower",
           frozenset({"cli", "card", "compare"}), optional=True),
    Metric("variability.p99_step_s", "p99 step (jittered)", "s", "lower",
           frozenset({"cli", "card", "compare"}), optional=True),
    Metric("variability.tail_from_sync", "p99 tail from synchronisation", "fraction", None,
           frozenset({"cli", "compare"}), optional=True),
    _m("comm_bytes_per_gpu", "bytes communicated per GPU", "bytes", "lower", "cli",
       "compare"),
    _m("parameters", "parameters", "params", None, "cli"),
    _m("micro_batches", "microbatches per step", "count", None, "cli"),
    _m("tokens_per_step", "tokens per step", "count", None),
    _m("model_flops_per_step", "model FLOPs per step", "count", None),
    _m("hardware_flops_per_step", "hardware FLOPs per step", "count", None),
    _m("tasks", "tasks in the graph", "count", None),
)
BY_KEY: dict[str, Metric] = {m.key: m for m in METRICS}
# Summary entries that are not one number: names, nested breakdowns, run facts.
DETAIL_KEYS = ("scenario", "gpu", "exposed_comm_by_kind", "memory_breakdown", "parallelism",
               "launch_bound", "fidelity", "fidelity_why",
               "network", "notes", "measured_compute", "report", "trace", "variability")


def shown_in(where: Where) -> tuple[Metric, ...]:
    """The metrics one surface shows, in summary order."""
    return tuple(m for m in METRICS if where in m.where)


def is_pipelined(summary: Mapping[str, Any]) -> bool:
    plan = summary.get("parallelism")
    return isinstance(plan, Mapping) and int(plan.get("pp", 1) or 1) > 1


def idle_label(summaries: Iterable[Mapping[str, Any]]) -> str:
    """What idle time is called for these runs (see BUBBLE_LABEL, IDLE_LABEL)."""
    kinds = {is_pipelined(s) for s in summaries}
    if kinds == {True}:
        return BUBBLE_LABEL
    if kinds == {False}:
        return IDLE_LABEL
    return f"{BUBBLE_LABEL} / idle"


def label(metric: Metric, *summaries: Mapping[str, Any]) -> str:
    """The metric's label for these runs (idle time is named by its cause)."""
    if metric.key in ("bubble_s", "bubble_fraction") and summaries:
        return idle_label(summaries)
    return metric.label


def number(summary: Mapping[str, Any], key: str) -> float | None:
    """``summary[key]`` as a float (a dotted key looks inside nested entries); None when
    absent or not a number."""
    value: Any = summary
    for part in key.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        return None
    return float(value)

"""Goodput: the share of wall-clock time a training job makes progress, given that it fails.

A job on N GPUs stops whenever any of its components fails. With failure rates per
component-hour λ_c and counts n_c (GPUs, hosts, NICs, network switches, plus software faults
counted per GPU), failures arrive at Λ = Σ n_c λ_c, a mean time between failures M = 1/Λ.
Each failure costs a restart R (reschedule and relaunch, read the checkpoint back, re-warm)
and the work since the last checkpoint; each checkpoint costs its write time δ. With a
checkpoint every τ seconds of work and failures arriving as a Poisson process, the expected
wall time per τ of work is M·e^{R/M}·(e^{(τ+δ)/M} − 1) (Daly 2006, "A higher order estimate
of the optimum checkpoint interval for restart dumps", FGCS 22(3), Eq. 20), so

    goodput G = τ / (M·e^{R/M}·(e^{(τ+δ)/M} − 1)),

whose first-order expansion is Young's (1974) τ / (τ + δ + (τ + δ)²/2M + R(τ + δ)/M).
The interval defaults to Daly's optimum, τ = sqrt(2δM)·[1 + ⅓·sqrt(δ/2M) + (1/9)·(δ/2M)] − δ
for δ < 2M (else τ = M), whose leading term is Young's sqrt(2δM); it is never below one step.

Default failure rates come from the one large run whose interruptions are published by
component: Llama 3 405B pre-training, 419 unexpected interruptions in a 54-day snapshot on
16,384 H100 GPUs in 2,048 hosts (Dubey et al. 2024, "The Llama 3 Herd of Models", §3.3.4,
Table 5). We group Table 5's root causes by the component that failed (counts below).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from simtrain.units import parse_bandwidth, parse_seconds

HOUR = 3600.0
COMPONENTS = ("gpu", "host", "nic", "switch", "software")

# Llama 3 Table 5 (54 days, 16,384 GPUs, 2,048 hosts, 8 NICs per host), grouped:
LLAMA3_HOURS = 54 * 24.0
LLAMA3_GPUS, LLAMA3_HOSTS, LLAMA3_NICS = 16384, 2048, 16384
# Switches: the 2,048-node dgx-h100 preset fabric has 512 leaf + 32 spine switches; Meta's
# RoCE fabric differs, so the per-switch rate holds only as far as the counts are alike.
LLAMA3_SWITCHES = 544
LLAMA3_INTERRUPTIONS = {
    # faulty GPU 148, GPU HBM3 72, GPU SRAM 19, GPU system processor 17, silent data
    # corruption 6, GPU thermal interface and sensor 6
    "gpu": 148 + 72 + 19 + 17 + 6 + 6,
    # host maintenance 32, SSD 3, power supply 3, server chassis 2, IO expansion board 2,
    # CPU 2, system memory 2
    "host": 32 + 3 + 3 + 2 + 2 + 2 + 2,
    "nic": 7,
    "switch": 35,  # network switch and cable
    "software": 54 + 7 + 2,  # software bug, NCCL watchdog timeouts, dependency
}
assert sum(LLAMA3_INTERRUPTIONS.values()) == 419
_LLAMA3_COUNTS = {"gpu": LLAMA3_GPUS, "host": LLAMA3_HOSTS, "nic": LLAMA3_NICS,
                  "switch": LLAMA3_SWITCHES, "software": LLAMA3_GPUS}
# failures per component-hour (software: per GPU-hour)
DEFAULT_RATES_PER_HOUR = {c: LLAMA3_INTERRUPTIONS[c] / (_LLAMA3_COUNTS[c] * LLAMA3_HOURS)
                          for c in COMPONENTS}

# Checkpoint storage: Llama 3 §3.3.1 gives Tectonic's sustained 2 TB/s (peak 7 TB/s) for
# checkpoint traffic; reading back at the same rate. Range: 0.1-10 TB/s for parallel file
# systems and object stores of this scale.
DEFAULT_CHECKPOINT_BANDWIDTH = 2e12
# Restart (the scheduler replaces the failed host, relaunches every rank, NCCL and the data
# loader initialise) and re-warm (the first steps run slow: allocator, compilation and
# caches). No source states these for a 16k-GPU job; they are user parameters, typical
# ranges 60-1800 s and 0-600 s. Measure yours.
DEFAULT_RESTART_S = 600.0
DEFAULT_REWARM_S = 120.0


@dataclass(frozen=True)
class GoodputConfig:
    """Failure, checkpoint and price inputs (SI: seconds, bytes/s; rates per hour)."""

    rates_per_hour: dict[str, float] = field(
        default_factory=lambda: dict(DEFAULT_RATES_PER_HOUR))
    write_bandwidth: float = DEFAULT_CHECKPOINT_BANDWIDTH
    read_bandwidth: float = DEFAULT_CHECKPOINT_BANDWIDTH
    restart_s: float = DEFAULT_RESTART_S
    rewarm_s: float = DEFAULT_REWARM_S
    interval_s: float | None = None  # None: Daly's optimum
    price_per_gpu_hour: float | None = None


_KEYS = {"failures_per_hour", "checkpoint_write_bandwidth", "checkpoint_read_bandwidth",
         "restart", "rewarm", "checkpoint_interval", "price_per_gpu_hour"}


def goodput_config(data: Mapping[str, Any] | None) -> GoodputConfig:
    """Validate a plan file's ``goodput:`` section; ValueError names the key and the range."""
    data = dict(data or {})
    bad = set(data) - _KEYS
    if bad:
        raise ValueError(f"goodput.{sorted(bad)[0]}: unknown key; expected: "
                         f"{', '.join(sorted(_KEYS))}")
    cfg = GoodputConfig()
    rates = dict(cfg.rates_per_hour)
    given = data.get("failures_per_hour") or {}
    if not isinstance(given, Mapping):
        raise ValueError(f"goodput.failures_per_hour must map components "
                         f"({', '.join(COMPONENTS)}) to failures per component-hour")
    for comp, value in given.items():
        if comp not in COMPONENTS:
            raise ValueError(f"goodput.failures_per_hour.{comp}: unknown component; "
                             f"expected: {', '.join(COMPONENTS)}")
        rates[comp] = _non_negative(value, f"goodput.failures_per_hour.{comp}")
    out = replace(cfg, rates_per_hour=rates)
    for key, attr in (("checkpoint_write_bandwidth", "write_bandwidth"),
                      ("checkpoint_read_bandwidth", "read_bandwidth")):
        if key in data:
            changed: dict[str, Any] = {
                attr: _parsed(parse_bandwidth, data[key], f"goodput.{key}", positive=True)}
            out = replace(out, **changed)
    for key, attr in (("restart", "restart_s"), ("rewarm", "rewarm_s")):
        if key in data:
            changed = {attr: _parsed(parse_seconds, data[key], f"goodput.{key}")}
            out = replace(out, **changed)
    if data.get("checkpoint_interval") is not None:
        out = replace(out, interval_s=_parsed(parse_seconds, data["checkpoint_interval"],
                                              "goodput.checkpoint_interval", positive=True))
    if data.get("price_per_gpu_hour") is not None:
        out = replace(out, price_per_gpu_hour=_non_negative(data["price_per_gpu_hour"],
                                                            "goodput.price_per_gpu_hour"))
    return out


def _non_negative(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a finite number >= 0, got {value!r}")
    return float(value)


def _parsed(parse: Any, value: Any, what: str, *, positive: bool = False) -> float:
    try:
        number = float(parse(value))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{what}: {exc}") from None
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise ValueError(f"{what} must be a finite number {'>' if positive else '>='} 0, "
                         f"got {value!r}")
    return number


# ---- the formulas ----------------------------------------------------------------------


def failure_rate(rates_per_hour: Mapping[str, float], counts: Mapping[str, float]) -> float:
    """Λ = Σ_c n_c λ_c, failures per second of the whole job (rates per component-hour)."""
    return sum(rates_per_hour.get(c, 0.0) * counts.get(c, 0.0) for c in COMPONENTS) / HOUR


def young_interval(write_s: float, mtbf_s: float) -> float:
    """Young's (1974) optimum checkpoint interval sqrt(2·δ·M) (seconds of work)."""
    return math.sqrt(2.0 * write_s * mtbf_s)


def daly_interval(write_s: float, mtbf_s: float) -> float:
    """Daly's (2006, Eq. 37) optimum: sqrt(2δM)[1 + ⅓·sqrt(δ/2M) + (δ/2M)/9] − δ, or M if
    δ >= 2M."""
    if write_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = write_s / (2.0 * mtbf_s)
    return young_interval(write_s, mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - write_s


def goodput_fraction(interval_s: float, write_s: float, restart_s: float,
                     mtbf_s: float) -> float:
    """G = τ / (M·e^{R/M}·(e^{(τ+δ)/M} − 1)) (Daly 2006, Eq. 20, exponential failures);
    τ / (τ + δ) when nothing fails."""
    if mtbf_s == math.inf:
        return interval_s / (interval_s + write_s)
    wall = mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1((interval_s + write_s) / mtbf_s)
    return interval_s / wall if math.isfinite(wall) else 0.0


def checkpoint_bytes(params: float, weight_bytes: float) -> float:
    """Bytes of one checkpoint: the weights and the optimizer states (the memory model's
    ZeRO-0 ``weights`` + ``optimizer``: 2 + 12 = 14 B per parameter for bf16 Adam)."""
    from simtrain.workload.memory import model_state_bytes

    states = model_state_bytes(params, zero=0, dp=1, weight_bytes=weight_bytes)
    return states["weights"] + states["optimizer"]


@dataclass(frozen=True)
class Goodput:
    """The expected effect of failures and checkpoints on one plan (SI units)."""

    mtbf_s: float
    checkpoint_bytes: float
    write_s: float
    restart_s: float  # relaunch + read back + re-warm
    interval_s: float
    goodput: float
    ideal_s: float
    time_to_train_s: float
    gpu_hours: float
    cost: float | None

    def as_dict(self) -> dict[str, float | None]:
        return {"mtbf_s": self.mtbf_s, "checkpoint_bytes": self.checkpoint_bytes,
                "checkpoint_write_s": self.write_s, "restart_s": self.restart_s,
                "checkpoint_interval_s": self.interval_s, "goodput": self.goodput,
                "ideal_time_to_train_s": self.ideal_s,
                "effective_time_to_train_s": self.time_to_train_s,
                "effective_gpu_hours": self.gpu_hours, "cost": self.cost}


def goodput(cfg: GoodputConfig, *, counts: Mapping[str, float], ckpt_bytes: float,
            step_s: float, ideal_s: float) -> Goodput:
    """Goodput, effective time-to-train (ideal / G) and GPU-hours of a job with ``counts``
    components whose failure-free time-to-train is ``ideal_s``. ValueError if the given
    checkpoint interval is shorter than one step."""
    rate = failure_rate(cfg.rates_per_hour, counts)
    mtbf = 1.0 / rate if rate > 0 else math.inf
    write = ckpt_bytes / cfg.write_bandwidth
    restart = cfg.restart_s + ckpt_bytes / cfg.read_bandwidth + cfg.rewarm_s
    if cfg.interval_s is not None:
        if cfg.interval_s < step_s:
            raise ValueError(f"goodput.checkpoint_interval={cfg.interval_s:g} s is shorter "
                             f"than one step ({step_s:.3g} s); checkpoints are taken between "
                             f"steps, give at least {step_s:.3g} s")
        interval = cfg.interval_s
    elif mtbf == math.inf:  # nothing fails: one checkpoint at the end
        interval = max(ideal_s, step_s)
    else:
        interval = max(daly_interval(write, mtbf), step_s)
    g = goodput_fraction(interval, write, restart, mtbf) if interval > 0 else 0.0
    ttt = ideal_s / g if g > 0 else math.inf
    gpus = float(counts.get("gpu", 0.0))
    hours = gpus * ttt / HOUR
    cost = None if cfg.price_per_gpu_hour is None else hours * cfg.price_per_gpu_hour
    return Goodput(mtbf, ckpt_bytes, write, restart, interval, g, ideal_s, ttt, hours, cost)

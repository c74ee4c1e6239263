"""Fit the compute model's per-GPU parameters to measured training runs (issue #8).

The compute model (``simtrain.workload.compute``) has a handful of physically meaningful
parameters per GPU architecture: the peak fraction of a large GEMM, of a fused attention
kernel and of HBM bandwidth for memory-bound kernels, and the slowdown of compute while a
collective runs. Calibration chooses them so that simulated step times match measured ones:

1. every row of the chosen suites (``scenarios/validation/<suite>.yaml``: a scenario and
   its published iteration time or TFLOP/s per GPU) becomes an *observation*, a scenario
   and a measured step time (TFLOP/s are turned back into seconds with the source's own
   FLOP formula, the same arithmetic ``simtrain validate`` uses the other way round);
2. observations are grouped by the architecture of their GPU, and each group is fitted on
   its own: the parameters are written into every scenario's ``compute:`` section and the
   residuals ``log(simulated step / measured step)`` are minimised by bounded nonlinear
   least squares (``scipy.optimize.least_squares``, trust-region reflective, finite
   differences), starting from today's defaults;
3. the result is one value per parameter and architecture, never a factor per row.

Log residuals weigh a step 10% slow and 10% fast alike and make rows of different length
comparable. Parameters not named are left at their defaults.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simtrain.validation import (
    SCENARIO_SUITES,
    formula_flops,
    load_row,
    load_suite,
    row_bodies,
)

# Fittable ComputeConfig fields and their bounds: efficiencies are fractions of a peak;
# interference is a fractional slowdown.
BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_efficiency": (0.2, 0.9),  # no sustained GEMM reaches more than ~90% of peak
    "attention_efficiency": (0.1, 1.0),
    "memory_efficiency": (0.2, 1.0),
    "comm_interference": (0.0, 0.6),  # a fitted fixed slowdown replaces the SM/HBM model
    "launch_overhead": (0.5e-6, 50e-6),  # seconds per kernel
    # Physical ranges documented in simtrain.workload.compute / host / interference / fp8:
    "host_kernel_issue": (1e-6, 30e-6),  # host seconds to issue one kernel
    "host_microbatch": (20e-6, 2e-3),  # host seconds of framework work per microbatch
    "tile_fill_latency": (0.2e-6, 1.5e-6),  # GEMM tile pipeline fill
    "sms_per_channel": (1.0, 2.0),  # SMs one NCCL channel holds
    "fp8_gemm_efficiency": (0.5, 0.85),
}
# The optimizer works in these units (finite-difference steps are relative to max(1, |x|)),
# so a microsecond-sized parameter moves in microseconds.
UNIT: dict[str, float] = {"launch_overhead": 1e-6, "host_kernel_issue": 1e-6,
                          "host_microbatch": 1e-6, "tile_fill_latency": 1e-6}
DEFAULT_PARAMS = ("gemm_efficiency", "memory_efficiency")


@dataclass(frozen=True)
class Observation:
    """A measured run: its scenario (as a plain dict) and measured step time."""

    suite: str
    id: str
    arch: str
    body: dict[str, Any]
    measured_step_s: float


@dataclass
class ArchFit:
    """The fit of one architecture's observations."""

    arch: str
    params: dict[str, float]
    start: dict[str, float]
    rows: list[dict[str, Any]] = field(default_factory=list)  # id, before, after errors
    evaluations: int = 0
    converged: bool = False
    message: str = ""

    def mape(self, which: str) -> float:
        return sum(abs(r[which]) for r in self.rows) / max(len(self.rows), 1)

    def worst(self, which: str) -> dict[str, Any]:
        return max(self.rows, key=lambda r: abs(r[which]))


def observations(suites: Sequence[str] = SCENARIO_SUITES,
                 directory: Path | None = None) -> list[Observation]:
    """Every row of ``suites`` with a step time (measured, or derived from TFLOP/s)."""
    from simtrain.hardware.topology import build_cluster

    out = []
    for suite in suites:
        if suite == "nccl":
            raise ValueError("the nccl points calibrate the network, not the compute model "
                             "(see docs/collectives.md); name a suite of training runs")
        flops_kind = str(load_suite(suite, directory)["flops"])
        for entry, body in row_bodies(suite, directory):
            scenario = load_row(suite, entry, body, directory)
            cluster = build_cluster(scenario.cluster)
            published = entry["published"]
            if "iteration_time_ms" in published:
                step = float(published["iteration_time_ms"]) / 1e3
            elif "tflops_per_gpu" in published:
                step = formula_flops(flops_kind, scenario) / (
                    float(published["tflops_per_gpu"]) * 1e12 * cluster.num_gpus)
            else:
                raise ValueError(f"row {entry['id']} of {suite} has neither "
                                 f"iteration_time_ms nor tflops_per_gpu")
            out.append(Observation(suite, str(entry["id"]), cluster.gpu_spec.arch, body, step))
    return out


def with_params(body: Mapping[str, Any], params: Mapping[str, float]) -> dict[str, Any]:
    """``body`` with ``params`` written into its ``compute:`` section."""
    out = dict(body)
    out["compute"] = {**dict(body.get("compute") or {}), **params}
    return out


def _step(body: dict[str, Any]) -> float:
    from simtrain.simulate import simulate

    return float(simulate(body).summary["step_time_s"])


def simulated_steps(obs: Sequence[Observation], params: Mapping[str, float],
                    pool: ProcessPoolExecutor | None = None) -> np.ndarray:
    """Simulated step time of every observation with ``params`` in its compute section."""
    bodies = [with_params(o.body, params) for o in obs]
    steps = list(pool.map(_step, bodies)) if pool else [_step(b) for b in bodies]
    return np.array(steps)


def current_params(arch: str, names: Sequence[str]) -> dict[str, float]:
    """Today's default value of each parameter for ``arch``."""
    from simtrain.workload.compute import ComputeConfig
    from simtrain.workload.fp8 import FP8_GEMM_EFFICIENCY

    cfg = ComputeConfig()
    getters: dict[str, Callable[[], float]] = {
        "gemm_efficiency": lambda: cfg.max_gemm_efficiency(arch),
        "attention_efficiency": lambda: cfg.max_attention_efficiency(arch),
        "memory_efficiency": lambda: cfg.hbm_efficiency(arch),
        "comm_interference": lambda: cfg.comm_interference or 0.0,
        "launch_overhead": lambda: cfg.launch_overhead,
        "host_kernel_issue": lambda: cfg.host_kernel_issue,
        "host_microbatch": lambda: cfg.host_microbatch,
        "tile_fill_latency": lambda: cfg.tile_fill_latency,
        "sms_per_channel": lambda: cfg.sms_per_channel,
        "fp8_gemm_efficiency": lambda: cfg.fp8_gemm_efficiency or FP8_GEMM_EFFICIENCY[arch],
    }
    return {n: float(getters[n]()) for n in names}


def check_params(names: Sequence[str], fixed: Mapping[str, float]) -> None:
    """ValueError unless ``names`` (to fit) and ``fixed`` are known, distinct parameters."""
    if not names:
        raise ValueError("nothing to fit: name at least one parameter")
    for name in [*names, *fixed]:
        if name not in BOUNDS:
            raise ValueError(f"cannot fit or fix {name!r}; the parameters are: "
                             f"{', '.join(BOUNDS)}")
    both = [n for n in names if n in fixed]
    if both:
        raise ValueError(f"{both[0]!r} is both fitted and fixed; choose one")


def fit(obs: Sequence[Observation], names: Sequence[str] = DEFAULT_PARAMS, *,
        fixed: Mapping[str, float] | None = None, jobs: int = 1, max_evaluations: int = 40,
        progress: Callable[[str], None] | None = None) -> list[ArchFit]:
    """Fit ``names`` per architecture of ``obs``; returns one ArchFit per architecture.

    ``fixed`` holds other compute parameters at given values during the fit (written into
    every scenario with the fitted ones), e.g. a memory efficiency measured separately.
    """
    from scipy.optimize import least_squares

    fixed = dict(fixed or {})
    check_params(names, fixed)
    unit = np.array([UNIT.get(n, 1.0) for n in names])
    by_arch: dict[str, list[Observation]] = {}
    for o in obs:
        by_arch.setdefault(o.arch, []).append(o)
    pool = ProcessPoolExecutor(max_workers=jobs) if jobs > 1 else None
    results = []
    try:
        for arch, group in by_arch.items():
            measured = np.array([o.measured_step_s for o in group])
            start = current_params(arch, names)
            lo = np.array([BOUNDS[n][0] for n in names]) / unit
            hi = np.array([BOUNDS[n][1] for n in names]) / unit
            x0 = np.clip(np.array([start[n] for n in names]) / unit, lo + 1e-9, hi - 1e-9)
            cache: dict[tuple[float, ...], np.ndarray] = {}

            def residuals(x: np.ndarray, group: list[Observation] = group,
                          measured: np.ndarray = measured, arch: str = arch,
                          cache: dict[tuple[float, ...], np.ndarray] = cache) -> np.ndarray:
                key = tuple(round(float(v), 12) for v in x)
                if key not in cache:
                    params = dict(zip(names, (float(v) for v in x * unit), strict=True))
                    cache[key] = np.log(simulated_steps(group, {**fixed, **params}, pool)
                                        / measured)
                    if progress:
                        shown = ", ".join(f"{n}={v:.4g}" for n, v in params.items())
                        rms = math.sqrt(float(np.mean(cache[key] ** 2)))
                        progress(f"{arch}: {shown} (rms log error {rms:.3f})")
                return cache[key]

            before = residuals(x0)
            sol = least_squares(residuals, x0, bounds=(lo, hi), method="trf",
                                diff_step=0.02, x_scale="jac", max_nfev=max_evaluations,
                                xtol=1e-3, ftol=1e-4)
            after = residuals(sol.x)
            rows = [{"suite": o.suite, "id": o.id, "measured_step_s": o.measured_step_s,
                     "before": math.expm1(float(b)), "after": math.expm1(float(a))}
                    for o, b, a in zip(group, before, after, strict=True)]
            results.append(ArchFit(arch, dict(zip(names, (float(f"{v:.4g}")
                                                          for v in sol.x * unit),
                                                  strict=True)),
                                   start, rows, evaluations=len(cache),
                                   converged=bool(sol.success), message=str(sol.message)))
    finally:
        if pool:
            pool.shutdown()
    return results

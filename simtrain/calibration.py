"""Fit the compute model's per-GPU parameters to measured runs, and test the fit on others.

The compute model (``simtrain.workload.compute``) has a few physically meaningful
parameters per GPU architecture, listed with their physical range in :data:`PARAMS` (the
one table to extend when the compute config gains a parameter). Calibration:

1. every expressible row of the chosen suites (``scenarios/validation/<suite>.yaml``)
   becomes an *observation*: a scenario and a measured step time (tokens/s per GPU and
   TFLOP/s are turned back into seconds with the row's own batch and the source's FLOP
   formula, the arithmetic ``simtrain validate`` uses the other way round);
2. observations are grouped by the architecture of their GPU and split **by suite** (one
   source each) into a training and a held-out set (:func:`split`);
3. each architecture's training rows are fitted alone: the parameters are written into every
   scenario's ``compute:`` section and the residuals ``log(simulated / measured step)`` are
   minimised by bounded nonlinear least squares (``scipy.optimize.least_squares``,
   trust-region reflective, finite differences) over ``log(parameter)`` for parameters with
   a positive range (step time is close to linear in it there);
4. each parameter gets a standard error from the Jacobian at the optimum,
   ``σ = sqrt(diag((JᵀJ)⁻¹)·Σr²/(m−n))`` (:func:`least_squares_fit`), and the held-out rows
   are simulated with the fitted values: their error beside the training error is the test.

A fit that does not converge, or whose optimum lands on (within 0.5% of) the edge of a
parameter's physical range, is reported as failed: the CLI then writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simtrain.calibration_data import (  # noqa: F401  (re-exported)
    Observation,
    observations,
    simulated_steps,
    split,
    with_params,
)


@dataclass(frozen=True)
class Param:
    """A fittable compute parameter: its physical range, what causes it, and the source."""

    lo: float
    hi: float
    cause: str
    source: str
    unit: str = ""

    @property
    def log(self) -> bool:
        """Fitted over log(value): the range is positive."""
        return self.lo > 0


# Every parameter calibration may fit; a name must also be a ComputeConfig field.
PARAMS: dict[str, Param] = {
    "gemm_efficiency": Param(
        0.5, 0.95, "peak fraction of a large, well-shaped GEMM (cuBLAS main loop)",
        "cuBLAS bf16 GEMMs reach 70-90% of dense peak (H100 ~750-800 of 989 TFLOP/s, "
        "NVIDIA cuBLAS 12 release notes; A100 ~250-280 of 312)"),
    "attention_efficiency": Param(
        0.2, 0.8, "peak fraction of fused attention on executed FLOPs",
        "FlashAttention-2 (Dao 2023): 50-73% of A100 peak; FlashAttention-3 (Shah et al. "
        "2024): up to 75% of H100 bf16 peak"),
    "memory_efficiency": Param(
        0.6, 0.95, "fraction of HBM bandwidth reached by memory-bound kernels",
        "STREAM-like copies reach 80-93% of HBM peak (NVIDIA bandwidthTest, BabelStream)"),
    "comm_interference": Param(
        0.0, 0.5, "compute slowdown while a collective runs (SMs and HBM taken by NCCL)",
        "NCCL uses 1-32 channels of one SM each out of 108-148 SMs; measured overlap "
        "slowdowns of 5-30% (Rashidi et al. 2021, Jangda et al. 2022)"),
    # Host and kernel-shape causes (simtrain.workload.host, compute, interference, fp8):
    "host_kernel_issue": Param(
        1e-6, 30e-6, "host seconds to issue one kernel (Python, dispatcher, autograd, launch)",
        "cudaLaunchKernel 2-4 us (A. Gray, NVIDIA blog 2019); eager PyTorch op 5-20 us of CPU "
        "(H. He, 'Making Deep Learning Go Brrrr', 2022)", "s"),
    "host_microbatch": Param(
        20e-6, 2e-3, "host seconds of framework work per microbatch and pipeline step",
        "forward/backward entry, data iterator, loss, no_sync: a few hundred us of Python "
        "(order of magnitude; no measurement in the reference data)", "s"),
    "tile_fill_latency": Param(
        0.2e-6, 1.5e-6, "GEMM tile pipeline fill: the first operand loads before the "
        "first MMA (small-K efficiency; the output store overlaps other tiles)",
        "global-memory load latency ~470 cycles, L2 hit ~260 (Luo et al. 2024, "
        "'Benchmarking and Dissecting the Nvidia Hopper GPU Architecture', Sec. 4): a few "
        "hundred ns to ~1 us per tile", "s"),
    "sms_per_channel": Param(
        1.0, 2.0, "SMs one NCCL channel holds while a collective runs beside compute",
        "NCCL runs one CTA per channel (NCCL docs, NCCL_MIN/MAX_NCHANNELS)"),
    "fp8_gemm_efficiency": Param(
        0.5, 0.85, "peak fraction of a large FP8 GEMM (Transformer Engine, cuBLASLt)",
        "FP8 GEMMs reach ~60-80% of the FP8 dense peak on H100 (NVIDIA TE benchmarks)"),
    "launch_overhead": Param(
        1e-6, 20e-6, "CPU cost of one kernel launch the GPU waits for",
        "3-4 us per launch without CUDA graphs, ~1 us with (A. Gray, NVIDIA blog 2019)", "s"),
}
DEFAULT_PARAMS = ("gemm_efficiency",)
# An optimum this close to an edge of the range (fraction of its width) is "on the bound".
EDGE = 0.005


def available_params() -> dict[str, Param]:
    """The entries of :data:`PARAMS` that today's ComputeConfig has as fields."""
    from simtrain.workload.compute import ComputeConfig

    return {k: v for k, v in PARAMS.items() if k in ComputeConfig.model_fields}


def check_params(names: Sequence[str], fixed: Mapping[str, float]) -> None:
    """ValueError unless ``names`` (to fit) and ``fixed`` are known, distinct parameters,
    and every fixed value lies in its physical range."""
    if not names:
        raise ValueError("nothing to fit: name at least one parameter")
    known = available_params()
    for name in [*names, *fixed]:
        if name not in known:
            raise ValueError(f"cannot fit or fix {name!r}; the parameters are: "
                             f"{', '.join(known)}")
    both = [n for n in names if n in fixed]
    if both:
        raise ValueError(f"{both[0]!r} is both fitted and fixed; choose one")
    for name, value in fixed.items():
        p = known[name]
        if not p.lo <= value <= p.hi:
            raise ValueError(f"--fix {name}={value} is outside its physical range "
                             f"[{p.lo:g}, {p.hi:g}] ({p.cause})")


def current_params(arch: str, names: Sequence[str]) -> dict[str, float]:
    """Today's default of each parameter for ``arch``: the ComputeConfig field's default,
    or (when that is None, "per architecture") compute.py's table named after the field
    in capitals (``GEMM_EFFICIENCY[arch]``)."""
    from simtrain.workload import compute, fp8
    from simtrain.workload.compute import ComputeConfig

    cfg = ComputeConfig()
    out = {}
    for name in names:
        value = getattr(cfg, name)
        if value is None:
            table = getattr(compute, name.upper(), None) or getattr(fp8, name.upper(), None)
            if not isinstance(table, Mapping) or arch not in table:
                raise ValueError(f"no default {name} for {arch!r} to start from; "
                                 f"--fix it or set a per-architecture default")
            value = table[arch]
        out[name] = float(value)
    return out


@dataclass
class LsqResult:
    """A bounded least-squares optimum with standard errors (in the parameters' units)."""

    x: np.ndarray
    sigma: np.ndarray
    rms: float
    converged: bool
    evaluations: int
    message: str


def least_squares_fit(residuals: Callable[[np.ndarray], np.ndarray], x0: Sequence[float],
                      lo: Sequence[float], hi: Sequence[float], *,
                      log: Sequence[bool] | None = None, max_evaluations: int = 40,
                      diff_step: float = 0.02) -> LsqResult:
    """Minimise ``Σ residuals(x)²`` within [lo, hi]; σ from the Jacobian at the optimum.

    Fits over ``log x`` where ``log[i]`` (positive range). The covariance is
    ``s²·(JᵀJ)⁻¹`` with ``s² = Σr²/(m − n)`` (m residuals, n parameters); σ is its
    diagonal's square root, mapped back by the delta method (``σ_x = x·σ_logx``). σ is
    inf when JᵀJ is singular (a parameter the residuals do not see) and nan when m ≤ n.
    """
    from scipy.optimize import least_squares

    n = len(x0)
    logs = np.array(log if log is not None else [False] * n, dtype=bool)
    lo_a, hi_a, x0_a = (np.asarray(v, dtype=float) for v in (lo, hi, x0))
    fwd = np.where(logs, np.log(np.where(logs, np.maximum(lo_a, 1e-300), 1.0)), lo_a)
    upper = np.where(logs, np.log(np.where(logs, hi_a, 1.0)), hi_a)
    # Linear parameters move in units of their range so finite differences are sensible.
    scale = np.where(logs, 1.0, np.maximum(hi_a - lo_a, 1e-300))

    def to_x(u: np.ndarray) -> np.ndarray:
        return np.where(logs, np.exp(u), u * scale)

    u_lo = np.where(logs, fwd, lo_a / scale)
    u_hi = np.where(logs, upper, hi_a / scale)
    u0 = np.where(logs, np.log(np.where(logs, np.maximum(x0_a, 1e-300), 1.0)), x0_a / scale)
    width = u_hi - u_lo
    u0 = np.clip(u0, u_lo + 1e-6 * width, u_hi - 1e-6 * width)
    count = [0]

    def fun(u: np.ndarray) -> np.ndarray:
        count[0] += 1
        return np.asarray(residuals(to_x(u)), dtype=float)

    # Stop when a step moves log(x) by < ~0.2% or the cost by < 0.1%: far inside the
    # parameters' standard errors (a few %), and each evaluation is a full set of runs.
    sol = least_squares(fun, u0, bounds=(u_lo, u_hi), method="trf", diff_step=diff_step,
                        x_scale=1.0, max_nfev=max_evaluations, xtol=1e-2, ftol=1e-3)
    x = to_x(sol.x)
    r = np.asarray(sol.fun, dtype=float)
    m = r.size
    jac = np.asarray(sol.jac, dtype=float)
    jtj = jac.T @ jac
    if m <= n:
        sigma_u = np.full(n, math.nan)
    elif np.linalg.matrix_rank(jtj) < n:
        sigma_u = np.full(n, math.inf)
    else:
        s2 = float(r @ r) / (m - n)
        sigma_u = np.sqrt(np.abs(np.diag(np.linalg.inv(jtj))) * s2)
    sigma = np.where(logs, x * sigma_u, sigma_u * scale)
    rms = math.sqrt(float(np.mean(r ** 2))) if m else 0.0
    return LsqResult(x, sigma, rms, bool(sol.success) and sol.status > 0, count[0],
                     str(sol.message))


def edge_problems(params: Mapping[str, float]) -> list[str]:
    """One line per fitted parameter on (within EDGE of) an edge of its physical range."""
    out = []
    for name, value in params.items():
        p = PARAMS[name]
        margin = EDGE * (p.hi - p.lo)
        if value <= p.lo + margin or value >= p.hi - margin:
            out.append(f"{name} = {value:.4g} lands on the edge of its physical range "
                       f"[{p.lo:g}, {p.hi:g}] ({p.cause}): the rows want something this "
                       f"parameter does not stand for")
    return out


@dataclass
class ArchFit:
    """The fit of one architecture: values, standard errors, and the error on both splits."""

    arch: str
    params: dict[str, float]
    sigma: dict[str, float]
    start: dict[str, float]
    train: list[dict[str, Any]] = field(default_factory=list)  # suite, id, before, after
    held_out: list[dict[str, Any]] = field(default_factory=list)
    evaluations: int = 0
    converged: bool = False
    message: str = ""
    problems: list[str] = field(default_factory=list)

    @staticmethod
    def mape_of(rows: Sequence[Mapping[str, Any]], which: str) -> float | None:
        return sum(abs(r[which]) for r in rows) / len(rows) if rows else None

    def mape(self, which: str, split_name: str = "train") -> float | None:
        return self.mape_of(self.train if split_name == "train" else self.held_out, which)

    @property
    def ok(self) -> bool:
        return self.converged and not self.problems


def _errors(group: Sequence[Observation], steps: np.ndarray) -> list[float]:
    return [float(s / o.measured_step_s - 1.0) for o, s in zip(group, steps, strict=True)]


def fit(obs: Sequence[Observation], names: Sequence[str] = DEFAULT_PARAMS, *,
        fixed: Mapping[str, float] | None = None, holdout: Sequence[str] | None = None,
        jobs: int = 1, max_evaluations: int = 12,
        progress: Callable[[str, int, float], None] | None = None) -> list[ArchFit]:
    """Fit ``names`` per architecture on the training split of ``obs``; one ArchFit each.

    ``fixed`` holds other compute parameters at given values (written into every scenario
    with the fitted ones); ``holdout`` names the suites held out (default: :func:`split`).
    ``progress(arch, evaluations, rms)`` after each evaluation of the training rows.
    """
    from concurrent.futures import ProcessPoolExecutor

    fixed = dict(fixed or {})
    check_params(names, fixed)
    pool = ProcessPoolExecutor(max_workers=jobs) if jobs > 1 else None
    results = []
    try:
        for arch, (train, held) in split(obs, holdout).items():
            measured = np.array([o.measured_step_s for o in train])
            start = current_params(arch, names)
            cache: dict[tuple[float, ...], np.ndarray] = {}

            def residuals(x: np.ndarray, train: list[Observation] = train,
                          measured: np.ndarray = measured, arch: str = arch,
                          cache: dict[tuple[float, ...], np.ndarray] = cache) -> np.ndarray:
                key = tuple(round(float(v), 12) for v in x)
                if key not in cache:
                    params = dict(zip(names, (float(v) for v in x), strict=True))
                    steps = simulated_steps(train, {**fixed, **params}, pool)
                    cache[key] = np.log(steps / measured)
                    if progress:
                        progress(arch, len(cache),
                                 math.sqrt(float(np.mean(cache[key] ** 2))))
                return cache[key]

            x0 = [start[n] for n in names]
            before = residuals(np.array(x0))
            res = least_squares_fit(residuals, x0, [PARAMS[n].lo for n in names],
                                    [PARAMS[n].hi for n in names],
                                    log=[PARAMS[n].log for n in names],
                                    max_evaluations=max_evaluations)
            after = residuals(res.x)
            params = {n: float(v) for n, v in zip(names, res.x, strict=True)}
            out = ArchFit(arch, {n: float(f"{v:.4g}") for n, v in params.items()},
                          {n: float(s) for n, s in zip(names, res.sigma, strict=True)},
                          start, evaluations=len(cache), converged=res.converged,
                          message=res.message, problems=edge_problems(params))
            if not res.converged:
                out.problems.insert(0, f"did not converge in {res.evaluations} evaluations "
                                       f"({res.message})")
            out.train = [{"suite": o.suite, "id": o.id, "measured_step_s": o.measured_step_s,
                          "before": math.expm1(float(b)), "after": math.expm1(float(a))}
                         for o, b, a in zip(train, before, after, strict=True)]
            if held:
                held_before = _errors(held, simulated_steps(held, {**fixed, **start}, pool))
                held_after = _errors(held, simulated_steps(held, {**fixed, **params}, pool))
                out.held_out = [{"suite": o.suite, "id": o.id,
                                 "measured_step_s": o.measured_step_s, "before": b, "after": a}
                                for o, b, a in zip(held, held_before, held_after, strict=True)]
            results.append(out)
    finally:
        if pool:
            pool.shutdown()
    return results

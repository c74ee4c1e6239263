"""Fit per-level collective latency and bandwidth to an nccl-tests sweep.

Model (Hockney alpha-beta in nccl-tests' bus-bandwidth terms, as the comm model's cost
formulas are): a collective of S bytes over n ranks takes

    t(S) = alpha_p + S · F(n) / B_p

with F(n) nccl-tests' busbw factor (2(n-1)/n for all-reduce, (n-1)/n for all-gather,
reduce-scatter and all-to-all; simtrain.comm.model.busbw_factor), alpha_p the latency and
B_p the bus bandwidth of the (algorithm, protocol) pair p NCCL runs at that size. NCCL's
tuner picks by size among LL (small), LL128 (medium) and Simple (large), and among ring,
tree, NVLS and CollNet where the topology has them (tuning.cc; ../shared/reference/
nccl.yaml), each with its own latency and bandwidth. The log does not say which it ran,
so the sweep is fitted as up to ``max_segments`` (default 4) contiguous size ranges, each
with its own (alpha, B), the ranges chosen to minimise the worst relative time error.

Within a range, alpha and 1/B solve the linear least-squares problem on relative time
error, sum((alpha + x_i·beta) / t_i - 1)^2 with x_i = S_i·F(n), alpha >= 0, beta > 0.
Errors are reported in busbw: busbw_model / busbw_measured - 1 = t_measured / t_model - 1.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simtrain.comm.model import busbw_factor
from simtrain.ingest.nccl_tests import Sweep

MIN_POINTS = 2  # a range fits two parameters: it needs at least two sizes


@dataclass(frozen=True)
class Segment:
    """One size range [lo, hi] (bytes) with its fitted latency (s) and bus bandwidth (B/s)."""

    lo: float
    hi: float
    latency: float
    busbw: float

    def time(self, size: float, factor: float) -> float:
        """alpha + S · F / B."""
        return self.latency + size * factor / self.busbw


@dataclass(frozen=True)
class SweepFit:
    """Fitted segments of one sweep and the busbw error at every fitted size."""

    sweep: Sweep
    level: str  # "intra-node" (one node) or "inter-node"
    segments: tuple[Segment, ...]
    sizes: tuple[float, ...]
    errors: tuple[float, ...]  # busbw model / measured - 1, per size
    # the same against the column not fitted (in-place when out-of-place was fitted): the
    # error on data the fit did not see
    check_errors: tuple[float, ...] = ()

    def max_error(self) -> float:
        return max(abs(e) for e in self.errors)


def fit_range(x: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """(alpha, beta) minimising sum(((alpha + x·beta) / t - 1)^2), alpha >= 0, beta > 0."""
    a = np.column_stack([1.0 / t, x / t])
    (alpha, beta), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    if alpha < 0.0 or beta <= 0.0:  # latency-free fit: beta = sum(x/t) / sum((x/t)^2)
        r = x / t
        alpha, beta = 0.0, float(np.sum(r) / np.sum(r * r))
    return float(alpha), float(beta)


def _splits(n: int, parts: int) -> list[tuple[int, ...]]:
    """Boundaries cutting n points into ``parts`` contiguous ranges of >= MIN_POINTS."""
    out = []
    for cuts in itertools.combinations(range(MIN_POINTS, n - MIN_POINTS + 1), parts - 1):
        bounds = (0, *cuts, n)
        if all(b - a >= MIN_POINTS for a, b in itertools.pairwise(bounds)):
            out.append(bounds)
    return out


def fit_sweep(sweep: Sweep, min_bytes: float = 2**20, max_segments: int = 4,
              inplace: bool = False) -> SweepFit:
    """Fit ``sweep``'s sizes >= ``min_bytes`` (out-of-place times unless ``inplace``)."""
    times = sweep.time_ip if inplace else sweep.time_oop
    keep = [i for i, s in enumerate(sweep.sizes) if s >= min_bytes and times[i] > 0]
    if len(keep) < MIN_POINTS:
        raise ValueError(f"{sweep.path}: {len(keep)} sizes >= {min_bytes:.0f} B; the fit "
                         f"needs at least {MIN_POINTS} (lower --min-bytes)")
    size = np.array([sweep.sizes[i] for i in keep])
    t = np.array([times[i] for i in keep])
    factor = busbw_factor(sweep.op, sweep.nranks)
    x = size * factor
    best: tuple[float, float, list[tuple[int, int, float, float]]] | None = None
    for parts in range(1, max_segments + 1):
        for bounds in _splits(len(t), parts):
            ranges = []
            model = np.empty_like(t)
            for lo, hi in itertools.pairwise(bounds):
                alpha, beta = fit_range(x[lo:hi], t[lo:hi])
                model[lo:hi] = alpha + x[lo:hi] * beta
                ranges.append((lo, hi, alpha, beta))
            err = t / model - 1.0
            score = (float(np.max(np.abs(err))), float(np.sum(err * err)))
            if best is None or score < best[:2]:
                best = (*score, ranges)
    assert best is not None
    ranges = best[2]
    segments = tuple(Segment(float(size[lo]), float(size[hi - 1]), alpha, 1.0 / beta)
                     for lo, hi, alpha, beta in ranges)
    model = np.concatenate([[s.time(v, factor) for v in size[lo:hi]]
                            for s, (lo, hi, _, _) in zip(segments, ranges, strict=True)])
    other = np.array([(sweep.time_oop if inplace else sweep.time_ip)[i] for i in keep])
    return SweepFit(sweep, "intra-node" if sweep.nodes <= 1 else "inter-node", segments,
                    tuple(float(v) for v in size), tuple(float(v) for v in t / model - 1.0),
                    tuple(float(v) for v in other / model - 1.0))


def fits_payload(fits: Sequence[SweepFit]) -> list[dict[str, object]]:
    """JSON/YAML-ready description of ``fits`` (latency in us, busbw in GB/s)."""
    return [{"log": f.sweep.path, "op": f.sweep.op, "ranks": f.sweep.nranks,
             "nodes": f.sweep.nodes, "level": f.level,
             "segments": [{"from_bytes": s.lo, "to_bytes": s.hi,
                           "latency_us": round(s.latency * 1e6, 3),
                           "busbw_gbps": round(s.busbw / 1e9, 3)} for s in f.segments],
             "max_busbw_error": round(f.max_error(), 5),
             "errors": [{"bytes": b, "busbw_error": round(e, 5), "check_error": round(c, 5)}
                        for b, e, c in zip(f.sizes, f.errors, f.check_errors, strict=True)]}
            for f in fits]


def comm_block(fits: Sequence[SweepFit]) -> dict[str, object]:
    """The scenario ``comm:`` block that makes the comm model reproduce ``fits``: one
    ``fitted`` entry per sweep (op, level, group size, size ranges with latency and bus
    bandwidth; simtrain.comm.fitted). Units as strings, 6 significant digits."""
    entries = []
    for f in fits:
        ranges = []
        for k, s in enumerate(f.segments):
            # a range reaches up to the next one's start, so sizes between two measured
            # ones take the range below them; the last has no upper end
            ranges.append({"from_bytes": int(s.lo), "to_bytes": int(s.hi),
                           "latency": f"{s.latency * 1e6:.6g}us",
                           "busbw": f"{s.busbw / 1e9:.6g}GB/s"})
            assert k == 0 or s.lo > f.segments[k - 1].hi
        entries.append({"op": f.sweep.op, "level": f.level, "ranks": f.sweep.nranks,
                        "nodes": f.sweep.nodes, "source": f.sweep.path, "ranges": ranges})
    return {"comm": {"fitted": entries}}

"""Fit simtrain.comm.harness's host costs on one nccl-modern series each; report held-out.

Run from the repository root: python benchmarks/harness_fit.py
LAUNCH_S on voltagepark-8xh100 (nccl-tests -g 8, stated), held out on the Azure sweeps (one
all_reduce_perf per host: -g inferred; GB200's 4-GPU ring is host-bound below 1 MiB, the NVLS
sweeps' device time is above the host floor at every size); TORCH_CALL_S on
mlengineering-8xh200-torch, held out on mlengineering-p6-b200-1x8 (same script, torch
2.9.1, NCCL 2.27.7). Least squares on the suite's error, predicted/published busbw - 1
(= published time / predicted time - 1), over every point of the fitting series, by a
golden-section search inside the parameter's physical range.
"""

import math

from simtrain.comm import harness
from simtrain.comm.model import busbw_factor
from simtrain.comm.phases import servers
from simtrain.comm.validation import _rows_of, load_series
from simtrain.hardware.topology import ClusterConfig, build_cluster

RANGES = {"launch_s": (2e-6, 10e-6), "torch_call_s": (5e-6, 50e-6)}
FITS = (("launch_s", "voltagepark-8xh100", ("azure-nd-gb200-v6-ring-4gpu", "azure-nd-h100-v5-nvls",
                                            "azure-nd-h200-v5-nvls")),
        ("torch_call_s", "mlengineering-8xh200-torch", ("mlengineering-p6-b200-1x8",)))


def points(sid):
    """(device s, published s, harness, GPUs per process) of every point of ``sid``."""
    series = next(s for s in load_series() if s.id == sid)
    cluster = build_cluster(ClusterConfig(**series.cluster))
    ranks = series.ranks or tuple(range(cluster.num_gpus))
    per_process = max(len(g) for g in servers(ranks, cluster))
    factor = busbw_factor(series.op, len(ranks))
    return [(r.extra["time_us"] * 1e-6, factor * p.nbytes / (p.busbw_gbps * 1e9),
             series.harness, per_process)
            for p, r in zip(series.points, _rows_of(series), strict=True)]


def errors(pts, name, value):
    kw = {name: value}
    return [b / harness.measured_time(h, d, g, **kw) - 1 for d, b, h, g in pts]


def fit(pts, name):
    lo, hi = RANGES[name]
    phi = (math.sqrt(5) - 1) / 2
    cost = lambda v: sum(e * e for e in errors(pts, name, v))  # noqa: E731
    a, b = lo, hi
    for _ in range(80):
        c, d = b - phi * (b - a), a + phi * (b - a)
        a, b = (a, d) if cost(c) < cost(d) else (c, b)
    return (a + b) / 2


def mape(errs):
    return 100 * sum(abs(e) for e in errs) / len(errs)


for name, train, held in FITS:
    pts = points(train)
    value = fit(pts, name)
    train_mape = mape(errors(pts, name, value))
    print(f"{name} = {value * 1e6:.2f} us (range {RANGES[name][0] * 1e6:g}-"
          f"{RANGES[name][1] * 1e6:g} us), fitted on {train}: MAPE {train_mape:.1f}%")
    for sid in held:
        pts = points(sid)
        e = errors(pts, name, value)
        small = [x for x, (_d, b, _h, _g) in zip(e, pts, strict=True) if b < 20e-6]
        print(f"  held out {sid}: MAPE {mape(e):.1f}%, mean {100 * sum(e) / len(e):+.1f}%"
              + (f"; published time < 20 us: MAPE {mape(small):.1f}%" if small else ""))

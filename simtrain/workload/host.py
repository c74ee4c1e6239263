"""Host (CPU) side of a training step: when the GPU waits for the framework to issue work.

An eager PyTorch / Megatron step is issued by one Python thread. Every kernel (a GEMM, an
elementwise op, an NCCL collective or a pipeline send/recv) costs the host a fixed time
to issue — Python, the dispatcher and autograd, then ``cudaLaunchKernel`` — and every
microbatch costs a further fixed time in the framework (the forward/backward call, the
data iterator, the loss, ``no_sync`` and pipeline send/recv bookkeeping). The host runs
ahead of the GPU through the CUDA stream queue, so issue costs are hidden while kernels
are long, and exposed when they are short: a kernel cannot start before the host has
issued it. The step is then *launch-bound*.

The model is a two-stage flow shop per rank. The host issues the rank's tasks in program
order (task id order in the graph); a task of n kernels whose issue began at host time h
releases its first kernel at h + c and its last at h + n·c (c: cost per kernel). On the
GPU the task starts no earlier than its first kernel's issue and ends no earlier than its
last kernel's issue plus that kernel's share of the task (d/n): with equal kernels this
is the exact flow-shop makespan of the task's kernels. Before the optimizer, Megatron and
PyTorch synchronise the host with the GPU (``.item()`` on the gradient norm and the
found-inf flag), so the optimizer's kernels are issued only once the GPU reaches them
(``issue_bound_makespan``), and nothing after it is released early.

Parameters (``compute:`` section, see ``ComputeConfig``):

- ``host_kernel_issue`` — host seconds per kernel. ``cudaLaunchKernel`` alone costs
  ~2-4 us (A. Gray, NVIDIA blog "Getting Started with CUDA Graphs", 2019: 3.8 us per short
  kernel back to back); eager PyTorch adds dispatcher, autograd and Python per op, which
  puts an eager op at roughly 5-20 us of CPU (H. He, "Making Deep Learning Go Brrrr From
  First Principles", 2022, "Overhead"). Default 8 us, range 1-30 us (1-2 us with CUDA
  graphs, which issue a whole graph at once).
- ``host_microbatch`` — host seconds per microbatch per pipeline step: forward/backward
  entry, the data iterator, loss scaling, gradient-accumulation (``no_sync``) and pipeline
  bookkeeping. No published measurement in the reference data; its order is a few
  hundred microseconds of Python. Default 200 us, range 20 us - 2 ms; calibratable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from simtrain.engine.issue import IssueTimes
from simtrain.engine.spantable import blocks

if TYPE_CHECKING:
    from simtrain.engine.taskgraph import TaskGraph

# The host share of a step above which a summary calls the step launch-bound: beyond it
# the GPU waits for the framework more than it would for a typical exposed collective.
LAUNCH_BOUND_SHARE = 0.10


# Members per block of ranks ``issue_times`` works on at once: its temporaries are about
# 100 bytes a member, so a block costs ~25 MB where an explicit 512-GPU step's 6M members at
# once cost 470 MB beside the 96 MB the result keeps. A rank is never split.
ISSUE_BLOCK = 1 << 18


def issue_times(graph: TaskGraph, kernel_issue_s: float, microbatch_s: float) -> IssueTimes:
    """Host issue times of every simulated rank's tasks before its optimizer step:
    (task id, rank) -> (host time its first kernel is issued, host time its last is).

    Program order is task id order; a task's kernels are ``meta["kernels"]`` (default 1);
    a task whose (microbatch, chunk, phase) differs from the previous one's opens a
    microbatch step and first costs ``microbatch_s``. The optimizer (kind "optimizer")
    follows a host-GPU synchronisation: it and the rank's later tasks get no issue time.
    Computed on the graph's columns, blocks of ranks at a time; each rank's clock is one
    sequential cumulative sum (h += microbatch, then h += kernels x c), so the floats are
    those of a loop.
    """
    if kernel_issue_s < 0 or microbatch_s < 0:
        raise ValueError(f"host costs must be >= 0, got kernel {kernel_issue_s} s, "
                         f"microbatch {microbatch_s} s")
    tid, rank = graph.members()
    out = IssueTimes.blank(len(tid), graph)
    if kernel_issue_s == 0 and microbatch_s == 0 or not len(tid):
        return out
    # per meta: (microbatch step code or -1, kernels); per kind: forward?, optimizer?
    steps: dict[tuple[object, object], int] = {}
    meta_step = np.empty(len(graph.metas), dtype=np.int64)
    meta_kernels = np.empty(len(graph.metas))
    for code, meta in enumerate(graph.metas):
        mb = meta.get("microbatch")
        meta_step[code] = -1 if mb is None else steps.setdefault((mb, meta.get("chunk")),
                                                                 len(steps))
        meta_kernels[code] = int(meta.get("kernels", 1))
    forward = np.array([k == "forward" for k in graph.kinds], dtype=bool)
    optimizer = np.array([k == "optimizer" for k in graph.kinds], dtype=bool)
    task_kind, task_meta = graph.codes("kind"), graph.codes("meta")
    small = rank.astype(np.int16) if graph.num_ranks <= np.iinfo(np.int16).max else rank
    order = np.argsort(small, kind="stable").astype(np.int32)  # per rank, task id order
    del small
    counts = np.bincount(rank)
    bounds = np.r_[0, np.cumsum(counts[counts > 0])]  # each rank's first member, in order
    del counts
    first, last = out.columns()
    with np.errstate(invalid="ignore"):
        for k0, k1 in blocks(bounds, ISSUE_BLOCK):
            rows = order[int(bounds[k0]):int(bounds[k1])]
            got_first, got_last = _block_clock(
                task_kind[tid[rows]], task_meta[tid[rows]], bounds[k0:k1 + 1] - bounds[k0],
                meta_step, meta_kernels, forward, optimizer, kernel_issue_s, microbatch_s)
            first[rows], last[rows] = got_first, got_last
    del first, last
    out.count = int(np.count_nonzero(~np.isnan(np.frombuffer(out.first, dtype=np.float64))))
    return out


def _block_clock(kind: np.ndarray, meta: np.ndarray, bounds: np.ndarray,
                 meta_step: np.ndarray, meta_kernels: np.ndarray, forward: np.ndarray,
                 optimizer: np.ndarray, kernel_issue_s: float,
                 microbatch_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(first, last) issue times of the members of consecutive ranks, given in program
    order with each rank's first member and the end in ``bounds``: NaN from a rank's
    optimizer on."""
    n = len(kind)
    step = meta_step[meta]
    key = np.where(step >= 0, step * 2 + forward[kind], -1)  # the (microbatch, chunk, phase)
    kernels = meta_kernels[meta]
    del step, meta
    lengths = np.diff(bounds)
    seg_start = np.repeat(bounds[:-1], lengths)  # each member's rank's first member
    at = np.arange(n)
    # synced from the optimizer on: a member at or after its rank's first optimizer
    synced = np.maximum.accumulate(np.where(optimizer[kind], at, -1)) >= seg_start
    # the last member with a step before each, within its rank (-1: none)
    prev = np.maximum.accumulate(np.where(key >= 0, at, -1))
    before = np.r_[-1, prev[:-1]]
    before[before < seg_start] = -1
    del prev, at
    opens = (key >= 0) & ((before < 0) | (key != key[np.maximum(before, 0)]))
    del before, key
    terms = np.empty(2 * n)
    terms[0::2] = np.where(opens, microbatch_s, 0.0)
    terms[1::2] = kernels * kernel_issue_s
    del opens, kernels
    clock = np.full(2 * n, np.nan)
    # the members before the first sync of each rank: a prefix of the rank's members
    starts = bounds[:-1]  # every rank has members: no empty segment
    stops = (starts + np.add.reduceat((~synced).astype(np.int64), starts)).tolist() if n else []
    for a, stop in zip(starts.tolist(), stops, strict=True):
        if stop > a:  # sequential: h += mb; h += kernels * c
            np.cumsum(terms[2 * a:2 * stop], out=clock[2 * a:2 * stop])
    return clock[0::2] + kernel_issue_s, clock[1::2]


def issue_bound_makespan(durations: Sequence[float], kernel_issue_s: float) -> float:
    """Seconds from a host-GPU sync until the last of ``durations`` (GPU kernels) ends.

    Kernel i (1-based) is issued at i·c and starts at max(i·c, end of kernel i-1): the
    flow shop of a host issuing at c per kernel and a GPU running them in order. Long
    kernels: c + Σd; short ones: n·c + d_n.
    """
    end = 0.0
    for i, d in enumerate(durations, start=1):
        end = max(i * kernel_issue_s, end) + d
    return end


def host_summary(host_s: float, step_s: float) -> dict[str, Any]:
    """The summary's host fields: mean exposed host seconds, share of the step, and
    whether the step is launch-bound (share above ``LAUNCH_BOUND_SHARE``), with a note."""
    share = host_s / step_s if step_s > 0 else 0.0
    out: dict[str, object] = {"host_s": host_s, "host_share": share,
                              "launch_bound": share > LAUNCH_BOUND_SHARE}
    if share > LAUNCH_BOUND_SHARE:
        out["notes"] = [
            f"launch-bound: the GPUs wait {share:.0%} of the step for the host to issue "
            f"kernels (compute.host_kernel_issue per kernel, compute.host_microbatch per "
            f"microbatch); larger micro-batches, fused kernels or CUDA graphs would hide it"]
    return out

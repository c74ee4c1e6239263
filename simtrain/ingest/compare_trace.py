"""A measured step (from a profiler trace) beside the simulated one: same metrics, same axes.

The trace's kernels become a Timeline of one rank (compute kernels as ``compute`` spans,
NCCL kernels as ``comm`` spans, one stream per CUDA stream, time 0 at the step's first
kernel), so the simulator's own metrics (step time, compute, communication, exposed
communication, bubble) apply to both unchanged. Ops are matched by what the simulator
and the importer both know, their size: GEMMs by (m, n, k), attention by FLOPs,
memory-bound ops by bytes, collectives by op and message bytes.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simtrain.engine.timeline import Span, Timeline
from simtrain.ingest.classify import kernel_category, nccl_op
from simtrain.ingest.kineto import CpuOp, Kernel
from simtrain.ingest.measure import Measured

_COMM_WORDS = {"all_reduce": ("allreduce", "all_reduce", "all-reduce", "ddp bucket"),
               "all_gather": ("allgather", "all_gather", "all-gather", "gather"),
               "reduce_scatter": ("reducescatter", "reduce_scatter", "reduce-scatter"),
               "all_to_all": ("alltoall", "all_to_all", "all-to-all", "dispatch", "combine"),
               "send_recv": ("send", "recv", "p2p")}


def measured_timeline(kernels: Sequence[Kernel], ops: dict[int, CpuOp], rank: int) -> Timeline:
    """The kernels as one rank's spans, shifted so the first kernel starts at 0; a trace of
    several GPUs contributes the one with the most kernels."""
    device = Counter(k.device for k in kernels).most_common(1)[0][0]
    kernels = [k for k in kernels if k.device == device]
    t0 = min(k.ts for k in kernels)
    timeline = Timeline(num_ranks=rank + 1)
    for k in sorted(kernels, key=lambda k: (k.ts, k.stream)):
        cpu = ops.get(k.ext) if k.ext is not None else None
        cat = kernel_category(k.name, cpu.name if cpu else "")
        if cat == "memcpy":
            continue
        comm = cat == "nccl"
        nbytes = 0.0
        if comm and cpu is not None and cpu.comm is not None:
            nbytes = float(cpu.comm[0] or 0)
        timeline.add(Span(rank, f"stream {k.stream}", "comm" if comm else "compute",
                          nccl_op(k.name)[0] if comm else k.name, k.ts - t0,
                          k.ts - t0 + k.dur, bytes=nbytes, meta={"category": cat}))
    return timeline


@dataclass(frozen=True)
class OpDiff:
    """One op size measured and simulated: mean seconds of each and how many there were."""

    kind: str
    size: tuple[float, ...]
    measured_s: float
    simulated_s: float
    measured_count: int
    simulated_count: int
    name: str

    @property
    def relative(self) -> float:
        return self.simulated_s / self.measured_s - 1.0


def op_diffs(measured: Measured, simulated: dict[tuple[str, tuple[float, ...]], list[float]]
             ) -> list[OpDiff]:
    """Ops of equal kind and size in both, worst relative difference first."""
    groups: dict[tuple[str, tuple[float, ...]], list[Any]] = {}
    for kind, size, t, name in measured.op_instances:
        acc = groups.setdefault((kind, size), [0.0, 0, name])
        acc[0] += t
        acc[1] += 1
    out = []
    for key, (t, n, name) in groups.items():
        sim = simulated.get(key)
        if sim:
            out.append(OpDiff(key[0], key[1], t / n, sum(sim) / len(sim), n, len(sim), name))
    return sorted(out, key=lambda d: -abs(d.relative))


def simulated_ops(spans: Sequence[Span], shapes: dict[str, tuple[str, tuple[float, ...]]]
                  ) -> dict[tuple[str, tuple[float, ...]], list[float]]:
    """Durations of one rank's compute spans by (kind, size), via their op names."""
    out: dict[tuple[str, tuple[float, ...]], list[float]] = defaultdict(list)
    for s in spans:
        key = shapes.get(s.name.removeprefix("recompute "))
        if key is not None:
            out[key].append(s.duration)
    return out


def collective_diffs(measured: Measured, spans: Sequence[Span]) -> list[dict[str, Any]]:
    """Measured collectives beside simulated comm spans of the same op and bytes (1%)."""
    rows = []
    for c in measured.collectives:
        words = _COMM_WORDS.get(c.op, (c.op,))
        sim = [s.duration for s in spans if s.is_comm and s.bytes > 0
               and abs(s.bytes / c.bytes - 1) < 0.01
               and any(w in s.name.lower() for w in words)]
        rows.append({"op": c.op, "bytes": c.bytes, "group_size": c.group_size,
                     "measured_s": c.time_s, "count": c.count,
                     "simulated_s": sum(sim) / len(sim) if sim else None,
                     "relative": (sum(sim) / len(sim) / c.time_s - 1) if sim else None})
    return sorted(rows, key=lambda r: -abs(r["relative"] or 0.0))


def kind_times(spans: Sequence[Span], kind_of: dict[str, str]) -> dict[str, float]:
    """Busy seconds per op kind (compute) or span kind (communication) of spans."""
    out: dict[str, float] = defaultdict(float)
    for s in spans:
        if s.is_comm:
            out[s.kind] += s.duration
        else:
            cat = s.meta.get("category") or kind_of.get(s.name.removeprefix("recompute "),
                                                        s.kind)
            out[cat] += s.duration
    return dict(out)


def op_sizes(units: Sequence[Any]) -> dict[str, tuple[str, tuple[float, ...]]]:
    """Op name -> (kind, size in the importer's terms) for the forward and backward ops of
    the plan's units (``Plan.units`` flattened)."""
    from simtrain.parallel.shard import Compute
    from simtrain.workload.model import backward_ops
    from simtrain.workload.tables import MEMORY_KINDS

    out: dict[str, tuple[str, tuple[float, ...]]] = {}
    for unit in units:
        for step in unit.steps:
            if not isinstance(step, Compute):
                continue
            for op in (step.op, *backward_ops(step.op)):
                if op.kind == "gemm" and op.gemm_shape is not None:
                    out[op.name] = ("gemm", (*map(float, op.gemm_shape), 1.0))
                elif op.kind == "attention":
                    out[op.name] = ("attention", (op.flops,))
                elif op.kind in MEMORY_KINDS:
                    out[op.name] = (op.kind, (op.bytes,))
    return out

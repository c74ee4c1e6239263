"""The plan search's lower bound of a candidate's step time, and the terms it adds up.

Every term is a time the simulated step cannot avoid, whatever the network model (analytic
or flow) and whoever contends for links; a term that compute or another stream could hide
is left out. The chain of a pipeline stage's rank (``simtrain.parallel.emit``): each
pipeline step's compute, then the step's plain TP/CP/EP collectives (``Emitter.collective``
makes every member's next task wait for them, at every granularity), then the transfer to
the next stage (``pipeline.send`` waits for the rank's frontier, so after those
collectives). After a stage's last backward: its DP gradient reduction (the gradients of
the last microbatch exist only then), the optimizer kernels (after the rank's frontier and
its last reduction, ``data_parallel.optimizer``) and the ZeRO-1/2 all-gather of the
updated parameters (after the optimizer).

Collectives are charged at a physical minimum, below any algorithm's cost: every member
of a g-rank all-gather must receive the (g-1)/g of the array it does not hold, every
member of a reduce-scatter must send the (g-1)/g its peers reduce, an all-reduce does both
(also in-network: each rank still sends its n bytes up and receives n down), an all-to-all
sends (g-1)/g of its buffer; a GPU moves bytes no faster than the sum of its links'
bandwidths (``injection_bandwidth``). No latency is charged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Collectives on the compute chain whose group size the plan's degrees give; the others
# (split CP / HSDP levels, pipeline gathers) are left out: fewer terms, still a bound.
CHAIN_GROUPS = ("tp", "cp", "ep")


@dataclass(frozen=True)
class StageTail:
    """What a stage's rank must still do after its last backward step's compute chain:
    ``reduce_s`` of DP reduction that may start ``overlap_s`` before the chain ends (the
    step's trailing collectives), then ``after_s`` (optimizer, ZeRO parameter gather)."""

    overlap_s: float = 0.0
    reduce_s: float = 0.0
    after_s: float = 0.0

    def seconds(self) -> float:
        """Seconds the step lasts past the end of the stage's compute chain."""
        return max(0.0, self.reduce_s - self.overlap_s) + self.after_s


def min_collective_seconds(op: str, group: int, nbytes: float, bandwidth: float) -> float:
    """Physical minimum of ``op`` over ``group`` ranks of an ``nbytes`` array (all-to-all:
    the per-rank buffer) on GPUs that move at most ``bandwidth`` bytes/s each way:
    (g-1)/g · nbytes / bandwidth for all-gather, reduce-scatter, all-reduce and all-to-all
    (see the module docstring), 0 for one rank; other ops count 0."""
    if group <= 1 or nbytes <= 0 or op not in ("all_gather", "reduce_scatter", "all_reduce",
                                               "all_to_all", "all_to_all_v"):
        return 0.0
    return (group - 1) / group * nbytes / bandwidth


def injection_bandwidth(cluster: Any) -> float:
    """Bytes/s the fastest GPU of ``cluster`` can send or receive: the larger of the sums
    of its outgoing and incoming links' bandwidths (NVLink, PCIe/NIC all at once)."""
    gpus = set(cluster.gpus)
    out: dict[str, float] = {}
    into: dict[str, float] = {}
    for link in cluster.links:
        if link.src in gpus:
            out[link.src] = out.get(link.src, 0.0) + link.bandwidth
        if link.dst in gpus:
            into[link.dst] = into.get(link.dst, 0.0) + link.bandwidth
    return max([*out.values(), *into.values()])


def chain_comm_seconds(templates: Sequence[Any], sizes: dict[str, int], bandwidth: float
                       ) -> float:
    """Physical minimum of the plain ``CHAIN_GROUPS`` collectives among ``templates``
    (TP overlaps and ring attention are not counted: they overlap compute)."""
    from simtrain.parallel.templates import Collective

    return sum(min_collective_seconds(t.op, sizes[t.group], t.nbytes, bandwidth)
               for t in templates if type(t) is Collective and t.group in sizes)


def step_time_bound(times: Sequence[Sequence[tuple[float, float]]], micro_batches: int,
                    tails: Sequence[StageTail] | None = None) -> float:
    """A lower bound of the step time (s) from each stage's chain and the pipeline fill/drain.

    ``times[s][c]`` is the (forward, backward) seconds per microbatch of chunk c on stage
    s: compute, plus the collectives serial on the chain. Stage s cannot start before the
    first microbatch's forward has passed the stages before it (their first chunk), then
    runs all its m microbatches' forward and backward on one chain (end E_s). With one
    chunk per stage (1F1B, GPipe) its last backward must then travel back through the
    stages before it: E_0 >= Σ_{j<s} (f_j + b_j) + m·c_s, which for equal stages is the
    familiar (m + p - 1)·c. With virtual stages only the fill is counted. The step ends no
    earlier than E_s + ``tails[s].seconds()``. Launch waits and transfers count zero.
    """
    tails = tails or [StageTail()] * len(times)
    best = 0.0
    single = all(len(chunks) == 1 for chunks in times)
    fill = drain = 0.0
    for chunks, tail in zip(times, tails, strict=True):
        work = micro_batches * sum(f + b for f, b in chunks)
        best = max(best, fill + work + tail.seconds())
        if single:
            best = max(best, fill + work + drain + tails[0].seconds())
        fill += chunks[0][0]
        drain += chunks[0][1]
    return best


def stage_compute_times(scenario: Any, cluster: Any, plan: Any
                        ) -> list[list[tuple[float, float]]]:
    """(forward, backward) seconds of compute per microbatch, per stage and model chunk:
    the lowering's own accounting (``simtrain.parallel.program.stage_compute_times``), no
    communication, launch waits or optimizer."""
    from simtrain.parallel.program import stage_compute_times as lowered
    from simtrain.workload.compute import op_time

    gpu, comp, dtype = cluster.gpu_spec, scenario.compute, scenario.training.dtype
    return lowered(plan.units, cp=plan.dims.cp, recompute=scenario.parallelism.recompute,
                   op_time=lambda op: op_time(op, gpu, comp, dtype))


def stage_chain_times(scenario: Any, cluster: Any, plan: Any, bandwidth: float
                      ) -> tuple[list[list[tuple[float, float]]], list[float]]:
    """Per stage and chunk, (forward, backward) seconds per microbatch of compute (the
    lowering's own accounting, ``program.stage_compute_times``) plus the serial TP/CP/EP
    collectives at their physical minimum; and per stage the least backward collective
    time of its chunks (what may overlap the DP reduction after the last backward)."""
    from simtrain.parallel import program
    from simtrain.workload.compute import op_time

    gpu, comp, dtype = cluster.gpu_spec, scenario.compute, scenario.training.dtype
    par, d = scenario.parallelism, plan.dims
    sizes = {"tp": d.tp, "cp": d.cp, "ep": d.ep}
    if par.tp_comm_overlap and scenario.sim.granularity != "stage":
        del sizes["tp"]  # pipelined with their GEMMs (tensor.py): not serial
    if par.schedule == "dualpipe":
        sizes = {}  # overlapped chunk pairs: one chain's collectives under the other's kernels
    cache: dict[tuple[object, ...], float] = {}

    def duration(op: Any) -> float:
        key = (op.kind, op.flops, op.bytes, op.gemm_shape)
        if key not in cache:
            cache[key] = op_time(op, gpu, comp, dtype)
        return cache[key]

    seen: dict[tuple[object, ...], tuple[float, float, float, float]] = {}

    def unit_times(u: Any) -> tuple[float, float, float, float]:
        key = (u.steps, u.layer >= 0)  # layers of one shape cost alike
        if key not in seen:
            fwd = program.forward(u, "forward", d.cp, duration)
            bwd = program.backward(u, par.recompute, d.cp, duration)
            seen[key] = (program.compute_seconds(fwd), program.compute_seconds(bwd),
                         chain_comm_seconds(fwd, sizes, bandwidth),
                         chain_comm_seconds(bwd, sizes, bandwidth))
        return seen[key]

    times: list[list[tuple[float, float]]] = []
    back: list[float] = []
    for chunks in plan.units:
        row = []
        comm_b = []
        for chunk in chunks:
            parts = [unit_times(u) for u in chunk]
            row.append((sum(p[0] + p[2] for p in parts), sum(p[1] + p[3] for p in parts)))
            comm_b.append(sum(p[3] for p in parts))
        times.append(row)
        back.append(min(comm_b))
    return times, back


def stage_tails(scenario: Any, cluster: Any, plan: Any, bandwidth: float,
                back: Sequence[float]) -> list[StageTail]:
    """Per stage, what follows its last backward (``StageTail``), at its lowering's cost:

    - the dense gradients' DP reduction (all-reduce under ZeRO 0, reduce-scatter under
      1/2) over dp·cp ranks, of the stage's smallest chunk (the last chunk reduced is one of
      them), at its physical minimum; only at "stage" granularity, where every gradient of
      a chunk comes from its one fused backward task (finer: only the last bucket waits);
      ZeRO-3 reduces inside the step and is not counted;
    - the optimizer step's kernels, the lowering's own ``optimizer_step`` cost (HBM-bound
      passes over the rank's shard);
    - under ZeRO 1/2 without ``overlap_param_gather``, the all-gather of the updated
      parameters after the optimizer, at its physical minimum.
    """
    from simtrain.parallel.expert import split_expert
    from simtrain.simulate import optimizer_timer
    from simtrain.training import DTYPE_BYTES

    par, d, train = scenario.parallelism, plan.dims, scenario.training
    group = d.dp * d.cp
    grad_bytes = DTYPE_BYTES[par.ddp.grad_dtype]
    step = optimizer_timer(scenario, cluster)
    shard = (d.fsdp_shard_size if d.zero == 3 else group) if d.zero >= 1 else 1
    op = "all_reduce" if d.zero == 0 else "reduce_scatter"
    out = []
    for chunks, overlap in zip(plan.units, back, strict=True):
        numels = [p.numel for chunk in chunks for u in chunk for p in u.params]
        reduce_s = 0.0
        if d.zero < 3 and scenario.sim.granularity == "stage":
            dense = [sum(p.numel for p in split_expert(q for u in chunk for q in u.params)[0])
                     for chunk in chunks]
            reduce_s = min_collective_seconds(op, group, min(dense) * grad_bytes, bandwidth)
        after = step(numels, shard).seconds
        if d.zero in (1, 2) and shard > 1 and not par.ddp.overlap_param_gather:
            after += min_collective_seconds("all_gather", group,
                                            sum(numels) * train.dtype_bytes, bandwidth)
        out.append(StageTail(overlap, reduce_s, after))
    return out

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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Optimizer = Callable[[Sequence[int], int], float]  # (parameter counts, shard) -> seconds

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


def min_collective_seconds(op: str, group: int, nbytes: float, bandwidth: float,
                           local: int = 0, nic_bandwidth: float = 0.0) -> float:
    """Physical minimum of ``op`` over ``group`` ranks of an ``nbytes`` array (all-to-all:
    the per-rank buffer) on GPUs that move at most ``bandwidth`` bytes/s each way:
    (g-1)/g · nbytes / bandwidth for all-gather, reduce-scatter, all-reduce and all-to-all
    (see the module docstring); 0 for one rank, other ops count 0.

    With ``local`` > 0 (at most that many members on one server, whose traffic to other
    servers crosses their own NIC's ``nic_bandwidth`` link): a server holding k members
    must send (reduce-scatter: one pre-reduced value of each shard owned outside) or
    receive (all-gather: each shard held outside) (g-k)/g · nbytes through at most k NIC
    links, so also (g-k)/g · nbytes / (k · nic_bandwidth), weakest for the largest k.
    """
    if group <= 1 or nbytes <= 0 or op not in ("all_gather", "reduce_scatter", "all_reduce",
                                               "all_to_all", "all_to_all_v"):
        return 0.0
    out = (group - 1) / group * nbytes / bandwidth
    if 0 < local < group and nic_bandwidth > 0:
        out = max(out, (group - local) / group * nbytes / (local * nic_bandwidth))
    return out


@dataclass(frozen=True)
class Links:
    """What bounds a GPU's traffic: ``gpu`` bytes/s over all its links at once; on preset
    clusters (every GPU's route off its server crosses its own NIC, ``fabric.py``) the
    ``nic`` link's bytes/s and each rank's server; else ``nic`` 0 (not used)."""

    gpu: float
    nic: float = 0.0
    servers: tuple[int, ...] = ()


def link_limits(cluster: Any) -> Links:
    """``Links`` of ``cluster``: the larger of the sums of a GPU's outgoing and incoming
    link bandwidths (NVLink, PCIe/NIC all at once), the fastest NIC-to-switch link."""
    gpus = set(cluster.gpus)
    out: dict[str, float] = {}
    into: dict[str, float] = {}
    for link in cluster.links:
        if link.src in gpus:
            out[link.src] = out.get(link.src, 0.0) + link.bandwidth
        if link.dst in gpus:
            into[link.dst] = into.get(link.dst, 0.0) + link.bandwidth
    gpu = max([*out.values(), *into.values()])
    if not cluster.uniform:
        return Links(gpu)
    kinds = {name: attrs["kind"] for name, attrs in cluster.node_attrs.items()}
    nic = max((lk.bandwidth for lk in cluster.links
               if {kinds[lk.src], kinds[lk.dst]} & {"nic"}
               and {kinds[lk.src], kinds[lk.dst]} & {"leaf", "spine"}), default=0.0)
    return Links(gpu, nic, tuple(cluster.server_of(r) for r in range(cluster.num_gpus)))


def injection_bandwidth(cluster: Any) -> float:
    """Bytes/s the fastest GPU of ``cluster`` can send or receive over all its links."""
    return link_limits(cluster).gpu


def members_per_server(dims: Any, servers: Sequence[int], kind: str) -> int:
    """The most members one ``kind`` group ("tp", "cp", "ep", "grad": dp x cp) of
    ``dims`` has on one server (``servers[rank]``); 0 without servers."""
    import numpy as np

    if not servers:
        return 0
    free = {"tp": ("tp",), "cp": ("cp",), "ep": ("dp",), "grad": ("dp", "cp")}[kind]
    rest = np.arange(dims.world_size, dtype=np.int64)
    key = np.asarray(servers, dtype=np.int64)
    for axis in dims.order.split("-"):
        size = dims.size(axis)
        coord, rest = rest % size, rest // size
        if kind == "ep" and axis == "dp":  # ep consecutive DP replicas: the block is fixed
            key, coord = key * size + coord // dims.ep, coord % dims.ep
        if axis not in free:
            key = key * size + coord
    return int(np.unique(key, return_counts=True)[1].max())


def chain_comm_bytes(templates: Sequence[Any], kinds: Sequence[str]) -> dict[str, float]:
    """Bytes per group kind of the plain collectives among ``templates`` over ``kinds``
    that ``min_collective_seconds`` counts (TP overlaps and ring attention are not plain:
    they overlap compute)."""
    from simtrain.parallel.templates import Collective

    out: dict[str, float] = {}
    for t in templates:
        if type(t) is Collective and t.group in kinds and \
                min_collective_seconds(t.op, 2, 1.0, 1.0) > 0:
            out[t.group] = out.get(t.group, 0.0) + t.nbytes
    return out


def step_time_bound(times: Sequence[Sequence[tuple[float, float]]], micro_batches: int,
                    tails: Sequence[StageTail] | None = None,
                    route: ScheduleRoute | None = None) -> float:
    """A lower bound of the step time (s) from each stage's chain and the pipeline fill/drain.

    ``times[s][c]`` is the (forward, backward) seconds per microbatch of chunk c on stage
    s: compute, plus the collectives serial on the chain. Stage s cannot start before the
    first microbatch's forward has passed the stages before it (their first chunk), then
    runs all its m microbatches' forward and backward on one chain (end E_s). With one
    chunk per stage (1F1B, GPipe) its last backward must then travel back through the
    stages before it: E_0 >= Σ_{j<s} (f_j + b_j) + m·c_s, which for equal stages is the
    familiar (m + p - 1)·c. With virtual stages only the fill is counted. The step ends no
    earlier than E_s + ``tails[s].seconds()``. Launch waits and transfers count zero.
    ``route`` says what the schedule changes (``ScheduleRoute``; None: every microbatch
    through every chunk in order, one backward phase).
    """
    route = route or ScheduleRoute()
    tails = tails or [StageTail()] * len(times)
    best = 0.0
    single = all(len(chunks) == 1 for chunks in times) and not route.split_backward
    fill = drain = 0.0
    for s, (chunks, tail) in enumerate(zip(times, tails, strict=True)):
        work = micro_batches * sum((f + b) * route.share(s, c)
                                   for c, (f, b) in enumerate(chunks))
        best = max(best, fill + work + tail.seconds())
        if single:
            best = max(best, fill + work + drain + tails[0].seconds())
        if not route.several_routes:
            fill += chunks[0][0]
        drain += chunks[0][1]
    return best


@dataclass(frozen=True)
class ScheduleRoute:
    """What a pipeline schedule changes in ``step_time_bound``: ``shares[s][c]``, the
    fraction of the microbatches that pass chunk c of stage s (DualPipe's two copies: half
    each; empty: all); ``several_routes``: microbatches enter at different stages, so no
    stage waits for a fill; ``split_backward``: weight gradients run apart from input
    gradients (zero-bubble schedules), so the drain through the earlier stages may wait
    only for their input gradients and is not counted."""

    shares: tuple[tuple[float, ...], ...] = ()
    several_routes: bool = False
    split_backward: bool = False

    def share(self, stage: int, chunk: int) -> float:
        return self.shares[stage][chunk] if self.shares else 1.0


def schedule_route(schedule: Any) -> ScheduleRoute:
    """``ScheduleRoute`` of a built ``Schedule``: each (stage, chunk)'s forward steps over
    its microbatches."""
    m = schedule.micro_batches
    shares = tuple(tuple(sum(1 for st in steps if st.chunk == c and st.phase == "F") / m
                         for c in range(len(schedule.placement[s])))
                   for s, steps in enumerate(schedule.stages))
    return ScheduleRoute(shares, bool(schedule.routes), bool(schedule.split_backward))


def stage_compute_times(scenario: Any, cluster: Any, plan: Any
                        ) -> list[list[tuple[float, float]]]:
    """(forward, backward) seconds of compute per microbatch, per stage and model chunk:
    the lowering's own accounting (``simtrain.parallel.program.stage_compute_times``), no
    communication, launch waits or optimizer."""
    from simtrain.parallel.program import stage_compute_times as lowered
    from simtrain.workload.compute import op_time

    gpu, comp, dtype = cluster.gpu_spec, scenario.compute, scenario.training.dtype
    return lowered(plan.units, cp=plan.dims.cp, recompute=scenario.parallelism.recompute,
                   op_time=lambda op: op_time(op, gpu, comp, dtype),
                   attention_saved=comp.op_sac_saves_attention)


@dataclass
class ChainCosts:
    """What a plan shape's bound needs, whatever its rank order and ZeRO stage: per stage
    and chunk the (forward, backward) compute per microbatch and the bytes of its serial
    collectives per group kind, the chunk's dense parameter count; per stage every
    parameter count (the optimizer's)."""

    compute: list[list[tuple[float, float]]]
    fwd_bytes: list[list[dict[str, float]]]
    bwd_bytes: list[list[dict[str, float]]]
    dense: list[list[int]]
    numels: list[list[int]]
    route: ScheduleRoute = field(default_factory=lambda: ScheduleRoute())


def chain_costs(scenario: Any, cluster: Any, plan: Any) -> ChainCosts:
    """``ChainCosts`` of ``plan``: compute as the lowering charges it
    (``program.stage_compute_times``: the sum of its templates), collectives as the
    lowering emits them."""
    from simtrain.parallel import program
    from simtrain.parallel.expert import split_expert
    from simtrain.workload.compute import op_time
    from simtrain.workload.fp8 import time_key

    gpu, comp, dtype = cluster.gpu_spec, scenario.compute, scenario.training.dtype
    par, d = scenario.parallelism, plan.dims
    kinds = ["tp", "cp", "ep"]
    if par.tp_comm_overlap and scenario.sim.granularity != "stage":
        kinds.remove("tp")  # pipelined with their GEMMs (tensor.py): not serial
    if any(step.overlap for steps in plan.schedule.stages for step in steps):
        kinds = []  # overlapped chunk pairs (DualPipe): one's collectives under the other's kernels
    times: dict[tuple[object, ...], float] = {}

    def duration(op: Any) -> float:
        key = time_key(op)
        if key not in times:
            times[key] = op_time(op, gpu, comp, dtype)
        return times[key]

    def unit(u: Any) -> tuple[float, float, dict[str, float], dict[str, float]]:
        fwd = program.forward(u, "forward", d.cp, duration)
        bwd = program.backward(u, par.recompute, d.cp, duration)
        return (program.compute_seconds(fwd), program.compute_seconds(bwd),
                chain_comm_bytes(fwd, kinds), chain_comm_bytes(bwd, kinds))

    out = ChainCosts([], [], [], [], [], schedule_route(plan.schedule))
    for chunks in plan.units:
        rows: list[list[Any]] = [[], [], [], []]
        for chunk in chunks:
            parts = [unit(u) for u in chunk]
            rows[0].append((sum(p[0] for p in parts), sum(p[1] for p in parts)))
            for row, pick in ((rows[1], [p[2] for p in parts]), (rows[2], [p[3] for p in parts])):
                total: dict[str, float] = {}
                for nbytes in pick:
                    for g, n in nbytes.items():
                        total[g] = total.get(g, 0.0) + n
                row.append(total)
            rows[3].append(sum(p.numel for p in split_expert(q for u in chunk
                                                               for q in u.params)[0]))
        out.compute.append(rows[0])
        out.fwd_bytes.append(rows[1])
        out.bwd_bytes.append(rows[2])
        out.dense.append(rows[3])
        out.numels.append([p.numel for chunk in chunks for u in chunk for p in u.params])
    return out


def plan_bound(costs: ChainCosts, scenario: Any, cluster: Any, dims: Any, micro_batches: int,
               links: Links, optimizer: Optimizer | None = None) -> float:
    """The step-time bound of a plan with ``costs`` laid out by ``dims`` (its rank order
    places the groups on servers): ``step_time_bound`` of ``chain_times`` and
    ``stage_tails``."""
    times, overlap = chain_times(costs, dims, links)
    return step_time_bound(times, micro_batches, stage_tails(
        costs, scenario, cluster, dims, links, overlap, optimizer), costs.route)


def optimizer_seconds(scenario: Any, cluster: Any) -> Optimizer:
    """Seconds of a rank's optimizer step from its parameter counts and shard
    (``op_timing.optimizer_timer``), each distinct (counts, shard) costed once."""
    from simtrain.op_timing import optimizer_timer

    step = optimizer_timer(scenario, cluster)
    seen: dict[tuple[tuple[int, ...], int], float] = {}

    def seconds(numels: Sequence[int], shard: int) -> float:
        key = (tuple(numels), shard)
        if key not in seen:
            seen[key] = step(list(numels), shard).seconds
        return seen[key]

    return seconds


def _per_byte(dims: Any, links: Links, kind: str, op: str) -> float:
    """Seconds per byte of ``op`` over ``dims``' ``kind`` group at its physical minimum."""
    size = {"tp": dims.tp, "cp": dims.cp, "ep": dims.ep, "grad": dims.dp * dims.cp}[kind]
    local = members_per_server(dims, links.servers, kind)
    return min_collective_seconds(op, size, 1.0, links.gpu, local, links.nic)


def chain_times(costs: ChainCosts, dims: Any, links: Links
                ) -> tuple[list[list[tuple[float, float]]], list[float]]:
    """Per stage and chunk the (forward, backward) seconds per microbatch of compute plus
    the serial TP/CP/EP collectives at their physical minimum (``min_collective_seconds``);
    per stage the least backward collective time of its chunks (what the DP reduction
    after the last backward may run under)."""
    rate = {k: _per_byte(dims, links, k, "all_gather") for k in ("tp", "cp", "ep")}

    def comm(nbytes: dict[str, float]) -> float:
        return sum(rate[k] * n for k, n in nbytes.items())

    times = [[(f + comm(fb), b + comm(bb)) for (f, b), fb, bb in zip(c, fbs, bbs, strict=True)]
             for c, fbs, bbs in zip(costs.compute, costs.fwd_bytes, costs.bwd_bytes,
                                    strict=True)]
    return times, [min(comm(bb) for bb in bbs) for bbs in costs.bwd_bytes]


def stage_tails(costs: ChainCosts, scenario: Any, cluster: Any, dims: Any, links: Links,
                overlap: Sequence[float], optimizer: Optimizer | None = None
                ) -> list[StageTail]:
    """Per stage what follows its last backward (``StageTail``):

    - the dense gradients' DP reduction (all-reduce under ZeRO 0, reduce-scatter under
      1/2) over dp·cp ranks of its smallest chunk (the last chunk reduced is one of them),
      at its physical minimum; only at "stage" granularity, where every gradient of a
      chunk comes from its one fused backward task (finer: only the last bucket waits);
      ZeRO-3 reduces inside the step and is not counted; it may start under the last
      backward's trailing collectives (``overlap``);
    - then the optimizer step's kernels at the lowering's own cost
      (``op_timing.optimizer_timer``), and under ZeRO 1/2 without ``overlap_param_gather``
      the all-gather of the updated parameters, at its physical minimum.

    ``optimizer`` (default: ``optimizer_seconds``) may be shared by the calls of one
    scenario and cluster.
    """
    from simtrain.training import DTYPE_BYTES

    par, d, train = scenario.parallelism, dims, scenario.training
    group = d.dp * d.cp
    shard = (d.fsdp_shard_size if d.zero == 3 else group) if d.zero >= 1 else 1
    step = optimizer or optimizer_seconds(scenario, cluster)
    grad = _per_byte(d, links, "grad", "all_reduce" if d.zero == 0 else "reduce_scatter")
    gather = _per_byte(d, links, "grad", "all_gather")
    grad_bytes = DTYPE_BYTES[par.ddp.grad_dtype]
    tails = []
    for dense, numels, early in zip(costs.dense, costs.numels, overlap, strict=True):
        reduce_s = 0.0
        if d.zero < 3 and scenario.sim.granularity == "stage":
            reduce_s = grad * min(dense) * grad_bytes
        after = step(numels, shard)
        if d.zero in (1, 2) and shard > 1 and not par.ddp.overlap_param_gather:
            after += gather * sum(numels) * train.dtype_bytes
        tails.append(StageTail(early, reduce_s, after))
    return tails

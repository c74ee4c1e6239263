"""The shared emitter: ranks, groups, dependency frontiers and task creation for a stage.

Every strategy module emits through one ``Emitter``: it knows which ranks of each stage
are simulated (``symmetry.py``), the process group of a rank for each group kind, each
rank's *frontier* (the tasks its next task must wait for: the head of its compute chain,
plus an FSDP all-gather or an incoming pipeline transfer) and the cross-strategy state
(gradient readiness for the DP buckets, pending reductions for the optimizer, overlapped
ZeRO parameter all-gathers). It emits the two templates every strategy shares: kernels
and plain collectives over a tp/cp/ep group.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain, islice, repeat
from operator import lt
from typing import Any

from simtrain.engine.taskgraph import TaskGraph
from simtrain.parallel.bucket_prepass import PrepassWatch
from simtrain.parallel.context_volume import CP_A2A_GROUP, CP_RING_GROUP
from simtrain.parallel.expert import expert_load
from simtrain.parallel.fsdp import FSDP_REPLICATE_GROUP, FSDP_SHARD_GROUP
from simtrain.parallel.grad_ready import GradReady
from simtrain.parallel.plan import ParallelDims
from simtrain.parallel.symmetry import Images, Symmetry, simulated_stage_ranks
from simtrain.parallel.templates import Collective, Kernel
from simtrain.workload.fp8 import time_key
from simtrain.workload.model import Op

# Group kinds besides the ParallelDims axes: "ep" (expert parallel), "grad" (dense
# gradients over dp x cp), "expert_grad" (expert gradients over the expert-data-parallel
# group), and the two levels of hierarchical CP and of HSDP (ParallelDims.split_group).
GRAD_GROUP, EXPERT_GRAD_GROUP = "grad", "expert_grad"


@dataclass
class State:
    """What strategies hand each other while a step is emitted."""

    frontier: dict[int, list[int]] = field(default_factory=dict)
    # (rank, param) -> the task producing the param's gradient of the last microbatch
    grad_ready: GradReady = field(default_factory=GradReady)
    # rank -> its gradient reductions, in DP-stream order (the optimizer waits for them)
    reductions: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    # (rank, param) -> the overlapped ZeRO parameter all-gather holding it
    param_ag: dict[tuple[int, str], int] = field(default_factory=dict)
    # (rank, unit) gathered by FSDP and kept until its gradients are reduced (no reshard)
    unsharded: set[tuple[int, str]] = field(default_factory=set)
    # Megatron-Core's per-bucket passes before each DP collective (bucket_prepass.py)
    prepass: PrepassWatch | None = None


class Emitter:
    """Task creation for the ranks of each pipeline stage of ``dims`` into ``graph``."""

    def __init__(self, graph: TaskGraph, dims: ParallelDims, op_time: Callable[[Op], float],
                 *, symmetric: bool, imbalance: float = 0.0,
                 capacity_factor: float | None = None, symmetry: Symmetry | None = None):
        self.graph = graph
        self.dims = dims
        self.state = State()
        self.imbalance = imbalance
        self.capacity_factor = capacity_factor
        self._op_time = op_time
        self._times: dict[tuple[object, ...], float] = {}
        if symmetry is None and symmetric:
            symmetry = Symmetry.symmetric(dims)
        self.stage_ranks = simulated_stage_ranks(dims, symmetry)
        self.simulated = {r for ranks in self.stage_ranks for r in ranks}
        if symmetry is not None:
            graph.virtual = set(range(dims.world_size)) - self.simulated
        self.images = Images(dims, symmetry)
        self._groups: dict[tuple[int, str], list[tuple[int, ...]]] = {}
        self._group_of: dict[tuple[int, str], tuple[int, ...]] = {}
        self._members: dict[tuple[int, str], tuple[int, ...]] = {}  # the groups' ranks
        self._places: dict[int, dict[int, int]] = {}

    # ---- lookups ---------------------------------------------------------------------
    def _place(self, stage: int) -> dict[int, int]:
        """Rank -> its index among the simulated ranks of ``stage`` (built once)."""
        place = self._places.get(stage)
        if place is None:
            place = self._places[stage] = {r: i for i, r in enumerate(self.stage_ranks[stage])}
        return place

    def duration(self, op: Op) -> float:
        """Seconds of ``op``; layers repeat, so each distinct op shape is costed once."""
        key = time_key(op)
        t = self._times.get(key)
        if t is None:
            t = self._times[key] = self._op_time(op)
        return t

    def group_of(self, rank: int, kind: str) -> tuple[int, ...]:
        """The group of ``rank`` of ``kind`` (a dims axis, "ep", "grad" or "expert_grad")."""
        key = (rank, kind)
        if key not in self._group_of:
            d = self.dims
            if kind == "ep":
                g = d.ep_group(rank)
            elif kind == GRAD_GROUP:
                g = d.group(rank, d.grad_dims)
            elif kind == EXPERT_GRAD_GROUP:
                g = d.expert_dp_group(rank)
            elif kind in (CP_A2A_GROUP, CP_RING_GROUP):
                g = d.split_group(rank, "cp", d.cp_a2a,
                                  "block" if kind == CP_A2A_GROUP else "stride")
            elif kind in (FSDP_SHARD_GROUP, FSDP_REPLICATE_GROUP):
                g = d.split_group(rank, d.grad_dims, d.fsdp_shard_size,
                                  "block" if kind == FSDP_SHARD_GROUP else "stride")
            else:
                g = d.group(rank, kind)
            for r in g:
                self._group_of[(r, kind)] = g
        return self._group_of[key]

    def groups(self, stage: int, kind: str) -> list[tuple[int, ...]]:
        """The distinct ``kind`` groups of the simulated ranks of ``stage``."""
        key = (stage, kind)
        if key not in self._groups:
            seen: dict[tuple[int, ...], None] = {}
            for r in self.stage_ranks[stage]:
                seen.setdefault(self.group_of(r, kind), None)
            self._groups[key] = list(seen)
            self._members[key] = tuple(chain.from_iterable(seen))
        return self._groups[key]

    def dep(self, rank: int) -> list[int]:
        """The tasks ``rank``'s next task waits for."""
        return self.state.frontier.get(rank, [])

    def group_deps(self, group: Sequence[int]) -> list[int]:
        """What a collective over ``group`` waits for: every member's frontier."""
        return sorted(set(chain.from_iterable(map(self.state.frontier.get, group,
                                                  repeat(())))))

    def groups_deps(self, groups: Sequence[tuple[int, ...]],
                    members: Sequence[int]) -> list[list[int]]:
        """``group_deps`` of each of the disjoint ``groups`` (``members``: their ranks,
        group after group). Where every member waits for one task and these rise along
        ``members`` (a kernel just ran on every rank), each group's are its members'."""
        got = list(chain.from_iterable(map(self.state.frontier.get, members, repeat(()))))
        if len(got) == len(members) and all(map(lt, got, islice(got, 1, None))):
            return [got[end - len(g):end]
                    for end, g in zip(accumulate(map(len, groups)), groups, strict=True)]
        return list(map(self.group_deps, groups))

    def copies_each(self, groups: Sequence[tuple[int, ...]]
                    ) -> list[tuple[tuple[int, ...], ...]] | None:
        """The symmetric copies of each of ``groups``; None when nothing is mirrored."""
        if self.images.symmetry is None:
            return None
        return list(map(self.images.copies, groups))

    def param_waits(self, rank: int, reads: Sequence[str]) -> list[int]:
        """The overlapped parameter all-gathers ``rank`` must finish before reading ``reads``."""
        pa = self.state.param_ag
        return sorted({pa[(rank, p)] for p in reads if (rank, p) in pa})

    # ---- tasks -----------------------------------------------------------------------
    def coll(self, op: str, group: tuple[int, ...], nbytes: float, name: str, *, kind: str,
             stream: str, deps: list[int], meta: dict[str, Any] | None = None,
             sms: int = 0) -> int:
        """A collective over ``group`` (with its symmetric copies); returns its task id.
        ``sms`` > 0: the SMs its kernels hold instead of NCCL's channels."""
        return self.graph.collective(op, group, nbytes, name, kind=kind, stream=stream,
                                     deps=deps, meta=meta, copies=self.images.copies(group),
                                     sms=sms)

    def p2p(self, src: int, dst: int, nbytes: float, name: str, *, kind: str, stream: str,
            deps: list[int], meta: dict[str, Any] | None = None) -> int:
        """A transfer src -> dst; returns the task the receiver's work must wait for."""
        return self.graph.send_recv(src, dst, nbytes, name, kind=kind, stream=stream,
                                    deps=deps, meta=meta,
                                    copies=self.images.copies((src, dst)))

    def p2p_each(self, srcs: Sequence[int], dsts: Sequence[int], nbytes: float, name: str,
                 *, kind: str, stream: str, deps: Sequence[Sequence[int]],
                 meta: dict[str, Any] | None = None) -> int:
        """A transfer srcs[i] -> dsts[i] per pair, in order; returns the first task's id."""
        copies = self.copies_each(list(zip(srcs, dsts, strict=True)))
        return self.graph.send_recv_each(srcs, dsts, nbytes, name, kind=kind, stream=stream,
                                         deps=deps, meta=meta, copies=copies)

    def kernel(self, stage: int, k: Kernel, meta: dict[str, Any], gather: bool,
               grads: bool) -> None:
        """``k`` on every simulated rank of ``stage``, after the rank's frontier (and, if
        ``gather``, the parameter all-gathers of what it reads); if ``grads``, it produces
        the last microbatch's gradients of its params."""
        st, d = self.state, self.dims
        frontier, grad_ready = st.frontier, st.grad_ready
        ranks = self.stage_ranks[stage]
        deps = list(map(frontier.get, ranks, repeat([])))  # read only
        if gather:
            deps = [dep + self.param_waits(r, k.reads) for r, dep in zip(ranks, deps,
                                                                         strict=True)]
        durations: list[float] | float
        flops: list[float] | float
        if k.expert:
            loads = [expert_load(d.ep_index(r), k.layer, d.ep, self.imbalance,
                                 self.capacity_factor) for r in ranks]
            durations = [k.base + k.expert * load for load in loads]
            flops = [k.flops + k.expert_flops * load for load in loads]
        else:  # load 1 on every rank: the same sums as for an expert kernel
            durations, flops = k.base + k.expert * 1.0, k.flops + k.expert_flops * 1.0
        first = self.graph.compute_each(
            ranks, k.name, durations, kind=k.kind, deps=deps, flops=flops,
            meta=meta if k.kernels == 1 else {**meta, "kernels": k.kernels})
        tids = range(first, first + len(ranks))
        frontier.update(zip(ranks, [[t] for t in tids], strict=True))  # rank -> [its task]
        if grads and k.params:  # (rank, param) -> the rank's task, as one batch
            grad_ready.batch(self._place(stage), first, k.params)
            if st.prepass is not None:
                st.prepass.ready(self, stage, ranks, range(first, first + len(ranks)), k.params)

    def collective(self, stage: int, c: Collective, meta: dict[str, Any]) -> None:
        """``c`` over each of the stage's groups of its kind, after every member's frontier."""
        frontier = self.state.frontier
        groups = self.groups(stage, c.group)  # disjoint: each waits only for its members
        members = self._members[(stage, c.group)]
        first = self.graph.collective_each(c.op, groups, c.nbytes, c.name, kind=c.kind,
                                           stream=c.group, deps=self.groups_deps(groups, members),
                                           meta=meta, splits=c.splits,
                                           copies=self.copies_each(groups))
        tids = chain.from_iterable(map(repeat, range(first, first + len(groups)),
                                       map(len, groups)))  # each member's task
        frontier.update(zip(members, [[t] for t in tids], strict=True))

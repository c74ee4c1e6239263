"""Lower a training step under any combination of TP, SP, CP, PP, EP, DP/ZeRO to a task graph.

Per pipeline stage, every rank of the stage runs the same program (its shard of the stage's
model chunks, see ``shard.py``) in the order of the pipeline schedule (``schedule.py``);
collectives are emitted once per group, point-to-point transfers once per rank pair.

Streams per rank: "compute"; one per process-group kind ("tp", "cp", "ep", "dp", and
"dp ag" for ZeRO-3 parameter all-gathers, so prefetch is not queued behind gradient
reduce-scatters); ring attention uses one stream per CP link ("cp a>b"); pipeline
transfers one per direction and link, shared by both ends ("pp fwd 0>1", "pp bwd 1>0").
A send/recv is created right after its producer, in the producer's schedule order; the
receiver consumes in the same order (every stage runs the same forward sequence), so
every link stream is FIFO-consistent and cannot deadlock. Stages are emitted step by step
from a worklist: a step whose input transfer does not exist yet waits for the producer.

Gradient reduction (DP composes with all of the above over the dp x cp group):
- zero 0 (DDP): PyTorch reducer buckets of the chunk's gradients, all-reduced when the
  last microbatch's backward has produced them (no_sync before); expert gradients over
  the expert-data-parallel group;
- zero 1, 2 (Megatron distributed optimizer / ZeRO): the same buckets reduce-scattered,
  optimizer on 1/N of the states, then an all-gather of the updated 16-bit parameters;
- zero 3 (FSDP): per unit, an all-gather of its parameters before its forward and again
  before its backward (resharded after forward), prefetched one unit ahead, and a
  reduce-scatter of its gradients after its backward, every microbatch.

Communication overlaps of Megatron-Core (scenario options, off by default):
- ``tp_comm_overlap`` (``--tp-comm-overlap``, Transformer Engine userbuffers; needs SP):
  each TP all-gather is pipelined with the GEMM run that consumes it, and each TP
  reduce-scatter with the GEMM run that produces it, in n = tp chunks (ring exchange). The
  chunked pipeline's makespan is c/n + (n-1)·max(c/n, g/n) + g/n (c: comm time, g: GEMM
  time); it is modelled exactly by two pieces per side: all-gather -> AG_first (1/n of
  the bytes), AG_rest ((n-1)/n, after AG_first), GEMM_main ((n-1)/n of the GEMM, after
  AG_first), GEMM_last (1/n, after GEMM_main and AG_rest); reduce-scatter -> GEMM_first
  (1/n), GEMM_rest ((n-1)/n), RS_main ((n-1)/n of the bytes, after GEMM_first), RS_last
  (1/n, after RS_main and GEMM_rest). The GEMM run is the contiguous non-expert GEMM
  kernels of one layer and kind next to the collective (e.g. backward dgrad + wgrad);
  TP all-reduces (no SP) are not overlapped. Each piece pays the collective's launch
  latency, so latency-bound (small) TP collectives may get slower, not faster. At "stage"
  granularity the option degrades to no overlap (``fuse.py``).
- ``overlap_param_gather`` (``--overlap-param-gather``, distributed optimizer, zero 1/2):
  the updated parameters are all-gathered bucket by bucket (the reduce-scatter's buckets,
  in the parameter dtype) at the start of the step on the "dp ag" stream, in forward order,
  and the first microbatch's forward of each kernel waits for the buckets holding its
  parameters (at "layer" granularity each fused task waits for all its kernels' buckets,
  at "stage" the one forward task for every bucket of the chunk), instead of one exposed
  all-gather after the optimizer.

Granularity (``fuse.py``): one task per kernel, per run of kernels between collectives,
or per pipeline step.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from simtrain.engine.taskgraph import TaskGraph
from simtrain.parallel.ddp import DP_STREAM, Bucket, assign_buckets
from simtrain.parallel.fuse import Spec, fuse
from simtrain.parallel.plan import PARAM_GATHER_NEEDS_ZERO, TP_OVERLAP_NEEDS_SP, ParallelDims
from simtrain.parallel.schedule import Step as PipeStep
from simtrain.parallel.shard import Comm, Compute, Unit, expert_load
from simtrain.workload.model import Op, backward_ops
from simtrain.workload.optimizer import OptimizerStep

FSDP_AG_STREAM = "dp ag"
# Kernels of core attention (fused, or the standard kernels' pieces): what selective
# recompute recomputes (Korthikanti et al. 2022).
_CORE_ATTENTION = (".attn.core", ".attn.scores", ".attn.softmax", ".attn.dropout",
                   ".attn.context")


def is_core_attention(op: Op) -> bool:
    """Whether ``op`` belongs to core attention (recomputed under selective recompute)."""
    return op.kind == "attention" or op.name.endswith(_CORE_ATTENTION)


@dataclass(frozen=True)
class LowerOptions:
    """Everything the lowering needs besides the units, the schedule and the op timer."""

    dims: ParallelDims
    micro_batches: int
    dtype_bytes: int
    grad_bytes_per_element: float
    first_bucket_bytes: float
    bucket_cap_bytes: float
    overlap: bool
    optimizer_bytes_per_param: float
    recompute: str = "none"
    granularity: str = "op"
    p2p_bytes: float = 0.0  # activation (and gradient) bytes per pipeline transfer
    imbalance: float = 0.0
    capacity_factor: float | None = None
    # Symmetric fidelity: emit only data-parallel replica 0; the other replicas mirror it
    # (virtual ranks), and their copies of its collectives load the network as weights.
    symmetric: bool = False
    # Megatron-Core --tp-comm-overlap: TP all-gather/reduce-scatter pipelined with GEMMs.
    tp_comm_overlap: bool = False
    # Megatron --overlap-param-gather: ZeRO-1/2 parameter all-gathers during the forward.
    overlap_param_gather: bool = False
    # The optimizer step's kernels on one rank (simtrain.workload.optimizer.optimizer_step
    # bound to the GPU): (local parameter numels, ZeRO shards) -> its time and launches.
    optimizer_step: Callable[[list[int], int], OptimizerStep] | None = None

    def __post_init__(self) -> None:
        if self.tp_comm_overlap and self.dims.tp > 1 and not self.dims.sp:
            raise ValueError(TP_OVERLAP_NEEDS_SP)
        if self.overlap_param_gather and self.dims.zero not in (1, 2):
            raise ValueError(PARAM_GATHER_NEEDS_ZERO.format(zero=self.dims.zero))


@dataclass
class _State:
    # rank -> the tasks the rank's next task must wait for (its chain's head, plus an
    # FSDP all-gather or an incoming pipeline transfer)
    frontier: dict[int, list[int]] = field(default_factory=dict)
    grad_ready: dict[tuple[int, str], int] = field(default_factory=dict)
    reductions: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    # (rank, param) -> the overlapped ZeRO parameter all-gather holding it
    param_ag: dict[tuple[int, str], int] = field(default_factory=dict)


class Lowering:
    """Emit one training step; ``units[stage][chunk]`` is the stage's shard of each chunk."""

    def __init__(self, graph: TaskGraph, units: Sequence[Sequence[Sequence[Unit]]],
                 schedule: Sequence[Sequence[PipeStep]], options: LowerOptions,
                 op_time: Callable[[Op], float]):
        self.graph = graph
        self.units = units
        self.schedule = schedule
        self.o = options
        self.dims = options.dims
        self._op_time = op_time
        self._times: dict[tuple[object, ...], float] = {}
        self._specs: dict[tuple[int, int, str], list[Spec]] = {}
        self.state = _State()
        d = self.dims
        self._simulated: set[int]
        if options.symmetric:
            # Data-parallel replicas are identical, and so are the ranks of a tensor-
            # parallel group (Megatron splits evenly): simulate tp = dp = 0 of each stage.
            self.stage_ranks = [[d.rank(pp=s, cp=c) for c in range(d.cp)]
                                for s in range(d.pp)]
            self._simulated = {r for ranks in self.stage_ranks for r in ranks}
            graph.virtual = set(range(d.world_size)) - self._simulated
        else:
            self.stage_ranks = [d.stage_ranks(s) for s in range(d.pp)]
            self._simulated = set(range(d.world_size))
        self._groups: dict[tuple[int, str], list[tuple[int, ...]]] = {}
        self._group_of: dict[tuple[int, str], tuple[int, ...]] = {}
        self._copies: dict[tuple[int, ...], tuple[tuple[int, ...], ...]] = {}

    # ---- helpers ---------------------------------------------------------------------
    def duration(self, op: Op) -> float:
        # Layers repeat: cost each distinct op shape once.
        key = (op.kind, op.flops, op.bytes, op.gemm_shape)
        if key not in self._times:
            self._times[key] = self._op_time(op)
        return self._times[key]

    def group_of(self, rank: int, kind: str) -> tuple[int, ...]:
        key = (rank, kind)
        if key not in self._group_of:
            d = self.dims
            if kind == "ep":
                g = d.ep_group(rank)
            elif kind == "grad":
                g = d.group(rank, d.grad_dims)
            elif kind == "expert_grad":
                g = d.expert_dp_group(rank)
            else:
                g = d.group(rank, kind)
            for r in g:
                self._group_of[(r, kind)] = g
        return self._group_of[key]

    def groups(self, stage: int, kind: str) -> list[tuple[int, ...]]:
        key = (stage, kind)
        if key not in self._groups:
            seen: dict[tuple[int, ...], None] = {}
            for r in self.stage_ranks[stage]:
                seen.setdefault(self.group_of(r, kind), None)
            self._groups[key] = list(seen)
        return self._groups[key]

    # ---- specs -----------------------------------------------------------------------
    def _compute_spec(self, op: Op, kind: str, expert: bool, layer: int,
                      owns: bool = True) -> Spec:
        t = self.duration(op)
        names = tuple(p.name for p in op.params)
        return Spec("compute", op.name, kind, base=0.0 if expert else t,
                    expert=t if expert else 0.0, flops=0.0 if expert else op.flops,
                    expert_flops=op.flops if expert else 0.0, layer=layer,
                    params=names if owns else (), reads=names if kind == "forward" else (),
                    gemm=op.kind == "gemm")

    def _forward_specs(self, unit: Unit, kind: str) -> list[Spec]:
        out = []
        for step in unit.steps:
            if isinstance(step, Compute):
                out.append(self._compute_spec(step.op, kind, step.expert, unit.layer, False))
            elif isinstance(step, Comm):
                if step.fwd:
                    out.append(Spec("comm", step.name, step.kind, nbytes=step.nbytes,
                                    op=step.fwd, group=step.group))
            else:
                blk = self._ring_block(step.op, 1.0)
                out.append(Spec("ring", step.op.name, kind, base=self.duration(blk),
                                flops=blk.flops, nbytes=step.kv_bytes, steps=step.steps,
                                group="cp", layer=unit.layer))
        return out

    def _ring_block(self, op: Op, factor: float) -> Op:
        n = self.dims.cp
        return Op(f"{op.name}.block", op.kind, factor * op.flops / n, factor * op.bytes / n,
                  None, (), 0.0)

    def _backward_specs(self, unit: Unit) -> list[Spec]:
        out: list[Spec] = []
        if self.o.recompute == "full" and unit.layer >= 0:
            out += self._forward_specs(unit, "recompute")
        for step in reversed(unit.steps):
            if isinstance(step, Compute):
                if self.o.recompute == "selective" and is_core_attention(step.op):
                    out.append(self._compute_spec(step.op, "recompute", False, unit.layer,
                                                  False))
                for bop in backward_ops(step.op):
                    out.append(self._compute_spec(bop, "backward", step.expert, unit.layer))
            elif isinstance(step, Comm):
                if step.bwd:
                    out.append(Spec("comm", step.name + ".bwd", step.kind,
                                    nbytes=step.nbytes, op=step.bwd, group=step.group))
            else:
                if self.o.recompute == "selective":
                    blk = self._ring_block(step.op, 1.0)
                    out.append(Spec("ring", step.op.name, "recompute", base=self.duration(blk),
                                    flops=blk.flops, nbytes=step.kv_bytes, steps=step.steps,
                                    group="cp", layer=unit.layer))
                bwd = backward_ops(step.op)[0]
                blk = self._ring_block(bwd, 1.0)
                out.append(Spec("ring", bwd.name, "backward", base=self.duration(blk),
                                flops=blk.flops, nbytes=2 * step.kv_bytes, steps=step.steps,
                                group="cp", layer=unit.layer))
        return out

    def specs(self, stage: int, chunk: int, phase: str) -> list[Spec]:
        key = (stage, chunk, phase)
        if key in self._specs:
            return self._specs[key]
        units = self.units[stage][chunk]
        if phase == "B":
            units = list(reversed(units))
        zero3 = self.dims.zero == 3 and self.dims.dp * self.dims.cp > 1
        out: list[Spec] = []
        for unit in units:
            pbytes = sum(p.numel for p in unit.params)
            if zero3 and pbytes:
                out.append(Spec("fsdp_ag", f"fsdp ag {unit.name}", "dp_comm",
                                nbytes=pbytes * self.o.dtype_bytes, op="all_gather"))
            out += (self._forward_specs(unit, "forward") if phase == "F"
                    else self._backward_specs(unit))
            if zero3 and pbytes and phase == "B":
                out.append(Spec("fsdp_rs", f"fsdp rs {unit.name}", "dp_comm",
                                nbytes=pbytes * self.o.grad_bytes_per_element,
                                op="reduce_scatter"))
        if self.o.tp_comm_overlap and self.dims.tp > 1 and self.dims.sp:
            out = overlap_tp(out)
        out = fuse(out, self.o.granularity, "forward" if phase == "F" else "backward")
        self._specs[key] = out
        return out

    # ---- emission --------------------------------------------------------------------
    def _dep(self, rank: int) -> list[int]:
        return self.state.frontier.get(rank, [])

    def copies(self, group: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """Symmetric fidelity: the images of ``group`` under the symmetries (shifts along dp
        and tp) that hold no simulated rank — identical collectives nobody emits, whose
        traffic must still load the network. Images that touch a simulated rank are the
        group itself or groups emitted in their own right."""
        if not self.o.symmetric:
            return ()
        if group not in self._copies:
            d = self.dims
            coords = [d.coords(r) for r in group]
            dp_i = np.array([c["dp"] for c in coords])
            tp_i = np.array([c["tp"] for c in coords])
            base = np.array(group) - dp_i * d.stride("dp") - tp_i * d.stride("tp")
            # A group closed under a unit shift along an axis (a DP group along dp, a TP
            # group along tp) maps onto itself under every shift along it: only the other
            # axis makes new images, so a 512-way DP group has tp images, not dp x tp.
            members = set(group)
            dp_range = [0] if members == set((base + (dp_i + 1) % d.dp * d.stride("dp")
                                              + tp_i * d.stride("tp")).tolist()) \
                else range(d.dp)
            tp_range = [0] if members == set((base + dp_i * d.stride("dp")
                                              + (tp_i + 1) % d.tp * d.stride("tp")).tolist()) \
                else range(d.tp)
            # Every remaining (dp, tp) shift at once: images[shift, member].
            dp_s, tp_s = np.meshgrid(np.asarray(dp_range), np.asarray(tp_range), indexing="ij")
            dp_new = (dp_i[None, :] + dp_s.reshape(-1, 1)) % d.dp
            tp_new = (tp_i[None, :] + tp_s.reshape(-1, 1)) % d.tp
            images = base[None, :] + dp_new * d.stride("dp") + tp_new * d.stride("tp")
            # Images holding a simulated rank (dp = tp = 0) are the group or emitted.
            free = ~((dp_new == 0) & (tp_new == 0)).any(axis=1)
            # Real groups partition the ranks: keep images disjoint from the group and from
            # each other (a shift that cuts across blocks, e.g. an expert-parallel block
            # moved by one replica, is not a group that exists).
            candidates = images[free]
            # Shifts that only permute the members give the same set: keep one per set, in
            # shift order. When the distinct sets are disjoint from the group and from each
            # other (the usual case: dp shifts of a TP group, tp shifts of a DP group), they
            # are the answer without a Python loop over every shift.
            if len(candidates):
                _, first = np.unique(np.sort(candidates, axis=1), axis=0, return_index=True)
                candidates = candidates[np.sort(first)]
            flat = np.concatenate([np.asarray(group), candidates.ravel()])
            if len(np.unique(flat)) == len(flat):
                found = [tuple(int(r) for r in row) for row in candidates]
            else:
                taken = set(group)
                found = []
                for row in candidates:
                    image = tuple(int(r) for r in row)
                    if taken.isdisjoint(image):
                        taken.update(image)
                        found.append(image)
            self._copies[group] = tuple(found)
        return self._copies[group]

    def _coll(self, op: str, group: tuple[int, ...], nbytes: float, name: str, *, kind: str,
              stream: str, deps: list[int], meta: dict[str, int] | None = None
              ) -> dict[int, int]:
        """A collective over ``group``; returns each member's task id."""
        tid = self.graph.collective(op, group, nbytes, name, kind=kind, stream=stream,
                                    deps=deps, meta=meta, copies=self.copies(group))
        return dict.fromkeys(group, tid)

    def _p2p(self, src: int, dst: int, nbytes: float, name: str, *, kind: str, stream: str,
             deps: list[int], meta: dict[str, int] | None = None) -> int:
        """A transfer src -> dst; returns the task the receiver's work must wait for."""
        return self.graph.send_recv(src, dst, nbytes, name, kind=kind, stream=stream,
                                    deps=deps, meta=meta, copies=self.copies((src, dst)))

    def emit_step(self, step: PipeStep, incoming: dict[int, int] | None) -> None:
        """Emit ``step`` on every rank of its stage; ``incoming`` maps rank -> p2p task."""
        st = self.state
        g = self.graph
        ranks = self.stage_ranks[step.stage]
        if incoming:
            for r in ranks:
                st.frontier[r] = [*self._dep(r), incoming[r]]
        last_mb = step.microbatch == self.o.micro_batches - 1
        meta = {"microbatch": step.microbatch, "chunk": step.chunk, "stage": step.stage}
        unit_starts: dict[int, list[list[int]]] = defaultdict(list)  # frontier per unit
        # The first forward of a chunk waits for its overlapped parameter all-gathers.
        gather = bool(st.param_ag) and step.phase == "F" and step.microbatch == 0
        for spec in self.specs(step.stage, step.chunk, step.phase):
            if spec.what == "compute":
                for r in ranks:
                    load = 1.0
                    if spec.expert:
                        load = expert_load(self.dims.ep_index(r), spec.layer, self.dims.ep,
                                           self.o.imbalance, self.o.capacity_factor)
                    deps = self._dep(r)
                    if gather:
                        deps = deps + self._param_waits(r, spec.reads)
                    tid = g.compute(r, spec.name, spec.base + spec.expert * load,
                                    kind=spec.kind, deps=deps,
                                    flops=spec.flops + spec.expert_flops * load,
                                    meta=meta if spec.kernels == 1 else
                                    {**meta, "kernels": spec.kernels})
                    st.frontier[r] = [tid]
                    if last_mb and spec.params and step.phase == "B":
                        for p in spec.params:
                            st.grad_ready[(r, p)] = tid
            elif spec.what == "comm":
                for grp in self.groups(step.stage, spec.group):
                    deps = sorted({t for r in grp for t in self._dep(r)})
                    ids = self._coll(spec.op, grp, spec.nbytes, spec.name, kind=spec.kind,
                                     stream=spec.group, deps=deps, meta=meta)
                    for r in grp:
                        st.frontier[r] = [ids[r]]
            elif spec.what == "ring":
                self._emit_ring(step.stage, spec, meta)
            elif spec.what == "tp_overlap":
                self._emit_tp_overlap(step.stage, spec, meta, gather,
                                      last_mb and step.phase == "B")
            elif spec.what == "fsdp_ag":
                for r in ranks:
                    unit_starts[r].append(self._dep(r))
                for grp in self.groups(step.stage, "grad"):
                    # Prefetch one unit ahead: issue once the unit before the previous ended.
                    deps = sorted({t for r in grp if len(unit_starts[r]) >= 2
                                   for t in unit_starts[r][-2]})
                    ids = self._coll("all_gather", grp, spec.nbytes, spec.name,
                                     kind="dp_comm", stream=FSDP_AG_STREAM, deps=deps,
                                     meta=meta)
                    for r in grp:
                        st.frontier[r] = [*self._dep(r), ids[r]]
            else:  # fsdp_rs
                for grp in self.groups(step.stage, "grad"):
                    deps = sorted({t for r in grp for t in self._dep(r)})
                    ids = self._coll("reduce_scatter", grp, spec.nbytes, spec.name,
                                     kind="dp_comm", stream=DP_STREAM, deps=deps, meta=meta)
                    for r in grp:
                        st.reductions[r].append(ids[r])

    def _param_waits(self, rank: int, reads: Sequence[str]) -> list[int]:
        """The overlapped parameter all-gathers ``rank`` must finish before reading ``reads``."""
        pa = self.state.param_ag
        return sorted({pa[(rank, p)] for p in reads if (rank, p) in pa})

    def _emit_tp_overlap(self, stage: int, spec: Spec, meta: dict[str, int], gather: bool,
                         grads: bool) -> None:
        """A TP all-gather or reduce-scatter pipelined with its GEMM run in n = tp chunks,
        as two pieces per side (module docstring): makespan c/n + (n-1)·max(c, g)/n + g/n."""
        st, g = self.state, self.graph
        n = self.dims.tp
        base = sum(p.base for p in spec.parts)
        flops = sum(p.flops for p in spec.parts)
        params = tuple(q for p in spec.parts for q in p.params)
        reads = tuple(q for p in spec.parts for q in p.reads)
        kind = spec.parts[0].kind
        gname = spec.parts[0].name
        if len(spec.parts) > 1:
            gname += "+" + "+".join(p.name.rsplit(".", 1)[-1] for p in spec.parts[1:])
        m = {**meta, "tp_overlap_chunks": n}
        big, small = (n - 1) / n, 1 / n

        def gemm(r: int, piece: str, frac: float, deps: list[int]) -> int:
            return g.compute(r, f"{gname} ({piece}/{n})", base * frac, kind=kind, deps=deps,
                             flops=flops * frac, meta=m)

        for grp in self.groups(stage, spec.group):
            local = [r for r in grp if r in self._simulated]
            deps = sorted({t for r in grp for t in self._dep(r)})
            waits = {r: self._param_waits(r, reads) if gather else [] for r in local}
            if spec.op == "all_gather":
                first = self._coll(spec.op, grp, spec.nbytes * small, f"{spec.name} (1/{n})",
                                   kind=spec.kind, stream=spec.group, deps=deps, meta=m)
                fid = first[grp[0]]
                rest = self._coll(spec.op, grp, spec.nbytes * big, f"{spec.name} (2-{n}/{n})",
                                  kind=spec.kind, stream=spec.group, deps=[fid], meta=m)
                for r in local:
                    main = gemm(r, f"1-{n - 1}", big, [fid, *waits[r]])
                    last = gemm(r, f"{n}", small, [main, rest[r]])
                    st.frontier[r] = [last]
                    if grads:
                        for p in params:
                            st.grad_ready[(r, p)] = last
            else:  # reduce_scatter
                firsts, rests = {}, {}
                for r in local:
                    firsts[r] = gemm(r, "1", small, [*self._dep(r), *waits[r]])
                    rests[r] = gemm(r, f"2-{n}", big, [firsts[r]])
                    if grads:
                        for p in params:
                            st.grad_ready[(r, p)] = rests[r]
                rs_main = self._coll(spec.op, grp, spec.nbytes * big,
                                     f"{spec.name} (1-{n - 1}/{n})", kind=spec.kind,
                                     stream=spec.group, deps=sorted(firsts.values()), meta=m)
                rs_last = self._coll(spec.op, grp, spec.nbytes * small,
                                     f"{spec.name} ({n}/{n})", kind=spec.kind,
                                     stream=spec.group,
                                     deps=sorted({rs_main[grp[0]], *rests.values()}), meta=m)
                for r in grp:
                    st.frontier[r] = [rs_last[r]]

    def _emit_ring(self, stage: int, spec: Spec, meta: dict[str, int]) -> None:
        st, g = self.state, self.graph
        for grp in self.groups(stage, "cp"):
            n = len(grp)
            nxt = {grp[i]: grp[(i + 1) % n] for i in range(n)}
            have = {r: self._dep(r) for r in grp}  # what each rank forwards next
            recv: dict[int, int] = {}
            for j in range(spec.steps):
                sends: dict[int, int] = {}
                if j < spec.steps - 1:
                    for r in grp:
                        dst = nxt[r]
                        sends[dst] = self._p2p(
                            r, dst, spec.nbytes, f"{spec.name} kv {j}", kind="cp_comm",
                            stream=f"cp {r}>{dst}", deps=have[r], meta=meta)
                for r in grp:
                    deps = self._dep(r) + ([recv[r]] if r in recv else [])
                    st.frontier[r] = [g.compute(r, f"{spec.name} block {j}", spec.base,
                                                kind=spec.kind, deps=deps, flops=spec.flops,
                                                meta=meta)]
                recv = sends
                have = {r: [sends[r]] for r in sends}

    def _buckets(self, stage: int, chunk: int) -> list[tuple[str, list[Bucket]]]:
        """The chunk's gradient buckets per reduction group kind: dense parameters over the
        data-parallel group ("grad"), expert parameters over the expert-data-parallel one."""
        o = self.o
        params = [p for u in self.units[stage][chunk] for p in u.params]
        out = []
        for kind, expert in (("grad", False), ("expert_grad", True)):
            plist = [p for p in params if (".experts." in p.name) == expert]
            if plist:
                out.append((kind, assign_buckets(plist, o.grad_bytes_per_element,
                                                 o.first_bucket_bytes, o.bucket_cap_bytes)))
        return out

    def reduce_gradients(self, stage: int, chunk: int) -> None:
        """Bucketed DP gradient reduction of one chunk after its last microbatch's backward."""
        d, o = self.dims, self.o
        if d.zero == 3:
            return
        op = "all_reduce" if d.zero == 0 else "reduce_scatter"
        for kind, buckets in self._buckets(stage, chunk):
            for grp in self.groups(stage, kind):
                if len(grp) == 1:
                    continue
                for b in buckets:
                    if o.overlap:
                        deps = sorted({self.state.grad_ready[(r, p.name)] for r in grp
                                       for p in b.params if (r, p.name) in
                                       self.state.grad_ready})
                    else:
                        deps = sorted({t for r in grp for t in self._dep(r)})
                    name = f"ddp bucket {b.index}" if d.zero == 0 else f"zero rs {b.index}"
                    if kind == "expert_grad":
                        name = "expert " + name
                    ids = self._coll(
                        op, grp, b.nbytes, name, kind="dp_comm", stream=DP_STREAM, deps=deps,
                        meta={"bucket": b.index, "params": len(b.params), "chunk": chunk})
                    for r in grp:
                        self.state.reductions[r].append(ids[r])

    def gather_params(self, stage: int) -> None:
        """``overlap_param_gather``: at the start of the step, all-gather the (previous
        step's) updated parameters of every chunk of ``stage``, one all-gather per gradient
        bucket (the reduce-scatter's buckets, bytes in the parameter dtype), in forward order
        on the "dp ag" stream; ``emit_step`` makes each kernel of the first forward wait."""
        o = self.o
        for chunk, units in enumerate(self.units[stage]):
            pos = {p.name: i for i, p in enumerate(p for u in units for p in u.params)}
            # Forward order: by the first-registered parameter of the bucket.
            todo = [(pos[b.params[-1].name], kind, b)
                    for kind, buckets in self._buckets(stage, chunk) for b in buckets]
            for _, kind, b in sorted(todo, key=lambda x: x[0]):
                name = f"zero param ag {b.index}"
                if kind == "expert_grad":
                    name = "expert " + name
                nbytes = sum(p.numel for p in b.params) * o.dtype_bytes
                for grp in self.groups(stage, kind):
                    if len(grp) == 1:
                        continue
                    ids = self._coll(
                        "all_gather", grp, nbytes, name, kind="dp_comm", stream=FSDP_AG_STREAM,
                        deps=[], meta={"bucket": b.index, "params": len(b.params),
                                       "chunk": chunk})
                    for r in grp:
                        for p in b.params:
                            self.state.param_ag[(r, p.name)] = ids[r]

    def optimizer(self, stage: int) -> None:
        """Optimizer step on each rank of ``stage`` (after its reductions), then the ZeRO-1/2
        all-gather of the updated parameters."""
        d, o, g = self.dims, self.o, self.graph
        numels = [p.numel for chunk in self.units[stage] for u in chunk for p in u.params]
        numel = sum(numels)
        shard = d.dp * d.cp if d.zero >= 1 else 1
        if o.optimizer_step is not None:
            step = o.optimizer_step(numels, shard)
            seconds, nbytes, meta = step.seconds, step.nbytes, {"kernels": step.launches}
        else:
            op = Op("optimizer.step", "elementwise", 0.0,
                    numel * o.optimizer_bytes_per_param / shard, None, (), 0.0)
            seconds, nbytes, meta = self.duration(op), op.bytes, {}
        for r in self.stage_ranks[stage]:
            # The DP stream is FIFO: waiting for its last reduction waits for all of them.
            deps = self._dep(r) + self.state.reductions.get(r, [])[-1:]
            self.state.frontier[r] = [g.compute(r, "optimizer.step", seconds,
                                                kind="optimizer", nbytes=nbytes, deps=deps,
                                                meta=meta)]
        if d.zero in (1, 2) and shard > 1 and not o.overlap_param_gather:
            for grp in self.groups(stage, "grad"):
                deps = sorted({t for r in grp for t in self._dep(r)})
                self._coll("all_gather", grp, numel * o.dtype_bytes, "zero param all-gather",
                           kind="dp_comm", stream=DP_STREAM, deps=deps)

    # ---- the whole step --------------------------------------------------------------
    def run(self) -> None:
        """Emit every stage's schedule, interleaved through a worklist, then the optimizer."""
        d = self.dims
        p, v = d.pp, d.vpp
        pos = [0] * p
        inbox: dict[tuple[int, int, int, str], dict[int, int]] = {}
        last_chunk_virtual = (p - 1, v - 1)
        if self.o.overlap_param_gather and self.dims.zero in (1, 2):
            for s in range(p):
                self.gather_params(s)
        while any(pos[s] < len(self.schedule[s]) for s in range(p)):
            progressed = False
            for s in range(p):
                while pos[s] < len(self.schedule[s]):
                    step = self.schedule[s][pos[s]]
                    key = (s, step.chunk, step.microbatch, step.phase)
                    needs = ((s, step.chunk) != (0, 0) if step.phase == "F"
                             else (s, step.chunk) != last_chunk_virtual)
                    if needs and key not in inbox:
                        break
                    self.emit_step(step, inbox.pop(key, None) if needs else None)
                    self._send(step, inbox)
                    if step.phase == "B" and step.microbatch == self.o.micro_batches - 1:
                        self.reduce_gradients(s, step.chunk)
                    pos[s] += 1
                    progressed = True
            if not progressed:
                stuck = [self.schedule[s][pos[s]] for s in range(p)
                         if pos[s] < len(self.schedule[s])]
                raise RuntimeError(f"pipeline schedule cannot make progress at {stuck}")
        for s in range(p):
            self.optimizer(s)

    def _send(self, step: PipeStep, inbox: dict[tuple[int, int, int, str], dict[int, int]]
              ) -> None:
        p, v = self.dims.pp, self.dims.vpp
        s, c = step.stage, step.chunk
        if step.phase == "F":
            if (s, c) == (p - 1, v - 1):
                return
            dst_s, dst_c = (s + 1, c) if s < p - 1 else (0, c + 1)
            stream = f"pp fwd {s}>{dst_s}"
        else:
            if (s, c) == (0, 0):
                return
            dst_s, dst_c = (s - 1, c) if s > 0 else (p - 1, c - 1)
            stream = f"pp bwd {s}>{dst_s}"
        out: dict[int, int] = {}
        for src, dst in zip(self.stage_ranks[s], self.stage_ranks[dst_s], strict=True):
            out[dst] = self._p2p(
                src, dst, self.o.p2p_bytes, f"pp {step.phase} mb{step.microbatch}",
                kind="pp_comm", stream=stream, deps=self._dep(src),
                meta={"microbatch": step.microbatch, "chunk": c})
        inbox[(dst_s, dst_c, step.microbatch, step.phase)] = out


def overlap_tp(specs: list[Spec]) -> list[Spec]:
    """``tp_comm_overlap``: turn each TP all-gather and the GEMM run after it, and each TP
    reduce-scatter and the GEMM run before it, into one "tp_overlap" template.

    A GEMM run is the contiguous non-expert GEMM kernels of one layer and kind (forward,
    backward, recompute) next to the collective. A collective without such a run, and TP
    all-reduces, are left as they are.
    """

    def joins(s: Spec, ref: Spec) -> bool:
        return (s.what == "compute" and s.gemm and not s.expert and s.kind == ref.kind
                and s.layer == ref.layer)

    out: list[Spec] = []
    i = 0
    while i < len(specs):
        s = specs[i]
        if s.what == "comm" and s.group == "tp" and s.op == "all_gather":
            j = i + 1
            while j < len(specs) and joins(specs[j], specs[i + 1]):
                j += 1
            if j > i + 1:
                out.append(_overlapped(s, specs[i + 1:j]))
                i = j
                continue
        elif s.what == "comm" and s.group == "tp" and s.op == "reduce_scatter" and out:
            k = len(out)
            while k > 0 and joins(out[k - 1], out[-1]):
                k -= 1
            if k < len(out):
                run = out[k:]
                del out[k:]
                out.append(_overlapped(s, run))
                i += 1
                continue
        out.append(s)
        i += 1
    return out


def _overlapped(comm: Spec, run: list[Spec]) -> Spec:
    return Spec("tp_overlap", comm.name, comm.kind, nbytes=comm.nbytes, op=comm.op,
                group=comm.group, layer=run[0].layer, parts=tuple(run))

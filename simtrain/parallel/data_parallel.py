"""Data parallelism, ZeRO and FSDP: gradient reduction, parameter gathers, the optimizer.

DP composes with every other parallelism over the dp x cp group of each stage:
- zero 0 (DDP, ``ddp.py``): PyTorch reducer buckets of the chunk's gradients, all-reduced
  when the last microbatch's backward has produced them (no_sync before); expert gradients
  over the expert-data-parallel group (``expert.py``);
- zero 1, 2 (Megatron distributed optimizer / ZeRO): the same buckets reduce-scattered,
  optimizer on 1/N of the states, then an all-gather of the updated 16-bit parameters;
  with ``overlap_param_gather`` (Megatron ``--overlap-param-gather``) that all-gather is
  instead issued bucket by bucket (the reduce-scatter's buckets, in the parameter dtype) at
  the start of the step on the "dp ag" stream, in forward order, and the first
  microbatch's forward of each kernel waits for the buckets holding its parameters (at
  "layer" granularity each fused task waits for all its kernels' buckets, at "stage" the
  one forward task for every bucket of the chunk);
- zero 3 (FSDP): per unit, an all-gather of its parameters before its forward and again
  before its backward (resharded after forward), prefetched one unit ahead, and a
  reduce-scatter of its gradients after its backward, every microbatch; the FSDP2 knobs
  (``fsdp.py``) shard over an HSDP shard group with an all-reduce of each shard across
  the replicas, keep gathered units until their backward, prefetch further, and reduce
  in another dtype, and (``fsdp.copies``) run FSDP2's copy-out after each all-gather and
  gradient copy-in before each reduce-scatter as compute-stream kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from simtrain.parallel.ddp import DP_STREAM, Bucket, assign_buckets
from simtrain.parallel.emit import EXPERT_GRAD_GROUP, GRAD_GROUP, Emitter
from simtrain.parallel.expert import split_expert
from simtrain.parallel.fsdp import (
    FSDP_REPLICATE_GROUP,
    FSDP_SHARD_GROUP,
    copy_in_bytes,
    copy_out_bytes,
)
from simtrain.parallel.options import LowerOptions
from simtrain.parallel.shard import Unit
from simtrain.parallel.templates import GradScatter, Kernel, ParamGather, Template
from simtrain.workload.model import Op

FSDP_AG_STREAM = "dp ag"
HSDP_AR_STREAM = "dp ar"  # FSDP2's all-reduce stream: HSDP replicas' all-reduce


def with_fsdp(unit: Unit, body: list[Template], o: LowerOptions,
              duration: Callable[[Op], float], *, gather: bool = True,
              scatter: bool = False) -> list[Template]:
    """``body`` (the unit's templates of one phase) between the unit's FSDP all-gather (if
    ``gather``) and its gradient reduce-scatter (if ``scatter``); ``body`` alone without
    sharded parameters. With ``o.fsdp_copies`` (FSDP2) the all-gather's copy-out follows
    it and the gradients' copy-in precedes the reduce-scatter, as kernels timed by
    ``duration``."""
    numel = sum(p.numel for p in unit.params)
    if not (o.fsdp and numel):
        return body
    copies = o.fsdp_copies
    kind = next((t.kind for t in body if isinstance(t, Kernel)), "forward")
    out: list[Template] = []
    if gather:
        out.append(ParamGather(f"fsdp ag {unit.name}", numel * o.dtype_bytes, unit.name,
                               o.fsdp_prefetch, not o.reshard_after_forward))
        if copies:
            out.append(_copy(f"{unit.name}.fsdp_copy_out", kind, unit.layer,
                             copy_out_bytes(numel, o.dtype_bytes), duration))
    out += body
    if scatter:
        if copies:
            out.append(_copy(f"{unit.name}.fsdp_copy_in", "backward", unit.layer,
                             copy_in_bytes(numel, o.dtype_bytes, o.fsdp_reduce_bytes),
                             duration))
        out.append(GradScatter(f"fsdp rs {unit.name}", numel * o.fsdp_reduce_bytes,
                               unit.name, o.fsdp_reduce_dtype))
    return out


def _copy(name: str, kind: str, layer: int, nbytes: float,
          duration: Callable[[Op], float]) -> Kernel:
    """A memory-bound FSDP2 copy kernel of ``nbytes`` HBM traffic on the compute stream."""
    return Kernel(name, kind, duration(Op(name, "elementwise", 0.0, nbytes, None, (), 0.0)),
                  layer=layer)


def emit_param_gather(em: Emitter, stage: int, t: ParamGather, meta: dict[str, Any],
                      unit_starts: dict[int, list[list[int]]]) -> None:
    """FSDP all-gather of a unit over its shard group, prefetched: issued once the unit
    ``t.prefetch`` units before it started (``unit_starts``: each rank's frontier at every
    unit start of this step; 0: at its own start). Skipped where the unit is still
    gathered (``t.keep``: not resharded since its forward)."""
    back = t.prefetch + 1
    st = em.state
    for r in em.stage_ranks[stage]:
        unit_starts[r].append(em.dep(r))
    for grp in em.groups(stage, FSDP_SHARD_GROUP):
        local = [r for r in grp if r in em.simulated]
        if len(grp) == 1 or (t.keep and all((r, t.unit) in st.unsharded for r in local)):
            continue
        deps = sorted({d for r in grp if len(unit_starts[r]) >= back
                       for d in unit_starts[r][-back]})
        tid = em.coll("all_gather", grp, t.nbytes, t.name, kind="dp_comm",
                      stream=FSDP_AG_STREAM, deps=deps, meta=meta)
        for r in grp:
            st.frontier[r] = [*em.dep(r), tid]
            if t.keep:
                st.unsharded.add((r, t.unit))


def emit_grad_scatter(em: Emitter, stage: int, t: GradScatter, meta: dict[str, Any]) -> None:
    """FSDP reduce-scatter of a unit's gradients over its shard group, after its backward,
    on the DP stream; under HSDP then an all-reduce of each shard (1/N of the bytes) across
    the replicas holding it, on its own stream. The unit is resharded."""
    st = em.state
    m = meta if t.dtype is None else {**meta, "dtype": t.dtype}
    scattered: dict[int, int] = {}
    for grp in em.groups(stage, FSDP_SHARD_GROUP):
        for r in grp:
            st.unsharded.discard((r, t.unit))
        if len(grp) == 1:
            continue
        tid = em.coll("reduce_scatter", grp, t.nbytes, t.name, kind="dp_comm",
                      stream=DP_STREAM, deps=em.group_deps(grp), meta=m)
        for r in grp:
            st.reductions[r].append(tid)
            scattered[r] = tid
    shard = em.dims.fsdp_shard_size
    for grp in em.groups(stage, FSDP_REPLICATE_GROUP):
        if len(grp) == 1:
            continue
        # After the members' reduce-scatters (shard_size 1: after their backward).
        deps = (sorted({scattered[r] for r in grp if r in scattered}) if scattered
                else em.group_deps(grp))
        tid = em.coll("all_reduce", grp, t.nbytes / shard, f"hsdp ar {t.unit}",
                      kind="dp_comm", stream=HSDP_AR_STREAM, deps=deps, meta=m)
        for r in grp:
            st.reductions[r].append(tid)


def buckets(units: Sequence[Unit], o: LowerOptions) -> list[tuple[str, list[Bucket]]]:
    """A chunk's gradient buckets per reduction group kind: dense parameters over the
    data-parallel group ("grad"), expert parameters over the expert-data-parallel one."""
    dense, expert = split_expert(p for u in units for p in u.params)
    return [(kind, assign_buckets(plist, o.grad_bytes_per_element, o.first_bucket_bytes,
                                  o.bucket_cap_bytes))
            for kind, plist in ((GRAD_GROUP, dense), (EXPERT_GRAD_GROUP, expert)) if plist]


def reduce_gradients(em: Emitter, stage: int, chunk: int, units: Sequence[Unit],
                     o: LowerOptions) -> None:
    """Bucketed DP gradient reduction of one chunk after its last microbatch's backward."""
    d, st = em.dims, em.state
    if d.zero == 3:
        return
    op = "all_reduce" if d.zero == 0 else "reduce_scatter"
    for kind, bucket_list in buckets(units, o):
        for grp in em.groups(stage, kind):
            if len(grp) == 1:
                continue
            for b in bucket_list:
                if o.overlap:  # the tasks producing the bucket's gradients on the group
                    ready = st.grad_ready.tasks(grp, [p.name for p in b.params])
                    deps = sorted(t for t in ready if t is not None)
                else:
                    deps = em.group_deps(grp)
                name = f"ddp bucket {b.index}" if d.zero == 0 else f"zero rs {b.index}"
                if kind == EXPERT_GRAD_GROUP:
                    name = "expert " + name
                tid = em.coll(op, grp, b.nbytes, name, kind="dp_comm", stream=DP_STREAM,
                              deps=deps, meta={"bucket": b.index, "params": len(b.params),
                                               "chunk": chunk})
                for r in grp:
                    st.reductions[r].append(tid)


def grad_shard_bytes(units: Sequence[Unit], o: LowerOptions) -> float:
    """Bytes of a chunk's gradients one rank holds after its DP reduction: all of them
    under DDP, its 1/(dp·cp) shard (experts: 1/(dp/ep·cp)) from ZeRO-1 on."""
    d = o.dims
    dense, expert = split_expert(p for u in units for p in u.params)
    shard = d.dp * d.cp if d.zero >= 1 else 1
    expert_shard = d.dp // d.ep * d.cp if d.zero >= 1 else 1
    return o.grad_bytes_per_element * (sum(p.numel for p in dense) / shard
                                       + sum(p.numel for p in expert) / expert_shard)


def gather_params(em: Emitter, stage: int, chunks: Sequence[Sequence[Unit]],
                  o: LowerOptions) -> None:
    """``overlap_param_gather``: at the start of the step, all-gather the (previous step's)
    updated parameters of every chunk of ``stage``, one all-gather per gradient bucket, in
    forward order on the "dp ag" stream (the first forward's kernels wait for them)."""
    for chunk, units in enumerate(chunks):
        pos = {p.name: i for i, p in enumerate(p for u in units for p in u.params)}
        # Forward order: by the first-registered parameter of the bucket.
        todo = [(pos[b.params[-1].name], kind, b)
                for kind, bucket_list in buckets(units, o) for b in bucket_list]
        for _, kind, b in sorted(todo, key=lambda x: x[0]):
            name = f"zero param ag {b.index}"
            if kind == EXPERT_GRAD_GROUP:
                name = "expert " + name
            nbytes = sum(p.numel for p in b.params) * o.dtype_bytes
            for grp in em.groups(stage, kind):
                if len(grp) == 1:
                    continue
                tid = em.coll("all_gather", grp, nbytes, name, kind="dp_comm",
                              stream=FSDP_AG_STREAM, deps=[],
                              meta={"bucket": b.index, "params": len(b.params),
                                    "chunk": chunk})
                for r in grp:
                    for p in b.params:
                        em.state.param_ag[(r, p.name)] = tid


def optimizer(em: Emitter, stage: int, chunks: Sequence[Sequence[Unit]],
              o: LowerOptions) -> None:
    """Optimizer step on each rank of ``stage`` (after its reductions) as its real kernels
    (``LowerOptions.optimizer_step``: multi-tensor-apply over the local shard), then the
    ZeRO-1/2 all-gather of the updated parameters."""
    d, g, st = em.dims, em.graph, em.state
    numels = [p.numel for chunk in chunks for u in chunk for p in u.params]
    numel = sum(numels)
    shard = (d.fsdp_shard_size if d.zero == 3 else d.dp * d.cp) if d.zero >= 1 else 1
    meta: dict[str, int] = {}
    if o.optimizer_step is not None:
        step = o.optimizer_step(numels, shard)
        seconds, nbytes, meta = step.seconds, step.nbytes, {"kernels": step.launches}
    else:  # one HBM-bound pass over the optimizer state (hand-built lowerings in tests)
        op = Op("optimizer.step", "elementwise", 0.0,
                numel * o.optimizer_bytes_per_param / shard, None, (), 0.0)
        seconds, nbytes = em.duration(op), op.bytes
    for r in em.stage_ranks[stage]:
        # The DP stream is FIFO: waiting for its last reduction waits for all of them.
        deps = em.dep(r) + st.reductions.get(r, [])[-1:]
        st.frontier[r] = [g.compute(r, "optimizer.step", seconds, kind="optimizer",
                                    nbytes=nbytes, deps=deps, meta=meta)]
    if d.zero in (1, 2) and shard > 1 and not o.overlap_param_gather:
        for grp in em.groups(stage, GRAD_GROUP):
            em.coll("all_gather", grp, numel * o.dtype_bytes, "zero param all-gather",
                    kind="dp_comm", stream=DP_STREAM, deps=em.group_deps(grp))

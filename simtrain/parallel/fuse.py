"""Task granularity: fuse a pipeline step's task templates into fewer, larger tasks.

"op" keeps one task per kernel; "layer" fuses consecutive kernels of one layer between two
collectives into one task (durations and FLOPs add up, the collectives stay as they are);
"stage" fuses each layer's compute of one pipeline step into one task and aggregates the
layer's TP/CP/EP collectives per (group, op) after it (FSDP gathers and scatters stay per
unit, in place; overlapped TP collectives stay overlapped with the whole layer). Coarse but
cheap, for 10k+ GPUs; the layers stay apart so gradient buckets still overlap the
backward bucket by bucket. Its costs: alpha terms are paid once per aggregate instead of
per collective, a layer's non-overlapped collectives run after all its compute, and ring
attention becomes an exposed all-gather of the K,V blocks.

A ``TPOverlap`` template (``parallelism.tp_comm_overlap``: a TP all-gather or
reduce-scatter pipelined with its GEMM run, see ``tensor.py``) is a barrier at "layer"
granularity: kernels before and after it still fuse, not across it. At "stage"
granularity a layer's overlapped collectives become one all-gather of their bytes
pipelined with the layer's whole compute task (the same chunked pipeline, ``tensor.py``).
"""

from __future__ import annotations

from typing import Any

from simtrain.parallel.templates import (
    Collective,
    GradScatter,
    Kernel,
    ParamGather,
    RingAttention,
    Template,
    TPOverlap,
    unhandled,
)

GRANULARITIES = ("op", "layer", "stage")
Aggregate = Collective | ParamGather | GradScatter


def fuse(templates: list[Template], granularity: str, phase_kind: str) -> list[Template]:
    """Fuse one pipeline step's templates to ``granularity`` (op, layer, stage)."""
    if granularity == "op":
        return templates
    if granularity == "layer":
        out: list[Template] = []
        run: list[Kernel] = []  # consecutive kernels of one kind and layer
        for t in templates:
            if isinstance(t, Kernel) and run and t.kind == run[0].kind and t.layer == run[0].layer:
                run.append(t)
                continue
            if run:
                out.append(_fused(run))
                run = []
            if isinstance(t, Kernel):
                run.append(t)
            else:
                out.append(t)
        if run:
            out.append(_fused(run))
        return out
    assert granularity == "stage", f"unknown granularity {granularity!r}"
    return _stage(templates, phase_kind)


def _stage(templates: list[Template], phase_kind: str) -> list[Template]:
    """One compute task per layer, its collectives aggregated per (group, op) after it
    (FSDP gathers and scatters in place); sums run in template order.

    Layers stay apart because a layer's gradients become ready when its backward ends:
    DDP / ZeRO buckets then launch bucket by bucket under the rest of the backward, and
    overlapped parameter all-gathers gate each layer's first forward, as at "layer"
    granularity. A layer's overlapped TP collectives (``TPOverlap``) become one TP
    all-gather of their summed bytes pipelined with the whole layer (an all-gather and a
    reduce-scatter of n bytes cost the same on a ring), so TP overlap is kept at layer
    resolution. Ring attention becomes an aggregated K,V all-gather.
    """
    out: list[Template] = []
    run: list[Kernel] = []  # the current layer's kernels
    post: dict[tuple[str, ...], list[Any]] = {}  # key -> [first template, bytes]
    overlapped: list[Collective] = []  # the layer's TP collectives run beside its GEMMs

    def add(k: Kernel) -> None:
        if run and k.layer != run[-1].layer:
            flush()
        run.append(k)

    def flush() -> None:
        if run:
            task = _layer_task(run, phase_kind)
            if overlapped:
                c = overlapped[0]
                comm = Collective(f"{c.group} overlapped {task.name}", c.kind, "all_gather",
                                  c.group, sum(o.nbytes for o in overlapped))
                out.append(TPOverlap(comm, (task,)))
            else:
                out.append(task)
            out.extend(_aggregate(*v) for v in post.values())
        run.clear()
        post.clear()
        overlapped.clear()

    for t in templates:
        match t:
            case Kernel():
                add(t)
            case TPOverlap(comm=comm, run=gemms):
                for part in gemms:
                    add(part)
                overlapped.append(comm)
            case RingAttention():
                add(Kernel(t.name, t.kind, base=t.base * t.steps, flops=t.flops * t.steps,
                           layer=t.layer, kernels=t.steps))
                ring = Collective("", "cp_comm", "all_gather", "cp", 0.0)
                _accumulate(post, ("comm", "cp", "all_gather"), ring, t.nbytes * t.steps)
            case Collective():
                _accumulate(post, ("comm", t.group, t.op), t, t.nbytes)
            case GradScatter() | ParamGather():  # FSDP units keep their own collectives
                flush()
                out.append(t)
            case _:
                raise unhandled(t)
    flush()
    return out


def _layer_task(run: list[Kernel], phase_kind: str) -> Kernel:
    """The kernels of one layer as one ``phase_kind`` task named after its first and last."""
    base = expert = flops = expert_flops = 0.0
    kernels = 0
    params: list[str] = []
    reads: list[str] = []
    for k in run:
        kernels += k.kernels
        base += k.base
        expert += k.expert
        flops += k.flops
        expert_flops += k.expert_flops
        params.extend(k.params)
        reads.extend(k.reads)
    return Kernel(f"{phase_kind} {run[0].name}..{run[-1].name}", phase_kind, base=base,
                  expert=expert, flops=flops, expert_flops=expert_flops, layer=run[0].layer,
                  params=tuple(params), reads=tuple(reads), kernels=kernels)


def _fused(run: list[Kernel]) -> Kernel:
    """One kernel for ``run``, summed in order; named after its layer (each merge drops the
    last component of a layer kernel's name, as merging pairwise would)."""
    first = run[0]
    if len(run) == 1:
        return first
    name = first.name
    base, expert, flops, expert_flops = first.base, first.expert, first.flops, first.expert_flops
    params, reads, gemm, kernels = first.params, first.reads, first.gemm, first.kernels
    for k in run[1:]:
        if first.layer >= 0:
            name = name.rsplit(".", 1)[0]
        base += k.base
        expert += k.expert
        flops += k.flops
        expert_flops += k.expert_flops
        params += k.params
        reads += k.reads
        gemm = gemm and k.gemm
        kernels += k.kernels
    return Kernel(name, first.kind, base, expert, flops, expert_flops, first.layer, params,
                  reads, gemm, kernels)


def _accumulate(target: dict[tuple[str, ...], list[Any]], key: tuple[str, ...],
                t: Aggregate, nbytes: float) -> None:
    if key in target:
        target[key][1] += nbytes
    else:
        target[key] = [t, nbytes]


def _aggregate(t: Aggregate, nbytes: float) -> Aggregate:
    """The aggregate named after its (group, op), of the summed bytes, kind of the first."""
    match t:
        case Collective():
            return Collective(f"{t.group} {t.op}", t.kind, t.op, t.group, nbytes)
        case ParamGather():
            return ParamGather("dp all_gather", nbytes)
        case GradScatter():
            return GradScatter("dp reduce_scatter", nbytes)
        case _:
            raise unhandled(t)

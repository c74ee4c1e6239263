"""Task granularity: fuse a pipeline step's task templates into fewer, larger tasks.

"op" keeps one task per kernel; "layer" fuses consecutive kernels of one layer between two
collectives into one task (durations and FLOPs add up, the collectives stay as they are);
"stage" fuses all compute of one pipeline step into one task and aggregates its
collectives per (group, op) after it (FSDP all-gathers before it). Coarse but cheap, for
10k+ GPUs; its costs: alpha terms are paid once per aggregate instead of per collective,
and ring attention becomes an exposed all-gather of the K,V blocks.

A ``TPOverlap`` template (``parallelism.tp_comm_overlap``: a TP all-gather or
reduce-scatter pipelined with its GEMM run, see ``tensor.py``) is a barrier at "layer"
granularity: kernels before and after it still fuse, not across it. At "stage"
granularity it degrades to the non-overlapped behaviour: its GEMMs join the step's compute
task and its collective the aggregated TP collective after it (exposed, as without the
option).
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
    # One compute task, then the collectives aggregated per (group, op); sums run in
    # template order.
    base = expert = flops = expert_flops = 0.0
    kernels = 0
    params: list[str] = []
    reads: list[str] = []
    pre: dict[tuple[str, ...], list[Any]] = {}  # key -> [first template, bytes]
    post: dict[tuple[str, ...], list[Any]] = {}

    def add(k: Kernel) -> None:
        nonlocal base, expert, flops, expert_flops, kernels
        kernels += k.kernels
        base += k.base
        expert += k.expert
        flops += k.flops
        expert_flops += k.expert_flops
        params.extend(k.params)
        reads.extend(k.reads)

    for t in templates:
        match t:
            case Kernel():
                add(t)
            case TPOverlap(comm=comm, run=gemms):  # degrade: GEMMs into compute, comm after
                for part in gemms:
                    add(part)
                _accumulate(post, ("comm", comm.group, comm.op), comm, comm.nbytes)
            case RingAttention():
                add(Kernel("", t.kind, base=t.base * t.steps, flops=t.flops * t.steps,
                           kernels=t.steps))
                ring = Collective("", "cp_comm", "all_gather", "cp", 0.0)
                _accumulate(post, ("comm", "cp", "all_gather"), ring, t.nbytes * t.steps)
            case Collective():
                _accumulate(post, ("comm", t.group, t.op), t, t.nbytes)
            case GradScatter():
                _accumulate(post, ("fsdp rs",), t, t.nbytes)
            case ParamGather():
                _accumulate(pre, ("fsdp ag",), t, t.nbytes)
            case _:
                raise unhandled(t)
    first = templates[0].name if templates else ""
    last = templates[-1].name if templates else ""
    compute = Kernel(f"{phase_kind} {first}..{last}", phase_kind, base=base, expert=expert,
                     flops=flops, expert_flops=expert_flops, params=tuple(params),
                     reads=tuple(reads), kernels=kernels)
    return [*(_aggregate(*v) for v in pre.values()), compute,
            *(_aggregate(*v) for v in post.values())]


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

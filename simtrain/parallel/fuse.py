"""Task granularity: fuse a pipeline step's task templates into fewer, larger tasks.

"op" keeps one task per kernel; "layer" fuses consecutive kernels of one layer between two
collectives into one task (durations and FLOPs add up, the collectives stay as they are);
"stage" fuses all compute of one pipeline step into one task and aggregates its
collectives per (group, op) after it (FSDP all-gathers before it). Coarse but cheap, for
10k+ GPUs; its costs: alpha terms are paid once per aggregate instead of per collective,
and ring attention becomes an exposed all-gather of the K,V blocks.

A "tp_overlap" template (``parallelism.tp_comm_overlap``: a TP all-gather or
reduce-scatter pipelined with its GEMM run, see ``lower.py``) is a barrier at "layer"
granularity: kernels before and after it still fuse, not across it. At "stage"
granularity it degrades to the non-overlapped behaviour: its GEMMs join the step's compute
task and its collective the aggregated TP collective after it (exposed, as without the
option).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Spec:
    """A rank-independent task template; compute time = base + expert x routing load."""

    what: str  # "compute", "comm", "ring", "fsdp_ag", "fsdp_rs", "tp_overlap"
    name: str
    kind: str
    base: float = 0.0
    expert: float = 0.0
    flops: float = 0.0
    expert_flops: float = 0.0
    nbytes: float = 0.0
    op: str = ""
    group: str = ""
    steps: int = 0
    layer: int = -1
    params: tuple[str, ...] = ()
    # Forward parameters the kernel reads (ZeRO param all-gather waits; not grad-ready).
    reads: tuple[str, ...] = ()
    gemm: bool = False  # a GEMM kernel (TP comm overlap pipelines GEMM runs)
    kernels: int = 1  # kernels the template stands for (fused: their sum; host issue cost)
    # "tp_overlap": the GEMM run (compute templates) pipelined with this collective.
    parts: tuple[Spec, ...] = ()


def fuse(specs: list[Spec], granularity: str, phase_kind: str) -> list[Spec]:
    """Fuse one pipeline step's task templates to ``granularity`` (op, layer, stage)."""
    g = granularity
    if g == "op":
        return specs
    if g == "layer":
        out: list[Spec] = []
        for s in specs:
            prev = out[-1] if out else None
            if (prev is not None and s.what == prev.what == "compute"
                    and s.kind == prev.kind and s.layer == prev.layer):
                out[-1] = _merge(prev, s, _layer_name(prev))
            else:
                out.append(s)
        return out
    # "stage": one compute task, then the collectives aggregated per (group, op).
    compute = Spec("compute", "", phase_kind, kernels=0)
    pre: dict[tuple[str, str, str], Spec] = {}
    post: dict[tuple[str, str, str], Spec] = {}
    for s in specs:
        if s.what == "compute":
            compute = _merge(compute, s, "")
        elif s.what == "tp_overlap":  # degrade: GEMMs into compute, collective after it
            for part in s.parts:
                compute = _merge(compute, part, "")
            _accumulate(post, ("comm", s.group, s.op), Spec("comm", s.name, s.kind,
                                                             nbytes=s.nbytes, op=s.op,
                                                             group=s.group))
        elif s.what == "ring":
            compute = _merge(compute, Spec("compute", "", s.kind, base=s.base * s.steps,
                                           flops=s.flops * s.steps, kernels=s.steps), "")
            key = ("comm", "cp", "all_gather")
            _accumulate(post, key, Spec("comm", "cp ring", "cp_comm",
                                        nbytes=s.nbytes * s.steps, op="all_gather",
                                        group="cp"))
        else:
            target = pre if s.what == "fsdp_ag" else post
            _accumulate(target, (s.what, s.group, s.op), s)
    first, last = specs[0].name if specs else "", specs[-1].name if specs else ""
    compute.name = f"{phase_kind} {first}..{last}"
    return [*pre.values(), compute, *post.values()]


def _layer_name(s: Spec) -> str:
    return s.name.rsplit(".", 1)[0] if s.layer >= 0 else s.name


def _merge(a: Spec, b: Spec, name: str) -> Spec:
    return Spec("compute", name or a.name, a.kind, base=a.base + b.base,
                expert=a.expert + b.expert, flops=a.flops + b.flops,
                expert_flops=a.expert_flops + b.expert_flops, layer=a.layer,
                params=a.params + b.params, reads=a.reads + b.reads,
                gemm=a.gemm and b.gemm, kernels=a.kernels + b.kernels)


def _accumulate(target: dict[tuple[str, str, str], Spec], key: tuple[str, str, str],
                s: Spec) -> None:
    if key in target:
        t = target[key]
        target[key] = Spec(t.what, t.name, t.kind, nbytes=t.nbytes + s.nbytes, op=t.op,
                           group=t.group)
    else:
        target[key] = Spec(s.what, f"{s.group or 'dp'} {s.op}", s.kind, nbytes=s.nbytes,
                           op=s.op, group=s.group)

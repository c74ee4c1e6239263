"""The task templates of one pipeline step, from a stage's units (``shard.py``).

Forward: each unit's kernels and collectives in order. Backward: the units in reverse,
each unit's steps in reverse, every kernel replaced by its backward kernels
(``backward_ops``) and every collective by its backward op; recompute adds the forward
kernels again before they are needed: "full" recomputes every transformer layer's forward
before its backward, "selective" only core attention (Korthikanti et al. 2022), "op" what
torchtitan's per-op checkpointing does not save (``op_checkpoint``); a kernel of a module
in ``parallelism.recompute_modules`` (``Compute.recompute``) runs again before its own
backward, whatever the mode. A
zero-bubble schedule splits the backward: B keeps recompute, collectives and the
input-gradient kernels, W the weight-gradient kernels (``Op.grad``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from simtrain.parallel.context import ring_backward, ring_forward
from simtrain.parallel.op_checkpoint import recomputed_steps
from simtrain.parallel.shard import Comm, Compute, Ring, Unit
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
from simtrain.workload.fp8 import time_key
from simtrain.workload.model import Op, backward_ops

Duration = Callable[[Op], float]
BackwardPart = Literal["all", "input", "weight"]


def _reverse(route: str) -> str:
    """The backward of an EP all-to-all moves the gradients the other way."""
    return {"to_experts": "from_experts", "from_experts": "to_experts"}.get(route, route)


def is_core_attention(op: Op) -> bool:
    """Whether ``op`` belongs to core attention (recomputed under selective recompute)."""
    return op.role == "core_attention"


def kernel(op: Op, kind: str, expert: bool, layer: int, duration: Duration,
           owns: bool = True, linears: int = 1) -> Kernel:
    """The template of ``op``; ``owns``: its parameters' gradients are produced here;
    ``linears``: the separate linears of the forward GEMM a backward GEMM belongs to."""
    t = duration(op)
    names = tuple(p.name for p in op.params)
    # Positional: templates are built for every kernel of a stage (frozen, so not cheap).
    if expert:
        return Kernel(op.name, kind, 0.0, t, 0.0, op.flops, layer, names if owns else (),
                      names if kind == "forward" else (), op.kind == "gemm", op.launches,
                      op.grad, linears)
    return Kernel(op.name, kind, t, 0.0, op.flops, 0.0, layer, names if owns else (),
                  names if kind == "forward" else (), op.kind == "gemm", op.launches, op.grad,
                  linears)


def forward(unit: Unit, kind: str, cp: int, duration: Duration) -> list[Template]:
    """``unit``'s forward templates (``kind`` "recompute" for its recomputation). ``cp``
    is the CP degree; ring attention takes its block count from each ``Ring``."""
    out: list[Template] = []
    for step in unit.steps:
        match step:
            case Compute():
                out.append(kernel(step.op, kind, step.expert, unit.layer, duration, False))
            case Comm():
                if step.fwd:
                    out.append(Collective(step.name, step.kind, step.fwd, step.group,
                                          step.nbytes, unit.layer, step.route))
            case Ring():
                out.append(ring_forward(step, kind, unit.layer, duration))
            case _:
                raise unhandled(step)
    return out


def backward(unit: Unit, recompute: str, cp: int, duration: Duration,
             part: BackwardPart = "all", attention_saved: bool = True) -> list[Template]:
    """``unit``'s backward templates, with what ``recompute`` recomputes before them.

    ``part``: "all" (the whole backward), "input" (zero-bubble B: everything but the
    weight-gradient kernels) or "weight" (zero-bubble W: only those). ``attention_saved``:
    whether per-op checkpointing keeps the fused attention's output (``op_checkpoint``).
    """
    out: list[Template] = []
    if part == "weight":
        for step in reversed(unit.steps):
            if isinstance(step, Compute):
                out += [kernel(bop, "backward", step.expert, unit.layer, duration)
                        for bop in backward_ops(step.op) if bop.grad == "weight"]
        return out
    keep_weight = part == "all"
    if recompute == "full" and unit.layer >= 0:
        out += forward(unit, "recompute", cp, duration)
    if recompute == "op" and unit.layer >= 0:
        redo = Unit(unit.name, recomputed_steps(unit.steps, attention_saved), unit.layer)
        out += forward(redo, "recompute", cp, duration)
    selective = recompute == "selective"
    for step in reversed(unit.steps):
        match step:
            case Compute():
                if step.recompute or (selective and is_core_attention(step.op)):
                    out.append(kernel(step.op, "recompute", False, unit.layer, duration,
                                      False))
                parts = len(step.op.parts) or 1
                for bop in backward_ops(step.op):
                    if keep_weight or bop.grad != "weight":
                        out.append(kernel(bop, "backward", step.expert, unit.layer, duration,
                                          linears=parts))
            case Comm():
                if step.bwd:
                    out.append(Collective(step.name + ".bwd", step.kind, step.bwd,
                                          step.group, step.backward_nbytes, unit.layer,
                                          _reverse(step.route)))
            case Ring():
                if selective:
                    out.append(ring_forward(step, "recompute", unit.layer, duration))
                out.append(ring_backward(step, unit.layer, duration))
            case _:
                raise unhandled(step)
    return out


# ---- compute accounting ------------------------------------------------------------------


def compute_seconds(templates: Sequence[Template]) -> float:
    """Seconds of compute the templates charge on a rank of mean routed-token load
    (expert load 1): kernels, ring attention blocks, the GEMM runs of TP overlaps."""
    total = 0.0
    for t in templates:
        match t:
            case Kernel():
                total += t.base + t.expert
            case RingAttention():
                total += t.base * t.steps
            case TPOverlap():
                total += sum(k.base + k.expert for k in t.run)
            case Collective() | ParamGather() | GradScatter():
                pass
            case _:
                raise unhandled(t)
    return total


def stage_compute_times(units: Sequence[Sequence[Sequence[Unit]]], *, cp: int, recompute: str,
                        op_time: Duration, attention_saved: bool = True
                        ) -> list[list[tuple[float, float]]]:
    """(forward, backward) seconds of compute per microbatch, per stage and model chunk.

    The sum of the lowering's own templates (``forward``, ``backward`` with ``recompute``)
    of ``units[stage][chunk]``: what the lowering charges on a rank's compute stream, at any
    granularity, with or without TP overlap or FSDP (they rearrange the same kernels),
    without communication, launch waits or the optimizer; expert kernels at mean load.
    """
    cache: dict[tuple[object, ...], float] = {}

    def duration(op: Op) -> float:
        key = time_key(op)
        if key not in cache:
            cache[key] = op_time(op)
        return cache[key]

    return [[(sum(compute_seconds(forward(u, "forward", cp, duration)) for u in chunk),
              sum(compute_seconds(backward(u, recompute, cp, duration,
                                           attention_saved=attention_saved)) for u in chunk))
             for chunk in chunks] for chunks in units]


def phase_costs(units: Sequence[Sequence[Sequence[Unit]]], *, cp: int, recompute: str,
                op_time: Duration, attention_saved: bool = True) -> tuple[float, float, float]:
    """Mean seconds of compute of a model chunk's F, B (input gradients, with what
    ``recompute`` recomputes) and W (weight gradients) per microbatch, over every (stage,
    chunk) of ``units``: what a costed pipeline schedule is built for."""
    cells = [chunk for chunks in units for chunk in chunks]
    sums = [0.0, 0.0, 0.0]
    for chunk in cells:
        for u in chunk:
            sums[0] += compute_seconds(forward(u, "forward", cp, op_time))
            sums[1] += compute_seconds(backward(u, recompute, cp, op_time, "input",
                                                attention_saved))
            sums[2] += compute_seconds(backward(u, recompute, cp, op_time, "weight"))
    n = max(len(cells), 1)
    return sums[0] / n, sums[1] / n, sums[2] / n

"""Data parallelism as PyTorch DDP does it: bucketed gradient all-reduce overlapping backward.

Gradients are grouped into buckets in reverse parameter-registration order (the order they
become ready in backward); the first bucket is capped at ``first_bucket_bytes`` (1 MiB) and
the rest at ``bucket_cap_bytes`` (25 MiB). A bucket's all-reduce is launched, in bucket
order, on the data-parallel communication stream once all its gradients are ready, so it
overlaps the rest of backward. With gradient accumulation only the last microbatch
all-reduces (``no_sync`` on the others). The optimizer step follows the last all-reduce.
Source: PyTorch torch/csrc/distributed/c10d/reducer.cpp, compute_bucket_assignment_by_size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from simtrain.engine.taskgraph import TaskGraph
from simtrain.workload.model import Layer, Op, Param, backward_ops

DP_STREAM = "dp"


@dataclass(frozen=True, slots=True)
class Bucket:
    """Gradients all-reduced together; ``nbytes`` in the gradient dtype."""

    index: int
    params: tuple[Param, ...]
    nbytes: float


def assign_buckets(
    params: Sequence[Param], bytes_per_element: float, first_cap: float, cap: float
) -> list[Bucket]:
    """Buckets over ``params`` given in registration order, as PyTorch's reducer builds them.

    Walks parameters in reverse registration order, adding each to the open bucket; a bucket
    closes as soon as its size reaches its limit (the first limit is ``first_cap``, every
    later one ``cap``). A parameter is never split, so buckets may exceed the cap.
    """
    buckets: list[Bucket] = []
    current: list[Param] = []
    size = 0.0
    limit = first_cap
    for param in reversed(params):
        current.append(param)
        size += param.numel * bytes_per_element
        if size >= limit:
            buckets.append(Bucket(len(buckets), tuple(current), size))
            current, size, limit = [], 0.0, cap
    if current:
        buckets.append(Bucket(len(buckets), tuple(current), size))
    return buckets


def registered_params(layers: Sequence[Layer]) -> list[Param]:
    """All parameters in registration (module) order."""
    return [p for layer in layers for op in layer.ops for p in op.params]


@dataclass(frozen=True)
class DDPPlan:
    """Everything the DDP lowering needs besides the graph."""

    ranks: tuple[int, ...]
    micro_batches: int
    grad_bytes_per_element: float
    first_bucket_bytes: float
    bucket_cap_bytes: float
    overlap: bool
    optimizer_op: Op


def lower_ddp(
    graph: TaskGraph,
    layers: Sequence[Layer],
    plan: DDPPlan,
    op_time: Callable[[Op], float],
) -> list[Bucket]:
    """Emit one DDP training step on every rank of ``plan.ranks``; returns the buckets."""
    buckets = assign_buckets(registered_params(layers), plan.grad_bytes_per_element,
                             plan.first_bucket_bytes, plan.bucket_cap_bytes)
    owner = {p.name: op.name for layer in layers for op in layer.ops for p in op.params}
    times: dict[tuple[object, ...], float] = {}

    def duration(op: Op) -> float:
        # Layers repeat: cost each distinct op shape once.
        key = (op.kind, op.flops, op.bytes, op.gemm_shape)
        if key not in times:
            times[key] = op_time(op)
        return times[key]

    grad_ready: dict[tuple[int, str], int] = {}  # (rank, op name) -> task id, last microbatch
    last_backward: dict[int, int] = {}
    for rank in plan.ranks:
        for mb in range(plan.micro_batches):
            last = mb == plan.micro_batches - 1
            for layer in layers:
                for op in layer.ops:
                    graph.compute(rank, op.name, duration(op), kind="forward", flops=op.flops,
                                  nbytes=op.bytes, meta={"microbatch": mb})
            for layer in reversed(layers):
                for op in reversed(layer.ops):
                    task = -1
                    for bop in backward_ops(op):
                        task = graph.compute(rank, bop.name, duration(bop), kind="backward",
                                             flops=bop.flops, nbytes=bop.bytes,
                                             meta={"microbatch": mb})
                    if last and op.params:
                        grad_ready[(rank, op.name)] = task
            last_backward[rank] = len(graph.tasks) - 1

    all_reduces = []
    for bucket in buckets:
        if plan.overlap:
            ops = {owner[p.name] for p in bucket.params}
            deps = sorted({grad_ready[(r, op)] for r in plan.ranks for op in ops})
        else:
            deps = [last_backward[r] for r in plan.ranks]
        all_reduces.append(graph.collective(
            "all_reduce", plan.ranks, bucket.nbytes, f"ddp bucket {bucket.index}",
            kind="dp_comm", stream=DP_STREAM, deps=deps,
            meta={"bucket": bucket.index, "params": len(bucket.params)},
        ))
    opt = plan.optimizer_op
    for rank in plan.ranks:
        graph.compute(rank, opt.name, duration(opt), kind="optimizer", flops=opt.flops,
                      nbytes=opt.bytes, deps=all_reduces)
    return buckets

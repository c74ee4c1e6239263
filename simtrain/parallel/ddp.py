"""Data parallelism as PyTorch DDP does it: bucketed gradient all-reduce overlapping backward.

Gradients are grouped into buckets in reverse parameter-registration order (the order they
become ready in backward); the first bucket is capped at ``first_bucket_bytes`` (1 MiB) and
the rest at ``bucket_cap_bytes`` (25 MiB). A bucket's all-reduce is launched, in bucket
order, on the data-parallel communication stream once all its gradients are ready, so it
overlaps the rest of backward. With gradient accumulation only the last microbatch
all-reduces (``no_sync`` on the others). The optimizer step follows the last all-reduce.
Source: PyTorch torch/csrc/distributed/c10d/reducer.cpp, compute_bucket_assignment_by_size.

The buckets are emitted by ``simtrain.parallel.lower`` over the data-parallel group of each
pipeline stage, composing DDP with TP, CP, PP and EP (and reduce-scattered under ZeRO).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simtrain.workload.model import Param

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

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

Megatron-Core's DDP (``distributed/param_and_grad_buffer.py``, ``Bucket.start_grad_sync``,
megatron-core 0.8.0 = commit 937571cf) runs two passes over a bucket's fp32 gradient
buffer on the compute stream, in the backward hook that completes the bucket, before its
collective (``prepass_bytes``): with ``check_for_nan_in_grad`` ``grad_data.norm(p=2)``
and ``assert not norm.isnan()`` (a device-to-host read: the host waits for the GPU), and,
unless ``average_in_collective``, ``grad_data *= gradient_scaling_factor`` (1/dp,
``distributed_data_parallel.py``). Megatron-LM's trainer turns the check on by default
(``--no-check-for-nan-in-loss-and-grad`` switches it off) and leaves
``--ddp-average-in-collective`` off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from simtrain.units import MiBCount
from simtrain.workload.model import Param

DP_STREAM = "dp"
# PyTorch DDP defaults, torch/csrc/distributed/c10d/reducer.hpp:
# kDefaultFirstBucketBytes = 1 MiB, kDefaultBucketBytesCap = 25 MiB.
DEFAULT_BUCKET_CAP_BYTES = 25 * 2**20
DEFAULT_FIRST_BUCKET_BYTES = 1 * 2**20


class DDPConfig(BaseModel):
    """PyTorch DistributedDataParallel gradient bucketing.

    ``bucket_cap_mb`` and ``first_bucket_mb`` are MiB as in PyTorch (a plain number), or a
    size string such as "25MB".
    """

    model_config = ConfigDict(extra="forbid")

    bucket_cap_mb: MiBCount = DEFAULT_BUCKET_CAP_BYTES
    first_bucket_mb: MiBCount = DEFAULT_FIRST_BUCKET_BYTES
    overlap: bool = Field(True, description="launch bucket all-reduces during backward")
    # Gradients are all-reduced in the parameters' dtype: fp32 for AMP training with fp32
    # master parameters (PyTorch DDP + autocast), bf16 when the model itself is bf16.
    grad_dtype: str = Field("fp32", pattern="^(fp32|bf16|fp16)$")
    # Megatron --overlap-param-gather (distributed optimizer, zero 1 or 2): the updated
    # parameters are all-gathered bucket by bucket (the gradient buckets, in the parameter
    # dtype) during the next forward instead of after the optimizer; each layer's first
    # forward waits for the buckets holding its parameters.
    overlap_param_gather: bool = Field(
        False, description="all-gather updated ZeRO-1/2 parameters per bucket during the "
        "first forward instead of after the optimizer (needs zero 1 or 2)")
    # Megatron-Core's passes over each bucket before its collective (module docstring):
    # the NaN check's L2 norm and host sync (Megatron-LM default on), and the 1/dp scaling
    # (on unless --ddp-average-in-collective). Off by default: PyTorch DDP does neither.
    check_for_nan_in_grad: bool = Field(
        False, description="Megatron-Core: L2 norm of each gradient bucket and a host sync "
        "on its NaN test before the bucket's collective")
    prescale: bool = Field(
        False, description="Megatron-Core: multiply each gradient bucket by 1/dp before its "
        "collective (average_in_collective off)")

    @property
    def bucket_cap_bytes(self) -> float:
        return self.bucket_cap_mb

    @property
    def first_bucket_bytes(self) -> float:
        return self.first_bucket_mb


def prepass_bytes(numel: int, grad_bytes: float, *, nan_check: bool,
                  prescale: bool) -> tuple[float, ...]:
    """HBM bytes of the compute-stream kernels Megatron-Core runs over a bucket of ``numel``
    gradients of ``grad_bytes`` each before its collective, in order: the NaN check's
    norm reads the bucket once (``numel·grad_bytes``), the 1/dp scaling reads and writes
    it (``2·numel·grad_bytes``). 40M fp32 gradients: 160 MB and 320 MB."""
    if numel < 0 or grad_bytes <= 0:
        raise ValueError(f"a bucket needs numel >= 0 and grad_bytes > 0, got {numel}, "
                         f"{grad_bytes}")
    return ((float(numel * grad_bytes),) if nan_check else ()) + (
        (2.0 * numel * grad_bytes,) if prescale else ())


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

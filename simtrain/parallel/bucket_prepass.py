"""Megatron-Core's passes over a gradient bucket before its collective, on the compute stream.

``Bucket.start_grad_sync`` (megatron-core 0.8.0, ``distributed/param_and_grad_buffer.py``)
runs in the backward hook of the parameter that completes a bucket, on the current
(compute) stream, before the bucket's reduce-scatter or all-reduce is issued: the NaN
check's norm and host sync, then the 1/dp scaling (``simtrain.parallel.ddp.prepass_bytes``
gives their bytes). So the bucket's collective waits for them and so does the rest of the
backward. ``PrepassWatch`` follows, per rank, which of a bucket's gradients of the last
microbatch have been produced and emits the passes right after the kernel producing the
last one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from simtrain.parallel.ddp import Bucket, DDPConfig, prepass_bytes
from simtrain.training import DTYPE_BYTES
from simtrain.workload.compute import ComputeConfig, GPULike, op_time
from simtrain.workload.ops import Op

if TYPE_CHECKING:
    from simtrain.parallel.emit import Emitter

BucketKey = tuple[str, int, int, int]  # (group kind, stage, chunk, bucket index)


@dataclass
class PrepassWatch:
    """The buckets of every (stage, chunk), their passes' seconds, and per rank the
    gradients each bucket still waits for."""

    members: dict[BucketKey, frozenset[str]]
    seconds: dict[BucketKey, float]
    bucket_of: dict[tuple[int, str], BucketKey]  # (stage, parameter) -> its bucket
    left: dict[tuple[int, BucketKey], set[str]] = field(default_factory=dict)

    @classmethod
    def build(cls, cells: Sequence[tuple[int, int, Sequence[tuple[str, list[Bucket]]]]],
              seconds: Callable[[int], float]) -> PrepassWatch:
        """From each (stage, chunk)'s buckets per group kind; ``seconds(numel)`` times the
        passes over a bucket of ``numel`` gradients."""
        members: dict[BucketKey, frozenset[str]] = {}
        secs: dict[BucketKey, float] = {}
        bucket_of: dict[tuple[int, str], BucketKey] = {}
        for stage, chunk, kinds in cells:
            for kind, bucket_list in kinds:
                for b in bucket_list:
                    key = (kind, stage, chunk, b.index)
                    members[key] = frozenset(p.name for p in b.params)
                    secs[key] = seconds(sum(p.numel for p in b.params))
                    for p in b.params:
                        bucket_of[(stage, p.name)] = key
        return cls(members, secs, bucket_of)

    def ready(self, em: Emitter, stage: int, ranks: Sequence[int], tids: Sequence[int],
              params: Sequence[str]) -> None:
        """``tids[i]`` produced ``params``' last-microbatch gradients on ``ranks[i]`` of
        ``stage``: emit the passes of every bucket this completes after it, and make them
        the rank's frontier and the bucket's readiness (its collective waits for them)."""
        done: dict[BucketKey, list[int]] = {}
        for r, tid in zip(ranks, tids, strict=True):
            for p in params:
                key = self.bucket_of.get((stage, p))
                if key is None:
                    continue
                left = self.left.get((r, key))
                if left is None:  # the bucket's first gradient on this rank
                    left = self.left[(r, key)] = set(self.members[key])
                left.discard(p)
                if not left:
                    del self.left[(r, key)]
                    done.setdefault(key, []).append(r)
                    assert em.state.frontier.get(r) == [tid], "passes follow their kernel"
        st = em.state
        for key, rs in done.items():
            kind, _, chunk, index = key
            first = em.graph.compute_each(
                rs, f"ddp bucket {index} prepass", [self.seconds[key]] * len(rs),
                kind="backward", deps=[st.frontier[r] for r in rs], flops=[0.0] * len(rs),
                meta={"bucket": index, "chunk": chunk, "group": kind})
            for tid, r in enumerate(rs, start=first):
                st.frontier[r] = [tid]
                for p in self.members[key]:
                    st.grad_ready[(r, p)] = tid


def prepass_timer(ddp: DDPConfig, compute: ComputeConfig, gpu: GPULike
                  ) -> Callable[[int], float] | None:
    """Seconds of the passes over a bucket of n gradients on ``gpu``: each kernel of
    ``prepass_bytes`` memory-bound (roofline plus launch), plus one kernel issue for the
    NaN check's host sync (the GPU idles until the host issues the scaling after the
    device-to-host read returns). None when ``ddp`` asks for neither pass."""
    if not (ddp.check_for_nan_in_grad or ddp.prescale):
        return None
    grad_bytes = DTYPE_BYTES[ddp.grad_dtype]
    sync = compute.host_kernel_issue if ddp.check_for_nan_in_grad else 0.0

    def seconds(numel: int) -> float:
        kernels = prepass_bytes(numel, grad_bytes, nan_check=ddp.check_for_nan_in_grad,
                                prescale=ddp.prescale)
        return sync + sum(op_time(Op("ddp.prepass", "elementwise", 0.0, b, None, (), 0.0),
                                  gpu, compute) for b in kernels)

    return seconds

"""The optimizer step as the kernels frameworks launch for it.

After the gradients are reduced, Megatron-LM and PyTorch run, per rank, on the parameters
(or the ZeRO shard of them) the rank owns:

1. the gradient norm for clipping: ``multi_tensor_l2norm`` over the gradients (reads
   ``grad_bytes`` per parameter);
2. the optimizer update: fused multi-tensor Adam (``torch.optim.Adam(fused=True)``, apex
   ``FusedAdam``, Transformer Engine ``FusedAdam``), HBM-bound, moving
   ``simtrain.training.optimizer_bytes_per_param`` bytes per parameter;
3. zeroing the gradient buffer for the next step (a memset of every local gradient,
   sharded or not: ``grad_bytes`` per local parameter).

Multi-tensor apply packs tensors into launches: each launch handles at most
``depth_to_max_tensors[depth - 1]`` tensors and ``depth_to_max_blocks`` chunks of
``CHUNK`` elements (PyTorch aten/src/ATen/native/cuda/MultiTensorApply.cuh: kChunkSize
65536, depth_to_max_tensors {110, 64, 48, 36, 30}, depth_to_max_blocks 320; apex's
multi_tensor_apply.cuh has the same limits). Adam's depth is 4 (grad, param, m, v); the
l2 norm's 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from simtrain.workload.host import issue_bound_makespan

CHUNK = 65536  # elements per block (kChunkSize)
MAX_TENSORS = (110, 64, 48, 36, 30)  # depth_to_max_tensors, depth 1..5
MAX_BLOCKS = 320  # depth_to_max_blocks
ADAM_DEPTH = 4
NORM_DEPTH = 1


def multi_tensor_launches(numels: Sequence[int], depth: int) -> int:
    """Kernel launches multi-tensor apply needs for tensors of ``numels`` elements.

    The packing loop of MultiTensorApply.cuh: tensors are added in order, each split into
    ⌈numel / CHUNK⌉ blocks; a launch is issued when the tensor list is full (at the end of
    a tensor), when the block list is full, or after the last block; a tensor cut by a
    full block list continues in the next launch.
    """
    if not 1 <= depth <= len(MAX_TENSORS):
        raise ValueError(f"multi-tensor depth must be 1..{len(MAX_TENSORS)}, got {depth}")
    max_tensors = MAX_TENSORS[depth - 1]
    tensors = [n for n in numels if n > 0]
    launches = tensors_in = blocks_in = 0
    for i, numel in enumerate(tensors):
        tensors_in += 1
        chunks = math.ceil(numel / CHUNK)
        for c in range(chunks):
            blocks_in += 1
            tensor_full = tensors_in == max_tensors and c == chunks - 1
            last = i == len(tensors) - 1 and c == chunks - 1
            if tensor_full or blocks_in == MAX_BLOCKS or last:
                launches += 1
                blocks_in = 0
                tensors_in = 0 if c == chunks - 1 else 1
    return launches


def shard_numels(numels: Sequence[int], shards: int) -> list[int]:
    """Elements of each tensor inside shard 0 of the flat buffer cut into ``shards`` equal
    contiguous ranges (Megatron's distributed optimizer, ZeRO-1/2)."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    if shards == 1:
        return list(numels)
    end = math.ceil(sum(numels) / shards)
    out, start = [], 0
    for n in numels:
        inside = min(start + n, end) - start
        if inside <= 0:
            break
        out.append(inside)
        start += n
    return out


def optimizer_kernels(numels: Sequence[int], shards: int, *, bytes_per_param: float,
                      grad_bytes: float) -> list[tuple[str, float, int]]:
    """(name, HBM bytes, launches) of the optimizer step's kernels on one rank.

    ``numels``: the rank's local parameter tensors; ``shards``: the ZeRO shard count of the
    optimizer states (1 without ZeRO). Gradient norm and Adam run on the owned shard, the
    gradient memset on every local gradient.
    """
    owned = shard_numels(numels, shards)
    n_owned, n_local = sum(owned), sum(numels)
    return [
        ("optimizer.grad_norm", n_owned * grad_bytes, multi_tensor_launches(owned, NORM_DEPTH)),
        ("optimizer.update", n_owned * bytes_per_param, multi_tensor_launches(owned, ADAM_DEPTH)),
        ("optimizer.zero_grad", n_local * grad_bytes, 1 if n_local else 0),
    ]


@dataclass(frozen=True)
class OptimizerStep:
    """The optimizer step of one rank as one task: seconds, kernel launches, HBM bytes."""

    seconds: float
    launches: int
    nbytes: float


def optimizer_step(numels: Sequence[int], shards: int, *, bytes_per_param: float,
                   grad_bytes: float, memory_time: Callable[[float], float],
                   kernel_issue_s: float) -> OptimizerStep:
    """The rank's optimizer kernels run back to back after the host-GPU sync.

    ``memory_time(nbytes)`` is one memory-bound kernel's seconds (roofline plus launch,
    ``simtrain.workload.compute``); a kernel's bytes are split evenly over its launches;
    the host issues each launch at ``kernel_issue_s`` (``issue_bound_makespan``).
    """
    durations: list[float] = []
    nbytes = 0.0
    for _name, kbytes, launches in optimizer_kernels(numels, shards,
                                                     bytes_per_param=bytes_per_param,
                                                     grad_bytes=grad_bytes):
        nbytes += kbytes
        durations += [memory_time(kbytes / launches)] * launches
    return OptimizerStep(issue_bound_makespan(durations, kernel_issue_s), len(durations),
                         nbytes)

"""The optimizer step as multi-tensor-apply kernels, with hand-counted launches."""

from __future__ import annotations

import pytest

from simtrain.workload.optimizer import (
    CHUNK,
    multi_tensor_launches,
    optimizer_kernels,
    optimizer_step,
    shard_numels,
)


def test_tensor_list_limit() -> None:
    # Depth 4 (Adam) takes 36 tensors per launch: 320 one-chunk tensors = 8·36 + 32 -> 9.
    assert multi_tensor_launches([CHUNK] * 320, 4) == 9
    # Depth 1 (l2 norm) takes 110: 110 tensors -> 1 launch, 111 -> 2.
    assert multi_tensor_launches([10] * 110, 1) == 1
    assert multi_tensor_launches([10] * 111, 1) == 2


def test_block_list_limit_cuts_a_tensor() -> None:
    # One tensor of 2·320·65536 + 1 elements = 641 chunks: launches at block 320, 640 and
    # after the last -> 3.
    assert multi_tensor_launches([2 * 320 * CHUNK + 1], 4) == 3
    assert multi_tensor_launches([], 4) == 0
    with pytest.raises(ValueError, match="depth"):
        multi_tensor_launches([1], 6)


def test_shard_is_a_contiguous_range() -> None:
    # 60 elements in 3 shards: shard 0 is [0, 20): all of the first tensor, half the second.
    assert shard_numels([10, 20, 30], 3) == [10, 10]
    assert shard_numels([10, 20, 30], 1) == [10, 20, 30]


def test_optimizer_kernels_and_step_by_hand() -> None:
    # 400 local params, 2 shards -> 200 owned ([100, 100]); 4 B gradients, 30 B Adam:
    # norm 200·4 = 800 B, update 200·30 = 6000 B, memset of every local grad 400·4 = 1600 B.
    kernels = optimizer_kernels([100, 300], 2, bytes_per_param=30.0, grad_bytes=4.0)
    assert kernels == [("optimizer.grad_norm", 800.0, 1), ("optimizer.update", 6000.0, 1),
                       ("optimizer.zero_grad", 1600.0, 1)]
    # A kernel takes bytes/1000 s and the host issues one per second after the sync:
    # 1 + 0.8 = 1.8; max(2, 1.8) + 6 = 8; max(3, 8) + 1.6 = 9.6.
    step = optimizer_step([100, 300], 2, bytes_per_param=30.0, grad_bytes=4.0,
                          memory_time=lambda b: b / 1000.0, kernel_issue_s=1.0)
    assert step.seconds == pytest.approx(9.6)
    assert step.launches == 3 and step.nbytes == 8400.0

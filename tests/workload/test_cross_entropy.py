"""The cross-entropy implementations' HBM traffic and saved bytes, derived by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simtrain.workload.cross_entropy import CROSS_ENTROPY_IMPLS, loss_op
from simtrain.workload.ops import backward_ops


def test_te_kernels_by_hand() -> None:
    # m = 4 tokens, v = 10 logits, bf16: E = 40. Forward: two reads and one in-place write of
    # the logits 3·2·40 = 240, targets read twice 2·8·4 = 64, row stats (3 fp32) written and
    # read 2·12·4 = 96: 400. Backward: scale in place 2·2·40 = 160 + the per-token loss
    # gradient 4·4 = 16: 176. Saves the gradient in the logits' buffer, 2·40 = 80.
    op = loss_op("loss", 4, 10, 2, "te")
    assert (op.bytes, op.backward_bytes, op.activation_bytes) == (400, 176, 80)
    (bwd,) = backward_ops(op)
    assert bwd.bytes == 176


def test_native_kernels_by_hand() -> None:
    # bf16, E = 40: forward cast + max (2 + 4), sub + exp (4 + 4), div (4 + 4) = 22 B per
    # logit, 880 + targets 32 = 912; backward scale + bf16 cast (4 + 2)·40 + 32 = 272; saves
    # the fp32 softmax 160 + targets 32 = 192. fp32 logits: no cast copy, 20·40 + 32 = 832.
    op = loss_op("loss", 4, 10, 2, "native")
    assert (op.bytes, op.backward_bytes, op.activation_bytes) == (912, 272, 192)
    assert loss_op("loss", 4, 10, 4, "native").bytes == 832


def test_unfused_is_ops_cross_entropy() -> None:
    # tests/workload/test_model.py derives it: 1,552 forward, 592 backward for this shape.
    op = loss_op("loss", 4, 10, 2)
    assert (op.bytes, op.backward_bytes) == (1552, 592)


def test_unknown_impl_is_an_error() -> None:
    assert set(CROSS_ENTROPY_IMPLS) == {"unfused", "native", "te"}  # the names accepted
    with pytest.raises(ValueError, match="unknown cross_entropy 'liger'"):
        loss_op("loss", 4, 10, 2, "liger")


@given(m=st.integers(1, 4096), v=st.integers(8, 200_000), dt=st.sampled_from([2, 4]))
def test_fusion_never_moves_more_bytes(m: int, v: int, dt: int) -> None:
    # Per token te adds 2·8 + 24 + 4 = 44 B against the others' 16, so it wins once its
    # per-logit saving covers 28 B: v >= 2 (bf16) or 5 (fp32); vocabularies are >= 8.
    ops = [loss_op("loss", m, v, dt, impl) for impl in ("unfused", "native", "te")]
    total = [op.bytes + (op.backward_bytes or 0.0) for op in ops]
    assert total[0] >= total[1] >= total[2]
    assert {op.flops for op in ops} == {ops[0].flops}  # the same arithmetic

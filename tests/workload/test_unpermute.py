"""The dispatcher's unpermute kernels, fused and Megatron-Core <= 0.9's (workload.unpermute)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simtrain import ScenarioError, load_scenario
from simtrain.workload.layers import Shard, block
from simtrain.workload.model import ModelConfig
from simtrain.workload.ops import backward_ops, elementwise
from simtrain.workload.unpermute import UNPERMUTE_IMPLS, unpermute_bytes, unpermute_op


def test_fused_bytes_by_hand():
    # top 2 of 4 tokens of width 8, bf16: E = 2·4·8 = 64 copies' values, T = 32 outputs.
    # Reads E, writes T: 2·96 = 192 B forward; backward twice that; nothing saved.
    assert unpermute_bytes("fused", 2, 4, 8, 2) == (192.0, 384.0, 0.0)


def test_scatter_sum_bytes_by_hand():
    # Same shapes, Megatron-Core 0.8/0.9. Forward: zeros writes 64, the scatter reads 64
    # and writes 64, the probability multiply reads 64 and writes 64, the top-k sum reads
    # 64 and writes 32: 416 values, 832 B. Backward: the multiply's input gradient reads
    # the 32-value gradient and writes 64; its probability gradient reads 32 + 64, writes
    # a 64-value product and reads it back for the sum over h; the scatter's gradient
    # reads and writes 64: 32 + 64 + 32 + 64 + 64 + 64 + 64 + 64 = 448 values, 896 B.
    # The multiply saves the 64 scattered values: 128 B.
    assert unpermute_bytes("scatter-sum", 2, 4, 8, 2) == (832.0, 896.0, 128.0)


def test_unknown_impl_is_refused():
    with pytest.raises(ValueError, match="unknown moe_unpermute 'index'"):
        unpermute_bytes("index", 2, 4, 8, 2)


@given(st.integers(1, 8), st.integers(1, 4096), st.integers(1, 8192), st.sampled_from([2, 4]))
def test_unfused_moves_more_and_both_scale_with_tokens(k, m, h, dt):
    fused = unpermute_bytes("fused", k, m, h, dt)
    unfused = unpermute_bytes("scatter-sum", k, m, h, dt)
    assert all(u >= f for u, f in zip(unfused, fused, strict=True))
    assert unpermute_bytes("scatter-sum", k, 2 * m, h, dt) == tuple(2 * x for x in unfused)


def test_fused_op_is_the_kernel_simtrain_always_charged():
    # The default must cost exactly what the plain elementwise unpermute did.
    old = elementwise("l.mlp.unpermute", 2 * 4 * 8, 4 * 8, 2.0 * 2, 2)
    new = unpermute_op("l.mlp.unpermute", "fused", 2, 4, 8, 2)
    (old_b,), (new_b,) = backward_ops(old), backward_ops(new)
    assert (new.flops, new.bytes, new.activation_bytes) == (old.flops, old.bytes, 0.0)
    assert (new_b.flops, new_b.bytes) == (old_b.flops, old_b.bytes)


def test_block_takes_the_shards_unpermute():
    cfg = ModelConfig.from_preset("tiny-moe", num_layers=1)
    # tiny-moe: h = 256, top 2; 64 tokens -> E = 128·256 = 32,768, T = 16,384 values.
    def unpermute(shard: Shard):
        ops = {getattr(i, "name", ""): i for i in block(cfg, 0, 1, 64, 2, shard).items}
        return ops["layers.0.mlp.unpermute"]

    unfused = unpermute(Shard(ep=2, unpermute="scatter-sum"))
    assert (unfused.bytes, unfused.activation_bytes) == (2 * (6 * 32_768 + 16_384),
                                                        2 * 32_768)
    assert unpermute(Shard(ep=2)).bytes == 2 * (32_768 + 16_384)


def _scenario(**par) -> dict:
    return {"cluster": {"preset": "dgx-h100", "nodes": 1},
            "model": {"preset": "tiny-moe"},
            "training": {"global_batch_size": 8, "micro_batch_size": 1, "seq_len": 128},
            "parallelism": par}


def test_scenario_field_names_the_impls():
    assert load_scenario(_scenario(ep=2, moe_unpermute="scatter-sum")).parallelism \
        .moe_unpermute == "scatter-sum"
    with pytest.raises(ScenarioError, match="unknown moe_unpermute 'unfused'; use one of "
                       + ", ".join(UNPERMUTE_IMPLS)):
        load_scenario(_scenario(moe_unpermute="unfused"))

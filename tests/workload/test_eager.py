"""Eager PyTorch norms, RoPE and SwiGLU (``model.elementwise: eager``), bytes by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simtrain.parallel.shard import Compute, ShardSpec, block_unit
from simtrain.workload.eager import (
    eager_rmsnorm_bytes,
    eager_rope_bytes,
    eager_swiglu_bytes,
)
from simtrain.workload.model import ModelConfig

LLAMA = {"family": "llama", "activation": "swiglu", "norm": "rmsnorm", "bias": False,
         "position_embedding": "rope", "dropout_masks": False, "vocab_size": 100,
         "max_seq_len": 64, "num_layers": 1, "hidden_size": 64, "num_heads": 4,
         "num_kv_heads": 2, "ffn_hidden_size": 128}


def test_bytes_per_element_by_hand():
    # bf16 RMSNorm: cast 2+4, pow 4+4, mean 4, mul 4+4, cast back 4+2, weight 2+2 = 36 B
    # per element; m = 10, h = 8: 36·80 + 2·8 (weight) = 2896.
    assert eager_rmsnorm_bytes(10, 8, 2) == 2896.0
    # RoPE: cast 2+4, complex multiply 4+4, cast back 4+2 = 20 B per element.
    assert eager_rope_bytes(100, 2) == 2000.0
    # silu(a)·b: silu 2+2, multiply 2+2+2 = 10 B per output element.
    assert eager_swiglu_bytes(100, 2) == 1000.0


def _bytes(elementwise: str) -> dict[str, float]:
    cfg = ModelConfig(**LLAMA, elementwise=elementwise)
    unit = block_unit(cfg, 0, 1, 16, 2, ShardSpec())
    return {s.op.name.removeprefix("layers.0."): s.op.bytes for s in unit.steps
            if isinstance(s, Compute)}


def test_eager_block_moves_more_bytes_only_in_norms_rope_and_swiglu():
    fused, eager = _bytes("fused"), _bytes("eager")
    m, h, f, rope = 16, 64, 128, 16 * (64 + 32)
    # fused RMSNorm: 2·(2·m·h) + 2·h + 4·m = 4096 + 128 + 64; eager: 36·m·h + 2·h.
    assert fused["input_norm"] == 4288.0
    assert eager["input_norm"] == 36 * m * h + 2 * h
    assert (fused["attn.rope"], eager["attn.rope"]) == (4.0 * rope, 20.0 * rope)
    assert (fused["mlp.act"], eager["mlp.act"]) == (6.0 * m * f, 10.0 * m * f)
    same = {k for k in fused if k not in ("input_norm", "post_attn_norm", "attn.rope",
                                          "mlp.act")}
    assert all(fused[k] == eager[k] for k in same)


@given(dt=st.sampled_from([2, 4]), m=st.integers(1, 64), h=st.integers(1, 64))
def test_eager_never_moves_fewer_bytes_than_one_fused_pass(dt, m, h):
    # A fused kernel reads and writes each element once: 2·dt bytes.
    assert eager_rmsnorm_bytes(m, h, dt) >= 2 * dt * m * h
    assert eager_rope_bytes(m * h, dt) >= 2 * dt * m * h
    assert eager_swiglu_bytes(m * h, dt) >= 3 * dt * m * h


def test_layernorm_and_gelu_stay_single_kernels():
    cfg = {**LLAMA, "norm": "layernorm", "activation": "gelu"}
    fused = block_unit(ModelConfig(**cfg), 0, 1, 16, 2, ShardSpec())
    eager = block_unit(ModelConfig(**cfg, elementwise="eager"), 0, 1, 16, 2, ShardSpec())
    by_name = {s.op.name: s.op.bytes for s in fused.steps if isinstance(s, Compute)}
    for s in eager.steps:
        if isinstance(s, Compute) and not s.op.name.endswith("rope"):
            assert s.op.bytes == pytest.approx(by_name[s.op.name])

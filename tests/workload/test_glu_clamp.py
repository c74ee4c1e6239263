"""GPT-OSS's GLU input clamp and Megatron-Core's eager expert fc2 bias (workload.glu_clamp)."""

from __future__ import annotations

import pytest

from simtrain import ScenarioError, load_scenario
from simtrain.workload.glu_clamp import clamp_bytes, expert_bias, expert_bias_bytes, glu_clamp
from simtrain.workload.layers import Shard, block
from simtrain.workload.memory import layer_activation_bytes
from simtrain.workload.model import ModelConfig, lower_model
from simtrain.workload.ops import backward_ops


def test_clamp_bytes_by_hand():
    # bf16 (dt = 2), 1,000 fc1-output values. Forward: gate and linear clamps read and
    # write each half (2·1000 bytes read, 2·1000 written), the cat reads and writes the
    # whole (2·1000 + 2·1000): 8,000. Backward per value: gate half where(self <= 7):
    # compare 2 + 1, where 1 + 2 + 2 = 8 B; linear half: two compares 2·3, logical_and
    # 3, where 5 = 14 B; the chunk's backward cat 2 + 2 = 4 B: (8 + 14) / 2 + 4 = 15 B.
    assert clamp_bytes(1000, 2) == (8000.0, 15000.0)


def test_expert_bias_bytes_by_hand():
    # bf16, 1,000 fc2-output values: b*p writes 2, t + bp reads 4 and writes 2, the cat
    # reads 2 and writes 2 = 12 B each; backward grad*p written (2 + 2 read) and summed
    # (2), grad*b the same: 12 B.
    assert expert_bias_bytes(1000, 2) == (12000.0, 12000.0)


def test_ops_carry_their_backward_bytes_and_role():
    clamp = glu_clamp("l.mlp.clamp", 1000, 2)
    (bwd,) = backward_ops(clamp)
    assert (clamp.bytes, bwd.bytes) == (8000.0, 15000.0)
    assert clamp.activation_bytes == 2000.0  # the clamp saves its bf16 input for the mask
    bias = expert_bias("l.mlp.fc2_bias", 1000, 2)
    (bbwd,) = backward_ops(bias)
    assert (bias.bytes, bbwd.bytes, bias.role) == (12000.0, 12000.0, "expert")


def _moe(**extra):
    return ModelConfig.from_preset("tiny-moe", num_layers=1, **extra)


def test_gpt_oss_style_expert_gets_clamp_and_bias_on_its_routed_copies():
    cfg = _moe(bias=True, activation_clamp=7.0)
    items = {getattr(i, "name", ""): i for i in block(cfg, 0, 1, 64, 2, Shard(ep=2)).items}
    # tiny-moe: h = 256, experts of 512 (SwiGLU fc1 1,024 wide), top 2 of 4 experts; 64
    # tokens -> 128 routed copies. Clamp over 128·1024 = 131,072 values: 8 B each =
    # 1,048,576 bytes forward; fc2 bias over 128·256 = 32,768 values: 12 B = 393,216.
    assert items["layers.0.mlp.clamp"].bytes == 1_048_576
    assert items["layers.0.mlp.clamp"].role == "expert"
    assert items["layers.0.mlp.fc2_bias"].bytes == 393_216
    names = list(items)
    at = names.index
    assert at("layers.0.mlp.fc1") < at("layers.0.mlp.clamp") < at("layers.0.mlp.act")
    assert at("layers.0.mlp.fc2") < at("layers.0.mlp.fc2_bias") < at("layers.0.mlp.combine")


def test_no_clamp_no_bias_no_ops_and_dense_mlp_clamps_too():
    plain = {op.name for layer in lower_model(_moe(), 1, 64) for op in layer.ops}
    assert not {"layers.0.mlp.clamp", "layers.0.mlp.fc2_bias"} & plain
    dense = ModelConfig.from_preset("tiny-moe", num_layers=1, num_experts=0,
                                    activation_clamp=7.0)
    ops = {op.name: op for layer in lower_model(dense, 1, 64) for op in layer.ops}
    # Dense fc1 of 2·512 over 64 tokens: 65,536 values, 8 B each forward.
    assert ops["layers.0.mlp.clamp"].bytes == 524_288
    assert "layers.0.mlp.fc2_bias" not in ops  # a dense fc2 fuses its bias


def test_clamp_adds_its_saved_input_to_the_activations():
    # tiny-moe, one sequence of 64 tokens: the saved unclamped fc1 output is 2 copies x
    # 1,024 values per token x 2 bytes x 64 tokens = 262,144 bytes more per layer.
    extra = (layer_activation_bytes(_moe(activation_clamp=7.0), 1, 64)
             - layer_activation_bytes(_moe(), 1, 64))
    assert extra == 262_144


def test_gpt_oss_preset_clamps_at_seven():
    assert ModelConfig.from_preset("gpt-oss-120b").activation_clamp == 7.0


def test_bad_clamp_is_a_one_line_error():
    with pytest.raises(ScenarioError, match="activation_clamp must be a positive number"):
        load_scenario({"cluster": {"preset": "dgx-h100", "nodes": 1},
                       "model": {"preset": "tiny-moe", "activation_clamp": 0},
                       "training": {"global_batch_size": 8, "micro_batch_size": 1,
                                    "seq_len": 128}})


def test_clamp_without_a_gated_activation_is_a_one_line_error():
    # it would otherwise be ignored: only a gated (swiglu) activation has the two inputs
    with pytest.raises(ScenarioError, match="activation_clamp clamps a gated activation"):
        load_scenario({"cluster": {"preset": "dgx-h100", "nodes": 1},
                       "model": {"preset": "tiny-moe", "activation": "gelu",
                                 "activation_clamp": 7},
                       "training": {"global_batch_size": 8, "micro_batch_size": 1,
                                    "seq_len": 128}})


def test_qk_norm_kernels_params_and_saved_bytes_by_hand():
    from simtrain.workload.model import num_parameters
    base = ModelConfig.from_preset("qwen3-30b-a3b", num_layers=1)
    assert base.qk_norm  # Qwen3 normalises each head's q and k (arXiv:2505.09388 Sec. 2)
    plain = ModelConfig.from_preset("qwen3-30b-a3b", num_layers=1, qk_norm=False)
    ops = {op.name: op for layer in lower_model(base, 1, 64) for op in layer.ops}
    # 64 tokens x 32 query heads = 2,048 rows of d = 128 (RMSNorm: read x and write y,
    # 2·2·2048·128 = 1,048,576 bytes, + the 128-wide weight 256 B, + fp32 rstd 4·2048 =
    # 8,192): 1,057,024. Keys: 64 x 4 heads = 256 rows: 131,072 + 256 + 1,024 = 132,352.
    assert ops["layers.0.attn.q_norm"].bytes == 1_057_024
    assert ops["layers.0.attn.k_norm"].bytes == 132_352
    assert num_parameters(base) - num_parameters(plain) == 2 * 128  # one weight each
    # Saved: q and k inputs 2·64·(4096 + 512) = 589,824 bytes, rstd 4·64·(32 + 4) = 9,216.
    extra = layer_activation_bytes(base, 1, 64) - layer_activation_bytes(plain, 1, 64)
    assert extra == 589_824 + 9_216

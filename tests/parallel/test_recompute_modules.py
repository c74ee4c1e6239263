"""Megatron-Core's MoE-module recompute (``parallelism.recompute_modules``): the kernels
re-run before the backward, the activations freed, and the plan's checks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from simtrain import ScenarioError, load_scenario
from simtrain.parallel.program import backward, compute_seconds
from simtrain.parallel.shard import ShardSpec, block_unit
from simtrain.workload.memory import layer_activation_bytes
from simtrain.workload.model import ModelConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import suite_sources_bridge  # noqa: E402  (benchmarks/ is a script folder, not a package)

MODULES = ("layernorm", "moe_act")


def _moe(**extra) -> ModelConfig:
    # tiny-moe: h = 256, experts of 512 (SwiGLU fc1 1,024 wide), top 2 of 4 experts.
    return ModelConfig.from_preset("tiny-moe", num_layers=1, activation_clamp=7.0, **extra)


def _recomputed(spec: ShardSpec, cfg: ModelConfig | None = None) -> list[str]:
    unit = block_unit(cfg or _moe(), 0, 1, 64, 2, spec)
    return [t.name for t in backward(unit, "none", 1, lambda op: 1.0)
            if getattr(t, "kind", "") == "recompute"]


def test_moe_act_and_layernorm_rerun_the_clamp_activation_and_pre_mlp_norm():
    # moe_act is TEGroupedMLP's bias_act_func (the clamp and the GLU); layernorm the MoE
    # layer's own pre-MLP TENorm (the input norm is fused into QKV's LayerNormLinear).
    assert _recomputed(ShardSpec(recompute_modules=MODULES)) == [
        "layers.0.mlp.act", "layers.0.mlp.clamp", "layers.0.post_attn_norm"]
    assert _recomputed(ShardSpec(recompute_modules=("moe_act",))) == [
        "layers.0.mlp.act", "layers.0.mlp.clamp"]
    assert _recomputed(ShardSpec()) == []


def test_a_dense_layer_has_no_such_modules():
    dense = ModelConfig.from_preset("tiny-moe", num_layers=1, num_experts=0,
                                    activation_clamp=7.0)
    assert _recomputed(ShardSpec(recompute_modules=MODULES), dense) == []


def test_recompute_costs_one_more_forward_of_each_module_kernel():
    # With every kernel 1 s, the backward gains exactly the three re-run kernels.
    def seconds(spec: ShardSpec) -> float:
        unit = block_unit(_moe(), 0, 1, 64, 2, spec)
        return compute_seconds(backward(unit, "none", 1, lambda op: 1.0))
    assert seconds(ShardSpec(recompute_modules=MODULES)) - seconds(ShardSpec()) == 3.0


def test_saved_activations_by_hand():
    # One sequence of 64 tokens, bf16, tp 1: 128 routed copies. Per copy the clamped
    # expert saves its fc1 output 2·1024 B, the clamp's copy 2·1024 and fc2's input
    # 2·512; moe_act keeps the fc1 output alone: 3,072 B less per copy, 393,216 in all.
    # layernorm frees the pre-MLP norm's output, 2·64·256 = 32,768 B.
    cfg = _moe()
    base = layer_activation_bytes(cfg, 1, 64)
    act = layer_activation_bytes(cfg, 1, 64, modules=("moe_act",))
    both = layer_activation_bytes(cfg, 1, 64, modules=MODULES)
    assert base - act == 393_216
    assert act - both == 32_768


def _scenario(**par) -> dict:
    return {"cluster": {"preset": "dgx-h100", "nodes": 1},
            "model": {"preset": "tiny-moe"},
            "training": {"global_batch_size": 8, "micro_batch_size": 1, "seq_len": 128},
            "parallelism": par}


def test_unknown_module_is_a_one_line_error():
    with pytest.raises(ScenarioError, match="unknown recompute module"):
        load_scenario(_scenario(recompute_modules=["core_attn"]))


def test_modules_under_full_recompute_are_refused():
    with pytest.raises(ScenarioError, match="recompute_modules"):
        load_scenario(_scenario(recompute="full", recompute_modules=["moe_act"]))


@pytest.mark.parametrize(("row", "modules"), [
    # megatron-bridge 0.6.2 perf_recipes: GB200 BF16 at ep 64, pp 1, mbs 4, gbs 1280.
    ({"model": "GPT OSS 120B", "sys": "DGX-GB200", "ep": 64, "pp": 1, "mbs": 4,
      "gbs": 1280}, ["layernorm", "moe_act"]),
    # 25.11's GB200 layout (mbs 1 at 8k) is another recipe; GB300's recomputes nothing.
    ({"model": "GPT OSS 120B", "sys": "DGX-GB200", "ep": 64, "pp": 1, "mbs": 1,
      "gbs": 1280}, None),
    ({"model": "GPT OSS 120B", "sys": "DGX-GB300", "ep": 64, "pp": 1, "mbs": 4,
      "gbs": 1280}, None),
])
def test_bridge_rows_take_the_recipe_recompute(row, modules):
    got = suite_sources_bridge.bridge_recompute(row, "BF16").get("recompute_modules")
    assert got == modules
    assert suite_sources_bridge.bridge_recompute(row, "MXFP8") == {}

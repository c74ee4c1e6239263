"""MoE model shapes: presets against published counts, shared experts, dense first layers,
fine-grained experts, head_dim, and MLA (DeepSeek-V2/V3) kernels and sizes."""

from __future__ import annotations

import pytest

from simtrain import ScenarioError, load_scenario
from simtrain.workload.memory import layer_activation_bytes
from simtrain.workload.mla import mla_core_flops_per_token, mla_params
from simtrain.workload.model import (
    ModelConfig,
    lower_model,
    model_flops_per_step,
    num_active_parameters,
    num_parameters,
)


# Published totals and active parameters per token: Mixtral 8x7B (Jiang et al. 2024:
# 46.7B / 12.9B), Mixtral 8x22B (Mistral AI 2024: 141B / 39B), DeepSeek-V3 (arXiv:
# 2412.19437: 671B / 37B), Qwen3 (arXiv:2505.09388 Table 2: 30.5B / 3.3B and 235B / 22B),
# GPT-OSS 120B (OpenAI model card 2025: 116.8B / 5.1B, its active count leaves out the
# input embedding).
@pytest.mark.parametrize(("preset", "total", "active", "no_input_embedding"), [
    ("mixtral-8x7b", 46.7e9, 12.9e9, False), ("mixtral-8x22b", 141e9, 39e9, False),
    ("deepseek-v3", 671e9, 37e9, False), ("qwen3-30b-a3b", 30.5e9, 3.3e9, False),
    ("qwen3-235b-a22b", 235e9, 22e9, False), ("gpt-oss-120b", 116.8e9, 5.1e9, True),
])
def test_moe_presets_match_published_parameters(preset, total, active, no_input_embedding):
    cfg = ModelConfig.from_preset(preset)
    assert num_parameters(cfg) == pytest.approx(total, rel=0.01)
    used = num_active_parameters(cfg)
    if no_input_embedding:
        used -= cfg.vocab_size * cfg.hidden_size
    assert used == pytest.approx(active, rel=0.025)


def test_deepseek_v3_count_by_hand():
    cfg = ModelConfig.from_preset("deepseek-v3")
    # MLA block (mla.mla_params docstring): 187,107,328. Dense MLP 3·7168·18432 =
    # 396,361,728. MoE MLP: 256 experts x 3·7168·2048 (44,040,192) = 11,274,289,152, the
    # router 7168·256 = 1,835,008, one shared expert 44,040,192 -> 11,320,164,352.
    # Two RMSNorms per layer 14,336. Embedding and untied head 2·129280·7168 =
    # 1,853,358,080; final norm 7,168.
    assert mla_params(cfg) == 187_107_328
    layer = 187_107_328 + 14_336
    total = 3 * (layer + 396_361_728) + 58 * (layer + 11_320_164_352) + 1_853_358_080 + 7_168
    assert num_parameters(cfg) == total == 671_026_404_352


def _ops(cfg, b=1, s=64):
    return {op.name: op for layer in lower_model(cfg, b, s) for op in layer.ops}


def test_dense_first_layers_and_shared_experts_are_lowered():
    cfg = ModelConfig.from_preset("deepseek-v3", num_layers=4)
    ops = _ops(cfg)
    m = 64
    # Layers 0-2 dense: fc1 fuses gate and up, 2·18432 wide; layer 3 routes.
    assert ops["layers.2.mlp.fc1"].gemm_shape == (m, 2 * 18432, 7168)
    assert "layers.2.mlp.router" not in ops and "layers.3.mlp.router" in ops
    # Layer 3: one grouped GEMM over the 256 local experts, k·m = 8·64 = 512 token copies
    # in all, 2 per expert; the shared expert runs on the m tokens.
    fc1 = ops["layers.3.mlp.fc1"]
    assert fc1.gemm_shape == (2, 2 * 2048, 7168) and fc1.groups == 256
    assert fc1.flops == 2 * 512 * 2 * 2048 * 7168
    assert ops["layers.3.mlp.shared.fc1"].gemm_shape == (m, 2 * 2048, 7168)
    assert not any(p.expert for p in ops["layers.3.mlp.shared.fc2"].params)
    owned = sum(p.numel for op in ops.values() for p in op.params)
    assert owned == num_parameters(cfg)


@pytest.mark.parametrize("preset", ["deepseek-v3", "qwen3-30b-a3b", "gpt-oss-120b",
                                    "mixtral-8x22b"])
def test_model_flops_are_three_forwards_without_the_router(preset):
    cfg = ModelConfig.from_preset(preset, num_layers=4, **(
        {"dense_layers": 1} if preset == "deepseek-v3" else {}))
    b, s = 1, 256
    fwd = sum(op.flops for op in _ops(cfg, b, s).values()
              if op.kind in ("gemm", "attention") and not op.name.endswith(".router"))
    assert 3 * fwd == pytest.approx(model_flops_per_step(cfg, b * s, s), rel=1e-12)


def test_mla_kernels_by_hand():
    # A small MLA: h 64, 4 heads, d_c' 32, d_c 16, d_h 8, d_h^R 4, d_v 8; m = 2·16 = 32.
    cfg = ModelConfig(family="llama", num_layers=1, hidden_size=64, num_heads=4,
                      vocab_size=100, max_seq_len=16, attention="mla", q_lora_rank=32,
                      kv_lora_rank=16, qk_head_dim=8, qk_rope_dim=4, v_head_dim=8)
    ops = _ops(cfg, b=2, s=16)
    shapes = {n.rsplit(".", 1)[-1]: op.gemm_shape for n, op in ops.items() if op.gemm_shape}
    assert shapes["q_down"] == (32, 32, 64) and shapes["q_up"] == (32, 4 * 12, 32)
    assert shapes["kv_down"] == (32, 16 + 4, 64) and shapes["kv_up"] == (32, 4 * 16, 16)
    assert shapes["proj"] == (32, 64, 4 * 8)
    # Core: QKᵀ 2·b·s²·a·(d_h + d_h^R) = 2·2·256·4·12 = 49,152 and AV 2·2·256·4·8 =
    # 32,768: 81,920 FLOPs; per token over s = 16 keys 2·16·4·(12 + 8) = 2,560 (x 32 tokens).
    core = ops["layers.0.attn.core"]
    assert core.flops == 81_920 == 32 * mla_core_flops_per_token(cfg, 16)
    # Params: q 64·32 + 32 + 32·48 = 3,616; kv 64·20 + 16 + 16·64 = 2,320; out 32·64 = 2,048.
    assert mla_params(cfg) == 3_616 + 2_320 + 2_048


def test_mla_context_parallel_kv_block_and_activations():
    s = load_scenario({"cluster": {"preset": "dgx-h100", "nodes": 1},
                       "model": {"preset": "deepseek-v3", "num_layers": 4},
                       "training": {"global_batch_size": 8, "micro_batch_size": 1,
                                    "seq_len": 4096},
                       "parallelism": {"cp": 2, "ep": 4, "dp": 4},
                       "sim": {"ignore_memory": True}})
    from simtrain.hardware.topology import build_cluster
    from simtrain.simulate import build_plan
    plan = build_plan(s, build_cluster(s.cluster))
    ring = next(st for u in plan.units[0][0] for st in u.steps if type(st).__name__ == "Ring")
    # Each CP rank holds 2048 tokens' keys (128·192) and values (128·128), bf16:
    # 2·2048·(24576 + 16384) = 167,772,160 bytes.
    assert ring.kv_bytes == 2 * 2048 * (128 * 192 + 128 * 128)
    # Saved per token, 16-bit units (bf16: bytes = units): the norms' and MLP inputs
    # 8·h = 57,344 (no dropout masks); MLA split 2·(2·128·192 + 128·128) + 2·128·128 =
    # 163,840 and latent 4·(1536 + 512) = 8,192; MoE MLP 8 copies x (2·4096 + 2·2048) =
    # 98,304 plus the shared expert 12,288 = 110,592, the same as a dense layer's
    # 2·36864 + 2·18432; router fp32 logits 2·256 per token.
    per_token = 57_344 + 163_840 + 8_192 + 110_592 + 512
    assert layer_activation_bytes(s.model, 1, 4096) == 4096 * per_token


def test_head_dim_other_than_hidden_over_heads():
    cfg = ModelConfig.from_preset("qwen3-30b-a3b", num_layers=1)
    ops = _ops(cfg, b=1, s=32)
    # 32 query heads and 4 KV heads of 128: QKV (32, (32 + 8)·128, 2048); proj reads 4096.
    assert ops["layers.0.attn.qkv"].gemm_shape == (32, 40 * 128, 2048)
    assert ops["layers.0.attn.proj"].gemm_shape == (32, 2048, 32 * 128)
    # Fine-grained experts: top-8 of 128 experts of 768 -> k·m = 256 routed copies, 2 per
    # expert when all 128 live on one GPU.
    fc1 = ops["layers.0.mlp.fc1"]
    assert fc1.gemm_shape == (2, 2 * 768, 2048) and fc1.groups == 128
    assert fc1.flops == 2 * 256 * 2 * 768 * 2048


def _bad(**model):
    base = {"cluster": {"preset": "dgx-h100", "nodes": 1},
            "model": {"preset": "tiny-moe", **model},
            "training": {"global_batch_size": 8, "micro_batch_size": 1, "seq_len": 128}}
    with pytest.raises(ScenarioError) as err:
        load_scenario(base)
    return str(err.value)


def test_bad_moe_and_mla_shapes_are_one_line_errors():
    assert "dense_layers 4 must be in 0..num_layers - 1" in _bad(dense_layers=4)
    assert "applies to mixture-of-experts" in _bad(num_experts=0, shared_expert_ffn_size=64)
    msg = _bad(attention="mla", kv_lora_rank=16)
    assert "needs model.qk_head_dim, model.qk_rope_dim, model.v_head_dim" in msg
    assert "\n" not in msg
    assert "give model.head_dim" in _bad(num_heads=3, num_kv_heads=1)


def test_ep_not_dividing_experts_is_rejected():
    with pytest.raises(ScenarioError, match="num_experts=4 is not divisible by ep=8"):
        load_scenario({"cluster": {"preset": "dgx-h100", "nodes": 1},
                       "model": {"preset": "tiny-moe"},
                       "training": {"global_batch_size": 8, "micro_batch_size": 1,
                                    "seq_len": 128},
                       "parallelism": {"ep": 8}})


def test_token_permutation_kernels_move_the_routed_copies():
    cfg = ModelConfig.from_preset("tiny-moe", num_layers=1)
    ops = _ops(cfg, b=1, s=64)
    # m = 64 tokens of h = 256, top-2: permute reads 64·256 and writes 2·64·256 bf16
    # elements (98,304 bytes); unpermute reads the 2 copies and writes one.
    assert ops["layers.0.mlp.permute"].bytes == 2 * (64 * 256 + 2 * 64 * 256) == 98_304
    assert ops["layers.0.mlp.unpermute"].bytes == 98_304
    assert ops["layers.0.mlp.permute"].role is None  # on the source tokens, not the load


def test_local_expert_sort_by_hand():
    from simtrain.workload.layers import local_expert_sort
    # Qwen3-30B-A3B on 8-way EP, one 4096-token micro-batch: k·m·h = 8·4096·2048 =
    # 67,108,864 received bf16 values; one read and one write: 2·2·67,108,864 =
    # 268,435,456 bytes, the same again in backward (the inverse permutation).
    sort, unsort = local_expert_sort("layers.0", 8 * 4096 * 2048, 16, 8, 2)
    assert [op.name for op in sort + unsort] == ["layers.0.mlp.sort_chunks",
                                                  "layers.0.mlp.unsort_chunks"]
    for op in sort + unsort:
        assert op.bytes == op.backward_bytes == 268_435_456
        assert op.role == "expert"  # on the rank's routed copies: scales with its load
    # One local expert (Mixtral 8x7B on EP 8) or no EP: the first permute already sorts.
    assert local_expert_sort("layers.0", 1024, 1, 8, 2) == ([], [])
    assert local_expert_sort("layers.0", 1024, 16, 1, 2) == ([], [])


def test_the_sort_wraps_the_local_experts_in_a_layer():
    from simtrain.workload.layers import Shard, block
    cfg = ModelConfig.from_preset("tiny-moe", num_layers=1)
    names = [getattr(i, "name", "") for i in block(cfg, 0, 1, 64, 2, Shard(ep=2)).items]
    # 4 experts on EP 2: 2 local experts, sorted after the dispatch, restored before combine.
    at = names.index
    assert at("layers.0.mlp.dispatch") < at("layers.0.mlp.sort_chunks") < at("layers.0.mlp.fc1")
    assert at("layers.0.mlp.fc2") < at("layers.0.mlp.unsort_chunks") < at("layers.0.mlp.combine")
    assert "layers.0.mlp.sort_chunks" not in _ops(cfg)  # no EP: no second permutation


def test_dropless_dispatch_gathers_the_routing_counts_first():
    from simtrain.workload.layers import Shard, Site, block
    from simtrain.workload.moe import token_count_bytes
    q = ModelConfig.from_preset("qwen3-30b-a3b")
    # Qwen3-30B-A3B on EP 8: each rank's 128 int64 counts, gathered from 8 ranks:
    # 8 · 128 · 8 B = 8,192 B (megatron-core 0.16.1 MoEAlltoAllTokenDispatcher.preprocess).
    assert token_count_bytes(q, 8) == 8 * 128 * 8 == 8192
    assert token_count_bytes(q, 1) == 0.0  # no EP: no all-to-all to size
    assert token_count_bytes(q.model_copy(update={"capacity_factor": 1.0}), 8) == 0.0
    cfg = ModelConfig.from_preset("tiny-moe", num_layers=1)
    items = block(cfg, 0, 1, 64, 2, Shard(ep=2)).items
    names = [getattr(i, "name", "") for i in items]
    at = names.index
    assert at("layers.0.mlp.router") < at("layers.0.mlp.counts") < at("layers.0.mlp.permute")
    site = items[at("layers.0.mlp.counts")]
    assert isinstance(site, Site) and site.kind == "counts"
    assert site.nbytes == 8 * cfg.num_experts * 2

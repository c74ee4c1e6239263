"""Mixture-of-experts layout: which layers route, shared experts, parameter counts, presets.

A MoE model (``model.num_experts > 0``) routes each token of every layer but the first
``dense_layers`` to ``experts_per_token`` of ``num_experts`` experts (fine-grained
experts: many narrow ones, DeepSeekMoE, Dai et al. 2024, arXiv:2401.06066), and passes it
through ``shared_expert_ffn_size`` of always-active shared experts beside them (one dense
MLP of that total width: DeepSeek-V3's 1 x 2048, DeepSeek-V2's 2 x 1536 = 3072).
The per-layer parameter and FLOP terms live here; ``model.py`` sums them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # model.py imports this module
    from simtrain.workload.model import ModelConfig

# Shapes from shared/reference/measured_runs.yaml model_shapes (NVIDIA/NeMo
# nemo/collections/llm/gpt/model/{mixtral,deepseek,qwen3,gpt_oss}.py @ 8cfedd72); the
# vocabularies from the models' tokenizers as measured_runs.yaml lists them.
# Megatron-Core's output-discarding recompute modules simtrain models
# (``parallelism.recompute_modules``; megatron-core 0.19.2 ``TransformerConfig.
# recompute_modules``, "moe_act", "layernorm" ... "use output-discarding checkpointing"):
# "moe_act" re-runs a MoE layer's expert activation (``TEGroupedMLP`` ``bias_act_func``,
# with GPT-OSS's clamp) before fc2's backward and frees fc2's input; "layernorm" the
# input and pre-MLP norms that are modules of their own, which under the Transformer
# Engine spec is only a MoE layer's pre-MLP norm (``TransformerLayer.__init__``: the norm
# fused into a TE ``LayerNormLinear`` is an ``IdentityOp``). "core_attn" is
# ``recompute: selective``.
RECOMPUTE_MODULES: tuple[str, ...] = ("layernorm", "moe_act")
_LLAMA_STYLE: dict[str, Any] = dict(family="llama", activation="swiglu", num_kv_heads=8)
MOE_PRESETS: dict[str, dict[str, Any]] = {
    # Mixtral 8x22B (Mistral AI 2024): 141B total, 39B active; 64k context.
    "mixtral-8x22b": dict(_LLAMA_STYLE, name="Mixtral 8x22B", num_layers=56, hidden_size=6144,
                          num_heads=48, ffn_hidden_size=16384, num_experts=8,
                          experts_per_token=2, vocab_size=32768, max_seq_len=65536),
    # DeepSeek-V3 (arXiv:2412.19437 Sec. 4.2, Table 1): 671B total, 37B active; MLA,
    # 3 dense layers of 18432, 256 routed experts of 2048 (top 8) + 1 shared of 2048;
    # pre-trained at 4K tokens (the multi-token-prediction module is not modelled).
    "deepseek-v3": dict(family="llama", activation="swiglu", name="DeepSeek-V3 671B",
                        num_layers=61, hidden_size=7168, num_heads=128, vocab_size=129280,
                        max_seq_len=4096, attention="mla", q_lora_rank=1536,
                        kv_lora_rank=512, qk_head_dim=128, qk_rope_dim=64, v_head_dim=128,
                        dense_layers=3, ffn_hidden_size=18432, num_experts=256,
                        experts_per_token=8, moe_ffn_hidden_size=2048,
                        shared_expert_ffn_size=2048),
    # Qwen3 MoE (Qwen3 Technical Report, arXiv:2505.09388, Table 2): 128 experts, top 8,
    # no shared experts, 4 KV heads of 128 (head_dim != h / a); 32K native context.
    "qwen3-30b-a3b": dict(_LLAMA_STYLE, name="Qwen3-30B-A3B", num_layers=48,
                          hidden_size=2048, num_heads=32, num_kv_heads=4, head_dim=128,
                          num_experts=128, experts_per_token=8, moe_ffn_hidden_size=768,
                          vocab_size=151936, max_seq_len=32768, qk_norm=True),
    "qwen3-235b-a22b": dict(_LLAMA_STYLE, name="Qwen3-235B-A22B", num_layers=94,
                            hidden_size=4096, num_heads=64, num_kv_heads=4, head_dim=128,
                            num_experts=128, experts_per_token=8, moe_ffn_hidden_size=1536,
                            vocab_size=151936, max_seq_len=32768, qk_norm=True),
    # GPT-OSS 120B (OpenAI 2025 model card: 116.8B total, 5.1B active per token): biases
    # in attention and experts; its sliding-window layers (128 tokens on every other
    # layer) are not modelled here: every layer attends over the full sequence.
    "gpt-oss-120b": dict(_LLAMA_STYLE, name="GPT-OSS 120B", num_layers=36, hidden_size=2880,
                         num_heads=64, head_dim=64, num_experts=128, experts_per_token=4,
                         moe_ffn_hidden_size=2880, vocab_size=201088, max_seq_len=131072,
                         bias=True, activation_clamp=7.0),
}


def check_moe_layout(cfg: ModelConfig) -> None:
    """ValueError for MoE-only fields on a dense model or dense layers beyond the model."""
    if not cfg.is_moe:
        given = [f for f in ("shared_expert_ffn_size", "routing_node_limit")
                 if getattr(cfg, f) is not None]
        if cfg.dense_layers:
            given.append("dense_layers")
        if given:
            raise ValueError(f"model.{given[0]} applies to mixture-of-experts models only "
                             f"(model.num_experts > 0); remove it or set num_experts")
        return
    if not 0 <= cfg.dense_layers < cfg.num_layers:
        raise ValueError(f"model.dense_layers {cfg.dense_layers} must be in 0..num_layers - 1 "
                         f"= {cfg.num_layers - 1} (at least one layer has experts)")


def mlp_params(cfg: ModelConfig, width: int) -> int:
    """One MLP of ``width``: 3·h·f gated (fused gate and up, down) or 2·h·f, + biases."""
    h, gated = cfg.hidden_size, cfg.activation == "swiglu"
    weights = (3 if gated else 2) * h * width
    return weights + (((2 * width) if gated else width) + h if cfg.bias else 0)


def moe_mlp_params(cfg: ModelConfig, experts: int) -> int:
    """A MoE layer's MLP counting ``experts`` routed experts (all E for the total, top-k
    for the active count), the router h·E (no bias) and the shared experts."""
    shared = mlp_params(cfg, cfg.shared_expert_ffn_size) if cfg.shared_expert_ffn_size else 0
    return experts * mlp_params(cfg, cfg.expert_ffn_size) + cfg.hidden_size * \
        cfg.num_experts + shared


def mlp_matmul_flops_per_token(cfg: ModelConfig, layer: int) -> float:
    """Forward MLP GEMM FLOPs per token of ``layer``: 2 x its active GEMM weights
    (top-k experts and the shared ones in a MoE layer; the router is not counted, as in
    Megatron-Core's formula)."""
    gated = 3 if cfg.activation == "swiglu" else 2
    h = cfg.hidden_size
    if not cfg.is_moe_layer(layer):
        return 2.0 * gated * h * cfg.ffn_size
    active = cfg.experts_per_token * cfg.expert_ffn_size + (cfg.shared_expert_ffn_size or 0)
    return 2.0 * gated * h * active


# Bytes of one routing-count element: Megatron-Core counts tokens per expert as int64
# (``routing_map.sum(dim=0).long()``, megatron-core 0.16.1 token_dispatcher.py).
COUNT_BYTES = 8


def token_count_bytes(cfg: ModelConfig, ep: int) -> float:
    """Bytes each EP rank receives in the all-gather of tokens-per-expert counts that a
    dropless dispatch runs before its all-to-all (0: none is run).

    Megatron-Core's ``MoEAlltoAllTokenDispatcher.preprocess`` (megatron-core 0.16.1
    ``transformer/moe/token_dispatcher.py``): without ``moe_pad_expert_input_to_capacity``
    and with ep > 1 every rank gathers every rank's E counts over the EP group
    (``gather_from_sequence_parallel_region(num_local_tokens_per_expert)``) to size the
    all-to-all's splits, then waits for them on the host (``cuda_sync_point =
    "before_ep_alltoall"``). A padded (capacity-factor) dispatch has static splits and
    skips it; simtrain's capacity factor is taken as padded. The all-gather's output is
    ep·E counts of ``COUNT_BYTES`` (nccl-tests' size convention). torchtitan's EP
    exchanges the same counts with an all-to-all before its dispatch (torchtitan 0.1.0
    ``experiments/deepseek_v3/model.py``), of the same latency; DeepEP inside its own
    dispatch (``ShardSpec.counts_gather``).
    """
    if not cfg.is_moe or ep <= 1 or cfg.capacity_factor is not None:
        return 0.0
    return float(COUNT_BYTES * cfg.num_experts * ep)

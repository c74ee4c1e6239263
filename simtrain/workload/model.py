"""Decoder-only transformer description and its lowering to ops (the compute IR).

A ``ModelConfig`` is the scenario's ``model:`` section after the preset merge. ``lower_model``
turns it into layers of ops, each carrying forward FLOPs, HBM bytes, GEMM shape, owned
parameters and saved activations for one microbatch; ``backward_ops`` derives the backward.
The layers are built in one place, ``layers.py`` (here without parallelism; sharded
programs come from the same builders through ``simtrain.parallel.shard``), from the
kernels of ``ops.py``.

FLOP conventions (see shared/reference/README.md and ``ops.py``): a GEMM (m, n, k) costs
2·m·n·k; attention core counts QKᵀ and AV as 4·b·s²·h, the *non-causal* convention used by
the Megatron MFU formula (a causal kernel executes about half; ``compute.py`` applies
that); memory-bound ops carry small nominal FLOP counts, informative only, not counted by
``model_flops_per_step``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator, model_validator

from simtrain.workload.layers import (
    Shard,
    attended_keys,
    attention_ops,
    block,
    embedding,
    head,
    layer_window,
    moe_ops,
)
from simtrain.workload.mla import (
    check_mla,
    mla_core_flops_per_token,
    mla_params,
    mla_projection_params,
)
from simtrain.workload.moe import (
    MOE_PRESETS,
    check_moe_layout,
    mlp_matmul_flops_per_token,
    mlp_params,
    moe_mlp_params,
)
from simtrain.workload.ops import OP_KINDS, Op, Param, backward_ops

# Re-exported: the kernels and their constructors live in ops.py and layers.py.
__all__ = ["MODEL_PRESETS", "OP_KINDS", "Layer", "ModelConfig", "Op", "Param",
           "attention_ops", "backward_ops", "lower_model", "model_flops_per_step", "moe_ops",
           "num_active_parameters", "num_parameters"]

_GPT3 = dict(family="gpt", vocab_size=50257, max_seq_len=2048, tied_embeddings=True)
_MEGATRON_2020 = dict(family="gpt", vocab_size=51200, max_seq_len=1024, tied_embeddings=True)
# Megatron-Core 2024 weak-scaling models (calibration.yaml): GPT style, ffn 4h, untied.
_MCORE_2024 = dict(family="gpt", vocab_size=131072, max_seq_len=4096, tied_embeddings=False)
# Llama 3 (Meta, "The Llama 3 Herd of Models", 2024, Table 3); 8192 = pre-training length.
_LLAMA3 = dict(family="llama", vocab_size=128256, max_seq_len=8192, num_kv_heads=8)


def _p(base: dict[str, Any], name: str, layers: int, hidden: int, heads: int,
       **extra: Any) -> dict[str, Any]:
    return {**base, "name": name, "num_layers": layers, "hidden_size": hidden,
            "num_heads": heads, **extra}


MODEL_PRESETS: dict[str, dict[str, Any]] = {
    # GPT-3 (Brown et al. 2020, Table 2.1). The paper lists 24 heads of 128 for 1.3B, which
    # does not divide 2048; we use 16 heads of 128 as Megatron/HF reproductions do.
    "gpt3-175b": _p(_GPT3, "GPT-3 175B", 96, 12288, 96),
    "gpt3-2.7b": _p(_GPT3, "GPT-3 2.7B", 32, 2560, 32),
    "gpt3-1.3b": _p(_GPT3, "GPT-3 1.3B", 24, 2048, 16),
    "gpt2-small": _p({**_GPT3, "max_seq_len": 1024}, "GPT-2 124M", 12, 768, 12),
    "llama3-8b": _p(_LLAMA3, "Llama 3 8B", 32, 4096, 32, ffn_hidden_size=14336),
    "llama3-70b": _p(_LLAMA3, "Llama 3 70B", 80, 8192, 64, ffn_hidden_size=28672),
    "llama3-405b": _p(_LLAMA3, "Llama 3 405B", 126, 16384, 128, ffn_hidden_size=53248),
    "megatron-1b": _p(_MEGATRON_2020, "Megatron-LM 1B", 24, 1920, 15),
    "megatron-2b": _p(_MEGATRON_2020, "Megatron-LM 2B", 30, 2304, 18),
    "megatron-4b": _p(_MEGATRON_2020, "Megatron-LM 4B", 36, 3072, 24),
    "megatron-8b": _p(_MEGATRON_2020, "Megatron-LM 8B", 42, 4096, 32),
    "mcore-1.7b": _p(_MCORE_2024, "Megatron-Core 1.7B", 24, 2048, 16),
    "mcore-7.1b": _p(_MCORE_2024, "Megatron-Core 7.1B", 30, 4096, 32),
    "mcore-16b": _p(_MCORE_2024, "Megatron-Core 16B", 32, 6144, 48),
    "mcore-32b": _p(_MCORE_2024, "Megatron-Core 32B", 48, 7168, 56),
    "mcore-70b": _p(_MCORE_2024, "Megatron-Core 70B", 84, 8192, 64),
    "mcore-119b": _p(_MCORE_2024, "Megatron-Core 119B", 92, 10240, 80),
    "mcore-177b": _p(_MCORE_2024, "Megatron-Core 177B", 96, 12288, 96),
    "mcore-314b": _p(_MCORE_2024, "Megatron-Core 314B", 96, 16384, 128),
    "mcore-462b": _p(_MCORE_2024, "Megatron-Core 462B", 112, 18432, 144),
    "tiny-gpt": _p({**_GPT3, "vocab_size": 1024, "max_seq_len": 512}, "tiny GPT", 4, 256, 4),
    # Mixtral 8x7B (Jiang et al. 2024, "Mixtral of Experts", Table 1): 8 experts, top-2,
    # Mistral-7B backbone (GQA 8 KV heads, SwiGLU ffn 14336), vocab 32000, 32k context.
    "mixtral-8x7b": _p({**_LLAMA3, "vocab_size": 32000, "max_seq_len": 32768}, "Mixtral 8x7B",
                       32, 4096, 32, ffn_hidden_size=14336, num_experts=8,
                       experts_per_token=2),
    "tiny-moe": _p({**_LLAMA3, "vocab_size": 1024, "max_seq_len": 512, "num_kv_heads": 2},
                   "tiny MoE", 4, 256, 4, ffn_hidden_size=512, num_experts=4,
                   experts_per_token=2),
}
MODEL_PRESETS.update(MOE_PRESETS)  # Mixtral 8x22B, DeepSeek-V3, Qwen3 MoE, GPT-OSS

# Defaults implied by the family when the user does not set them.
_FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "gpt": dict(activation="gelu", tied_embeddings=True, position_embedding="learned",
                norm="layernorm", bias=True, dropout_masks=True),
    "llama": dict(activation="swiglu", tied_embeddings=False, position_embedding="rope",
                  norm="rmsnorm", bias=False, dropout_masks=False),
}


class ModelConfig(BaseModel):
    """A decoder-only transformer: the scenario's ``model:`` section after preset merge.

    ``num_kv_heads`` (None = MHA) and ``ffn_hidden_size`` (None = 4h for gelu, Llama's
    ⌈(8h/3)/256⌉·256 for swiglu) are filled in on validation. Unset style fields
    (activation, norm, bias, ...) default by ``family``.
    """

    model_config = ConfigDict(extra="forbid")

    preset: str | None = None
    name: str | None = None
    family: Literal["gpt", "llama"] = "gpt"
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int | None = None
    # Width of one attention head (None: hidden_size / num_heads, filled in on validation).
    # Qwen3 and GPT-OSS set it apart from h/a (Qwen3-32B: 64 heads of 128 on h = 5120): the
    # Q/K/V projections are h -> heads·head_dim, the output projection heads·head_dim -> h.
    head_dim: int | None = None
    # Sliding-window attention (Beltagy et al. 2020; Mistral 7B, Jiang et al. 2023): each
    # query attends to at most the ``sliding_window`` latest keys (itself included), so a
    # flash kernel skips the key blocks beyond the window. ``sliding_window_pattern`` n > 1
    # keeps full attention in every n-th layer (layers n-1, 2n-1, ...): GPT-OSS alternates
    # (n = 2, OpenAI gpt-oss model card 2025), Gemma 3 runs 5 local then 1 global (n = 6);
    # 1 = every layer slides (Mistral).
    sliding_window: int | None = None
    sliding_window_pattern: int = 1
    # QK-norm: an RMSNorm over each head's query and key (head_dim wide, one weight each)
    # between the QKV projection and RoPE: Qwen3 (Qwen3 Technical Report, arXiv:2505.09388,
    # Sec. 2; Megatron Bridge Qwen3 providers qk_layernorm=True).
    qk_norm: bool = False
    ffn_hidden_size: int | None = None
    activation: Literal["gelu", "swiglu"] = "gelu"
    # A gated activation whose inputs are clamped first (gate <= L, linear half in [-L, L]):
    # GPT-OSS, L = 7 (OpenAI gpt-oss model card 2025; Megatron Bridge GPTOSSProvider
    # activation_func_clamp_value). Megatron-Core clamps in eager ops (workload.glu_clamp).
    activation_clamp: float | None = None
    vocab_size: int
    max_seq_len: int
    tied_embeddings: bool = True
    position_embedding: Literal["learned", "rope"] = "learned"
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    bias: bool = True
    # Dropout after attention and MLP: no FLOPs modelled, but its masks are saved
    # activations (1 byte per element, Korthikanti et al. 2022).
    dropout_masks: bool = True
    # "flash": fused attention, no s x s matrices are stored (FlashAttention); "standard":
    # the pre-2022 kernels: a batched GEMM for the scores, a fused scale-mask-softmax and
    # (with dropout) a dropout over the s x s matrices, a batched GEMM for the context; the
    # matrices are materialised, saved for backward and cost HBM traffic.
    attention_kernel: Literal["flash", "standard"] = "flash"
    # Norms, RoPE and SwiGLU: "fused" (one kernel each: TE/Apex, or torch.compile) or
    # "eager" (PyTorch's aten ops one by one, torchtitan without torch.compile;
    # simtrain.workload.eager).
    elementwise: Literal["fused", "eager"] = "fused"
    # Activation order: "sbh" (sequence first, Megatron-Core) or "bsh" (batch first,
    # PyTorch-native models such as torchtitan's Llama: sequence-parallel collectives copy
    # around themselves; simtrain.parallel.sp_layout).
    layout: Literal["sbh", "bsh"] = "sbh"
    # Mixture of experts (every layer's MLP): 0 = dense. Each token goes to
    # ``experts_per_token`` of ``num_experts`` experts of width ``moe_ffn_hidden_size``
    # (None: ffn_hidden_size). ``capacity_factor`` caps tokens per expert at that multiple
    # of the mean (None: dropless); ``routing_imbalance`` gives the busiest expert-parallel
    # rank (1 + imbalance) x the mean load.
    num_experts: int = 0
    experts_per_token: int = 2
    moe_ffn_hidden_size: int | None = None
    capacity_factor: float | None = None
    routing_imbalance: float = 0.0
    # How a rank's local experts' GEMMs are launched (host issue only; the GPU time is the
    # grouped GEMM's, compute.gemm_efficiency): "grouped", one kernel (a CUTLASS grouped
    # GEMM: Megatron-Core's legacy GroupedMLP, torch._grouped_mm); "per-expert", one kernel
    # per local expert, as Transformer Engine's GroupedLinear (Megatron-Core TEGroupedMLP)
    # runs them (workload.layers.expert_launches).
    expert_gemm: Literal["grouped", "per-expert"] = "grouped"
    # Node-limited routing: each token's experts lie on at most this many nodes (DeepSeek-V3:
    # 4); it lowers the network bytes of a DeepEP dispatch (parallelism.moe_dispatcher).
    routing_node_limit: int | None = None
    # Shared experts (DeepSeekMoE, Dai et al. 2024; DeepSeek-V2/V3, Llama 4): a dense MLP of
    # this total width that every token passes beside its routed experts (None: none).
    shared_expert_ffn_size: int | None = None
    # The first ``dense_layers`` layers of a MoE model have a dense MLP of ffn_hidden_size
    # (DeepSeek-V3: 3 of 61, first_k_dense_replace).
    dense_layers: int = 0
    # "gqa": grouped-query (MHA when num_kv_heads = num_heads); "mla": DeepSeek-V2/V3
    # multi-head latent attention (simtrain.workload.mla): queries through a rank
    # ``q_lora_rank`` bottleneck (None: a full projection), keys and values through a
    # shared ``kv_lora_rank`` latent, per-head ``qk_head_dim`` (no RoPE) + ``qk_rope_dim``
    # (decoupled RoPE) query/key widths and ``v_head_dim`` value width.
    attention: Literal["gqa", "mla"] = "gqa"
    # How a GQA attention meets its shared K/V heads: "native" (the kernel reads each KV
    # head for its group of query heads: FlashAttention, cuDNN, SDPA's enable_gqa) or
    # "repeat" (K and V copied out to one head per query head first: torchtitan's
    # ``repeat_kv`` up to 0.2.0; ``ops.repeat_kv``).
    gqa: Literal["native", "repeat"] = "native"
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_head_dim: int | None = None
    qk_rope_dim: int | None = None
    v_head_dim: int | None = None

    @classmethod
    def from_preset(cls, preset: str, **overrides: Any) -> ModelConfig:
        """Build from ``MODEL_PRESETS[preset]`` with ``overrides`` on top."""
        if preset not in MODEL_PRESETS:
            raise ValueError(f"unknown model preset {preset!r}; use one of "
                             f"{sorted(MODEL_PRESETS)} or describe the model field by field")
        return cls(**{**MODEL_PRESETS[preset], "preset": preset, **overrides})

    @model_validator(mode="before")
    @classmethod
    def _family_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("family", "gpt") in _FAMILY_DEFAULTS:
            return {**_FAMILY_DEFAULTS[data.get("family", "gpt")], **data}
        return data

    @field_validator("num_layers", "hidden_size", "num_heads", "num_kv_heads",
                     "ffn_hidden_size", "vocab_size", "max_seq_len", "shared_expert_ffn_size",
                     "head_dim", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_rope_dim",
                     "v_head_dim", "moe_ffn_hidden_size", "routing_node_limit",
                     "sliding_window", "sliding_window_pattern")
    @classmethod
    def _positive(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and value <= 0:
            raise ValueError(f"model.{info.field_name} must be a positive integer, got {value}")
        return value

    @field_validator("activation_clamp")
    @classmethod
    def _clamp_positive(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is not None and not value > 0:
            raise ValueError(f"model.activation_clamp must be a positive number (GPT-OSS: 7) "
                             f"or null, got {value}")
        activation = info.data.get("activation")
        if value is not None and activation != "swiglu":
            raise ValueError(f"model.activation_clamp clamps a gated activation's two "
                             f"inputs: it needs activation swiglu, got {activation}")
        return value

    @model_validator(mode="after")
    def _shapes(self) -> ModelConfig:
        h, a = self.hidden_size, self.num_heads
        if self.attention == "mla":
            check_mla(self)
            if self.gqa == "repeat":
                raise ValueError("model.gqa repeat copies out grouped K/V heads; MLA has "
                                 "none (attention: mla): drop model.gqa")
        elif self.head_dim is None and h % a:
            raise ValueError(f"model.hidden_size {h} is not divisible by num_heads {a}; pick "
                             f"num_heads dividing {h} (e.g. {h // 128 or 1} heads of 128), "
                             f"or give model.head_dim")
        if self.head_dim is None:
            self.head_dim = h // a
        if self.num_kv_heads is None:
            self.num_kv_heads = a
        if a % self.num_kv_heads:
            raise ValueError(f"model.num_heads {a} is not divisible by num_kv_heads "
                             f"{self.num_kv_heads}; pick num_kv_heads dividing {a} "
                             f"(num_kv_heads = num_heads is plain multi-head attention)")
        if self.ffn_hidden_size is None:
            self.ffn_hidden_size = (4 * h if self.activation == "gelu"
                                    else -(-(8 * h // 3) // 256) * 256)
        if self.num_experts < 0 or self.routing_imbalance < 0:
            raise ValueError(f"model.num_experts ({self.num_experts}) and routing_imbalance "
                             f"({self.routing_imbalance}) must be >= 0")
        if self.num_experts and not 1 <= self.experts_per_token <= self.num_experts:
            raise ValueError(f"model.experts_per_token {self.experts_per_token} must be "
                             f"between 1 and num_experts {self.num_experts}")
        if self.capacity_factor is not None and self.capacity_factor < 1.0:
            raise ValueError(f"model.capacity_factor {self.capacity_factor} must be >= 1 "
                             f"(1 = exactly the mean load per expert), or null for dropless")
        check_moe_layout(self)
        return self

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def expert_ffn_size(self) -> int:
        """Width of one expert's MLP."""
        return self.moe_ffn_hidden_size or self.ffn_size

    @property
    def head_width(self) -> int:
        """Width of one attention head (``head_dim``, filled in: h / a unless given)."""
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_heads

    def is_moe_layer(self, layer: int) -> bool:
        """Whether transformer layer ``layer`` has routed experts (not one of the dense
        first layers)."""
        return self.is_moe and layer >= self.dense_layers

    @property
    def kv_channels(self) -> int:
        """Megatron's name for the width of one attention head (``head_width``)."""
        return self.head_width

    @property
    def q_width(self) -> int:
        """Query (and attention output) features: heads · head_dim (= h unless set)."""
        return self.num_heads * self.head_width

    @property
    def kv_heads(self) -> int:
        """Number of key/value heads (filled in: never None after validation)."""
        return self.num_kv_heads if self.num_kv_heads is not None else self.num_heads

    @property
    def ffn_size(self) -> int:
        """MLP hidden width (filled in: never None after validation)."""
        return self.ffn_hidden_size if self.ffn_hidden_size is not None else 4 * self.hidden_size

    @property
    def qkv_width(self) -> int:
        """Output features of the fused QKV projection: (a + 2·g)·d."""
        return (self.num_heads + 2 * self.kv_heads) * self.head_width


@dataclass(frozen=True, slots=True)
class Layer:
    """A named group of ops in forward order: "embedding", "layers.i", "final_norm", "lm_head"."""

    name: str
    ops: tuple[Op, ...]


def lower_model(cfg: ModelConfig, micro_batch_size: int, seq_len: int,
                dtype_bytes: int = 2) -> list[Layer]:
    """Layers of ops for one microbatch of ``micro_batch_size`` sequences of ``seq_len``.

    Order (also parameter registration order, as in PyTorch modules, which DDP buckets in
    reverse): embedding, layers.0 .. layers.L-1, final_norm, lm_head. A MoE layer's MLP is
    the router plus all experts as grouped kernels (``moe_ops``) on one device; sharded
    programs (TP/CP/EP) come from ``simtrain.parallel.shard``.
    """
    for label, value in (("micro_batch_size", micro_batch_size), ("seq_len", seq_len),
                         ("dtype_bytes", dtype_bytes)):
        if value <= 0:
            raise ValueError(f"{label} must be a positive integer, got {value}")
    if seq_len > cfg.max_seq_len:
        raise ValueError(f"seq_len {seq_len} exceeds model.max_seq_len {cfg.max_seq_len}; "
                         f"shorten the sequence or set model.max_seq_len >= {seq_len}")
    b, s, dt, one = micro_batch_size, seq_len, dtype_bytes, Shard()
    programs = [embedding(cfg, b, s, dt, one)]
    programs += [block(cfg, i, b, s, dt, one) for i in range(cfg.num_layers)]
    programs += head(cfg, b, s, dt, one)
    return [Layer(p.name, p.ops) for p in programs]


def _attention_params(cfg: ModelConfig) -> int:
    """One attention block: MLA (``mla.mla_params``) or GQA: QKV h·(a + 2g)·d, output
    a·d·h, and their biases if ``bias``."""
    if cfg.attention == "mla":
        return mla_params(cfg)
    h, q = cfg.hidden_size, cfg.num_heads * cfg.head_width
    qk_norm = 2 * cfg.head_width if cfg.qk_norm else 0
    return h * cfg.qkv_width + q * h + (cfg.qkv_width + h if cfg.bias else 0) + qk_norm


def _parameters(cfg: ModelConfig, routed: int) -> int:
    h, v = cfg.hidden_size, cfg.vocab_size
    norm = (2 if cfg.norm == "layernorm" else 1) * h
    attn = _attention_params(cfg) + 2 * norm
    dense = cfg.dense_layers if cfg.is_moe else cfg.num_layers
    layers = dense * (attn + mlp_params(cfg, cfg.ffn_size))
    layers += (cfg.num_layers - dense) * (attn + moe_mlp_params(cfg, routed))
    pos = cfg.max_seq_len * h if cfg.position_embedding == "learned" else 0
    head = 0 if cfg.tied_embeddings else v * h
    return v * h + pos + layers + norm + head


def num_parameters(cfg: ModelConfig) -> int:
    """Exact parameter count: embeddings (+ learned positions), per layer attention (GQA or
    MLA), MLP (2 matrices gelu, 3 swiglu; a MoE layer's E experts, router and shared
    experts, ``moe.py``), biases if ``bias``, norms, final norm, untied head."""
    return _parameters(cfg, cfg.num_experts)


def num_active_parameters(cfg: ModelConfig) -> int:
    """Parameters one token's forward uses: ``num_parameters`` with only the top-k of each
    MoE layer's routed experts (the whole embedding matrix counted, as ``num_parameters``)."""
    return _parameters(cfg, cfg.experts_per_token if cfg.is_moe else 0)


def model_flops_per_step(cfg: ModelConfig, tokens: int, seq_len: int) -> float:
    """Model FLOPs (MFU numerator) for ``tokens`` tokens in sequences of ``seq_len``.

    Forward + backward (3x forward), no recompute, non-causal attention: per token and
    layer 2 x the attention projection weights, the core attention (GQA 4·s·a·d; MLA
    ``mla_core_flops_per_token``) and 2 x the active MLP weights (``moe.py``: top-k experts
    and shared experts, no router), plus 2·V·h for the LM head. For GQA this is
    Megatron-Core's formula (training.py ``num_floating_point_operations`` at 937571cf,
    calibration.yaml) 12·T·l·h²·[(1 + g/a + s/h)·(a·d/h) + (ffn/h)·k·(3/2 if swiglu else 1)
    + V/(2·l·h)], which for MHA, ffn = 4h, gelu is 72·T·l·h²·(1 + s/(6h) + V/(12·l·h))
    (T = B·s tokens). Equals 3× the forward FLOPs of the GEMM and attention ops of
    ``lower_model`` other than the router. ``head_dim`` enters as Megatron's
    ``kv_channels`` (q_proj = a·d); with sliding windows the s of the attention term is each
    layer's ``attended_keys``, averaged over layers.
    """
    if tokens <= 0 or seq_len <= 0:
        raise ValueError(f"tokens and seq_len must be positive, got {tokens} and {seq_len}")
    h, s = cfg.hidden_size, seq_len
    if cfg.attention == "mla":
        attn = 2.0 * mla_projection_params(cfg) + mla_core_flops_per_token(cfg, s)
    else:
        q = cfg.q_width
        # keys per query, averaged over the layers (s without sliding windows)
        keys = sum(attended_keys(s, layer_window(cfg, i)) for i in range(cfg.num_layers)) \
            / cfg.num_layers
        attn = 2.0 * (h * cfg.qkv_width + q * h) + 4.0 * keys * q
    mlp = sum(mlp_matmul_flops_per_token(cfg, i) for i in range(cfg.num_layers))
    forward = cfg.num_layers * attn + mlp + 2.0 * cfg.vocab_size * h
    return 3.0 * tokens * forward

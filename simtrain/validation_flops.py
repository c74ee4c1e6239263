"""FLOP formulas of the published sources, each as the source writes it (per iteration).

Published TFLOP/s are only comparable under the source's own count (shared/reference/
README.md): simtrain turns its *simulated step time* into TFLOP/s with the same formula, so
the error in TFLOP/s is the error in step time, inverted. Tokens/s per GPU needs no formula.
"""

from __future__ import annotations

from simtrain.scenario import Scenario
from simtrain.workload.model import ModelConfig


def megatron_2020_hardware_flops(batch: int, seq: int, layers: int, hidden: int,
                                 vocab: int) -> float:
    """Hardware FLOPs per iteration with full activation recompute (Megatron SC21 Eq. 3):
    ``96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))``; what the 2020 README's TFLOP/s count."""
    b, s, ll, h, v = batch, seq, layers, hidden, vocab
    return 96.0 * b * s * ll * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * ll * h))


def mcore_2024_model_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int, *,
                           heads: int, query_groups: int | None = None,
                           ffn_hidden: int | None = None, swiglu: bool = False,
                           experts_per_token: int = 1, kv_channels: int | None = None) -> float:
    """Megatron-Core ``num_floating_point_operations`` at commit 937571cf (model FLOPs, no
    recompute, non-causal attention), per iteration:

    ``12·B·s·l·h²·[(1 + g/a + s/h)·(q_proj/h) + (ffn/h)·topk·(3/2 if swiglu) + V/(2·l·h)]``
    with ``q_proj = kv_channels·a`` (= h for standard heads), g query groups (= a for MHA).
    For a plain GPT (MHA, ffn 4h, GELU) this is ``72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))``.
    """
    b, s, ll, h, v, a = batch, seq, layers, hidden, vocab, heads
    g = query_groups or a
    ffn = ffn_hidden or 4 * h
    q_proj = (kv_channels or h // a) * a
    gated = 1.5 if swiglu else 1.0
    return 12.0 * b * s * ll * h * h * ((1.0 + g / a + s / h) * (q_proj / h)
                                        + (ffn / h) * experts_per_token * gated
                                        + v / (2.0 * ll * h))


def matmul_params(model: ModelConfig) -> float:
    """Weights that take part in a GEMM per token (NeMo's ``N_matmul``): per layer Q, K, V,
    O projections ``h·(a + 2g)·d + a·d·h`` and the MLP of the active experts
    (``3·h·f`` gated, ``2·h·f`` otherwise, times top-k for MoE), plus the output layer
    ``h·V``; embeddings and norms excluded."""
    h, d, a, g = model.hidden_size, model.head_width, model.num_heads, model.kv_heads
    attention = h * (a + 2 * g) * d + a * d * h
    ffn = model.expert_ffn_size if model.is_moe else model.ffn_size
    mlp = (3 if model.activation == "swiglu" else 2) * h * ffn
    mlp *= model.experts_per_token if model.is_moe else 1
    return float(model.num_layers * (attention + mlp) + h * model.vocab_size)


def nemo_full_attention_flops(model: ModelConfig, tokens: float, seq: int) -> float:
    """NeMo 24.07 / NeMo 2.0 docs: ``(6·N_matmul + 12·l·s·h)`` FLOPs per token, full
    (non-causal) attention (measured_runs.yaml flop_conventions; LLAMA3-8B at 8192 tokens
    gives 57.9e9 FLOP/token)."""
    per_token = 6.0 * matmul_params(model) + 12.0 * model.num_layers * seq * model.hidden_size
    return per_token * tokens


FORMULAS = ("megatron-2020-hardware", "mcore-2024-model", "nemo-full-attention")


def formula_flops(kind: str, scenario: Scenario) -> float:
    """FLOPs per step of ``scenario`` under the suite's formula ``kind`` (one of FORMULAS)."""
    m: ModelConfig = scenario.model
    b, s = scenario.training.global_batch_size, scenario.seq_len
    if kind == "megatron-2020-hardware":
        return megatron_2020_hardware_flops(b, s, m.num_layers, m.hidden_size, m.vocab_size)
    if kind == "mcore-2024-model":
        return mcore_2024_model_flops(
            b, s, m.num_layers, m.hidden_size, m.vocab_size, heads=m.num_heads,
            query_groups=m.kv_heads, ffn_hidden=m.expert_ffn_size if m.is_moe else m.ffn_size,
            swiglu=m.activation == "swiglu",
            experts_per_token=m.experts_per_token if m.is_moe else 1,
            kv_channels=m.kv_channels)
    if kind == "nemo-full-attention":
        return nemo_full_attention_flops(m, float(b * s), s)
    raise ValueError(f"unknown FLOP formula {kind!r}; expected one of: {', '.join(FORMULAS)}")

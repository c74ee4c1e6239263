"""Multi-head latent attention (MLA), DeepSeek-V2/V3: its kernels, parameters and sizes.

DeepSeek-V2 (DeepSeek-AI 2024, arXiv:2405.04434, Sec. 2.1.2-2.1.3, Eqs. 9-19) compresses
keys and values into a latent c_KV = W_DKV·h of ``kv_lora_rank`` (d_c) per token and
queries into c_Q = W_DQ·h of ``q_lora_rank`` (d_c'); per head, up-projections give the
no-RoPE parts q_C, k_C (``qk_head_dim``, d_h) and v (``v_head_dim``); RoPE is decoupled:
a per-head query part q_R = RoPE(W_QR·c_Q) and one key part shared by all heads
k_R = RoPE(W_KR·h) of ``qk_rope_dim`` (d_h^R). DeepSeek-V3 (arXiv:2412.19437, Sec. 2.1.1)
keeps this shape: d_c = 512, d_c' = 1536, d_h = 128, d_h^R = 64, 128 heads, h = 7168.

Training (as Megatron-Core's and the reference implementation do) materialises per-head
keys [k_C; k_R] of d_h + d_h^R and values of v_head_dim, and runs a fused attention on
them; the latent cache only matters for inference. Kernels of one layer on a TP rank of
``heads`` heads, m tokens (the down-projections and their RMSNorms are replicated across
TP, as Megatron-Core's duplicated linear_q_down_proj / linear_kv_down_proj):

- q_down GEMM (m, d_c', h), q_norm RMSNorm over d_c', q_up GEMM (m, heads·(d_h + d_h^R),
  d_c') [without q_lora_rank: one q GEMM (m, heads·(d_h + d_h^R), h)];
- kv_down GEMM (m, d_c + d_h^R, h) (the latent and the shared RoPE key, one GEMM as
  DeepSeek's kv_a_proj_with_mqa), kv_norm over d_c, kv_up GEMM (m, heads·(d_h + d_v), d_c);
- RoPE on q_R (heads·d_h^R) and k_R (d_h^R);
- core attention: QKᵀ over d_h + d_h^R and AV over d_v, non-causal 2·b·sq·sk·heads·
  (d_h + d_h^R + d_v) FLOPs (the 4·b·s²·h of standard attention when both widths are h/a);
- output projection GEMM (m, h, heads·d_v).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simtrain.workload.ops import FP32, ROPE_FLOPS, Op, elementwise, gemm, norm

if TYPE_CHECKING:  # model.py imports this module
    from simtrain.workload.model import ModelConfig

MLA_FIELDS = ("kv_lora_rank", "qk_head_dim", "qk_rope_dim", "v_head_dim")


def check_mla(cfg: ModelConfig) -> None:
    """ValueError unless an ``attention: mla`` model gives every MLA width."""
    missing = [f for f in MLA_FIELDS if getattr(cfg, f) is None]
    if missing:
        raise ValueError(f"model.attention: mla needs {', '.join('model.' + f for f in missing)}"
                         f" (DeepSeek-V3: kv_lora_rank 512, qk_head_dim 128, qk_rope_dim 64, "
                         f"v_head_dim 128; q_lora_rank 1536 or null for a full q projection)")
    if cfg.head_dim is not None and cfg.head_dim != cfg.hidden_size // cfg.num_heads:
        raise ValueError("model.head_dim does not apply to attention: mla (its widths are "
                         "qk_head_dim, qk_rope_dim and v_head_dim); remove head_dim")


def _dims(cfg: ModelConfig) -> tuple[int, int, int, int, int | None]:
    """(d_c, d_h, d_h^R, d_v, d_c') of an MLA model (validated: never None but d_c')."""
    assert cfg.kv_lora_rank and cfg.qk_head_dim and cfg.qk_rope_dim and cfg.v_head_dim, \
        "check_mla ran on validation"
    return cfg.kv_lora_rank, cfg.qk_head_dim, cfg.qk_rope_dim, cfg.v_head_dim, cfg.q_lora_rank


def mla_params(cfg: ModelConfig) -> int:
    """Parameters of one MLA block (no biases, RMSNorms of one weight each):
    q: h·d_c' + d_c' + d_c'·a·(d_h + d_h^R) (or h·a·(d_h + d_h^R) without q_lora_rank);
    kv: h·(d_c + d_h^R) + d_c + d_c·a·(d_h + d_v); output a·d_v·h.
    DeepSeek-V3: 11,010,048 + 1,536 + 37,748,736 + 4,128,768 + 512 + 16,777,216
    + 117,440,512 = 187,107,328."""
    h, a = cfg.hidden_size, cfg.num_heads
    dc, dh, dr, dv, dq = _dims(cfg)
    q = (h * dq + dq + dq * a * (dh + dr)) if dq else h * a * (dh + dr)
    kv = h * (dc + dr) + dc + dc * a * (dh + dv)
    return q + kv + a * dv * h


def mla_core_flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Forward core-attention FLOPs per query token over ``seq_len`` keys (non-causal):
    2·s·a·(d_h + d_h^R) for QKᵀ plus 2·s·a·d_v for AV."""
    _, dh, dr, dv, _ = _dims(cfg)
    return 2.0 * seq_len * cfg.num_heads * (dh + dr + dv)


def mla_projection_params(cfg: ModelConfig) -> int:
    """The GEMM weights of ``mla_params`` (the two RMSNorm weights left out)."""
    dc, _, _, _, dq = _dims(cfg)
    return mla_params(cfg) - dc - (dq or 0)


def mla_attention(name: str, b: int, heads: int, sq: int, sk: int, qk: int, v: int,
                  dt: int) -> Op:
    """Fused core attention with query/key width ``qk`` and value width ``v`` (heads·dims):
    2·b·sq·sk·(qk + v) FLOPs (non-causal); reads q, k, v, writes o and the fp32 logsumexp;
    saves q, k, v and the logsumexp. Equals ``flash_attention`` when qk = v."""
    m, lse = b * sq, FP32 * b * heads * sq
    return Op(name, "attention", 2.0 * b * sq * sk * (qk + v),
              float(dt * m * (2 * qk + 2 * v) + lse), None, (),
              float(dt * m * (2 * qk + v) + lse), role="core_attention")


def mla_projections(cfg: ModelConfig, p: str, m: int, heads: int, dt: int) -> list[Op]:
    """The q and kv projections (with their latent RMSNorms) and RoPE of one TP rank's
    ``heads`` heads over m tokens, in execution order; the core and output follow."""
    h = cfg.hidden_size
    dc, dh, dr, dv, dq = _dims(cfg)
    if dq:
        q = [gemm(f"{p}.attn.q_down", m, dq, h, dt, False, dt * m * h),
             norm(f"{p}.attn.q_norm", dq, False, m, dt),
             gemm(f"{p}.attn.q_up", m, heads * (dh + dr), dq, dt, False, dt * m * dq)]
    else:
        q = [gemm(f"{p}.attn.q", m, heads * (dh + dr), h, dt, False, dt * m * h)]
    # The kv_down GEMM reads the same normed input as q_down: saved once (q_down's).
    kv = [gemm(f"{p}.attn.kv_down", m, dc + dr, h, dt, False, 0.0 if dq else dt * m * h),
          norm(f"{p}.attn.kv_norm", dc, False, m, dt),
          gemm(f"{p}.attn.kv_up", m, heads * (dh + dv), dc, dt, False, dt * m * dc)]
    rope = elementwise(f"{p}.attn.rope", m * (heads * dr + dr), m * (heads * dr + dr),
                       ROPE_FLOPS, dt)
    return [*q, *kv, rope]


def mla_widths(cfg: ModelConfig, heads: int) -> tuple[int, int]:
    """(query/key width, value width) of ``heads`` heads: heads·(d_h + d_h^R), heads·d_v."""
    _, dh, dr, dv, _ = _dims(cfg)
    return heads * (dh + dr), heads * dv


def mla_activation_units(cfg: ModelConfig) -> tuple[float, float]:
    """Saved activations per token of one MLA block in 16-bit units, as (split over TP,
    replicated on every TP rank), matching ``mla_projections`` + core + output:
    split: q, k, v for the core 2·(2·a·(d_h + d_h^R) + a·d_v) and the output projection's
    input 2·a·d_v; replicated: the latent norms' and up-projections' inputs 2·2·(d_c' + d_c)
    (the normed layer input the down-projections read is counted with the layer's)."""
    a = cfg.num_heads
    dc, dh, dr, dv, dq = _dims(cfg)
    split = 2.0 * (2 * a * (dh + dr) + a * dv) + 2.0 * a * dv
    replicated = 4.0 * ((dq or 0) + dc)
    return split, replicated

"""Memory per GPU: model states, activations, in-flight microbatches, communication buffers.

Pure functions; bytes in, bytes out. Conventions:

- **Model states** (Rajbhandari et al. 2020, "ZeRO", Sec. 3.1 and 5): mixed-precision Adam
  keeps a 16-bit weight (2 B/param), a gradient (``grad_bytes``: 2 B in ZeRO's accounting,
  4 B with fp32 gradient accumulation as in PyTorch AMP DDP and Megatron-LM) and K = 12 B
  of fp32 optimizer state (master weight, momentum, variance). ZeRO's 16Ψ is
  2 + 2 + 12; Megatron's 18 B/param is 2 + 4 + 12 (its distributed optimizer, i.e. ZeRO-1,
  gives 6 + 12/d). ZeRO-1 shards the optimizer state over the N data-parallel ranks
  (4Ψ + 12Ψ/N), ZeRO-2 also the gradients (2Ψ + 14Ψ/N), ZeRO-3 / FSDP everything (16Ψ/N).
- **Activations** (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models", Sec. 4): per transformer layer, 16-bit activations with dropout,
  s·b·h·(34 + 5·a·s/h) bytes without parallelism. TP alone: s·b·h·(10 + 24/t + 5·a·s/(h·t));
  TP + SP: s·b·h/t·(34 + 5·a·s/h); selective recompute drops the 5·a·s/h term (the attention
  softmax/dropout matrices are recomputed); full recompute keeps only the layer input,
  2·s·b·h (/t with SP). A fused (flash) attention kernel never stores the s x s matrices,
  so the 5·a·s/h term is absent whatever the recompute mode: the formula follows the
  model's ``attention_kernel``.
- **In flight**: a pipeline stage holds the activations of every microbatch whose forward
  ran and whose backward did not yet (counted from the schedule itself, see
  ``simtrain.parallel.schedule.peak_in_flight``): 1F1B stage i holds p - i, GPipe m.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from simtrain.workload.model import ModelConfig

GIB = 2**30
Recompute = Literal["none", "selective", "full"]

OPTIMIZER_STATE_BYTES = 12.0  # fp32 master weight + Adam m + v (ZeRO's K = 12)


def model_state_bytes(params: float, *, zero: int, dp: int, weight_bytes: float = 2.0,
                      grad_bytes: float = 2.0,
                      optimizer_bytes: float = OPTIMIZER_STATE_BYTES) -> dict[str, float]:
    """Bytes of weights, gradients and optimizer states for ``params`` parameters on one GPU.

    ZeRO (Rajbhandari et al. 2020, Fig. 1) over ``dp`` ranks, per stage:
    0: (2 + 2 + 12)Ψ = 16Ψ; 1: 2Ψ + 2Ψ + 12Ψ/N; 2: 2Ψ + (2 + 12)Ψ/N; 3: (2 + 2 + 12)Ψ/N.
    With ``grad_bytes`` = 4 (fp32 gradient accumulation) the stage-0 total is Megatron's 18Ψ.
    """
    if zero not in (0, 1, 2, 3):
        raise ValueError(f"zero stage must be 0, 1, 2 or 3, got {zero}")
    if dp < 1 or params < 0:
        raise ValueError(f"need dp >= 1 and params >= 0, got dp={dp}, params={params}")
    return {
        "weights": params * weight_bytes / (dp if zero >= 3 else 1),
        "gradients": params * grad_bytes / (dp if zero >= 2 else 1),
        "optimizer": params * optimizer_bytes / (dp if zero >= 1 else 1),
    }


def korthikanti_activation_bytes(s: int, b: int, h: int, a: int, *, t: int = 1,
                                 sp: bool = False, recompute: Recompute = "none",
                                 flash: bool = False) -> float:
    """Activation bytes one transformer layer saves for backward (Korthikanti et al. 2022).

    Eq. 1-5 (16-bit activations, dropout, standard attention):
    none:      s·b·h·(34 + 5·a·s/h)                 (t = 1)
    TP:        s·b·h·(10 + 24/t + 5·a·s/(h·t))
    TP + SP:   s·b·h·(34 + 5·a·s/h)/t
    selective: the same without the 5·a·s/h term (also what ``flash`` attention gives);
    full:      2·s·b·h (the layer input only; /t with SP).
    """
    if min(s, b, h, a, t) < 1:
        raise ValueError(f"s, b, h, a and t must be positive, got {s}, {b}, {h}, {a}, {t}")
    sbh = s * b * h
    if recompute == "full":
        return 2.0 * sbh / (t if sp else 1)
    attn = 0.0 if recompute == "selective" or flash else 5.0 * a * s / h
    if sp:
        return sbh * (34.0 + attn) / t
    return sbh * (10.0 + 24.0 / t + attn / t)


def layer_activation_bytes(cfg: ModelConfig, b: int, s: int, *, tp: int = 1, cp: int = 1,
                           sp: bool = False, recompute: Recompute = "none",
                           dtype_bytes: int = 2) -> float:
    """Korthikanti's per-layer count generalised to GQA, SwiGLU, MoE, CP and no dropout.

    Term by term (16-bit elements, sl = s/cp local tokens, r = replicated without SP):
    norm inputs 2·2·sl·b·h (r); QKV input 2·sl·b·h (r); Q, K, V 2·sl·b·(h + 2·kv)/t;
    [standard kernel: softmax 2·a·sl·s·b/t, its dropout mask a·sl·s·b/t, scores after
    dropout 2·a·sl·s·b/t]; proj input 2·sl·b·h/t; attention dropout mask sl·b·h (r);
    fc1 input 2·sl·b·h (r); activation input 2·sl·b·fc1/t; fc2 input 2·sl·b·f/t; MLP
    dropout mask sl·b·h (r). MoE: the expert MLP terms are multiplied by the tokens each
    rank's experts see (top-k x capacity) and the router adds its fp32 logits. With dropout,
    MHA, gelu, 4h and cp = 1 this is exactly ``korthikanti_activation_bytes``.
    """
    h, sl = cfg.hidden_size, s // cp
    kv, q = cfg.kv_heads * cfg.kv_channels, cfg.q_width
    unit = dtype_bytes / 2.0  # the counts below are for 16-bit elements
    if recompute == "full":
        return 2.0 * sl * b * h * unit / (tp if sp else 1)
    rep = tp if sp else 1
    mask = 1.0 if cfg.dropout_masks else 0.0
    replicated = (4.0 + 2.0 + mask + 2.0 + mask) * sl * b * h
    attn = (2.0 * (q + 2 * kv) + 2.0 * q) * sl * b
    if cfg.attention_kernel == "standard" and recompute == "none":
        attn += (4.0 + mask) * cfg.num_heads * sl * s * b
    if cfg.is_moe:
        f = cfg.expert_ffn_size
        routed = cfg.experts_per_token * (cfg.capacity_factor or 1.0)
        router = 4.0 * sl * b * cfg.num_experts / 2.0  # fp32 logits in 16-bit units
    else:
        f, routed, router = cfg.ffn_size, 1.0, 0.0
    fc1 = 2 * f if cfg.activation == "swiglu" else f
    mlp = (2.0 * fc1 + 2.0 * f) * sl * b * routed
    return unit * (replicated / rep + (attn + mlp) / tp + router)


def pipeline_inflight_formula(schedule: str, p: int, m: int, stage: int, v: int = 1) -> float:
    """Microbatches (in units of a whole stage's layers) stage ``stage`` holds at its peak.

    GPipe: m. 1F1B (Narayanan et al. 2021, PipeDream-Flush): min(p - i, m). Interleaved
    1F1B with v chunks (Megatron-LM schedules.py warm-up count): (2·(p - i - 1) + (v - 1)·p
    + 1) chunk-microbatches of L/(p·v) layers; stage 0 holds p·(1 + (p - 1)/(p·v)) stage
    equivalents, Korthikanti et al. 2022 Sec. 4.2.3.
    """
    if schedule == "gpipe":
        return float(m)
    if schedule == "interleaved" and v > 1:
        return min(m * v, 2 * (p - stage - 1) + (v - 1) * p + 1) / v
    return float(min(p - stage, m))


@dataclass(frozen=True)
class MemoryReport:
    """Per-GPU memory of the fullest pipeline stage, bytes by category."""

    stage: int
    breakdown: dict[str, float]
    capacity: float

    @property
    def total(self) -> float:
        return sum(self.breakdown.values())

    def gib(self) -> dict[str, float]:
        return {k: v / GIB for k, v in self.breakdown.items()}

    def fits(self) -> bool:
        return self.total <= self.capacity

    def describe(self) -> str:
        parts = ", ".join(f"{k} {v / GIB:.1f}" for k, v in self.breakdown.items())
        return (f"stage {self.stage} needs {self.total / GIB:.1f} GiB per GPU ({parts} GiB) "
                f"but the GPU has {self.capacity / GIB:.0f} GiB")

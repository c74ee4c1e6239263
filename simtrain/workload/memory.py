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
from typing import Literal, get_args

from simtrain.workload.mla import mla_activation_units
from simtrain.workload.model import ModelConfig

GIB = 2**30
Recompute = Literal["none", "selective", "op", "full"]
# Every activation-recompute mode, in order of memory saved (the one home of the names).
RECOMPUTE_MODES: tuple[str, ...] = get_args(Recompute)

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
                           dtype_bytes: int = 2, modules: tuple[str, ...] = (),
                           attention_saved: bool = True) -> float:
    """Korthikanti's per-layer count generalised to GQA, SwiGLU, MoE, CP and no dropout.

    Term by term (16-bit elements, sl = s/cp local tokens, r = replicated without SP):
    norm inputs 2·2·sl·b·h (r); QKV input 2·sl·b·h (r); Q, K, V 2·sl·b·(h + 2·kv)/t;
    [standard kernel: softmax 2·a·sl·s·b/t, its dropout mask a·sl·s·b/t, scores after
    dropout 2·a·sl·s·b/t]; proj input 2·sl·b·h/t; attention dropout mask sl·b·h (r);
    fc1 input 2·sl·b·h (r); activation input 2·sl·b·fc1/t; fc2 input 2·sl·b·f/t; MLP
    dropout mask sl·b·h (r); QK-norm: its inputs 2·sl·b·(a·d + kv)/t and fp32 rstd
    4·sl·b·(a + g)/t; a clamped GLU: the unclamped fc1 output 2·sl·b·fc1/t. MoE: the
    expert MLP terms are multiplied by the tokens each rank's experts see (top-k x
    capacity), shared experts add a dense MLP's terms and the
    router its fp32 logits; the fullest of a dense and a MoE layer counts when the first
    layers are dense. MLA: ``mla.mla_activation_units`` in place of Q, K, V and the proj
    input. Query width a·d (= h unless head_dim is given); ``model.gqa`` repeat saves K
    and V at that width (kv = a·d: the attention's inputs are the repeated copies; under
    ``op`` they are recomputed, not saved). ``op`` (torchtitan's per-op
    checkpointing): the block input, the saved mm and SDPA outputs
    (``op_checkpoint_widths``; a MoE block counted as a dense one) and the logsumexp; with
    ``attention_saved`` False (cuDNN SDPA, not in the save list) neither the SDPA output nor
    its logsumexp is kept.
    ``modules`` (Megatron-Core's output-discarding recompute, ``moe.RECOMPUTE_MODULES``) of a
    MoE layer: "moe_act" keeps only the experts' fc1 output (the checkpoint's input), not
    the clamp's copy nor fc2's input; "layernorm" drops the pre-MLP norm's output, 2·sl·b·h
    (r). With dropout, MHA, gelu, 4h and cp = 1 this is exactly
    ``korthikanti_activation_bytes``.
    """
    h, sl = cfg.hidden_size, s // cp
    kv = cfg.kv_heads * cfg.head_width
    q = cfg.num_heads * cfg.head_width
    unit = dtype_bytes / 2.0  # the counts below are for 16-bit elements
    if recompute == "full":
        return 2.0 * sl * b * h * unit / (tp if sp else 1)
    rep = tp if sp else 1
    if recompute == "op":  # torchtitan per-op checkpointing (simtrain.parallel.op_checkpoint)
        sharded, whole = op_checkpoint_widths(q, kv, h, cfg.ffn_size, cfg.activation == "swiglu")
        heads = cfg.num_heads // tp if attention_saved else 0
        sharded -= 0 if attention_saved else q  # the SDPA output is recomputed
        replicated = float(h * (1 + (2 if sp and tp > 1 else 0)))  # block input, saved RS out
        return (dtype_bytes * sl * b * (sharded / tp + whole + replicated / rep)
                + 4.0 * heads * sl * b)  # + the fp32 logsumexp of the saved SDPA
    mask = 1.0 if cfg.dropout_masks else 0.0
    replicated = (4.0 + 2.0 + mask + 2.0 + mask) * sl * b * h
    full = 0.0  # on every TP rank whatever SP does: MLA's latent projections
    if cfg.attention == "mla":
        split, latent = mla_activation_units(cfg)
        attn, full = split * sl * b, latent * sl * b
    else:
        # SDPA's saved K and V are query-head wide after repeat_kv (``model.gqa``)
        kv_saved = q if cfg.gqa == "repeat" else kv
        attn = (2.0 * (q + 2 * kv_saved) + 2.0 * q) * sl * b
        if cfg.qk_norm:  # QK-norm saves its inputs, q and k, and fp32 rstd per head row
            attn += (2.0 * (q + kv) + 4.0 * (cfg.num_heads + cfg.kv_heads)) * sl * b
    if cfg.attention_kernel == "standard" and recompute == "none" and cfg.attention != "mla":
        attn += (4.0 + mask) * cfg.num_heads * sl * s * b
    clamp = cfg.activation_clamp is not None
    mlp = _mlp_units(cfg.ffn_size, 1.0, cfg.activation, clamp) * sl * b
    router = 0.0
    if cfg.is_moe:
        routed = cfg.experts_per_token * (cfg.capacity_factor or 1.0)
        if "moe_act" in modules:  # the fc1 output alone (2·fc1 16-bit units per copy)
            moe = 2.0 * (2 if cfg.activation == "swiglu" else 1) * cfg.expert_ffn_size * routed
        else:
            moe = _mlp_units(cfg.expert_ffn_size, routed, cfg.activation, clamp)
        if cfg.shared_expert_ffn_size:
            moe += _mlp_units(cfg.shared_expert_ffn_size, 1.0, cfg.activation, clamp)
        router = 4.0 * sl * b * cfg.num_experts / 2.0  # fp32 logits in 16-bit units
        # The pre-MLP norm's output, in the MLP's 1/t units (it is replicated 1/rep).
        norm_out = 2.0 * sl * b * h * tp / rep if "layernorm" in modules else 0.0
        # The fullest layer: dense first layers (dense_layers > 0) may hold more.
        mlp = max(moe * sl * b - norm_out, mlp if cfg.dense_layers else 0.0)
    return unit * (replicated / rep + (attn + mlp) / tp + router + full)


def op_checkpoint_widths(q: int, kv: int, h: int, f: int, swiglu: bool) -> tuple[int, int]:
    """Per-token widths of what torchtitan's per-op checkpointing saves of a dense block:
    (column-parallel, 1/t per TP rank; row-parallel, whole on every rank).

    Its mm's in forward order are wq (q), wk (kv), wv (kv), wo (h), w1 (f), w3 (f, SwiGLU
    only), w2 (h), and the odd ones' outputs are saved (``simtrain.parallel.op_checkpoint``):
    wq, wv, w1 column-parallel, w2 (SwiGLU; else no fourth) row-parallel, the unreduced
    m x h partial sum; plus the SDPA output (q, column-parallel). Llama 3 8B (q 4096,
    kv 1024, h 4096, f 14336, SwiGLU): (4096 + 1024 + 14336 + 4096, 4096) = (23552, 4096).
    """
    order = [(True, q), (True, kv), (True, kv), (False, h), (True, f)]
    order += [(True, f), (False, h)] if swiglu else [(False, h)]
    saved = order[::2]
    return (sum(w for col, w in saved if col) + q, sum(w for col, w in saved if not col))


def _mlp_units(width: int, tokens: float, activation: str, clamp: bool = False) -> float:
    """Saved MLP activations per token in 16-bit units: activation input 2·fc1 and fc2
    input 2·f, for ``tokens`` copies of each token (top-k x capacity for experts); a
    clamped GLU (``model.activation_clamp``, workload.glu_clamp) also saves the
    unclamped fc1 output, 2·fc1 more."""
    fc1 = 2 * width if activation == "swiglu" else width
    saved = 2.0 * fc1 * (2 if clamp and activation == "swiglu" else 1)
    return (saved + 2.0 * width) * tokens


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

"""One rank's share of the model under TP, SP, CP and EP, as a program of steps.

The model is cut into units (the embedding, each transformer layer, the final norm, the LM
head). A unit is a list of steps in forward order: compute ops (a ``simtrain.workload``
``Op`` with its shard's shape), communication (op in forward, op in backward, over the
tp/cp/ep group) and ring attention (CP). Parallelisms are applied in this fixed order:

1. TP (Megatron column/row split, Shoeybi et al. 2019): QKV and fc1 split their output
   features, proj and fc2 their input features; heads and KV heads split t ways (fewer
   KV heads than t are replicated, one per rank). The "f" operator before a column-parallel
   GEMM is identity forward / all-reduce backward; "g" after a row-parallel GEMM all-reduces
   forward. Each moves b·s·h elements, forward and backward.
2. SP (Korthikanti et al. 2022): f becomes all-gather (backward reduce-scatter) and g
   reduce-scatter (backward all-gather); norms, dropout and residuals run on s/t tokens.
3. CP: every rank holds s/cp tokens (load-balanced causal chunks: 2·cp chunks, rank i takes
   i and 2·cp - 1 - i, so every rank does the same attention work). Ring attention passes
   K,V blocks around the CP ring in cp - 1 steps overlapped with cp blockwise attention
   steps (backward passes K,V and dK,dV); the all-gather variant gathers K,V up front
   (backward reduce-scatters dK,dV).
4. EP (MoE, Fedus et al. 2021; Megatron-Core): a router GEMM, all-to-all dispatch of
   top-k token copies to the ranks owning the experts, the local experts' GEMMs (one
   grouped GEMM), all-to-all combine; the same in reverse in backward.

At tp = cp = 1 and a dense model the ops are exactly those of ``lower_model``.
"""

from __future__ import annotations

from dataclasses import dataclass

from simtrain.workload.model import (
    _ACT_FLOPS,
    _ADD_FLOPS,
    _FP32,
    _IDS,
    _LOSS_FLOPS,
    _ROPE_FLOPS,
    ModelConfig,
    Op,
    Param,
    _elementwise,
    _gemm,
    _norm,
    attention_ops,
    moe_ops,
)


@dataclass(frozen=True, slots=True)
class Compute:
    """A kernel; ``expert`` kernels scale with the rank's routed-token load."""

    op: Op
    expert: bool = False


@dataclass(frozen=True, slots=True)
class Comm:
    """A collective over the ``group`` ("tp", "cp", "ep"); ``fwd``/``bwd`` op or None."""

    name: str
    group: str
    fwd: str | None
    bwd: str | None
    nbytes: float

    @property
    def kind(self) -> str:
        return f"{self.group}_comm"


@dataclass(frozen=True, slots=True)
class Ring:
    """Ring attention: ``steps`` blocks of ``op``/steps, K,V blocks of ``kv_bytes`` passed on."""

    op: Op
    kv_bytes: float
    steps: int


Step = Compute | Comm | Ring


@dataclass(frozen=True)
class Unit:
    """A named group of steps in forward order; its params are registered in this order."""

    name: str
    steps: tuple[Step, ...]
    layer: int = -1  # transformer layer index, -1 for embedding/head

    @property
    def params(self) -> tuple[Param, ...]:
        return tuple(p for s in self.steps if isinstance(s, Compute) for p in s.op.params)


@dataclass(frozen=True)
class ShardSpec:
    """Degrees that shape one rank's ops."""

    tp: int = 1
    cp: int = 1
    ep: int = 1
    sp: bool = False
    cp_algorithm: str = "ring"
    pp: int = 1


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    """KV heads a TP rank holds: kv/t, or 1 (replicated) when kv < t and t % kv == 0."""
    if kv_heads >= tp:
        return kv_heads // tp
    return 1


def _comm(name: str, group: str, fwd: str | None, bwd: str | None, nbytes: float,
          size: int) -> list[Step]:
    return [Comm(name, group, fwd, bwd, nbytes)] if size > 1 else []


def _f(name: str, spec: ShardSpec, nbytes: float) -> list[Step]:
    """Megatron's f before a column-parallel GEMM (SP: all-gather)."""
    if spec.sp:
        return _comm(name, "tp", "all_gather", "reduce_scatter", nbytes, spec.tp)
    return _comm(name, "tp", None, "all_reduce", nbytes, spec.tp)


def _g(name: str, spec: ShardSpec, nbytes: float) -> list[Step]:
    """Megatron's g after a row-parallel GEMM (SP: reduce-scatter)."""
    if spec.sp:
        return _comm(name, "tp", "reduce_scatter", "all_gather", nbytes, spec.tp)
    return _comm(name, "tp", "all_reduce", None, nbytes, spec.tp)


def block_unit(cfg: ModelConfig, i: int, b: int, s: int, dt: int, spec: ShardSpec) -> Unit:
    """Transformer layer ``i`` on one rank: b sequences, s/cp tokens each, 1/t of the heads."""
    t, h = spec.tp, cfg.hidden_size
    sl = s // spec.cp
    m = b * sl
    mn = m // t if spec.sp else m  # tokens of norms and residuals
    d = cfg.head_dim
    al = cfg.num_heads // t
    kvl = kv_heads_per_rank(cfg.kv_heads, t) * d
    hl = al * d
    act = float(dt * m * h)
    p = f"layers.{i}"
    steps: list[Step] = [Compute(_norm(f"{p}.input_norm", cfg, mn, dt))]
    steps += _f(f"{p}.attn.f", spec, act)
    steps.append(Compute(_gemm(f"{p}.attn.qkv", m, hl + 2 * kvl, h, dt, cfg.bias, dt * m * h)))
    if cfg.position_embedding == "rope":
        steps.append(Compute(_elementwise(f"{p}.attn.rope", m * (hl + kvl), m * (hl + kvl),
                                          _ROPE_FLOPS, dt)))
    kv_block = float(dt * m * 2 * kvl)
    if spec.cp > 1:
        # Context parallelism runs fused (flash) blocks whatever the model's kernel.
        lse = _FP32 * b * al * sl
        core = Op(f"{p}.attn.core", "attention", 4.0 * b * sl * s * hl,
                  float(dt * m * (2 * hl + 2 * kvl) + lse), None, (),
                  float(dt * m * (hl + 2 * kvl) + lse))
        if spec.cp_algorithm == "allgather":
            steps += _comm(f"{p}.attn.kv_allgather", "cp", "all_gather", "reduce_scatter",
                           kv_block * spec.cp, spec.cp)
            steps.append(Compute(core))
        else:
            steps.append(Ring(core, kv_block, spec.cp))
    else:
        steps += [Compute(op) for op in attention_ops(cfg, p, b, al, sl, s, hl, kvl, dt)]
    steps.append(Compute(_gemm(f"{p}.attn.proj", m, h, hl, dt, cfg.bias, dt * m * hl)))
    steps += _g(f"{p}.attn.g", spec, act)
    steps += [Compute(_elementwise(f"{p}.attn.residual", 2 * mn * h, mn * h, _ADD_FLOPS, dt)),
              Compute(_norm(f"{p}.post_attn_norm", cfg, mn, dt))]
    steps += _f(f"{p}.mlp.f", spec, act)
    if cfg.is_moe:
        steps += _moe(cfg, p, m, h, dt, spec)
    else:
        fl = cfg.ffn_size // t
        fc1 = (2 if cfg.activation == "swiglu" else 1) * fl
        steps += [Compute(_gemm(f"{p}.mlp.fc1", m, fc1, h, dt, cfg.bias, dt * m * h)),
                  Compute(_elementwise(f"{p}.mlp.act", m * fc1, m * fl, _ACT_FLOPS, dt,
                                       dt * m * fc1)),
                  Compute(_gemm(f"{p}.mlp.fc2", m, h, fl, dt, cfg.bias, dt * m * fl))]
    steps += _g(f"{p}.mlp.g", spec, act)
    steps.append(Compute(_elementwise(f"{p}.mlp.residual", 2 * mn * h, mn * h, _ADD_FLOPS, dt)))
    return Unit(p, tuple(steps), layer=i)


def _moe(cfg: ModelConfig, p: str, m: int, h: int, dt: int, spec: ShardSpec) -> list[Step]:
    """Router, all-to-all dispatch, this rank's E/ep experts (grouped GEMMs), combine.

    Each rank routes its m tokens to k experts: it sends k·m·h elements (all-to-all size per
    rank, nccl-tests convention) and its experts receive k·m tokens on average.
    """
    router, experts = moe_ops(cfg, p, m, dt, cfg.num_experts // spec.ep, spec.tp)
    moved = float(dt * cfg.experts_per_token * m * h)
    steps: list[Step] = [Compute(router)]
    steps += _comm(f"{p}.mlp.dispatch", "ep", "all_to_all", "all_to_all", moved, spec.ep)
    steps += [Compute(op, expert=True) for op in experts]
    steps += _comm(f"{p}.mlp.combine", "ep", "all_to_all", "all_to_all", moved, spec.ep)
    return steps


def embedding_unit(cfg: ModelConfig, b: int, s: int, dt: int, spec: ShardSpec) -> Unit:
    """Vocab-parallel lookup (V/t rows per rank) then the TP all-reduce (SP: reduce-scatter)
    of the partial embeddings; learned positions are replicated."""
    h, t = cfg.hidden_size, spec.tp
    m = b * (s // spec.cp)
    rows = padded_vocab(cfg, t) // t
    steps: list[Step] = [Compute(Op("embedding.word", "embedding", 0.0,
                                    float(_IDS * m + 2 * dt * m * h), None,
                                    (Param("embedding.word.weight", rows * h),),
                                    float(_IDS * m)))]
    if cfg.position_embedding == "learned":
        steps.append(Compute(Op("embedding.position", "embedding", _ADD_FLOPS * m * h,
                                float(dt * (s * h + 2 * m * h)), None,
                                (Param("embedding.position.weight", cfg.max_seq_len * h),),
                                0.0)))
    steps += _g("embedding.g", spec, float(dt * m * h))
    return Unit("embedding", tuple(steps))


def head_units(cfg: ModelConfig, b: int, s: int, dt: int, spec: ShardSpec) -> list[Unit]:
    """Final norm, then the vocab-parallel LM head and fp32 cross-entropy (V/t per rank).

    Tied embeddings share the word embedding's weight when it lives on the same rank
    (pp = 1); with pp > 1 the last stage holds its own copy, as Megatron does.
    """
    h, t = cfg.hidden_size, spec.tp
    v = padded_vocab(cfg, t) // t
    m = b * (s // spec.cp)
    mn = m // t if spec.sp else m
    norm = Unit("final_norm", (Compute(_norm("final_norm", cfg, mn, dt)),))
    gemm = _gemm("lm_head", m, v, h, dt, False, dt * m * h)
    if cfg.tied_embeddings and spec.pp == 1:
        gemm = Op(gemm.name, gemm.kind, gemm.flops, gemm.bytes, gemm.gemm_shape, (),
                  gemm.activation_bytes)
    loss = Op("lm_head.loss", "loss", _LOSS_FLOPS * m * v,
              float((dt + _FP32) * m * v + _IDS * m), None, (), float(_FP32 * m * v + _IDS * m))
    steps: list[Step] = [*_f("lm_head.f", spec, float(dt * m * h)), Compute(gemm), Compute(loss)]
    return [norm, Unit("lm_head", tuple(steps))]


def padded_vocab(cfg: ModelConfig, tp: int) -> int:
    """Vocabulary padded to a multiple of tp (Megatron pads to 128·tp; at tp = 1 unpadded,
    so ``lower_model``'s shapes are kept)."""
    return -(-cfg.vocab_size // tp) * tp


def stage_layers(num_layers: int, pp: int, vpp: int,
                 pp_layers: list[int] | None = None) -> list[list[range]]:
    """Transformer layers of each (stage, chunk): chunk c of stage i is model chunk c·pp + i."""
    if pp_layers is not None:
        starts = [sum(pp_layers[:i]) for i in range(pp)]
        return [[range(starts[i], starts[i] + pp_layers[i])] for i in range(pp)]
    per = num_layers // (pp * vpp)
    return [[range((c * pp + i) * per, (c * pp + i + 1) * per) for c in range(vpp)]
            for i in range(pp)]


def chunk_units(cfg: ModelConfig, layers: range, *, first: bool, last: bool, b: int, s: int,
                dt: int, spec: ShardSpec) -> list[Unit]:
    """Units of one model chunk: the embedding if ``first``, its layers, the head if ``last``."""
    units = [embedding_unit(cfg, b, s, dt, spec)] if first else []
    units += [block_unit(cfg, i, b, s, dt, spec) for i in layers]
    if last:
        units += head_units(cfg, b, s, dt, spec)
    return units

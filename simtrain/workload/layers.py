"""The transformer, built in one place: each layer as a program of kernels and the sites
where a parallel plan puts its collectives, for one rank's shard.

``lower_model`` (no parallelism) keeps the kernels; ``simtrain.parallel.shard`` turns the
sites into collectives. The shard's degrees shape the kernels (Megatron's column/row split,
Shoeybi et al. 2019; SP, Korthikanti et al. 2022; CP; EP):

- TP: QKV and fc1 split their output features, proj and fc2 their input features; heads
  and KV heads split t ways (fewer KV heads than t are replicated, one per rank). A
  ``Site`` "f" stands before each column-parallel GEMM and "g" after each row-parallel
  one (Megatron's conjugate operators), each of b·s·h elements;
- SP: norms, dropout and residuals run on s/t tokens;
- CP: every rank holds s/cp tokens; core attention becomes a ``ContextAttention`` (fused
  blocks over all s keys, whatever the model's kernel) holding the rank's K,V block;
- EP: a router GEMM, "dispatch" and "combine" sites around this rank's E/ep experts
  (grouped GEMMs over the k·m routed tokens).

Saved activations (dt bytes each unless noted): norms save their input (+ fp32 stats),
each GEMM its input, attention q, k, v (+ fp32 logsumexp; no s² matrix with flash), the
activation its input. For a GPT layer this is 32·s·b·h + stats: Korthikanti et al. 2022's
34·s·b·h without the two dropout masks and without the 5·a·s²·b attention matrices. The
attention output is the proj GEMM's saved input and is counted there only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from simtrain.workload.cross_entropy import loss_op
from simtrain.workload.eager import eager_activation, eager_norm, eager_rope
from simtrain.workload.glu_clamp import expert_bias, glu_clamp
from simtrain.workload.mla import mla_attention, mla_projections, mla_widths
from simtrain.workload.moe import token_count_bytes
from simtrain.workload.ops import (
    ACT_FLOPS,
    ADD_FLOPS,
    ROPE_FLOPS,
    SOFTMAX_FLOPS,
    Op,
    Param,
    elementwise,
    embedding_lookup,
    flash_attention,
    gemm,
    norm,
    repeat_kv,
)
from simtrain.workload.unpermute import unpermute_op

if TYPE_CHECKING:  # the builders only read the config (model.py imports this module)
    from simtrain.workload.model import ModelConfig


@dataclass(frozen=True)
class Shard:
    """Degrees that shape one rank's kernels."""

    tp: int = 1
    cp: int = 1
    ep: int = 1
    sp: bool = False
    pp: int = 1
    etp: int = 0  # expert tensor parallelism; 0: tp
    unpermute: str = "fused"  # the dispatcher's unpermute kernels (workload/unpermute.py)

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp


@dataclass(frozen=True, slots=True)
class Site:
    """Where a split layer communicates: Megatron's "f" (before a column-parallel GEMM) and
    "g" (after a row-parallel one), MoE's "dispatch" and "combine", and "counts" (a
    dropless dispatch's all-gather of tokens per expert, ``moe.token_count_bytes``);
    ``nbytes`` per rank."""

    name: str
    kind: Literal["f", "g", "dispatch", "combine", "counts"]
    nbytes: float


@dataclass(frozen=True, slots=True)
class ContextAttention:
    """A CP rank's core attention over all keys, and the K,V block of ``kv_bytes`` it holds
    (ring attention passes it on; the all-gather variant, named ``gather_name``, gathers);
    ``q_bytes`` and ``o_bytes``: its Q block and attention output (Ulysses all-to-alls)."""

    gather_name: str
    core: Op
    kv_bytes: float
    q_bytes: float
    o_bytes: float


Item = Op | Site | ContextAttention


@dataclass(frozen=True)
class LayerProgram:
    """A named layer ("embedding", "layers.i", "final_norm", "lm_head") in forward order;
    ``layer`` is the transformer layer index, -1 for the others."""

    name: str
    items: tuple[Item, ...]
    layer: int = -1

    @property
    def ops(self) -> tuple[Op, ...]:
        return tuple(i for i in self.items if isinstance(i, Op))


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    """KV heads a TP rank holds: kv/t, or 1 (replicated) when kv < t and t % kv == 0."""
    if kv_heads >= tp:
        return kv_heads // tp
    return 1


def padded_vocab(cfg: ModelConfig, tp: int) -> int:
    """Vocabulary padded to a multiple of tp (Megatron pads to 128·tp; at tp = 1 unpadded)."""
    return -(-cfg.vocab_size // tp) * tp


def _norm(name: str, cfg: ModelConfig, m: int, dt: int) -> Op:
    op = norm(name, cfg.hidden_size, cfg.norm == "layernorm", m, dt)
    if cfg.elementwise == "eager":
        return eager_norm(op, m, cfg.hidden_size, dt, cfg.norm == "rmsnorm")
    return op


def _act(cfg: ModelConfig, name: str, tokens: int, fc1: int, width: int, dt: int) -> Op:
    """The activation over ``tokens`` rows of fc1's output (``width`` outputs each)."""
    op = elementwise(name, tokens * fc1, tokens * width, ACT_FLOPS, dt, dt * tokens * fc1)
    if cfg.elementwise == "eager":
        return eager_activation(op, tokens * width, dt, cfg.activation == "swiglu")
    return op


def _clamp(cfg: ModelConfig, name: str, elements: int, dt: int) -> list[Op]:
    """The GLU input clamp before a gated activation (``model.activation_clamp``), if any."""
    if cfg.activation_clamp is None:  # (the model accepts a clamp with swiglu only)
        return []
    return [glu_clamp(f"{name}.clamp", elements, dt)]


def layer_window(cfg: ModelConfig, i: int) -> int | None:
    """The sliding window of layer ``i`` (None: full attention): every layer's when
    ``sliding_window_pattern`` is 1, else all but layers n-1, 2n-1, ... (n the pattern)."""
    n = cfg.sliding_window_pattern
    if cfg.sliding_window is None or (n > 1 and (i + 1) % n == 0):
        return None
    return cfg.sliding_window


def attended_keys(seq: int, window: int | None) -> float:
    """Keys per query in the non-causal FLOP convention (s for full attention).

    A causal mask keeps s²/2 of the s² (query, key) pairs; a window w also drops the
    (s - w)²/2 pairs more than w keys back, leaving w·s - w²/2 causal pairs, i.e. the
    non-causal count of 2w - w²/s keys per query (w >= s: s). s = 4096, w = 128: 252.
    """
    if window is None or window >= seq:
        return float(seq)
    return 2.0 * window - window * window / seq


def attention_ops(cfg: ModelConfig, p: str, b: int, heads: int, sq: int, sk: int, q: int,
                  kv: int, dt: int, window: int | None = None) -> list[Op]:
    """Core attention of ``heads`` heads: ``sq`` queries of ``b`` sequences over ``sk`` keys.

    q and kv are the query and key/value widths (heads · head_dim). Flash: one fused
    kernel (``flash_attention``) over the ``attended_keys`` of a sliding ``window``
    (a flash kernel skips the key blocks outside it; standard kernels compute and mask
    every score, so the window does not shorten them). Standard (Megatron 2020): scores =
    QKᵀ as one batched GEMM (``torch.baddbmm``) of b·heads problems (sq, sk, d), fused
    scale-mask-softmax over the E = b·heads·sq·sk scores (read and write, output saved),
    dropout (writes a 1-byte mask) when the model has dropout, context = PV
    (``torch.bmm``) of b·heads problems (sq, d, sk): the same 4·b·sq·sk·q FLOPs, plus
    ~4·E·dt bytes of traffic. A batched GEMM is one kernel over its problems' tiles
    (``Op.groups`` = b·heads), so its backward's second GEMM (dK = dSᵀQ, dV = PᵀdO) is
    b·heads problems (sk, d, sq), not one GEMM of sk x d outputs reducing over every
    head's queries. Every kernel has the "core_attention" role.
    """
    if cfg.attention_kernel == "flash":
        keys = sk if window is None else attended_keys(sk, window)
        return [flash_attention(f"{p}.attn.core", b, heads, sq, keys, q, kv, dt)]
    m, d = b * sq, q // heads
    rows, e = b * heads * sq, b * heads * sq * sk
    core: Literal["core_attention"] = "core_attention"
    # Batched GEMMs read Q (K, V) per head: K and V are shared by q/kv query heads (GQA).
    batch = b * heads
    ops = [Op(f"{p}.attn.scores", "gemm", 2.0 * rows * sk * d,
              float(dt * (m * q + b * sk * kv + e)), (sq, sk, d), (),
              float(dt * m * (q + kv)), role=core, groups=batch),
           Op(f"{p}.attn.softmax", "softmax", SOFTMAX_FLOPS * e, float(2 * dt * e), None, (),
              float(dt * e), role=core)]
    if cfg.dropout_masks:  # reads and writes the scores, writes (and saves) a byte mask
        ops.append(Op(f"{p}.attn.dropout", "elementwise", ADD_FLOPS * e,
                      float(2 * dt * e + e), None, (), float(e), role=core))
    ops.append(Op(f"{p}.attn.context", "gemm", 2.0 * rows * d * sk,
                  float(dt * (e + b * sk * kv + m * q)), (sq, d, sk), (),
                  float(dt * (e + b * sk * kv)), role=core, groups=batch))
    return ops


def expert_launches(expert_gemm: str, local_experts: int) -> int:
    """Kernels the host issues for one of a rank's grouped expert GEMMs (its forward, and
    each of its dgrad and wgrad): 1 for a grouped kernel (``model.expert_gemm:
    grouped``), else one GEMM per local expert. Transformer Engine's ``GroupedLinear``
    passes per-expert operand lists to ``general_grouped_gemm`` in its forward, dgrad and
    wgrad (transformer_engine 2.9.0 ``pytorch/module/grouped_linear.py``), which hands
    them to ``tex.te_general_grouped_gemm`` (``pytorch/cpp_extensions/gemm.py``), one
    cuBLAS GEMM per pair "on multiple streams" (``common/include/transformer_engine/
    gemm.h``, docs/moe.md). Qwen3-30B-A3B on EP 8 (16 local experts): 16 per GEMM, 96
    per layer for fc1 and fc2 forward, dgrad and wgrad, against 6 grouped.
    """
    if local_experts < 1:
        raise ValueError(f"a rank holds at least one local expert, got {local_experts}")
    if expert_gemm == "grouped":
        return 1
    if expert_gemm == "per-expert":
        return local_experts
    raise ValueError(f"unknown model.expert_gemm {expert_gemm!r}; use grouped or per-expert")


def moe_ops(cfg: ModelConfig, p: str, m: int, dt: int, local_experts: int,
            tp: int) -> tuple[Op, list[Op]]:
    """The router GEMM (m, E, h) and ``local_experts`` experts' MLP as grouped kernels.

    Each of m tokens goes to k experts, so the local experts see k·m tokens on average
    when they are spread over E/local_experts ranks (or all E live here): the grouped GEMMs
    have m' = k·m rows in all, expert width f_e/tp, and own the weights of every local
    expert (expert parameters); the three kernels have the "expert" role. Each grouped GEMM
    is ``local_experts`` problems of ⌈k·m / local_experts⌉ tokens (``Op.groups``: the
    per-expert token count sets its efficiency, ``compute.gemm_efficiency``).
    """
    h, k = cfg.hidden_size, cfg.experts_per_token
    fe = cfg.expert_ffn_size // tp
    fc1_out = (2 if cfg.activation == "swiglu" else 1) * fe
    tokens = k * m

    def grouped(op: Op) -> Op:
        params = tuple(Param(q.name.replace(".mlp.", ".mlp.experts."), q.numel * local_experts,
                             expert=True) for q in op.params)
        extra = dt * (local_experts - 1) * sum(q.numel for q in op.params)
        assert op.gemm_shape is not None, "gemm() gives every GEMM its shape"
        _, n, kdim = op.gemm_shape
        shape = (-(-tokens // local_experts), n, kdim)
        return Op(op.name, op.kind, op.flops, op.bytes + extra, shape, params,
                  op.activation_bytes, role="expert", groups=local_experts,
                  launches=expert_launches(cfg.expert_gemm, local_experts))

    # The activation with its clamp is Megatron-Core's "moe_act" (TEGroupedMLP bias_act_func).
    act = replace(_act(cfg, f"{p}.mlp.act", tokens, fc1_out, fe, dt), role="expert",
                  module="moe_act")
    router = gemm(f"{p}.mlp.router", m, cfg.num_experts, h, dt, False, dt * m * h)
    clamp = [replace(op, role="expert", module="moe_act")
             for op in _clamp(cfg, f"{p}.mlp", tokens * fc1_out, dt)]
    # Megatron-Core adds the experts' fc2 bias outside the grouped GEMM (glu_clamp.py).
    bias = [expert_bias(f"{p}.mlp.fc2_bias", tokens * h, dt)] if cfg.bias else []
    experts = [grouped(gemm(f"{p}.mlp.fc1", tokens, fc1_out, h, dt, cfg.bias, dt * tokens * h)),
               *clamp, act,
               grouped(gemm(f"{p}.mlp.fc2", tokens, h, fe, dt, cfg.bias, dt * tokens * fe)),
               *bias]
    return router, experts


def local_expert_sort(p: str, elements: int, local_experts: int, ep: int, dt: int
                      ) -> tuple[list[Op], list[Op]]:
    """The dispatcher's second permutation around the local experts, ([sort], [unsort]).

    After the dispatch all-to-all a rank holds its routed copies grouped by source rank;
    with more than one local expert Megatron-Core's all-to-all dispatcher regroups them by
    expert before the grouped GEMMs and restores the order before the combine
    (``MoEAlltoAllTokenDispatcher``: ``sort_chunks_by_idxs`` with
    ``sort_input_by_local_experts`` / ``restore_output_by_local_experts``, when
    ``num_local_experts > 1``). Each is one read and one write of the ``elements`` = k·m·h
    received values, and so is its backward (the inverse permutation of the gradient).
    None with one local expert or without expert parallelism (the permute already sorts).
    """
    if local_experts <= 1 or ep <= 1:
        return [], []
    nbytes = float(2 * dt * elements)

    def one(name: str) -> Op:
        return Op(f"{p}.mlp.{name}", "elementwise", 0.0, nbytes, None, (), 0.0,
                  role="expert", backward_bytes=nbytes)

    return [one("sort_chunks")], [one("unsort_chunks")]


def _attention(cfg: ModelConfig, p: str, b: int, s: int, dt: int, shard: Shard,
               window: int | None = None
               ) -> tuple[list[Item], int]:
    """The attention block's kernels from the QKV (or MLA) projections through the core,
    and the output projection's input width (heads · value width) on one rank."""
    t, h = shard.tp, cfg.hidden_size
    sl = s // shard.cp
    m = b * sl
    al = cfg.num_heads // t
    items: list[Item] = []
    if cfg.attention == "mla":
        items += mla_projections(cfg, p, m, al, dt)
        qk, v = mla_widths(cfg, al)
        core = mla_attention(f"{p}.attn.core", b, al, sl, s, qk, v, dt)
        if shard.cp > 1:
            # Q block and output for the Ulysses all-to-alls (qk, v: this rank's heads' widths)
            items.append(ContextAttention(f"{p}.attn.kv_allgather", core,
                                          float(dt * m * (qk + v)), float(dt * m * qk),
                                          float(dt * m * v)))
        else:
            items.append(core)
        return items, v
    d = cfg.head_width
    kvl = kv_heads_per_rank(cfg.kv_heads, t) * d
    hl = al * d
    qkv = gemm(f"{p}.attn.qkv", m, hl + 2 * kvl, h, dt, cfg.bias, dt * m * h)
    items.append(replace(qkv, parts=(hl, kvl, kvl)))
    if cfg.qk_norm:  # one RMSNorm kernel over each head's d values, queries then keys
        items += [norm(f"{p}.attn.q_norm", d, False, m * al, dt),
                  norm(f"{p}.attn.k_norm", d, False, m * (kvl // d), dt)]
    if cfg.position_embedding == "rope":
        rope = elementwise(f"{p}.attn.rope", m * (hl + kvl), m * (hl + kvl), ROPE_FLOPS, dt)
        eager = cfg.elementwise == "eager"
        items.append(eager_rope(rope, m * (hl + kvl), dt) if eager else rope)
    if cfg.gqa == "repeat" and kvl < hl:  # the kernel (and CP's blocks) see all heads' K, V
        items.append(repeat_kv(f"{p}.attn.repeat_kv", m, kvl, hl, dt))
        kvl = hl
    if shard.cp > 1:  # context parallelism runs fused (flash) blocks whatever the kernel
        core = flash_attention(f"{p}.attn.core", b, al, sl, s, hl, kvl, dt)
        items.append(ContextAttention(f"{p}.attn.kv_allgather", core,
                                      float(dt * m * 2 * kvl), float(dt * m * hl),
                                      float(dt * m * hl)))
    else:
        items += attention_ops(cfg, p, b, al, sl, s, hl, kvl, dt, window)
    return items, hl


def _mlp(cfg: ModelConfig, name: str, m: int, width: int, dt: int) -> list[Item]:
    """A dense MLP of ``width`` (this rank's share): fc1 (gate and up fused for swiglu),
    activation, fc2."""
    h = cfg.hidden_size
    fc1 = (2 if cfg.activation == "swiglu" else 1) * width
    up = gemm(f"{name}.fc1", m, fc1, h, dt, cfg.bias, dt * m * h)
    return [replace(up, parts=(width, width)) if cfg.activation == "swiglu" else up,
            *_clamp(cfg, name, m * fc1, dt), _act(cfg, f"{name}.act", m, fc1, width, dt),
            gemm(f"{name}.fc2", m, h, width, dt, cfg.bias, dt * m * width)]


def block(cfg: ModelConfig, i: int, b: int, s: int, dt: int, shard: Shard) -> LayerProgram:
    """Transformer layer ``i`` (pre-norm) on one rank: b sequences, s/cp tokens each, 1/t of
    the heads. A MoE layer (``cfg.is_moe_layer(i)``) routes its MLP to experts; its
    shared experts run as a dense MLP after the combine, before the layer's "g"."""
    t, h = shard.tp, cfg.hidden_size
    m = b * (s // shard.cp)
    mn = m // t if shard.sp else m  # tokens of norms and residuals
    act = float(dt * m * h)
    p = f"layers.{i}"
    items: list[Item] = [_norm(f"{p}.input_norm", cfg, mn, dt), Site(f"{p}.attn.f", "f", act)]
    attention, out_width = _attention(cfg, p, b, s, dt, shard, layer_window(cfg, i))
    items += attention
    pre_mlp_norm = _norm(f"{p}.post_attn_norm", cfg, mn, dt)
    if cfg.is_moe_layer(i):
        # Megatron-Core's TE spec keeps a MoE layer's pre-MLP norm a separate TENorm (the
        # router reads it): its "layernorm" recompute module; dense layers fuse it into fc1.
        pre_mlp_norm = replace(pre_mlp_norm, module="layernorm")
    items += [gemm(f"{p}.attn.proj", m, h, out_width, dt, cfg.bias, dt * m * out_width),
              Site(f"{p}.attn.g", "g", act),
              elementwise(f"{p}.attn.residual", 2 * mn * h, mn * h, ADD_FLOPS, dt),
              pre_mlp_norm, Site(f"{p}.mlp.f", "f", act)]
    if cfg.is_moe_layer(i):
        # An expert-TP group routes the tokens of its etp TP peers: m·etp/t per rank (all
        # m with etp = t; with etp < t and SP each rank its own sequence shard).
        et = shard.expert_tp
        mr = m * et // t
        local = cfg.num_experts // shard.ep
        router, experts = moe_ops(cfg, p, mr, dt, local, et)
        # Each rank sends its tokens' k copies: k·mr·h elements (nccl-tests size).
        k = cfg.experts_per_token
        moved = float(dt * k * mr * h)
        # The token dispatcher's permutation (Megatron-Core moe_utils.permute/unpermute):
        # a gather of the mr tokens into k·mr expert-ordered copies before the dispatch,
        # and after the combine their probability-weighted sum back into token order.
        permute = elementwise(f"{p}.mlp.permute", mr * h, k * mr * h, 0.0, dt)
        unpermute = unpermute_op(f"{p}.mlp.unpermute", shard.unpermute, k, mr, h, dt)
        sort, unsort = local_expert_sort(p, k * mr * h, local, shard.ep, dt)
        # The router's counts every rank needs to size the dispatch (moe.py), then it.
        counts = token_count_bytes(cfg, shard.ep)
        items += [router, *([Site(f"{p}.mlp.counts", "counts", counts)] if counts else [])]
        items += [permute, Site(f"{p}.mlp.dispatch", "dispatch", moved), *sort,
                  *experts, *unsort, Site(f"{p}.mlp.combine", "combine", moved), unpermute]
        if cfg.shared_expert_ffn_size:
            items += _mlp(cfg, f"{p}.mlp.shared", m, cfg.shared_expert_ffn_size // t, dt)
    else:
        items += _mlp(cfg, f"{p}.mlp", m, cfg.ffn_size // t, dt)
    items += [Site(f"{p}.mlp.g", "g", act),
              elementwise(f"{p}.mlp.residual", 2 * mn * h, mn * h, ADD_FLOPS, dt)]
    return LayerProgram(p, tuple(items), layer=i)


def embedding(cfg: ModelConfig, b: int, s: int, dt: int, shard: Shard) -> LayerProgram:
    """Vocab-parallel word lookup (V/t rows per rank; a gather of m rows) then, for learned
    positions (replicated), a position add; the partial embeddings meet at a "g" site."""
    h, t = cfg.hidden_size, shard.tp
    m = b * (s // shard.cp)
    rows = padded_vocab(cfg, t) // t
    items: list[Item] = [embedding_lookup("embedding.word", rows, h, m, dt)]
    if cfg.position_embedding == "learned":
        items.append(Op("embedding.position", "embedding", ADD_FLOPS * m * h,
                        float(dt * (s * h + 2 * m * h)), None,
                        (Param("embedding.position.weight", cfg.max_seq_len * h),), 0.0))
    items.append(Site("embedding.g", "g", float(dt * m * h)))
    return LayerProgram("embedding", tuple(items))


def head(cfg: ModelConfig, b: int, s: int, dt: int, shard: Shard,
         loss: str = "unfused") -> list[LayerProgram]:
    """Final norm, then the vocab-parallel LM head GEMM (V/t per rank) and the softmax
    cross-entropy over its logits as ``loss``'s kernels run it (``cross_entropy.loss_op``).

    Tied embeddings share the word embedding's weight when it lives on the same rank
    (pp = 1); with pp > 1 the last stage holds its own copy, as Megatron does.
    """
    h, t = cfg.hidden_size, shard.tp
    v = padded_vocab(cfg, t) // t
    m = b * (s // shard.cp)
    mn = m // t if shard.sp else m
    logits = gemm("lm_head", m, v, h, dt, False, dt * m * h)
    if cfg.tied_embeddings and shard.pp == 1:
        logits = Op(logits.name, logits.kind, logits.flops, logits.bytes, logits.gemm_shape,
                    (), logits.activation_bytes)
    kernels = loss_op("lm_head.loss", m, v, dt, loss)
    return [LayerProgram("final_norm", (_norm("final_norm", cfg, mn, dt),)),
            LayerProgram("lm_head", (Site("lm_head.f", "f", float(dt * m * h)), logits,
                                     kernels))]

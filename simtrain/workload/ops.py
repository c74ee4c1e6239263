"""Kernels as data: ``Op`` (one forward kernel of one microbatch), ``Param``, and the public
constructors of the kernels every layer is built from, plus ``backward_ops``.

FLOP conventions (see shared/reference/README.md):
- a GEMM (m, n, k) costs 2·m·n·k; bias adds in the epilogue are not counted;
- memory-bound ops (norm, residual, activation, rope, loss) carry small nominal FLOP counts
  (per element, below); they are informative only, their time comes from bytes, and the
  MFU formula ``model_flops_per_step`` does not count them.

Roles are fields, never parts of a name: ``Param.expert`` (an expert's weight, reduced over
the expert-data-parallel group), ``Op.role`` ("expert": runs on the tokens routed to this
rank; "core_attention": what selective recompute recomputes) and ``Op.grad`` (a backward
kernel's part: "input" or "weight" gradient).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

OP_KINDS = ("gemm", "attention", "elementwise", "norm", "softmax", "embedding", "loss")
GradPart = Literal["input", "weight"]
OpRole = Literal["expert", "core_attention"]
FP32 = 4  # norm statistics, attention logsumexp and the loss softmax are kept in fp32
IDS = 8  # token ids are int64, as in PyTorch
# Nominal FLOPs per element of memory-bound ops (informative; time comes from bytes).
NORM_FLOPS, ADD_FLOPS, ACT_FLOPS, ROPE_FLOPS, LOSS_FLOPS = 5.0, 1.0, 8.0, 3.0, 5.0
SOFTMAX_FLOPS = 5.0  # scale, mask, max, exp, normalise per score


@dataclass(frozen=True, slots=True)
class Param:
    """A parameter tensor: its name (PyTorch style), element count, and whether it belongs
    to an MoE expert."""

    name: str
    numel: int
    expert: bool = False


@dataclass(frozen=True, slots=True)
class Op:
    """One kernel of the forward pass for one microbatch.

    ``gemm_shape`` is (m, n, k): m tokens (rows), n output features, k input features.
    ``params`` are owned by this op: their gradients are ready when its backward ends.
    ``grad`` marks a backward kernel (``backward_ops``): "input" if it computes the
    gradient the previous layer waits for (zero-bubble schedules' B), "weight" if it only
    computes parameter gradients (their W, which may be deferred); None for a forward op.
    ``role``: "expert" (an MoE expert kernel: its time scales with the routed tokens),
    "core_attention" (softmax(QKᵀ)V, recomputed under selective recompute) or None.
    ``groups``: a grouped GEMM (one kernel over a rank's local experts, Megatron-Core
    ``--moe-grouped-gemm``) runs ``groups`` GEMMs of ``gemm_shape`` each; ``flops`` and
    ``bytes`` are the kernel's totals. ``launches``: the kernels the host issues for it
    (a grouped GEMM run as one GEMM per expert, ``workload.layers.expert_launches``); a
    GEMM's dgrad and wgrad issue as many each.
    """

    name: str
    kind: str
    flops: float
    bytes: float
    gemm_shape: tuple[int, int, int] | None
    params: tuple[Param, ...]
    activation_bytes: float
    grad: GradPart | None = None
    role: OpRole | None = None
    groups: int = 1
    # HBM bytes of this op's backward when they do not follow backward_ops' default rule
    # (the cross-entropy's passes, the embedding's dense gradient); None: the default.
    backward_bytes: float | None = None
    # Output widths of the separate linears a fused GEMM stands for, in forward order
    # (QKV: q, k, v; SwiGLU fc1: gate w1, up w3, as torchtitan's Llama writes them);
    # empty: one linear. A backward GEMM keeps its forward's. Read by per-op checkpointing
    # (simtrain.parallel.op_checkpoint) and compute.linears "separate" (workload.linears).
    parts: tuple[int, ...] = ()
    # The Megatron-Core module (``recompute_modules`` name, workload.moe.RECOMPUTE_MODULES)
    # whose output-discarding checkpoint re-runs this kernel when the plan names it.
    module: str | None = None
    launches: int = 1


# Passes of the unfused fp32 cross-entropy over the logits, in bytes per logit beyond the
# 16-bit logits' own read: Megatron-Core ``vocab_parallel_cross_entropy`` (tensor_parallel/
# cross_entropy.py at 937571cf: ``.float()``; max; subtract the max; exp in place; sum;
# divide in place, the softmax saved) reads and writes fp32 as below; torchtitan's
# ``F.cross_entropy(logits.float(), ...)`` makes the same cast and a log-softmax of similar
# traffic. Backward: multiply the saved softmax (minus the one-hot) by dL in place, then
# autograd's cast back to the logits' dtype.
CE_FORWARD_FP32 = (1, 1, 2, 2, 1, 2)  # fp32 tensor moves: cast write, max, sub, exp, sum, div
CE_BACKWARD_FP32 = (2, 1)  # scale in place (read + write), cast back (read)


def cross_entropy(name: str, m: int, v: int, dt: int) -> Op:
    """Unfused fp32 softmax cross-entropy of m tokens over v logits (``CE_*`` passes).

    E = m·v logits: forward reads the dt-byte logits once and moves Σ CE_FORWARD_FP32 = 9
    fp32 tensors (dt = 2: 2 + 36 = 38 bytes per logit); backward moves 3 fp32 tensors and
    writes dt-byte gradients (12 + 2 = 14). fp32 logits (dt = 4) need no casts: 32 and 8.
    Both also read the m int64 targets. Saves the fp32 softmax and the targets.
    """
    e = m * v
    casts = dt != FP32  # the 16-bit logits' fp32 copy and the gradient's cast back
    fwd = ((dt + FP32 * sum(CE_FORWARD_FP32)) if casts
           else FP32 * (sum(CE_FORWARD_FP32) - 1)) * e + IDS * m
    bwd = ((FP32 * sum(CE_BACKWARD_FP32) + dt) if casts
           else FP32 * (sum(CE_BACKWARD_FP32) - 1)) * e + IDS * m
    return Op(name, "loss", LOSS_FLOPS * e, float(fwd), None, (), float(FP32 * e + IDS * m),
              backward_bytes=float(bwd))


def embedding_lookup(name: str, rows: int, h: int, m: int, dt: int) -> Op:
    """Word-embedding lookup of m tokens in a table of ``rows`` x h (reads the m ids and rows,
    writes the m·h output); saves the ids.

    Backward (PyTorch ``embedding_dense_backward``): a dense gradient of the whole table is
    zero-filled and the m·h output gradients scattered into it, then Megatron's gradient
    hook adds it into the fp32 main gradient (``main_grad.add_(grad)``: reads 4 + dt,
    writes 4 bytes per weight): 1.5x the forward's token traffic + (dt + 8 + dt)·rows·h.
    """
    fwd = float(IDS * m + 2 * dt * m * h)
    return Op(name, "embedding", 0.0, fwd, None, (Param(f"{name}.weight", rows * h),),
              float(IDS * m), backward_bytes=1.5 * fwd + float((2 * dt + 2 * FP32) * rows * h))


def gemm(name: str, m: int, n: int, k: int, dt: int, bias: bool, save: float) -> Op:
    """Y[m,n] = X[m,k]·Wᵀ: 2·m·n·k FLOPs; reads X and W (and bias), writes Y, once each."""
    params = (Param(f"{name}.weight", n * k),) + ((Param(f"{name}.bias", n),) if bias else ())
    nbytes = dt * (m * k + n * k + m * n + (n if bias else 0))
    return Op(name, "gemm", 2.0 * m * n * k, float(nbytes), (m, n, k), params, float(save))


def norm(name: str, h: int, layernorm: bool, m: int, dt: int) -> Op:
    """Norm of m rows over h: reads x and the weight(s), writes y; saves x and fp32 row
    statistics (mean and rstd for layernorm, rstd for rmsnorm)."""
    params = (Param(f"{name}.weight", h),) + ((Param(f"{name}.bias", h),) if layernorm else ())
    stats = (2 if layernorm else 1) * FP32 * m
    nbytes = dt * (2 * m * h + len(params) * h) + stats
    return Op(name, "norm", NORM_FLOPS * m * h, float(nbytes), None, params,
              float(dt * m * h + stats))


def elementwise(name: str, reads: int, writes: int, flops_per: float, dt: int,
                save: float = 0.0) -> Op:
    """A memory-bound elementwise kernel reading ``reads`` and writing ``writes`` elements."""
    return Op(name, "elementwise", flops_per * writes, float(dt * (reads + writes)), None, (),
              float(save))


def flash_attention(name: str, b: int, heads: int, sq: int, sk: float, q: int, kv: int,
                    dt: int) -> Op:
    """Fused (flash) core attention: 4·b·sq·sk·q FLOPs (non-causal convention) reading q,
    k, v, writing o and the fp32 logsumexp; saves q, k, v and the logsumexp."""
    m, lse = b * sq, FP32 * b * heads * sq
    return Op(name, "attention", 4.0 * b * sq * sk * q, float(dt * m * (2 * q + 2 * kv) + lse),
              None, (), float(dt * m * (q + 2 * kv) + lse), role="core_attention")


def repeat_kv(name: str, m: int, kv: int, q: int, dt: int) -> Op:
    """K and V of m tokens expanded from ``kv`` to ``q`` features each (a copy per query
    head of its KV head), torchtitan's ``repeat_kv`` (``unsqueeze``, ``expand``,
    ``reshape``: the reshape of the expanded view materialises it, torchtitan 0.1.0 and
    0.2.0 ``models/llama3/model/model.py``): reads 2·m·kv, writes 2·m·q elements. Its
    backward sums each group's gradients back (reads 2·m·q, writes 2·m·kv): the same bytes.
    Saves nothing (the attention saves its expanded inputs)."""
    nbytes = float(dt * 2 * m * (kv + q))
    return Op(name, "elementwise", 0.0, nbytes, None, (), 0.0, backward_bytes=nbytes)


def backward_ops(op: Op) -> tuple[Op, ...]:
    """The backward kernels of forward ``op``, in execution order (its role kept).

    - gemm (m, n, k): dgrad dX = dY·W with shape (m, k, n) then wgrad dW = dYᵀ·X with shape
      (n, k, m) (the weight's [out, in] layout, reducing over tokens); each costs the forward's
      2·m·n·k FLOPs and touches the same three matrices. wgrad owns the params. dgrad is
      the input gradient, wgrad the weight gradient (``Op.grad``). Both keep the forward's
      ``parts`` (the separate linears' widths: dgrad's reduction, wgrad's rows).
    - attention: one fused kernel, 2.5× forward FLOPs: FlashAttention-2 backward runs 5
      matmuls (QKᵀ recomputed, dV, dP, dQ, dK) against 2 forward (Dao 2023, Sec. 3.1);
      bytes 2× (reads q, k, v, o, dO; writes dq, dk, dv).
    - embedding: scatter-add of dY into weight rows: 1.5× forward bytes (dY read plus a
      read-modify-write of rows, against row read plus output write forward), unless the
      op states ``backward_bytes`` (``embedding_lookup``: the dense table gradient).
    - other memory-bound ops: 2× forward FLOPs and bytes (read y or x and dY, write dX),
      or the op's ``backward_bytes`` (``cross_entropy``).
    Every kernel but wgrad and the embedding's is an input-gradient kernel (``Op.grad``).
    """
    r = op.role
    if op.kind == "gemm":
        if op.gemm_shape is None:
            raise ValueError(f"gemm op {op.name!r} has no gemm_shape; give it (m, n, k)")
        m, n, k = op.gemm_shape
        g = op.groups  # grouped: each expert's dgrad and wgrad (over its own m tokens)
        return (Op(f"{op.name}.dgrad", "gemm", op.flops, op.bytes, (m, k, n), (), 0.0,
                   "input", r, g, launches=op.launches, parts=op.parts),
                Op(f"{op.name}.wgrad", "gemm", op.flops, op.bytes, (n, k, m), op.params, 0.0,
                   "weight", r, g, launches=op.launches, parts=op.parts))
    if op.kind == "attention":
        return (Op(f"{op.name}.bwd", "attention", 2.5 * op.flops, 2.0 * op.bytes, None,
                   op.params, 0.0, "input", r),)
    if op.kind == "embedding":  # token ids have no gradient: only the weight's
        nbytes = 1.5 * op.bytes if op.backward_bytes is None else op.backward_bytes
        return (Op(f"{op.name}.bwd", "embedding", op.flops, nbytes, None, op.params,
                   0.0, "weight", r),)
    if op.kind in OP_KINDS:  # norms compute their weight gradients in the same kernel
        nbytes = 2.0 * op.bytes if op.backward_bytes is None else op.backward_bytes
        return (Op(f"{op.name}.bwd", op.kind, 2.0 * op.flops, nbytes, None, op.params,
                   0.0, "input", r),)
    raise ValueError(f"op {op.name!r} has unknown kind {op.kind!r}; use one of {OP_KINDS}")

"""The LM head's softmax cross-entropy as each framework's kernels run it.

``compute.cross_entropy`` picks one:

- ``unfused``: eager fp32 passes (``ops.cross_entropy``): Megatron-Core's
  ``vocab_parallel_cross_entropy`` without ``cross_entropy_loss_fusion``, torchtitan's
  ``F.cross_entropy(logits.float(), ...)``. 38 B per bf16 logit forward, 14 backward.
- ``native``: Megatron-Core's ``fused_vocab_parallel_cross_entropy``
  (``cross_entropy_loss_fusion: True`` with ``cross_entropy_fusion_impl: native``,
  megatron-core 0.13.0 ``fusions/fused_cross_entropy.py``): four ``jit_fuser`` (torch.compile)
  functions. ``calculate_logits_max`` returns the fp32 copy (reads dt, writes 4; no copy when
  the logits are fp32), ``calculate_predicted_logits`` subtracts the max and exponentiates in
  place (reads 4, writes 4), ``calculate_cross_entropy_loss`` divides in place (4 + 4) and the
  fp32 softmax is saved; backward ``calculate_gradients`` scales it and casts to bf16 in one
  kernel (reads 4, writes 2: the function hard-codes ``torch.bfloat16``). 22 B forward, 6
  backward. NeMo 2.2.0's ``GPTConfig`` default (``cross_entropy_loss_fusion: bool = True``,
  ``nemo/collections/llm/gpt/model/base.py``); megatron_bridge 0.3.1's GPT-OSS recipes.
- ``te``: Transformer Engine's Triton ``parallel_cross_entropy`` (``cross_entropy_fusion_impl:
  te``; transformer_engine 2.14.1 ``common/triton/cross_entropy.py``): ``online_softmax_kernel``
  reads the logits once for each row's max, sum and target logit (three fp32 per row),
  ``cross_entropy_kernel`` reads them again and writes the gradient in place in their dtype,
  and backward's ``element_mul_kernel`` scales it in place by the per-token loss gradient
  (Megatron passes ``reduce_loss=False``, so the mul runs). 3·dt B forward, 2·dt backward;
  the saved tensor is the gradient in the logits' buffer (dt per logit), not an fp32 softmax.
  NeMo 2.3.0 (``scripts/performance/utils.py`` ``set_primary_perf_configs``) and 2.4.0
  (``scripts/performance/helpers.py``) set it on every performance run; megatron_bridge
  0.3.1's Llama and Qwen3 pretrain recipes set ``cross_entropy_loss_fusion = True`` and
  ``cross_entropy_fusion_impl = "te"``.

The TP all-reduces (unfused, native) or all-gather (te) of per-row statistics, 12 B or less
per token, are not charged in any implementation.
"""

from __future__ import annotations

from typing import Literal, get_args

from simtrain.workload.ops import FP32, IDS, LOSS_FLOPS, Op, cross_entropy

CrossEntropyImpl = Literal["unfused", "native", "te"]
CROSS_ENTROPY_IMPLS: tuple[str, ...] = get_args(CrossEntropyImpl)
BF16 = 2  # fused_cross_entropy.calculate_gradients casts the gradient to torch.bfloat16
ROW_STATS = 3  # te: max, sum of exponentials and the target's logit, fp32 per row


def native_cross_entropy(name: str, m: int, v: int, dt: int) -> Op:
    """Megatron-Core's torch.compile-fused cross-entropy of m tokens over v logits.

    E = m·v: forward (dt + 5·4)·E for 16-bit logits (cast + max, sub + exp, div), 5·4·E for
    fp32 ones (no cast copy: ``.float()`` returns the tensor); backward (4 + 2)·E; both read
    the m int64 targets. Saves the fp32 softmax and the targets, as the unfused kernels do.
    """
    e = m * v
    fwd = ((dt if dt != FP32 else 0) + 5 * FP32) * e + IDS * m
    bwd = (FP32 + BF16) * e + IDS * m
    return Op(name, "loss", LOSS_FLOPS * e, float(fwd), None, (), float(FP32 * e + IDS * m),
              backward_bytes=float(bwd))


def te_cross_entropy(name: str, m: int, v: int, dt: int) -> Op:
    """Transformer Engine's two-kernel Triton cross-entropy of m tokens over v logits.

    E = m·v: forward 3·dt·E (two reads, the in-place gradient write) + 2·8·m (targets, read by
    both kernels) + 2·12·m (row statistics written and read back); backward 2·dt·E (scale in
    place) + 4·m (the per-token loss gradient). Saves the gradient, dt·E.
    """
    e = m * v
    stats = ROW_STATS * FP32 * m
    fwd = 3 * dt * e + 2 * IDS * m + 2 * stats
    bwd = 2 * dt * e + FP32 * m
    return Op(name, "loss", LOSS_FLOPS * e, float(fwd), None, (), float(dt * e),
              backward_bytes=float(bwd))


def loss_op(name: str, m: int, v: int, dt: int, impl: str = "unfused") -> Op:
    """The cross-entropy op of ``impl`` (one of ``CROSS_ENTROPY_IMPLS``)."""
    if impl == "unfused":
        return cross_entropy(name, m, v, dt)
    if impl == "native":
        return native_cross_entropy(name, m, v, dt)
    if impl == "te":
        return te_cross_entropy(name, m, v, dt)
    raise ValueError(f"unknown cross_entropy {impl!r}; "
                     f"use one of: {', '.join(CROSS_ENTROPY_IMPLS)}")

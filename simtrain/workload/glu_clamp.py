"""Megatron-Core's eager kernels around a GPT-OSS-style gated expert.

GPT-OSS (OpenAI gpt-oss model card, 2025) clamps its GLU's inputs (gate at most +L, linear
half within ±L, L = 7) and adds a bias after the experts' fc2. Megatron-Core runs both as
plain PyTorch ops beside its fused activation, at every release from 0.16 to 0.19
(``megatron/core``):

- the clamp, ``fusions/fused_bias_geglu.py: weighted_bias_quick_geglu_impl`` with
  ``clamp_value`` (GPTOSSProvider ``activation_func_clamp_value = 7.0`` in Megatron
  Bridge): ``x_glu, x_linear = input.chunk(2, -1)``, then ``torch.cat((x_glu.clamp(max=L),
  x_linear.clamp(-L, L)), -1)`` before the fused quick-GEGLU. Forward: the two clamps read
  and write each half once, the cat reads and writes the whole once: 4·dt bytes per
  element of the fc1 output. Backward (PyTorch ``FunctionsManual.cpp: clamp_backward``,
  ``where(self <= max, grad, 0)`` for one bound and ``where((self >= min).logical_and_(
  self <= max), grad, 0)`` for two; the cat's backward is views; the chunk's backward
  (``split_backward``) cats the halves' gradients): one bound 3·dt + 2 bytes per element
  (compare: dt read, 1 written; where: 1 + dt read, dt written), two bounds 4·dt + 6
  (two compares, a 3-byte logical_and, the where), the cat 2·dt; over the whole:
  5.5·dt + 4. The clamp saves its input (the fc1 output) for that mask.
- the expert bias, ``transformer/moe/experts.py: TEGroupedMLP._apply_bias`` (fc2 is built
  with ``skip_bias_add=True`` when ``add_bias_linear``): per local expert ``t + b * p``
  (the bias scaled by each token's routing probability, in the probabilities' dtype,
  which is the logits' for GPT-OSS: ``moe_router_dtype`` unset), then ``torch.cat`` of the
  pieces. Forward per element of the fc2 output: ``b * p`` writes dt, the add reads 2·dt
  and writes dt, the cat reads and writes dt: 6·dt. Backward (``MulBackward0`` of b and p,
  both requiring gradients: the router's probabilities are trained, and forced balancing's
  ``RandomSTE`` passes gradients straight through): ``grad * p`` written and summed to b's
  shape, ``grad * b`` written and summed to p's: 6·dt. The add and the cat pass the
  gradient on as views.

Both ops carry the "expert" role, so they scale with the tokens a rank receives.
"""

from __future__ import annotations

from simtrain.workload.ops import Op

CLAMP_FLOPS = 1.0  # one compare-select per element


def clamp_bytes(elements: int, dt: int) -> tuple[float, float]:
    """(forward, backward) HBM bytes of Megatron-Core's GLU input clamp over ``elements``
    values of the fc1 output (both halves): 4·dt and (5.5·dt + 4) per element."""
    return float(4 * dt * elements), float((5.5 * dt + 4) * elements)


def expert_bias_bytes(elements: int, dt: int) -> tuple[float, float]:
    """(forward, backward) HBM bytes of ``TEGroupedMLP._apply_bias`` over ``elements``
    values of the experts' fc2 output: 6·dt per element each way."""
    return float(6 * dt * elements), float(6 * dt * elements)


def glu_clamp(name: str, elements: int, dt: int) -> Op:
    """The clamp and concatenation before the fused GLU (saves its input)."""
    fwd, bwd = clamp_bytes(elements, dt)
    return Op(name, "elementwise", CLAMP_FLOPS * elements, fwd, None, (),
              float(dt * elements), backward_bytes=bwd)


def expert_bias(name: str, elements: int, dt: int) -> Op:
    """The probability-weighted per-expert fc2 bias added after the grouped GEMM."""
    fwd, bwd = expert_bias_bytes(elements, dt)
    return Op(name, "elementwise", 2.0 * elements, fwd, None, (), 0.0,
              role="expert", backward_bytes=bwd)

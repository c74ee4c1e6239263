"""Memory-bound kernels as eager PyTorch runs them (``model.elementwise: eager``).

simtrain's norm, RoPE and activation ops are one fused kernel each (Transformer Engine and
Apex kernels, or what torch.compile's Inductor generates). Without torch.compile,
torchtitan's Llama runs them as written in PyTorch, each aten op its own HBM-bound kernel
(torchtitan/models/llama/model.py and norms.py at 9dec370, the commit of its Dec 2024
benchmarks; ``torch.nn.RMSNorm`` decomposes into the same aten ops). Bytes per element
of the input, dt the activation dtype's bytes (2 for bf16), fp32 intermediates 4 B:

- RMSNorm ``(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * weight``:
  cast (dt + 4), pow (4 + 4), mean (4), multiply (4 + 4), cast back (4 + dt), weight
  multiply (dt + dt): 28 + 4·dt (36 for bf16; fused: 2·dt = 4);
- RoPE ``view_as_real(view_as_complex(x.float().reshape(..., 2)) * freqs_cis)
  .flatten(3).type_as(x)``: cast (dt + 4), complex multiply (4 + 4), cast back (4 + dt):
  16 + 2·dt (20 for bf16; fused 2·dt);
- SwiGLU ``silu(w1(x)) * w3(x)`` per element of the f-wide output: silu (dt + dt),
  multiply (2·dt + dt): 5·dt (fused: 3·dt).

LayerNorm (``F.layer_norm``) and GELU (``F.gelu``) are single native kernels either way.
Backward: autograd's kernels for the same ops, about twice the forward's traffic, which
is ``backward_ops``' rule for memory-bound ops. Not modelled: the extra launches (a few
microseconds each, under 1 ms per step at these sizes) and the fp32 intermediates
autograd saves when the ops are not recomputed.
"""

from __future__ import annotations

from dataclasses import replace

from simtrain.workload.ops import FP32, Op

ELEMENTWISE_MODES = ("fused", "eager")


def eager_rmsnorm_bytes(m: int, h: int, dt: int) -> float:
    """HBM bytes of eager RMSNorm over m x h: (28 + 4·dt)·m·h plus the weight (dt·h)."""
    return float((7 * FP32 + 4 * dt) * m * h + dt * h)


def eager_rope_bytes(elements: int, dt: int) -> float:
    """HBM bytes of eager complex-number RoPE over ``elements``: (16 + 2·dt) each."""
    return float((4 * FP32 + 2 * dt) * elements)


def eager_swiglu_bytes(elements: int, dt: int) -> float:
    """HBM bytes of eager ``silu(a) * b`` with ``elements`` outputs: 5·dt each."""
    return float(5 * dt * elements)


def eager_norm(op: Op, m: int, h: int, dt: int, rms: bool) -> Op:
    """``op`` (a fused norm of m x h) as eager PyTorch runs it: RMSNorm's aten ops, or
    LayerNorm unchanged (one native kernel)."""
    return replace(op, bytes=eager_rmsnorm_bytes(m, h, dt)) if rms else op


def eager_rope(op: Op, elements: int, dt: int) -> Op:
    """``op`` (a fused RoPE over ``elements``) as eager complex-number RoPE."""
    return replace(op, bytes=eager_rope_bytes(elements, dt))


def eager_activation(op: Op, elements: int, dt: int, swiglu: bool) -> Op:
    """``op`` (an activation with ``elements`` outputs) eager: SwiGLU as silu then multiply,
    GELU unchanged (one native kernel)."""
    return replace(op, bytes=eager_swiglu_bytes(elements, dt)) if swiglu else op

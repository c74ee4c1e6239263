"""The token dispatcher's unpermute: the k·m expert outputs a rank gets back from the
combine, weighted by their routing probabilities and summed into its m tokens.

``parallelism.moe_unpermute`` says which kernels run it (names: ``UNPERMUTE_IMPLS``):

- ``fused`` (default): one kernel that reads the k·m·h combined values and writes the
  m·h token outputs (Transformer Engine's ``moe_unpermute`` with ``merging_probs``, which
  Megatron-Core calls under ``moe_permute_fusion``; the fused ideal), backward the same
  traffic twice (simtrain's memory-bound rule, ``ops.backward_ops``).
- ``scatter-sum``: Megatron-Core 0.8 and 0.9, which have no permute fusion
  (``transformer/moe/moe_utils.py: unpermute``, read in the megatron-core 0.8.0 and
  0.9.0 wheels): ``torch.zeros`` of [k·m, h], ``index_copy_`` (0.8) or the ``moe_scatter``
  autograd function (0.9) of the k·m·h copies into token-major order, ``reshape(-1, k,
  h)``, ``* probs.unsqueeze(-1)``, ``.sum(dim=1)``. With E = k·m·h and T = m·h elements
  of dt bytes, forward: the zero fill writes E, the scatter reads and writes E, the
  multiply reads and writes E, the sum reads E and writes T: dt·(6E + T). Backward
  (PyTorch autograd): the sum's gradient is an expand (a view); the multiply's input
  gradient reads the T-sized gradient and writes E; its probability gradient multiplies
  the gradient by the saved scattered copies (reads T and E, writes an E-sized product)
  and reduces it over h (reads E); the scatter's gradient gathers (reads and writes E):
  dt·(6E + 2T). The multiply saves its input, the scattered copies (E·dt). The
  probabilities and indices (k·m values) are left out: < 0.1% of the bytes at h ≥ 1024.
  Four kernels forward and five backward, costed as one op each way.
"""

from __future__ import annotations

from simtrain.workload.ops import Op

UNPERMUTE_IMPLS: tuple[str, ...] = ("fused", "scatter-sum")


def unpermute_bytes(impl: str, k: int, m: int, h: int, dt: int
                    ) -> tuple[float, float, float]:
    """(forward bytes, backward bytes, saved bytes) of the unpermute of m tokens' k copies
    of width h, run as ``impl`` (module docstring)."""
    e, t = k * m * h, m * h
    if impl == "fused":
        return float(dt * (e + t)), float(2 * dt * (e + t)), 0.0
    if impl == "scatter-sum":
        return float(dt * (6 * e + t)), float(dt * (6 * e + 2 * t)), float(dt * e)
    raise ValueError(f"unknown moe_unpermute {impl!r}; use one of: "
                     f"{', '.join(UNPERMUTE_IMPLS)}")


def unpermute_op(name: str, impl: str, k: int, m: int, h: int, dt: int) -> Op:
    """The unpermute as one memory-bound op: 2·k FLOPs per token output value (the
    probability multiply and the top-k sum), its bytes from ``unpermute_bytes``."""
    fwd, bwd, saved = unpermute_bytes(impl, k, m, h, dt)
    return Op(name, "elementwise", 2.0 * k * m * h, fwd, None, (), saved,
              backward_bytes=bwd)

"""Which fused attention kernel runs, and the share of dense peak it reaches.

``compute.attention_impl``:

- ``default``: the per-architecture ``ATTENTION_EFFICIENCY`` of ``simtrain.workload.compute``
  (on Hopper 0.339, FA2's best case, 335 of 989 TFLOP/s, which NeMo's long-sequence H100
  table implies for its Transformer Engine stack at every length from 4k to 1M);
- ``fa2``: the FlashAttention-2 kernels PyTorch's ``scaled_dot_product_attention`` runs
  through its flash backend (``aten._scaled_dot_product_flash_attention``, the FA2 sources
  vendored in PyTorch; FlashAttention-3's Hopper kernels are not in PyTorch's SDPA at
  the torchtitan commits of the validation suites). torchtitan's Llama calls SDPA, its
  activation-checkpoint save list names exactly the flash and memory-efficient SDPA ops,
  and PyTorch's context parallelism (``torch.distributed.tensor.experimental.
  context_parallel``, 2024-25) dispatches only those two backends. Its ring attention
  is PyTorch's, one SDPA call per ring step merged by separate fp32 kernels: with ``fa2``
  each ring step also pays them (``simtrain.parallel.ring_merge``).

FA2's efficiency (Dao 2023, "FlashAttention-2", Sec. 4.1): forward + backward reaches
"up to 225 TFLOPs/s" on A100 (72% of 312) and, the same code on H100, "up to 335 TFLOPs/s"
(34% of 989): FA2 uses Ampere's mma.sync instructions, without Hopper's wgmma and TMA
(Shah et al. 2024, "FlashAttention-3", Sec. 1: FA2 "achieves only 35% utilization on
H100"). simtrain's Ampere default, 0.60, is FA2 at training shapes (the 0.72 is the best
case); Hopper keeps the same ratio to its best case: 0.60 · (335/989) / (225/312) = 0.282.
Range on H100: 0.25 (short sequences) to 0.34 (the paper's best). So on Hopper ``fa2``
(0.282, FA2 at training shapes) sits below the default (0.339, FA2's best case): the two
come from different evidence (torchtitan's 8k-token rows, NeMo's long-sequence rows), and
simtrain has no efficiency that grows with sequence length to join them. Other
architectures have no FA2 figure here: set ``compute.attention_efficiency`` for them.

- ``cudnn``: PyTorch SDPA's cuDNN backend (``aten._scaled_dot_product_cudnn_attention``),
  which torchtitan puts first on Blackwell: ``ScaledDotProductAttention._init_backend``
  inserts ``SDPBackend.CUDNN_ATTENTION`` at the head of the backend list "on B200"
  (``has_cuda_capability(10, 0)``, torchtitan 0.1.0, ``models/attention.py``), and 0.2.0's
  ``ScaledDotProductAttentionWrapper`` lists it first on every GPU (the PyPI wheels, read
  for docs/blackwell.md). Its rate is the architecture default: on Blackwell that is
  cuDNN's own fused attention (NeMo's B200 long-sequence table, Transformer Engine's cuDNN
  backend). What differs is checkpointing: torchtitan's per-op policy saves the flash and
  memory-efficient SDPA ops only (``_save_list`` in 0.1.0's ``llama3/infra/
  parallelize.py``, ``_op_sac_save_list`` in 0.2.0), so under ``recompute: op`` the cuDNN
  attention forward is re-run before each block's backward (``op_sac_saves_attention``).
"""

from __future__ import annotations

ATTENTION_IMPLS = ("default", "fa2", "cudnn")
# Dao 2023 Sec. 4.1, forward + backward, best case (TFLOP/s) and the GPU's dense BF16 peak.
FA2_BEST_TFLOPS = {"ampere": (225.0, 312.0), "hopper": (335.0, 989.4)}
FA2_AMPERE_TRAINING = 0.60  # simtrain's Ampere default, an FA2 figure at training shapes


def fa2_efficiency(arch: str) -> float:
    """Peak fraction of FlashAttention-2 on ``arch``: the Ampere training-shape figure
    scaled by the ratio of FA2's best-case fractions (module docstring)."""
    if arch not in FA2_BEST_TFLOPS:
        raise ValueError(f"no FlashAttention-2 efficiency for GPU architecture {arch!r} "
                         f"(known: {sorted(FA2_BEST_TFLOPS)}); set "
                         f"compute.attention_efficiency, or compute.attention_impl: default")
    best, peak = FA2_BEST_TFLOPS[arch]
    a_best, a_peak = FA2_BEST_TFLOPS["ampere"]
    return FA2_AMPERE_TRAINING * (best / peak) / (a_best / a_peak)


def op_sac_saves_attention(impl: str) -> bool:
    """Whether torchtitan's per-op checkpointing saves the fused attention's output when
    ``impl`` runs it: its save list names the flash and memory-efficient SDPA ops, not the
    cuDNN one (module docstring), so ``cudnn`` attention is recomputed."""
    if impl not in ATTENTION_IMPLS:
        raise ValueError(f"unknown attention_impl {impl!r}; use one of: "
                         f"{', '.join(ATTENTION_IMPLS)}")
    return impl != "cudnn"

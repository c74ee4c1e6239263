"""FP8 training, Transformer Engine style: which GEMMs run in FP8 and what it costs around them.

With ``training.dtype: fp8`` the linear layers' GEMMs (QKV, projection, MLP and expert
fc1/fc2, forward, dgrad and wgrad) run on FP8 tensor cores, at the GPU's FP8 peak with
their own efficiency; core attention, embeddings, the router and the output layer
(``lm_head``) stay BF16, as Transformer Engine and Megatron-Core keep them (TE
``fp8_autocast`` covers ``te.Linear``/``LayerNormLinear``/``LayerNormMLP`` modules only;
Megatron keeps the output layer and the router out of FP8). Activations, weights and
collectives stay BF16; FP8 operands are made by cast kernels around each FP8 GEMM:

- forward (m, n, k): the input X (m x k) is cast, with its transpose for wgrad
  (``cast_transpose``: read 2 B, write 1 B + 1 B per element) — except where the kernel
  that produces X writes FP8 itself: TE's ``LayerNormLinear``/``LayerNormMLP`` fuse the
  cast into the norm (QKV, fc1) and into the activation (fc2), under delayed scaling and
  MXFP8 (``FUSED_INPUT_CASTS``), but not for the experts: TE's ``GroupedLinear``
  quantises its own BF16 input (``tex.split_quantize`` over the routed tokens the
  dispatcher delivers, and the separate activation's output before fc2); the weight
  W (n x k) is cast once per step (TE casts weights on the first microbatch and caches
  them);
- dgrad (m, k, n): the output gradient dY (m x n) is cast and transposed (used by wgrad
  too); wgrad: no cast (it reuses X^T and dY^T).

Recipes (TE ``recipe.DelayedScaling``, ``Float8CurrentScaling``, ``MXFP8BlockScaling``):

- ``delayed``: the scale comes from the amax history of earlier steps; the cast kernel
  records the new amax on the fly: no extra pass.
- ``current`` (per-tensor current scaling): the scale needs this tensor's amax before the
  cast, one more read of the input (a separate amax kernel): +2 B per element, +1 kernel.
- ``mxfp8`` (Blackwell only: 1x32 blocks with E8M0 scales in hardware): scales are
  computed inside the cast; it writes rowwise and columnwise copies plus one scale byte
  per 32 elements of each: +2/32 B per element.
- ``blockwise`` (Hopper: DeepSeek-V3's fine-grained FP8, arXiv:2412.19437 Sec. 3.3.1,
  "1x128 tile" activation and gradient scales and "128x128 block" weight scales; TE's
  ``Float8BlockScaling``): each tile's scale comes from its own amax inside the cast (no
  separate amax pass), one FP32 scale per 128 elements of the rowwise and of the
  columnwise copy: +2·4/128 B per element. The norm and activation write BF16 and the
  cast runs as its own kernel, as under current scaling (the fused norm/activation casts
  of ``FUSED_INPUT_CASTS`` produce per-tensor or MXFP8 scales).

Memory: FP8 weight copies (rowwise and transposed/columnwise, 1 B each per GEMM weight
parameter) beside the BF16 weights and the FP32 master weights (``FP8_WEIGHT_BYTES``).
"""

from __future__ import annotations

from simtrain.workload.compute import ComputeConfig, GPULike, gemm_efficiency, op_time
from simtrain.workload.model import Op

FP8_RECIPES = ("delayed", "current", "mxfp8", "blockwise")
# Architectures whose tensor cores have FP8 (Hopper, Ada, Blackwell; CDNA3 has OCP FP8);
# MXFP8 block scaling is a Blackwell (5th-gen tensor core) feature.
FP8_ARCHS = ("hopper", "blackwell", "cdna3")
MXFP8_ARCHS = ("blackwell",)
# 1x128 / 128x128 block-scaled FP8 GEMMs: Hopper (the sources' blockwise runs are H800,
# DeepSeek-V3 Sec. 3.3, and DGX-H100, Megatron Bridge 25.09; DeepGEMM is SM90 code).
BLOCKWISE_ARCHS = ("hopper",)
# Recipes whose norm/activation kernels cannot write the GEMM's FP8 input themselves.
UNFUSED_CAST_RECIPES = ("current", "blockwise")
# GEMMs that stay BF16 under FP8 training (name suffixes of simtrain.workload.model ops).
BF16_GEMMS = (".router", "lm_head")
# FP8 GEMMs whose input is written in FP8 by the norm or activation kernel before them.
FUSED_INPUT_CASTS = (".attn.qkv", ".mlp.fc1", ".mlp.fc2")
FP8_WEIGHT_BYTES = 2.0  # rowwise + columnwise FP8 copies of each GEMM weight parameter

# Peak fraction of a large FP8 GEMM. H100 SXM FP8 cuBLASLt GEMMs reach ~1,300-1,450 of
# 1,979 TFLOP/s on large shapes, lower relative to peak than BF16 (NVIDIA Transformer
# Engine/cuBLASLt benchmarks as commonly reported; Hopper's FP8 wgmma accumulates in
# limited precision and kernels promote partial sums to FP32 every few k-steps, DeepSeek-V3
# report Sec. 3.3.2, which costs issue slots). Uncalibrated: 0.70 on Hopper and Blackwell,
# 0.60 on CDNA3 (hipBLASLt); range 0.5-0.85.
FP8_GEMM_EFFICIENCY: dict[str, float] = {"hopper": 0.70, "blackwell": 0.70, "cdna3": 0.60}


def check_fp8(arch: str, gpu_name: str, recipe: str) -> None:
    """ValueError unless ``gpu_name`` (of ``arch``) can train in FP8 with ``recipe``."""
    if recipe not in FP8_RECIPES:
        raise ValueError(f"unknown FP8 recipe {recipe!r}; use one of {', '.join(FP8_RECIPES)}")
    if arch not in FP8_ARCHS:
        raise ValueError(f"training.dtype fp8 needs FP8 tensor cores, but {gpu_name} "
                         f"({arch}) has none; use bf16, or an H100/H200/B200")
    if recipe == "mxfp8" and arch not in MXFP8_ARCHS:
        raise ValueError(f"training.fp8.recipe mxfp8 needs Blackwell tensor cores, but "
                         f"{gpu_name} is {arch}; use recipe delayed or current")
    if recipe == "blockwise" and arch not in BLOCKWISE_ARCHS:
        raise ValueError(f"training.fp8.recipe blockwise is modelled on Hopper only, but "
                         f"{gpu_name} is {arch}; use mxfp8 (block scales on Blackwell), "
                         f"delayed or current")


def runs_in_fp8(op: Op) -> bool:
    """Whether ``op`` (or its dgrad/wgrad) is an FP8 GEMM under FP8 training."""
    if op.kind != "gemm" or op.role == "core_attention":  # standard attention's bmm: BF16
        return False
    base = op.name.removesuffix(".dgrad").removesuffix(".wgrad")
    return not base.endswith(BF16_GEMMS)


def cast_bytes_per_element(recipe: str) -> float:
    """HBM bytes per element of one cast_transpose: read 2 (BF16), write 1 + 1 (FP8 and
    its transpose), +2 (amax pass) for current scaling, +2/32 (block scales) for MXFP8,
    +8/128 (FP32 tile scales) for blockwise."""
    extra = {"delayed": 0.0, "current": 2.0, "mxfp8": 2.0 / 32.0,
             "blockwise": 2.0 * 4.0 / 128.0}[recipe]
    return 4.0 + extra


def cast_kernels(op: Op, recipe: str, microbatches: int) -> list[float]:
    """HBM bytes of each cast kernel an FP8 GEMM ``op`` needs, per microbatch.

    Forward (m, n, k): X (m·k) every microbatch, W (n·k) once per step (so / microbatches);
    dgrad (m, k, n): dY (m·n); wgrad: none. Current scaling adds an amax kernel per cast
    (its read is in ``cast_bytes_per_element``; the kernel is listed as one more launch
    carrying no further bytes).
    """
    if not runs_in_fp8(op) or op.gemm_shape is None or op.name.endswith(".wgrad"):
        return []
    m, n, k = op.gemm_shape
    m, n = m * op.groups, n * op.groups  # a grouped GEMM casts every group's operands
    per = cast_bytes_per_element(recipe)
    sizes: list[float]
    if op.name.endswith(".dgrad"):
        sizes = [m * k]  # dY: m x (forward's n), the reduction dim k of dgrad (m, k, n)
    else:
        fused = (recipe not in UNFUSED_CAST_RECIPES and op.name.endswith(FUSED_INPUT_CASTS)
                 and op.role != "expert")
        sizes = ([] if fused else [m * k]) + [n * k / max(microbatches, 1)]
    out = [per * s for s in sizes]
    if recipe == "current":
        out += [0.0] * len(sizes)
    return out


def fp8_op_time(op: Op, gpu: GPULike, cfg: ComputeConfig, recipe: str,
                microbatches: int) -> float:
    """Seconds of ``op`` under FP8 training: FP8 GEMMs at the FP8 peak and FP8 efficiency
    plus their cast kernels (memory-bound, one launch each); everything else as BF16."""
    if not runs_in_fp8(op):
        return op_time(op, gpu, cfg, "bf16")
    assert op.gemm_shape is not None
    ceiling = cfg.fp8_gemm_efficiency or FP8_GEMM_EFFICIENCY.get(gpu.arch)
    if ceiling is None:
        raise ValueError(f"no default FP8 GEMM efficiency for {gpu.arch!r}; set "
                         f"compute.fp8_gemm_efficiency")
    eff = gemm_efficiency(*op.gemm_shape, gpu, cfg, "fp8", max_efficiency=ceiling,
                          groups=op.groups)
    # FP8 operands are half the bytes of BF16 ones (the output stays BF16).
    m, n, k = op.gemm_shape
    nbytes = op.bytes - (m * k + n * k) * op.groups
    gemm = max(op.flops / (gpu.flops("fp8") * eff),
               nbytes / (gpu.hbm_bandwidth * cfg.hbm_efficiency(gpu.arch)))
    casts = sum(op_time(Op(f"{op.name}.cast", "elementwise", 0.0, b, None, (), 0.0), gpu,
                        cfg, "bf16") for b in cast_kernels(op, recipe, microbatches))
    return gemm + cfg.launch_overhead + casts

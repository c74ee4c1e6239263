"""FP8 training, Transformer Engine style: which GEMMs run in FP8 and what it costs around them.

With ``training.dtype: fp8`` the linear layers' GEMMs (QKV, projection, MLP and expert
fc1/fc2, forward, dgrad and wgrad) run on FP8 tensor cores, at the GPU's FP8 peak with
their own efficiency; core attention, embeddings, the router and the output layer
(``lm_head``) stay BF16, as Transformer Engine and Megatron-Core keep them (TE
``fp8_autocast`` covers ``te.Linear``/``LayerNormLinear``/``LayerNormMLP`` modules only;
Megatron keeps the output layer and the router out of FP8). Activations and weights stay
BF16, and so do collectives but for the SP all-gathers below; FP8 operands are made by cast
kernels around each FP8 GEMM:

- forward (m, n, k): the input X (m x k) is cast, with its transpose for wgrad
  (``cast_transpose``: read 2 B, write 1 B + 1 B per element) — except where the kernel
  that produces X writes FP8 itself: TE's ``LayerNormLinear``/``LayerNormMLP`` fuse the
  cast into the norm (QKV, fc1) and into the activation (fc2) under delayed scaling, and
  into the activation only under MXFP8 (``_WRITES_FP8``; under delayed scaling wgrad
  still needs X's transpose, a ``tex.fp8_transpose`` in the backward, TE 1.9: read 1 B,
  write 1 B; MXFP8's fused kernel writes both copies); under current scaling the norm
  and activation compute the amax, so their quantize skips the amax pass
  (``_WRITES_AMAX``); none of this for the experts: TE's ``GroupedLinear``
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

Sequence-parallel all-gathers of an FP8 GEMM's own operand move FP8 (1 B per element, not
BF16's 2): the "f" all-gather of the input to QKV and the dense fc1, and the backward
all-gather ("g"'s) of the output gradient of the projection and the dense fc2. TE 1.9
(``transformer_engine/pytorch/module/layernorm_linear.py`` and ``layernorm_mlp.py``,
``_LayerNormLinear.forward``: the norm writes ``ln_out`` as uint8 FP8, then
``gather_along_first_dim(ln_out, tp_group)``; ``base.py`` ``grad_output_preprocess``,
"FP8 case with gather": ``cast_to_fp8`` on the local shard, then the gather); torchao 0.11
(``torchao/float8/float8_tensor_parallel.py``, ``Float8ColwiseParallel``/
``Float8RowwiseParallel``, "all-gather in float8"), which torchtitan uses for tensorwise
(current) scaling (torchtitan 0.1.0, ``models/llama3/infra/parallelize.py``, "float8
all-gather with TP is only supported for tensorwise"). Reduce-scatters, all-reduces and the
gathers beside BF16 GEMMs (router, experts' dispatch side, ``lm_head``) stay BF16.

Memory: FP8 weight copies (rowwise and transposed/columnwise, 1 B each per GEMM weight
parameter) beside the BF16 weights and the FP32 master weights (``FP8_WEIGHT_BYTES``).
"""

from __future__ import annotations

from simtrain.workload.compute import ComputeConfig, GPULike, gemm_efficiency, op_time
from simtrain.workload.linears import separate_kernels
from simtrain.workload.model import Op

FP8_RECIPES = ("delayed", "current", "mxfp8", "blockwise")
# Architectures whose tensor cores have FP8 (Hopper, Ada, Blackwell; CDNA3 has OCP FP8);
# MXFP8 block scaling is a Blackwell (5th-gen tensor core) feature.
FP8_ARCHS = ("hopper", "blackwell", "cdna3")
MXFP8_ARCHS = ("blackwell",)
# 1x128 / 128x128 block-scaled FP8 GEMMs: Hopper (the sources' blockwise runs are H800,
# DeepSeek-V3 Sec. 3.3, and DGX-H100, Megatron Bridge 25.09; DeepGEMM is SM90 code).
BLOCKWISE_ARCHS = ("hopper",)
# GEMMs that stay BF16 under FP8 training (name suffixes of simtrain.workload.model ops).
BF16_GEMMS = (".router", "lm_head")
# FP8 GEMMs whose input is written by the norm (QKV, fc1) or the activation (fc2) before them.
FUSED_INPUT_CASTS = (".attn.qkv", ".mlp.fc1", ".mlp.fc2")
# Which of those the norm/activation kernel quantises itself, per recipe (TE 2.x
# ``pytorch/csrc/extensions/normalization.cpp`` and ``activation.cpp`` choose an ``Impl``
# per quantizer): per-tensor delayed scaling FULLY_FUSED for both; MXFP8 FULLY_FUSED for
# the activation (``quantize_gated`` has an MXFP8 path) but UNFUSED for the norm (norm in
# BF16, then a separate quantize, unless ``NVTE_NORM_FWD_USE_CUDNN`` is set, which the
# recipes simtrain validates against do not set); current scaling FUSED_NORM_AMAX_FP8 /
# FUSED_ACTIVATION_AMAX_FP8 (the kernel writes BF16 and the amax, then a quantize kernel
# without the separate amax pass); blockwise none (module docstring).
_WRITES_FP8 = {"delayed": FUSED_INPUT_CASTS, "mxfp8": (".mlp.fc2",), "current": (),
               "blockwise": ()}
_WRITES_AMAX = {"current": FUSED_INPUT_CASTS}
FP8_WEIGHT_BYTES = 2.0  # rowwise + columnwise FP8 copies of each GEMM weight parameter
# Recipes whose SP all-gathers carry FP8 (module docstring): TE 1.9's delayed scaling and
# torchao's tensorwise (current) scaling. MXFP8 (TE 2.x block scales) is left BF16: its
# gather is MXFP8 in TE 2.4 (``distributed._all_gather_mxfp8``) but BF16 in torchtitan's MX
# path (tensorwise only, above), and simtrain cannot tell the two apart.
FP8_GATHER_RECIPES = ("delayed", "current")
FP8_GATHER_SHARE = 0.5  # bytes of an FP8 gather per byte of the BF16 one (1 B vs 2 B)
# The GEMMs an SP all-gather feeds in FP8: after an "f" (their input), before a "g" (the
# backward all-gather of their output gradient).
_GATHERED_INPUT = (".attn.qkv", ".mlp.fc1")
_GATHERED_GRAD = (".attn.proj", ".mlp.fc2")
# Every name ending this module tells GEMMs apart by (``time_key``).
_NAMED_GEMMS = BF16_GEMMS + FUSED_INPUT_CASTS + _GATHERED_GRAD

# Peak fraction of a large FP8 GEMM. H100 SXM FP8 cuBLASLt GEMMs reach ~1,300-1,450 of
# 1,979 TFLOP/s on large shapes, lower relative to peak than BF16 (NVIDIA Transformer
# Engine/cuBLASLt benchmarks as commonly reported; Hopper's FP8 wgmma accumulates in
# limited precision and kernels promote partial sums to FP32 every few k-steps, DeepSeek-V3
# report Sec. 3.3.2, which costs issue slots). Uncalibrated: 0.70 on Hopper, 0.60 on CDNA3
# (hipBLASLt); range 0.5-0.85.
# Blackwell 0.5496 ± 0.027, fitted by ``simtrain calibrate`` (1 Dec 2026) on Megatron
# Bridge's ten Llama 3 8B FP8 rows on B200, GB200 and GB300 (25.09, 25.11; delayed,
# current scaling and MXFP8): training MAPE 12.3% -> 6.3%, held out on NeMo's 8B rows
# (nemo2-docs) and its B200 long-sequence table 9.1% -> 3.3% (docs/blackwell.md has the
# command and the rows). It also gives the FP8/BF16 speedup torchtitan measured on B200
# (MXFP8 Llama 3 8B 1.16-1.20x, tensorwise 1.25x; tests/workload/test_fp8.py), which 0.70
# put at 1.37x. 2,470 of 4,500 TFLOP/s, 1.1x the BF16 peak: FP8 GEMMs sustain less of
# their datasheet peak than BF16 ones on B200/GB200; GB300 rows read slower by it (its
# measured 1.19-1.24x lead over GB200 at equal datasheet peaks is not modelled).
FP8_GEMM_EFFICIENCY: dict[str, float] = {"hopper": 0.70, "blackwell": 0.5496, "cdna3": 0.60}


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


def time_key(op: Op) -> tuple[object, ...]:
    """Everything of ``op`` that ``op_time`` and ``fp8_op_time`` read: ops with equal keys
    take equal seconds, so a layer's repeats are costed once (parallel.emit,
    parallel.program, study.plan_bound). The name counts through its pass (".dgrad",
    ".wgrad" or the forward) and which named GEMM it is (``BF16_GEMMS``,
    ``FUSED_INPUT_CASTS``, ``_GATHERED_GRAD``): a forward GEMM and a dgrad of one shape
    cast different operands, and an expert's GEMM or core attention's bmm differ by role."""
    name = op.name
    backward = next((s for s in (".dgrad", ".wgrad") if name.endswith(s)), "")
    base = name.removesuffix(backward)
    named = next((s for s in _NAMED_GEMMS if base.endswith(s)), "")
    return (op.kind, op.flops, op.bytes, op.gemm_shape, op.groups, op.parts, op.role,
            op.grad, backward, named)


def runs_in_fp8(op: Op) -> bool:
    """Whether ``op`` (or its dgrad/wgrad) is an FP8 GEMM under FP8 training."""
    if op.kind != "gemm" or op.role == "core_attention":  # standard attention's bmm: BF16
        return False
    base = op.name.removesuffix(".dgrad").removesuffix(".wgrad")
    return not base.endswith(BF16_GEMMS)


def gathers_fp8(site_kind: str, gemm: Op) -> bool:
    """Whether an SP all-gather at a Megatron "f" (before ``gemm``) or "g" (after it) moves
    FP8 under FP8 training: it gathers ``gemm``'s own FP8 operand (module docstring);
    ``gemm`` may be the forward GEMM or its dgrad."""
    if not runs_in_fp8(gemm) or gemm.role == "expert":
        return False
    base = gemm.name.removesuffix(".dgrad")
    return base.endswith(_GATHERED_INPUT if site_kind == "f" else _GATHERED_GRAD)


def cast_bytes_per_element(recipe: str) -> float:
    """HBM bytes per element of one cast_transpose: read 2 (BF16), write 1 + 1 (FP8 and
    its transpose), +2 (amax pass) for current scaling, +2/32 (block scales) for MXFP8,
    +8/128 (FP32 tile scales) for blockwise."""
    extra = {"delayed": 0.0, "current": 2.0, "mxfp8": 2.0 / 32.0,
             "blockwise": 2.0 * 4.0 / 128.0}[recipe]
    return 4.0 + extra


def cast_kernels(op: Op, recipe: str, microbatches: int, sp_gather: int = 1) -> list[float]:
    """HBM bytes of each cast kernel an FP8 GEMM ``op`` needs, per microbatch.

    Forward (m, n, k): X (m·k) every microbatch, W (n·k) once per step (so / microbatches);
    dgrad (m, k, n): dY (m·n); wgrad: none. Current scaling adds an amax kernel per cast
    (its read is in ``cast_bytes_per_element``; the kernel is listed as one more launch
    carrying no further bytes), except where the norm or activation before it computed
    the amax (``_WRITES_AMAX``). An input written in FP8 by the norm or activation before
    it (``_WRITES_FP8``) needs no cast; under delayed scaling it still needs its transpose
    for wgrad: TE 1.9 ``tex.fp8_transpose`` of ``ln_out_total`` and ``gelu_out`` in the
    backward (read 1 B, write 1 B). ``sp_gather`` > 1: an operand SP all-gathers in FP8
    (``gathers_fp8``) is quantised on the rank's 1/sp_gather shard before the gather (read
    2 B, write 1 B, +2 B amax under current scaling; TE 2.4 ``gather_along_first_dim(...,
    quantizer)``, TE 1.9
    ``grad_output_preprocess``), then the gathered FP8 copy is transposed (2 B).
    """
    if not runs_in_fp8(op) or op.gemm_shape is None or op.name.endswith(".wgrad"):
        return []
    m, n, k = op.gemm_shape
    m, n = m * op.groups, n * op.groups  # a grouped GEMM casts every group's operands
    per = cast_bytes_per_element(recipe)
    dgrad = op.name.endswith(".dgrad")
    base = op.name.removesuffix(".dgrad")
    dense = op.role != "expert"  # GroupedLinear quantises its own BF16 input
    fused_amax = not dgrad and dense and base.endswith(_WRITES_AMAX.get(recipe, ()))
    amax = per - 4.0 if recipe == "current" and not fused_amax else 0.0
    # the forward input is gathered at an "f", dgrad's dY at a "g"
    gathered = (sp_gather > 1 and recipe in FP8_GATHER_RECIPES
                and gathers_fp8("g" if dgrad else "f", op))
    operand = m * k  # dgrad (m, k, n): dY is m x (forward's n) = m·k
    out: list[float]
    launches = 0
    if gathered:  # quantise the shard, transpose the gathered copy
        out = [(3.0 + amax) * operand / sp_gather, 2.0 * operand]
        launches = 1
    elif dgrad:
        out = [per * operand]
        launches = 1
    elif dense and base.endswith(_WRITES_FP8[recipe]):
        # written in FP8 by the norm/activation: delayed scaling still transposes it for
        # wgrad; MXFP8's fused kernel writes the rowwise and columnwise copies itself
        out = [2.0 * operand] if recipe == "delayed" else []
    else:
        out = [(4.0 if fused_amax else per) * operand]
        launches = 1
    amax_launches = 0 if fused_amax else launches
    if not dgrad:
        out.append(per * n * k / max(microbatches, 1))
        launches += 1
        amax_launches += 1
    if recipe == "current":
        out += [0.0] * amax_launches
    return out


def fp8_op_time(op: Op, gpu: GPULike, cfg: ComputeConfig, recipe: str,
                microbatches: int, sp_gather: int = 1) -> float:
    """Seconds of ``op`` under FP8 training: FP8 GEMMs at the FP8 peak and FP8 efficiency
    plus their cast kernels (memory-bound, one launch each); everything else as BF16.
    With ``compute.linears`` "separate" the GEMM runs as its separate linears
    (``simtrain.workload.linears``) and its casts stay the fused op's."""
    if not runs_in_fp8(op):
        return op_time(op, gpu, cfg, "bf16")
    assert op.gemm_shape is not None
    ceiling = cfg.fp8_gemm_efficiency or FP8_GEMM_EFFICIENCY.get(gpu.arch)
    if ceiling is None:
        raise ValueError(f"no default FP8 GEMM efficiency for {gpu.arch!r}; set "
                         f"compute.fp8_gemm_efficiency")
    kernels = separate_kernels(op) if cfg.linears == "separate" else [op]
    gemm = sum(_fp8_gemm(k, gpu, cfg, ceiling) if k.kind == "gemm"
               else op_time(k, gpu, cfg, "bf16") for k in kernels)
    casts = sum(op_time(Op(f"{op.name}.cast", "elementwise", 0.0, b, None, (), 0.0), gpu,
                        cfg, "bf16") for b in cast_kernels(op, recipe, microbatches, sp_gather))
    return gemm + casts


def _fp8_gemm(op: Op, gpu: GPULike, cfg: ComputeConfig, ceiling: float) -> float:
    """Seconds of one FP8 GEMM kernel ``op`` (FP8 operands, BF16 output), with its launch."""
    assert op.gemm_shape is not None
    eff = gemm_efficiency(*op.gemm_shape, gpu, cfg, "fp8", max_efficiency=ceiling,
                          groups=op.groups)
    # FP8 operands are half the bytes of BF16 ones (the output stays BF16).
    m, n, k = op.gemm_shape
    nbytes = op.bytes - (m * k + n * k) * op.groups
    return max(op.flops / (gpu.flops("fp8") * eff),
               nbytes / (gpu.hbm_bandwidth * cfg.hbm_efficiency(gpu.arch))) + cfg.launch_overhead

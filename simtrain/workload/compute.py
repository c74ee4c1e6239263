"""Roofline compute model: how long one op takes on one GPU.

time = max(FLOPs / (peak · efficiency), bytes / (HBM bandwidth · memory_efficiency))
       + launch_overhead

GEMM efficiency depends on shape: output tiles quantise m and n, tiles run in waves across
the SMs (NVIDIA, "Matrix Multiplication Background User's Guide", Deep Learning Performance
docs: tile and wave quantization), and every tile pays a fixed latency its main loop must
amortise (``kloop_efficiency``): the software pipeline's fill, the first operand tiles'
load before the first MMA. The epilogue's store of the output tile is not a per-tile
serial cost: it overlaps other tiles' main loops (Hopper's warp-specialized "ping-pong"
kernels run one consumer warp group's epilogue beside the other's MMA, CUTLASS 3.x
docs, "efficient_gemm.md"; on Ampere and Volta the tile is written back to L2 while
the other SMs keep computing), and its HBM traffic is the output's m·n bytes in the
roofline's memory term (``ops.gemm`` counts them), so a GEMM whose output outweighs its
FLOPs (k = 64-128: standard attention's scores) is memory-bound rather than paying both.
The fill is a larger share of a tile the faster one SM computes, so the same shape
reaches less of peak on H100 than on A100, and FP8 less than BF16. Skinny GEMMs
(small m: micro-batch 1-2 under TP 8, MoE experts with few tokens) lose padded tile rows
and fall into the memory-bound regime of the roofline, where the weight read dominates.
Efficiencies are parameters with documented defaults, meant to be calibrated against
measurements (shared/reference/calibration.yaml).
"""

from __future__ import annotations

import math
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from simtrain.units import Seconds
from simtrain.workload.attention_impl import fa2_efficiency, op_sac_saves_attention
from simtrain.workload.cross_entropy import CrossEntropyImpl
from simtrain.workload.linears import separate_kernels
from simtrain.workload.model import OP_KINDS, Op

# Fraction of dense peak a large, well-shaped bf16 GEMM reaches with cuBLAS/cuBLASLt.
# Measured large square GEMMs on V100/A100 reach ~75-85% of dense tensor-core peak; H100
# SXM similar (~0.75-0.8: 989 TFLOP/s assumes boost clock, the card power-throttles under
# sustained GEMMs). Blackwell and MI300X (hipBLASLt) have fewer public measurements and
# typically land lower relative to their datasheet peaks; calibrate before trusting.
# Hopper: fitted by ``simtrain calibrate`` to the Megatron-Core 2024 H100 rows (see
# docs/validation.md, "Calibration"). Volta and Ampere: refitted by ``simtrain calibrate``
# on 1 Dec 2026 (evening) on the Megatron-LM 2020 rows, once the k-loop factor kept only
# the tile's fill latency and standard attention's batched GEMMs ran their backward as
# batched problems: Volta 0.9196 -> 0.7696 ± 0.020 (96 of 125 TFLOP/s; no held-out V100
# source), Ampere 0.80 -> 0.6971 ± 0.015 (217 of 312 TFLOP/s), which also lowers its
# held-out torchtitan A100 error 17.2% -> 8.5%. Both in the 0.5-0.95 range; the earlier
# Volta 0.92 and Ampere 0.88 fits were absorbing those two kernel costs.
GEMM_EFFICIENCY: dict[str, float] = {
    "volta": 0.7696, "ampere": 0.6971, "hopper": 0.8156, "blackwell": 0.75, "cdna3": 0.60,
}
# Fraction of dense peak a fused attention kernel reaches on its (executed) FLOPs, fwd+bwd.
# Executed FLOPs as the FlashAttention benchmarks count them: causal pairs halved, the
# backward 2.5x the forward (``backward_ops``). FlashAttention-2 forward reaches 50-73% of
# peak on A100 (Dao 2023, "FlashAttention-2", abstract and Sec. 4.1). Hopper: FA2 reaches
# "up to 335 TFLOPs/s" forward+backward on H100 (Dao 2023, Sec. 4.1, Fig. 7; no TMA or
# wgmma), 335/989 = 0.339: the class of kernel the H100 suites' stacks ran (PyTorch SDPA's
# flash backend is FA2; NeMo's long-sequence table, attention 84-98% of its FLOPs from 128k
# tokens on, implies 0.32 at every length from 4k to 1M, docs/validation.md). Hopper-native
# kernels go further, FlashAttention-3 up to 75% forward in BF16 (Shah et al. 2024,
# abstract): set compute.attention_efficiency (range 0.30-0.75) for such a stack.
# Volta has no FlashAttention-2 kernels (memory-efficient attention is much slower).
# Blackwell 0.42: measured, from NeMo's B200 long-sequence table (NVIDIA/NeMo 19fadb67,
# docs/source/performance/performance_long_sequence.md; measured_runs.yaml
# nemo_long_sequence_cp): Llama 3 8B FP8 at 8K-1M tokens, where core attention (BF16,
# cuDNN fused attention, NeMo 25.04) is 22-97% of the counted FLOPs. Time per token
# T(s) = 6·l·s·h / R_a + 6·N / R_g (NeMo counts 12·l·s·h attention FLOPs, non-causal;
# a causal kernel runs half) fits all 8 rows within 6% with R_a = 804 TFLOP/s; the kernel
# executes 7·l·s·h per token (backward 2.5x forward, as Op.flops counts), so its efficiency
# on executed FLOPs is 7/6 · 804 / 2250 = 0.417 (tests/workload/test_blackwell_attention.py
# repeats the fit). The same fit on NeMo's H100 rows (24.03, pre-FA3 kernels) gives 0.27.
# B300/GB300 share it: their measured lead over GB200 on the same jobs (1.19-1.24x) is
# not attention-specific (docs/blackwell.md), so Blackwell Ultra's faster softmax
# exponentials (NVIDIA, general knowledge) are not modelled.
ATTENTION_EFFICIENCY: dict[str, float] = {
    "volta": 0.35, "ampere": 0.60, "hopper": 0.339, "blackwell": 0.42, "cdna3": 0.40,
}
# Fraction of HBM bandwidth streaming elementwise/norm kernels reach: STREAM-like copies
# reach ~85-90% of datasheet bandwidth on A100/H100 (held at 0.85 when Hopper was fitted).
MEMORY_EFFICIENCY: dict[str, float] = {
    "volta": 0.85, "ampere": 0.85, "hopper": 0.85, "blackwell": 0.85, "cdna3": 0.80,
}

class GPULike(Protocol):
    """What the compute model needs from a GPU (implemented by simtrain.hardware.gpus)."""

    @property
    def hbm_bandwidth(self) -> float: ...  # bytes/s

    @property
    def num_sms(self) -> int: ...

    @property
    def arch(self) -> str: ...  # "volta", "ampere", "hopper", "blackwell", "cdna3"

    def flops(self, dtype: str) -> float: ...  # dense peak FLOP/s for dtype


class ComputeConfig(BaseModel):
    """The scenario's ``compute:`` section: roofline efficiencies and overheads.

    ``None`` efficiencies take the per-architecture defaults above.
    """

    model_config = ConfigDict(extra="forbid")

    # Peak fraction of a large, well-shaped GEMM (None: GEMM_EFFICIENCY[gpu.arch]).
    gemm_efficiency: float | None = None
    # Output tile of the GEMM kernel. 128x128 is cuBLAS's workhorse tile for bf16 on
    # A100/H100 (256x128 is also common on Hopper); one tile per SM at a time.
    tile_m: int = 128
    tile_n: int = 128
    # Latency before a tile's main loop streams: the first operand tiles' load from HBM
    # through L2 into shared memory (the output's store overlaps other tiles' main loops;
    # its bytes are the roofline's, see kloop_k0). Global-memory load latency is ~400-800 cycles on
    # A100/H100 (Luo et al. 2024, "Benchmarking and Dissecting the Nvidia Hopper GPU
    # Architecture", Sec. 4: ~470 cycles global, ~260 L2 hit; ~0.3-0.5 us at 1.4-1.8 GHz);
    # range 0.2-1.5 us. See kloop_efficiency.
    tile_fill_latency: Seconds = Field(0.5e-6, ge=0.0)
    # Peak fraction of a large FP8 GEMM (None: simtrain.workload.fp8.FP8_GEMM_EFFICIENCY).
    fp8_gemm_efficiency: float | None = None
    # Peak fraction of fused (flash) attention on executed FLOPs (None: from attention_impl).
    attention_efficiency: float | None = None
    # The fused attention kernel: "default" (per-arch ATTENTION_EFFICIENCY), "fa2"
    # (FlashAttention-2, as PyTorch SDPA runs it) or "cudnn" (SDPA's cuDNN backend: the
    # default rate, not saved by per-op checkpointing); simtrain.workload.attention_impl.
    attention_impl: Literal["default", "fa2", "cudnn"] = "default"
    # The LM head's cross-entropy kernels: "unfused" fp32 passes, Megatron-Core's "native"
    # torch.compile fusion or Transformer Engine's Triton kernel ("te");
    # simtrain.workload.cross_entropy.
    cross_entropy: CrossEntropyImpl = "unfused"
    # Multi-output linears: "fused" (one GEMM for Q, K, V and one for SwiGLU's gate and up,
    # Megatron-Core's linear_qkv and linear_fc1) or "separate" (one nn.Linear each, as
    # torchtitan's Llama and Hugging Face models run them); simtrain.workload.linears.
    linears: Literal["fused", "separate"] = "fused"
    # Training uses causal masks: a causal flash kernel skips the blocks above the diagonal
    # and executes about half the non-causal FLOPs that Op.flops counts (MFU convention).
    causal_attention: bool = True
    # Fraction of HBM bandwidth of memory-bound kernels (None: per-arch default).
    memory_efficiency: float | None = None
    # Per-kernel launch cost: a few microseconds per launch (A. Gray, NVIDIA blog "Getting
    # Started with CUDA Graphs", 2019, measures ~3-4 us per short kernel without graphs).
    # We take the low end of 3-5 us since launches queue asynchronously ahead of execution;
    # set ~1us to model CUDA graphs.
    launch_overhead: Seconds = 3e-6
    # Compute slowdown while a collective runs on the same GPU. None (default): from its
    # causes, the SMs the collective's NCCL channels hold (channels x sms_per_channel out
    # of the GPU's SMs, hardware.yaml ``sms``) and the HBM bandwidth it moves
    # (simtrain.workload.interference); a number: that fixed fractional slowdown; 0
    # switches it off.
    comm_interference: float | None = Field(None, ge=0.0, le=1.0)
    # SMs one NCCL channel holds while its collective runs: NCCL launches one CTA (thread
    # block) per channel and each CTA keeps its SM's shared memory and registers
    # (NCCL docs, "NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS": "each channel uses one CUDA
    # block"); range 1-2 (2 models CTAs that crowd a second SM's occupancy).
    sms_per_channel: float = Field(1.0, ge=0.0, le=4.0)
    # NCCL channels of a communicator (None: per-arch default, interference.NCCL_CHANNELS).
    comm_channels: int | None = Field(None, ge=1, le=64)

    # Host seconds to issue one kernel (Python, dispatcher, autograd, cudaLaunchKernel):
    # range 1-30 us, see simtrain.workload.host for the sources.
    host_kernel_issue: Seconds = Field(8e-6, ge=0.0)
    # Host seconds of framework work per microbatch and pipeline step (forward/backward
    # entry, data iterator, loss, no_sync and pipeline bookkeeping): range 20 us - 2 ms.
    host_microbatch: Seconds = Field(200e-6, ge=0.0)
    # Measured per-op efficiency tables (simtrain.workload.tables), consulted before the
    # roofline; paths relative to the scenario file.
    tables: list[str] = Field(default_factory=list)

    @field_validator("gemm_efficiency", "attention_efficiency", "memory_efficiency",
                     "fp8_gemm_efficiency")
    @classmethod
    def _fraction(cls, value: float | None) -> float | None:
        if value is not None and not 0.0 < value <= 1.0:
            raise ValueError(f"efficiency must be a fraction in (0, 1], got {value}; "
                             f"e.g. 0.8 means 80% of the peak")
        return value

    @field_validator("tile_m", "tile_n")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError(f"tile sizes must be positive integers, got {value}")
        return value

    def max_gemm_efficiency(self, arch: str) -> float:
        """The configured GEMM efficiency, or the default for ``arch``."""
        return _by_arch(self.gemm_efficiency, GEMM_EFFICIENCY, arch, "gemm_efficiency")

    def hbm_efficiency(self, arch: str) -> float:
        """The configured memory efficiency, or the default for ``arch``."""
        return _by_arch(self.memory_efficiency, MEMORY_EFFICIENCY, arch, "memory_efficiency")

    @property
    def op_sac_saves_attention(self) -> bool:
        """Whether per-op checkpointing keeps this attention kernel's output (not cuDNN's)."""
        return op_sac_saves_attention(self.attention_impl)

    def max_attention_efficiency(self, arch: str) -> float:
        """The configured attention efficiency, else ``attention_impl``'s for ``arch``."""
        if self.attention_efficiency is None and self.attention_impl == "fa2":
            return fa2_efficiency(arch)
        return _by_arch(self.attention_efficiency, ATTENTION_EFFICIENCY, arch,
                        "attention_efficiency")


def _by_arch(value: float | None, table: dict[str, float], arch: str, field: str) -> float:
    if value is not None:
        return value
    if arch not in table:
        raise ValueError(f"no default {field} for GPU architecture {arch!r} (known: "
                         f"{sorted(table)}); set compute.{field} explicitly")
    return table[arch]


def tile_efficiency(m: int, n: int, tile_m: int, tile_n: int) -> float:
    """Useful fraction of the padded output: m·n / (⌈m/tm⌉·tm · ⌈n/tn⌉·tn)."""
    return (m * n) / (math.ceil(m / tile_m) * tile_m * math.ceil(n / tile_n) * tile_n)


def wave_efficiency(tiles: int, num_sms: int) -> float:
    """Busy fraction of SM-slots over the waves: tiles / (⌈tiles/SMs⌉·SMs)."""
    return tiles / (math.ceil(tiles / num_sms) * num_sms)


def kloop_k0(tile_m: int, tile_n: int, per_sm_flops: float, fill_latency: float) -> float:
    """The reduction length whose main-loop time equals a tile's fixed latency.

    One SM computes a tm x tn output tile at ``per_sm_flops`` (peak / SMs): 2·tm·tn FLOP per
    unit of k; the pipeline fill (``fill_latency``) is paid once per tile, so
    k0 = fill_latency · per_sm_flops / (2·tm·tn). H100 bf16, 128x128, 0.5 us:
    0.5 us · 7.4955 TFLOP/s / 32768 = 114.4 (the output store is in the roofline's
    memory term, module docstring).
    """
    return fill_latency * per_sm_flops / (2.0 * tile_m * tile_n)


def kloop_efficiency(k: int, k0: float) -> float:
    """Main-loop share of a tile's time: k / (k + k0) (see ``kloop_k0``)."""
    return k / (k + k0)


def gemm_efficiency(m: int, n: int, k: int, gpu: GPULike, cfg: ComputeConfig,
                    dtype: str = "bf16", max_efficiency: float | None = None,
                    groups: int = 1) -> float:
    """Peak fraction a GEMM (m, n, k) reaches: max · tile · wave · k/(k + k0).

    ``dtype`` sets the peak the tile computes at; ``max_efficiency`` overrides the
    large-GEMM ceiling (FP8 GEMMs have their own, ``simtrain.workload.fp8``). A grouped
    GEMM of ``groups`` (m, n, k) problems in one kernel (CUTLASS grouped GEMM, as
    Megatron-Core's ``--moe-grouped-gemm`` runs a rank's experts) pads each problem's
    tiles and runs all groups' tiles in one set of waves: the per-expert token count m
    sets the tile fill and, for the weight gradient (n, k, m), the k-loop.
    """
    if min(m, n, k) <= 0:
        raise ValueError(f"gemm shape must be positive, got (m, n, k) = ({m}, {n}, {k})")
    if gpu.num_sms <= 0:
        raise ValueError(f"gpu.num_sms must be positive, got {gpu.num_sms}")
    if groups < 1:
        raise ValueError(f"a grouped GEMM needs groups >= 1, got {groups}")
    tiles = groups * math.ceil(m / cfg.tile_m) * math.ceil(n / cfg.tile_n)
    k0 = kloop_k0(cfg.tile_m, cfg.tile_n, gpu.flops(dtype) / gpu.num_sms,
                  cfg.tile_fill_latency)
    ceiling = cfg.max_gemm_efficiency(gpu.arch) if max_efficiency is None else max_efficiency
    return (ceiling
            * tile_efficiency(m, n, cfg.tile_m, cfg.tile_n)
            * wave_efficiency(tiles, gpu.num_sms)
            * kloop_efficiency(k, k0))


def op_time(op: Op, gpu: GPULike, cfg: ComputeConfig, dtype: str = "bf16") -> float:
    """Seconds for ``op`` on ``gpu``: roofline max of FLOP and byte time, plus launch.

    gemm uses ``gemm_efficiency`` of its shape (with ``cfg.linears`` "separate", a GEMM
    with ``parts`` is the sum of its separate kernels, ``simtrain.workload.linears``),
    attention ``attention_efficiency`` on the
    executed FLOPs (half of Op.flops when causal); memory-bound kinds use bytes only.
    """
    if op.flops < 0 or op.bytes < 0:
        raise ValueError(f"op {op.name!r} has negative flops {op.flops} or bytes {op.bytes}")
    if op.kind == "gemm" and cfg.linears == "separate" and len(op.parts) > 1:
        return sum(op_time(k, gpu, cfg, dtype) for k in separate_kernels(op))
    if cfg.tables:  # measured kernel times first (simtrain.workload.tables)
        from simtrain.workload.tables import measured_time
        measured = measured_time(op, gpu, cfg.tables, dtype)
        if measured is not None:
            return measured + cfg.launch_overhead
    if op.kind == "gemm":
        if op.gemm_shape is None:
            raise ValueError(f"gemm op {op.name!r} has no gemm_shape; give it (m, n, k)")
        eff = gemm_efficiency(*op.gemm_shape, gpu, cfg, dtype, groups=op.groups)
        compute = op.flops / (gpu.flops(dtype) * eff)
    elif op.kind == "attention":
        executed = op.flops * (0.5 if cfg.causal_attention else 1.0)
        compute = executed / (gpu.flops(dtype) * cfg.max_attention_efficiency(gpu.arch))
    elif op.kind in OP_KINDS:
        compute = 0.0
    else:
        raise ValueError(f"op {op.name!r} has unknown kind {op.kind!r}; use one of {OP_KINDS}")
    memory = op.bytes / (gpu.hbm_bandwidth * cfg.hbm_efficiency(gpu.arch))
    return max(compute, memory) + cfg.launch_overhead

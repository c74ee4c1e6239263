"""Roofline compute model: how long one op takes on one GPU.

time = max(FLOPs / (peak · efficiency), bytes / (HBM bandwidth · memory_efficiency))
       + launch_overhead

GEMM efficiency depends on shape: output tiles quantise m and n, tiles run in waves across
the SMs, and a short reduction (small k) cannot hide the tile prologue/epilogue (NVIDIA,
"Matrix Multiplication Background User's Guide", Deep Learning Performance docs: tile and
wave quantization). Efficiencies are parameters with documented defaults, meant to be
calibrated against measurements (shared/reference/calibration.yaml).
"""

from __future__ import annotations

import math
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from simtrain.units import Seconds
from simtrain.workload.model import OP_KINDS, Op

# Fraction of dense peak a large, well-shaped bf16 GEMM reaches with cuBLAS/cuBLASLt.
# Measured large square GEMMs on V100/A100 reach ~75-85% of dense tensor-core peak; H100
# SXM similar (~0.75-0.8: 989 TFLOP/s assumes boost clock, the card power-throttles under
# sustained GEMMs). Blackwell and MI300X (hipBLASLt) have fewer public measurements and
# typically land lower relative to their datasheet peaks; calibrate before trusting.
# Hopper: fitted by ``simtrain calibrate`` to the Megatron-Core 2024 H100 rows (see
# docs/validation.md, "Calibration"); the others are the literature values above.
GEMM_EFFICIENCY: dict[str, float] = {
    "volta": 0.80, "ampere": 0.80, "hopper": 0.8156, "blackwell": 0.75, "cdna3": 0.60,
}
# Fraction of dense peak a fused attention kernel reaches on its (executed) FLOPs.
# FlashAttention-2 forward reaches 50-73% of peak on A100 (Dao 2023, "FlashAttention-2",
# abstract and Sec. 4.1); FlashAttention-3 reaches up to 75% on H100 in FP16 (Shah et al.
# 2024, abstract) while FA2 on H100 reaches ~35-40%; 0.55 sits between cuDNN/FA3 and FA2.
# Volta has no FlashAttention-2 kernels (memory-efficient attention is much slower).
ATTENTION_EFFICIENCY: dict[str, float] = {
    "volta": 0.35, "ampere": 0.60, "hopper": 0.55, "blackwell": 0.50, "cdna3": 0.40,
}
# Fraction of HBM bandwidth streaming elementwise/norm kernels reach: STREAM-like copies
# reach ~85-90% of datasheet bandwidth on A100/H100 (held at 0.85 when Hopper was fitted).
MEMORY_EFFICIENCY: dict[str, float] = {
    "volta": 0.85, "ampere": 0.85, "hopper": 0.85, "blackwell": 0.85, "cdna3": 0.80,
}

# Host time per training step the GPUs wait for and the task graph does not hold: data
# loading, logging, loss and gradient-norm reductions, Python between phases. 0 unless
# fitted against measured runs (simtrain calibrate).
STEP_OVERHEAD: dict[str, float] = {
    "volta": 0.0, "ampere": 0.0, "hopper": 0.1413, "blackwell": 0.0, "cdna3": 0.0,
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
    # Below this reduction length the main loop (a few 32-64 wide k-steps) is too short to
    # hide the fixed per-tile prologue/epilogue, so time per tile is roughly flat and the
    # efficiency scales as k / small_k. Transformer GEMMs (k = h, ffn or tokens) rarely hit it.
    small_k: int = 128
    # Peak fraction of fused (flash) attention on executed FLOPs (None: per-arch default).
    attention_efficiency: float | None = None
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
    # Fractional compute slowdown while a collective runs on the same GPU (NCCL kernels
    # take SMs and HBM bandwidth). 0 until fitted against measured runs: the reference
    # data has no direct measurement of it.
    comm_interference: float = Field(0.0, ge=0.0, le=1.0)

    # Host overhead per step in seconds (None: per-arch default, STEP_OVERHEAD).
    step_overhead: Seconds | None = Field(None, ge=0.0)
    # Measured per-op efficiency tables (simtrain.workload.tables), consulted before the
    # roofline; paths relative to the scenario file.
    tables: list[str] = Field(default_factory=list)

    @field_validator("gemm_efficiency", "attention_efficiency", "memory_efficiency")
    @classmethod
    def _fraction(cls, value: float | None) -> float | None:
        if value is not None and not 0.0 < value <= 1.0:
            raise ValueError(f"efficiency must be a fraction in (0, 1], got {value}; "
                             f"e.g. 0.8 means 80% of the peak")
        return value

    @field_validator("tile_m", "tile_n", "small_k")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError(f"tile sizes and small_k must be positive integers, got {value}")
        return value

    def max_gemm_efficiency(self, arch: str) -> float:
        """The configured GEMM efficiency, or the default for ``arch``."""
        return _by_arch(self.gemm_efficiency, GEMM_EFFICIENCY, arch, "gemm_efficiency")

    def hbm_efficiency(self, arch: str) -> float:
        """The configured memory efficiency, or the default for ``arch``."""
        return _by_arch(self.memory_efficiency, MEMORY_EFFICIENCY, arch, "memory_efficiency")

    def host_overhead(self, arch: str) -> float:
        """The configured host overhead per step, or the default for ``arch``."""
        return _by_arch(self.step_overhead, STEP_OVERHEAD, arch, "step_overhead")

    def max_attention_efficiency(self, arch: str) -> float:
        """The configured attention efficiency, or the default for ``arch``."""
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


def gemm_efficiency(m: int, n: int, k: int, gpu: GPULike, cfg: ComputeConfig) -> float:
    """Peak fraction a GEMM (m, n, k) reaches: max · tile · wave · min(1, k/small_k)."""
    if min(m, n, k) <= 0:
        raise ValueError(f"gemm shape must be positive, got (m, n, k) = ({m}, {n}, {k})")
    if gpu.num_sms <= 0:
        raise ValueError(f"gpu.num_sms must be positive, got {gpu.num_sms}")
    tiles = math.ceil(m / cfg.tile_m) * math.ceil(n / cfg.tile_n)
    return (cfg.max_gemm_efficiency(gpu.arch)
            * tile_efficiency(m, n, cfg.tile_m, cfg.tile_n)
            * wave_efficiency(tiles, gpu.num_sms)
            * min(1.0, k / cfg.small_k))


def op_time(op: Op, gpu: GPULike, cfg: ComputeConfig, dtype: str = "bf16") -> float:
    """Seconds for ``op`` on ``gpu``: roofline max of FLOP and byte time, plus launch.

    gemm uses ``gemm_efficiency`` of its shape, attention ``attention_efficiency`` on the
    executed FLOPs (half of Op.flops when causal); memory-bound kinds use bytes only.
    """
    if op.flops < 0 or op.bytes < 0:
        raise ValueError(f"op {op.name!r} has negative flops {op.flops} or bytes {op.bytes}")
    if cfg.tables:  # measured kernel times first (simtrain.workload.tables)
        from simtrain.workload.tables import measured_time
        measured = measured_time(op, gpu, cfg.tables, dtype)
        if measured is not None:
            return measured + cfg.launch_overhead
    if op.kind == "gemm":
        if op.gemm_shape is None:
            raise ValueError(f"gemm op {op.name!r} has no gemm_shape; give it (m, n, k)")
        eff = gemm_efficiency(*op.gemm_shape, gpu, cfg)
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

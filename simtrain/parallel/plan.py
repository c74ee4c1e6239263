"""The scenario's ``parallelism:`` section and its checks against the cluster and model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from simtrain.units import MiBCount

# PyTorch DDP defaults, torch/csrc/distributed/c10d/reducer.hpp:
# kDefaultFirstBucketBytes = 1 MiB, kDefaultBucketBytesCap = 25 MiB.
DEFAULT_BUCKET_CAP_BYTES = 25 * 2**20
DEFAULT_FIRST_BUCKET_BYTES = 1 * 2**20


class DDPConfig(BaseModel):
    """PyTorch DistributedDataParallel gradient bucketing.

    ``bucket_cap_mb`` and ``first_bucket_mb`` are MiB as in PyTorch (a plain number), or a
    size string such as "25MB".
    """

    model_config = ConfigDict(extra="forbid")

    bucket_cap_mb: MiBCount = DEFAULT_BUCKET_CAP_BYTES
    first_bucket_mb: MiBCount = DEFAULT_FIRST_BUCKET_BYTES
    overlap: bool = Field(True, description="launch bucket all-reduces during backward")
    # Gradients are all-reduced in the parameters' dtype: fp32 for AMP training with fp32
    # master parameters (PyTorch DDP + autocast), bf16 when the model itself is bf16.
    grad_dtype: str = Field("fp32", pattern="^(fp32|bf16|fp16)$")

    @property
    def bucket_cap_bytes(self) -> float:
        return self.bucket_cap_mb

    @property
    def first_bucket_bytes(self) -> float:
        return self.first_bucket_mb


class ParallelismConfig(BaseModel):
    """How the step is split across GPUs. Data parallelism over every GPU by default."""

    model_config = ConfigDict(extra="forbid")

    dp: int | None = Field(None, gt=0, description="data-parallel degree; all GPUs if None")
    ddp: DDPConfig = Field(default_factory=DDPConfig)


def check_plan(
    dp: int, num_gpus: int, global_batch: int, micro_batch: int
) -> list[tuple[str, str]]:
    """Problems with a data-parallel plan as (field, message-with-fix) pairs; empty if fine."""
    problems: list[tuple[str, str]] = []
    if dp != num_gpus:
        problems.append((
            "parallelism.dp",
            f"dp={dp} does not match the cluster's {num_gpus} GPUs (world size); "
            f"set parallelism.dp to {num_gpus} or change cluster.nodes",
        ))
        return problems
    per_step = dp * micro_batch
    if global_batch % per_step:
        problems.append((
            "training.global_batch_size",
            f"global_batch_size={global_batch} is not divisible by dp x micro_batch_size = "
            f"{dp} x {micro_batch} = {per_step}; use a multiple of {per_step}",
        ))
    return problems

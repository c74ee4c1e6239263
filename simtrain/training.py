"""Training hyper-parameters that shape a step: batch, sequence, precision, optimizer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Bytes per element of each training dtype (of weights, activations and collectives:
# FP8 training keeps them BF16 and casts only the GEMM operands, simtrain.workload.fp8).
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
_ACTIVATION_BYTES = {**DTYPE_BYTES, "fp8": 2}


class FP8Config(BaseModel):
    """The scenario's ``training.fp8:`` block (used with ``training.dtype: fp8``).

    ``recipe``: Transformer Engine scaling recipe — ``delayed`` (amax history of earlier
    steps, TE's DelayedScaling), ``current`` (per-tensor scale from this tensor's amax,
    Float8CurrentScaling), ``mxfp8`` (1x32 block scales, MXFP8BlockScaling; Blackwell
    only) or ``blockwise`` (1x128 / 128x128 tile scales, DeepSeek-V3's recipe and TE's
    Float8BlockScaling; Hopper only). See simtrain.workload.fp8 for what each costs.
    """

    model_config = ConfigDict(extra="forbid")

    recipe: Literal["delayed", "current", "mxfp8", "blockwise"] = "delayed"


class TrainingConfig(BaseModel):
    """The scenario's ``training:`` section."""

    model_config = ConfigDict(extra="forbid")

    global_batch_size: int = Field(gt=0, description="sequences per optimizer step, all ranks")
    micro_batch_size: int = Field(1, gt=0, description="sequences per forward/backward")
    seq_len: int | None = Field(None, gt=0, description="tokens per sequence; model max if None")
    dtype: Literal["bf16", "fp16", "fp32", "fp8"] = "bf16"
    fp8: FP8Config | None = None
    optimizer: Literal["adam", "sgd"] = "adam"

    @model_validator(mode="after")
    def _fp8_block_needs_fp8(self) -> TrainingConfig:
        if self.fp8 is not None and self.dtype != "fp8":
            raise ValueError(f"training.fp8 is given but training.dtype is {self.dtype!r}; "
                             f"set training.dtype: fp8 or remove the fp8 block")
        return self

    @property
    def dtype_bytes(self) -> int:
        """Bytes per element of weights, activations and collectives (2 under FP8)."""
        return _ACTIVATION_BYTES[self.dtype]

    @property
    def fp8_recipe(self) -> str | None:
        """The FP8 scaling recipe, or None when not training in FP8."""
        if self.dtype != "fp8":
            return None
        return (self.fp8 or FP8Config()).recipe


def optimizer_bytes_per_param(optimizer: str, dtype: str) -> float:
    """HBM bytes one optimizer step moves per parameter (fused multi-tensor kernel).

    Mixed-precision Adam (Micikevicius et al. 2018; Rajbhandari et al. 2020 count 16 B of
    state per parameter): read fp32 grad, master weight, m and v (4 x 4 B), write master,
    m, v (3 x 4 B) and the low-precision copy of the weight (2 B): 30 B. In fp32 there is
    no copy: 28 B. SGD reads grad and weight and writes the weight: 12 B (+2 B copy).
    """
    copy = 0.0 if dtype == "fp32" else 2.0  # fp8 training keeps a BF16 weight copy too
    if optimizer == "adam":
        return 28.0 + copy
    return 12.0 + copy

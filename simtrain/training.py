"""Training hyper-parameters that shape a step: batch, sequence, precision, optimizer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Bytes per element of each training dtype.
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


class TrainingConfig(BaseModel):
    """The scenario's ``training:`` section."""

    model_config = ConfigDict(extra="forbid")

    global_batch_size: int = Field(gt=0, description="sequences per optimizer step, all ranks")
    micro_batch_size: int = Field(1, gt=0, description="sequences per forward/backward")
    seq_len: int | None = Field(None, gt=0, description="tokens per sequence; model max if None")
    dtype: Literal["bf16", "fp16", "fp32"] = "bf16"
    optimizer: Literal["adam", "sgd"] = "adam"

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]


def optimizer_bytes_per_param(optimizer: str, dtype: str) -> float:
    """HBM bytes one optimizer step moves per parameter (fused multi-tensor kernel).

    Mixed-precision Adam (Micikevicius et al. 2018; Rajbhandari et al. 2020 count 16 B of
    state per parameter): read fp32 grad, master weight, m and v (4 x 4 B), write master,
    m, v (3 x 4 B) and the low-precision copy of the weight (2 B): 30 B. In fp32 there is
    no copy: 28 B. SGD reads grad and weight and writes the weight: 12 B (+2 B copy).
    """
    copy = 0.0 if dtype == "fp32" else 2.0
    if optimizer == "adam":
        return 28.0 + copy
    return 12.0 + copy

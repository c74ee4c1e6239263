"""The scenario's ``comm:`` section: collective library settings."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from simtrain.units import Seconds


class CommConfig(BaseModel):
    """Collective communication settings shared by every process group."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["nccl"] = "nccl"
    # "auto" takes each op's default algorithm (ring for all-reduce/reduce-scatter/
    # all-gather); forcing one is checked when the collective is lowered.
    algorithm: Literal["auto", "ring"] = "auto"
    # Fixed cost of launching one collective, paid once before its first step. Default:
    # NCCL's base latency for ring/Simple, 8.4 us (src/graph/tuning.cc baseLat, NCCL
    # 2.18-2.30; ../shared/reference/nccl.yaml). Per-step latencies come from the topology.
    collective_latency: Seconds = 8.4e-6

"""``LowerOptions``: everything the lowering needs besides the units, schedule and op timer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simtrain.parallel.plan import PARAM_GATHER_NEEDS_ZERO, TP_OVERLAP_NEEDS_SP, ParallelDims
from simtrain.parallel.symmetry import Symmetry
from simtrain.workload.optimizer import OptimizerStep


@dataclass(frozen=True)
class LowerOptions:
    """The plan's options as the strategies read them (SI units, bytes per element)."""

    dims: ParallelDims
    micro_batches: int
    dtype_bytes: int
    grad_bytes_per_element: float
    first_bucket_bytes: float
    bucket_cap_bytes: float
    overlap: bool
    optimizer_bytes_per_param: float
    recompute: str = "none"
    granularity: str = "op"
    p2p_bytes: float = 0.0  # activation (and gradient) bytes per pipeline transfer
    imbalance: float = 0.0
    capacity_factor: float | None = None
    # Symmetric fidelity: emit only data-parallel replica 0; the other replicas mirror it
    # (virtual ranks), and their copies of its collectives load the network as weights.
    symmetric: bool = False
    # Symmetric or hybrid fidelity spelled out: which ranks are simulated and whom the
    # others mirror (``symmetry.py``; overrides ``symmetric``).
    symmetry: Symmetry | None = None
    # Megatron-Core --tp-comm-overlap: TP all-gather/reduce-scatter pipelined with GEMMs.
    tp_comm_overlap: bool = False
    # Megatron --overlap-param-gather: ZeRO-1/2 parameter all-gathers during the forward.
    overlap_param_gather: bool = False
    # The optimizer step's kernels on one rank (simtrain.workload.optimizer.optimizer_step
    # bound to the GPU): (local parameter numels, ZeRO shards) -> its time and launches.
    optimizer_step: Callable[[list[int], int], OptimizerStep] | None = None

    def __post_init__(self) -> None:
        if self.tp_comm_overlap and self.dims.tp > 1 and not self.dims.sp:
            raise ValueError(TP_OVERLAP_NEEDS_SP)
        if self.overlap_param_gather and self.dims.zero not in (1, 2):
            raise ValueError(PARAM_GATHER_NEEDS_ZERO.format(zero=self.dims.zero))

    @property
    def fsdp(self) -> bool:
        """ZeRO-3 / FSDP with parameters actually sharded (dp x cp > 1)."""
        return self.dims.zero == 3 and self.dims.dp * self.dims.cp > 1

    @property
    def tp_overlap(self) -> bool:
        """``tp_comm_overlap`` with something to overlap (TP with SP)."""
        return self.tp_comm_overlap and self.dims.tp > 1 and self.dims.sp

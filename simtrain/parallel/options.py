"""``LowerOptions``: everything the lowering needs besides the units, schedule and op timer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simtrain.parallel.plan import PARAM_GATHER_NEEDS_ZERO, TP_OVERLAP_NEEDS_SP, ParallelDims
from simtrain.parallel.symmetry import Symmetry
from simtrain.training import DTYPE_BYTES
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
    # Megatron scatter-gather (sp off): p2p_bytes is 1/tp of the activation, all-gathered
    # over TP on the receiving stage.
    pp_gather: bool = False
    imbalance: float = 0.0
    capacity_factor: float | None = None
    # MoE token dispatch: "alltoall" (NCCL all-to-all) or "deepep" (one network copy per
    # destination node, forwarded over NVLink; parallel.expert.deepep_splits), the
    # routing's top-k and node limit, and the node of each rank (cluster.server_of).
    moe_dispatcher: str = "alltoall"
    experts_per_token: int = 1
    routing_node_limit: int | None = None
    server_of: Callable[[int], int] | None = None
    # Symmetric fidelity: emit only data-parallel replica 0; the other replicas mirror it
    # (virtual ranks), and their copies of its collectives load the network as weights.
    symmetric: bool = False
    # Symmetric or hybrid fidelity spelled out: which ranks are simulated and whom the
    # others mirror (``symmetry.py``; overrides ``symmetric``).
    symmetry: Symmetry | None = None
    # Megatron-Core --tp-comm-overlap: TP all-gather/reduce-scatter pipelined with GEMMs;
    # by TE's userbuffers or PyTorch's symmetric-memory async TP (parallel.tensor).
    tp_comm_overlap: bool = False
    tp_overlap_impl: str = "userbuffers"
    # Megatron --overlap-param-gather: ZeRO-1/2 parameter all-gathers during the forward.
    overlap_param_gather: bool = False
    # The optimizer step's kernels on one rank (simtrain.workload.optimizer.optimizer_step
    # bound to the GPU): (local parameter numels, ZeRO shards) -> its time and launches.
    optimizer_step: Callable[[list[int], int], OptimizerStep] | None = None
    # Megatron-Core's passes over each gradient bucket before its collective
    # (simtrain.parallel.bucket_prepass; ddp.check_for_nan_in_grad / ddp.prescale): a
    # bucket's gradient count -> their seconds on the compute stream; None: none.
    bucket_prepass: Callable[[int], float] | None = None
    # ZeRO-3 / FSDP2 knobs (simtrain.parallel.fsdp; the HSDP shard group is in dims).
    reshard_after_forward: bool = True
    fsdp_prefetch: int = 1
    fsdp_reduce_dtype: str | None = None  # None: gradients reduced in their own dtype
    fsdp_copies: bool = False  # FSDP2's copy-out / copy-in kernels (fsdp.FSDPConfig.copies)
    # Per-op checkpointing keeps the fused attention's output (False: cuDNN SDPA, re-run;
    # simtrain.workload.attention_impl.op_sac_saves_attention).
    attention_saved: bool = True
    fsdp_sync_each_microbatch: bool = True  # false: one reduce-scatter after the last

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
    def fsdp_reduce_bytes(self) -> float:
        """Bytes per gradient element of FSDP's reduce-scatter and HSDP all-reduce."""
        if self.fsdp_reduce_dtype is None:
            return self.grad_bytes_per_element
        return DTYPE_BYTES[self.fsdp_reduce_dtype]

    @property
    def tp_overlap(self) -> bool:
        """``tp_comm_overlap`` with something to overlap (TP with SP)."""
        return self.tp_comm_overlap and self.dims.tp > 1 and self.dims.sp

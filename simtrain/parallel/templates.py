"""Task templates: what one pipeline step runs on every rank of a stage, rank-independent.

A stage's ranks run the same program (``shard.py``), so each pipeline step is lowered once
to a list of templates; the emitter (``emit.py``) and the strategy modules turn every
template into tasks for each rank or group of the stage. The templates are typed and
frozen, and the lowering dispatches on their type with ``match``: a template no strategy
handles is an internal error, never a silent default.

- ``Kernel``: compute on each rank; time = ``base + expert`` x the rank's routed-token load
  (MoE expert kernels carry their time in ``expert``, everything else in ``base``).
- ``Collective``: a collective over the rank's tp, cp or ep group (``tensor.py``,
  ``expert.py``: Megatron's f/g, SP's all-gather/reduce-scatter, EP's all-to-alls, CP's
  K,V all-gather).
- ``RingAttention``: CP ring attention's blocks and K,V passes (``context.py``).
- ``ParamGather`` / ``GradScatter``: FSDP / ZeRO-3 all-gather of a unit's parameters and
  reduce-scatter of its gradients over the data-parallel group (``data_parallel.py``).
- ``TPOverlap``: a TP all-gather or reduce-scatter pipelined with its GEMM run
  (``tensor.py``, Megatron-Core ``--tp-comm-overlap``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Kernel:
    """Compute on each rank; ``params`` get their gradients here, ``reads`` are the forward
    parameters it reads (overlapped ZeRO parameter all-gathers gate it)."""

    name: str
    kind: str  # forward, backward, recompute
    base: float = 0.0
    expert: float = 0.0
    flops: float = 0.0
    expert_flops: float = 0.0
    layer: int = -1
    params: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    gemm: bool = False  # a GEMM kernel (TP comm overlap pipelines GEMM runs)
    kernels: int = 1  # kernels the template stands for (fused: their sum; host issue cost)
    grad: str | None = None  # a backward kernel's part, "input" or "weight" (``Op.grad``)
    # Separate linears (``aten.mm`` calls, ``Op.parts``) the forward GEMM stands for: its
    # dgrad is their sum (async TP under torch.compile fuses no sum, ``tensor.py``).
    linears: int = 1


@dataclass(frozen=True, slots=True)
class Collective:
    """``op`` of ``nbytes`` over each of the stage's ``group`` groups ("tp", "cp", "ep").

    An EP all-to-all names its ``layer`` and ``route`` ("to_experts" or "from_experts",
    ``expert.py``); with routing imbalance it becomes "all_to_all_v" with ``splits[i][j]``
    the bytes group index i sends index j (the group in EP-index order)."""

    name: str
    kind: str  # tp_comm, cp_comm, ep_comm
    op: str
    group: str
    nbytes: float
    layer: int = -1
    route: str = ""
    splits: tuple[tuple[float, ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class RingAttention:
    """``steps`` attention blocks of ``base`` seconds each, K,V blocks of ``nbytes`` passed
    around each ``group`` ring between them ("cp", or "cp_ring" under a2a+p2p)."""

    name: str
    kind: str
    base: float
    flops: float
    nbytes: float
    steps: int
    layer: int
    group: str = "cp"


@dataclass(frozen=True, slots=True)
class ParamGather:
    """FSDP: all-gather of a unit's ``nbytes`` of parameters over its shard group, issued
    ``prefetch`` units ahead; ``keep``: the unit stays gathered until its gradients are
    reduced (no reshard after forward), so a gather of a gathered ``unit`` is skipped."""

    name: str
    nbytes: float
    unit: str = ""
    prefetch: int = 1
    keep: bool = False


@dataclass(frozen=True, slots=True)
class GradScatter:
    """FSDP: reduce-scatter of a unit's ``nbytes`` of gradients over its shard group (then,
    under HSDP, an all-reduce of the shard across the replicas), in ``dtype`` (None: the
    gradients' own); the ``unit`` is resharded."""

    name: str
    nbytes: float
    unit: str = ""
    dtype: str | None = None


@dataclass(frozen=True, slots=True)
class TPOverlap:
    """``comm`` (a TP all-gather or reduce-scatter) pipelined with the GEMM ``run``."""

    comm: Collective
    run: tuple[Kernel, ...]

    @property
    def name(self) -> str:
        return self.comm.name


Template = Kernel | Collective | RingAttention | ParamGather | GradScatter | TPOverlap


def unhandled(template: object) -> AssertionError:
    """The internal error for a template no strategy handles (a lowering bug)."""
    return AssertionError(f"no strategy lowers task template {template!r}")

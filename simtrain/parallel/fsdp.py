"""FSDP2 / HSDP knobs (``parallelism.fsdp``): shard group, reshard, prefetch, reduce dtype.

ZeRO-3 / FSDP (``parallelism.zero: 3``, Rajbhandari et al. 2020; PyTorch FSDP2
``fully_shard``) shards every unit's parameters over the dp x cp group: the unit's
parameters are all-gathered before its forward and its gradients reduce-scattered after
its backward. The knobs, as PyTorch FSDP2 names them:

- ``shard_size`` (HSDP, FSDP2 with a 2-D device mesh (replicate, shard); torchtitan's
  ``data_parallel_shard_degree``): parameters are sharded over blocks of ``shard_size``
  consecutive members of the dp x cp group and replicated across the
  dp·cp/shard_size blocks. All-gathers and reduce-scatters stay inside a shard group
  (a node, when it holds one); each reduce-scattered shard is then all-reduced across
  the replicas (the members holding the same shard). None: one shard group (plain FSDP).
- ``reshard_after_forward`` (FSDP2 ``reshard_after_forward``): true frees the gathered
  parameters after the unit's forward and all-gathers them again before its backward;
  false keeps them from the forward to the backward (no second all-gather; all of a
  stage's parameters unsharded at the forward/backward turn).
- ``prefetch``: how many units ahead a unit's all-gather is issued (FSDP2 issues the
  next unit's all-gather one unit ahead by default; ``set_modules_to_forward_prefetch``
  / ``..._backward_prefetch`` go further). 0: issued when the unit itself is reached.
  Each unit ahead holds one more unit's gathered parameters.
- ``reduce_dtype`` (FSDP2 ``MixedPrecisionPolicy.reduce_dtype``): the element type of the
  gradient reduce-scatter (and HSDP all-reduce) on the wire; None: the gradient dtype
  ``parallelism.ddp.grad_dtype``. Gradient memory stays in ``ddp.grad_dtype``.
- ``copies`` (PyTorch FSDP2's per-parameter sharding, ``torch.distributed.fsdp.
  _fully_shard._fsdp_collectives``): the all-gather lands in one flat buffer, and
  ``foreach_all_gather_copy_out`` then copies it into each parameter's unsharded tensor
  (``split_with_sizes_copy``) on the compute stream, after waiting for the all-gather;
  before each reduce-scatter ``foreach_reduce_scatter_copy_in`` copies the unsharded
  gradients (param dtype) into one flat buffer of the reduce dtype (``_chunk_cat``),
  also on the compute stream (it runs before ``reduce_scatter_stream.wait_stream
  (current_stream)``). Two memory-bound kernels per unit and phase that compute waits
  for (``copy_out_bytes``, ``copy_in_bytes``). False: parameters and gradients are views
  of flat buffers the collectives read and write directly (FSDP1's FlatParameter,
  Megatron-FSDP's contiguous buffers), no copies.
- ``sync_each_microbatch`` (FSDP2 ``set_requires_gradient_sync``): true reduce-scatters a
  unit's gradients after every microbatch's backward; false only after the last one, the
  others accumulating unsharded gradients: what ``torch.distributed.pipelining``'s
  schedules set for FSDP2 stages (``stage.py`` ``backward_maybe_with_nosync`` in the
  torch 2.6.0 wheel: gradient sync and reshard-after-backward off until the last
  backward, then every group's ``post_backward``), so one reduce-scatter per unit and
  step, all after the stage's last backward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_PREFETCH = 64  # units ahead; beyond the units of a stage it changes nothing
FSDP_SHARD_GROUP, FSDP_REPLICATE_GROUP = "fsdp_shard", "fsdp_replicate"


class FSDPConfig(BaseModel):
    """The scenario's ``parallelism.fsdp:`` section (used with ``zero: 3``)."""

    model_config = ConfigDict(extra="forbid")

    shard_size: int | None = Field(
        None, gt=0, description="HSDP: ranks of the dp x cp group a parameter is sharded "
        "over (consecutive members); replicated across the rest. None: all of them")
    reshard_after_forward: bool = Field(
        True, description="free gathered parameters after forward and all-gather them "
        "again for backward (false: keep them, no second all-gather)")
    prefetch: int = Field(1, ge=0, le=MAX_PREFETCH,
                          description="units ahead a unit's all-gather is issued")
    reduce_dtype: Literal["fp32", "bf16"] | None = Field(
        None, description="gradient reduce-scatter / all-reduce dtype; None: "
        "parallelism.ddp.grad_dtype")
    copies: bool = Field(
        False, description="FSDP2's copy-out after each all-gather and gradient copy-in "
        "before each reduce-scatter, on the compute stream (false: flat-buffer views)")
    sync_each_microbatch: bool = Field(
        True, description="reduce-scatter gradients after every microbatch (false: only "
        "after the last, accumulating unsharded; torch pipelining with FSDP2)")


def check_fsdp(cfg: FSDPConfig, *, zero: int, dp: int, cp: int) -> list[tuple[str, str]]:
    """Problems with ``parallelism.fsdp`` for this plan, as (field, message)."""
    if cfg.model_fields_set and zero != 3:
        keys = ", ".join(sorted(cfg.model_fields_set))
        return [("parallelism.fsdp", f"parallelism.fsdp ({keys}) configures ZeRO-3 / FSDP "
                 f"sharding, but zero={zero}; set parallelism.zero: 3 or remove the fsdp "
                 f"section")]
    group = dp * cp
    if cfg.shard_size is not None and group % cfg.shard_size:
        return [("parallelism.fsdp.shard_size", f"shard_size={cfg.shard_size} must divide "
                 f"the dp x cp = {dp} x {cp} = {group} ranks that hold the same "
                 f"parameters (HSDP replicates {group}/shard_size shard groups); use a "
                 f"divisor of {group}")]
    return []


def gathered_bytes(unit_bytes: Sequence[float], prefetch: int, reshard: bool) -> float:
    """Bytes of gathered (unsharded) parameters a rank holds at its peak.

    Resharding after forward: the running unit plus ``prefetch`` units ahead, bounded by
    (prefetch + 1) x the largest unit (and by all units). Without it: every unit of the
    stage is unsharded between its forward and its backward: their sum.
    """
    if not unit_bytes:
        return 0.0
    total = float(sum(unit_bytes))
    if not reshard:
        return total
    return min(total, (prefetch + 1) * float(max(unit_bytes)))


def copy_out_bytes(numel: float, param_bytes: float) -> float:
    """HBM bytes of FSDP2's all-gather copy-out of ``numel`` parameters: the flat
    all-gather output read and each parameter's unsharded tensor written, 2·numel·b."""
    return 2.0 * numel * param_bytes


def copy_in_bytes(numel: float, grad_bytes: float, reduce_bytes: float) -> float:
    """HBM bytes of FSDP2's reduce-scatter copy-in of ``numel`` gradients: each unsharded
    gradient read (param dtype) and the flat reduce-dtype buffer written (cast in the
    same kernel), numel·(g + r)."""
    return numel * (grad_bytes + reduce_bytes)


@dataclass(frozen=True, slots=True)
class FSDPTraffic:
    """Bytes one rank sends per unit and microbatch under FSDP / HSDP (ring algorithms)."""

    all_gather: float
    reduce_scatter: float
    all_reduce: float


def fsdp_traffic(param_bytes: float, grad_bytes: float, *, shard: int, replicas: int,
                 reshard: bool) -> FSDPTraffic:
    """Per unit and microbatch: all-gathers (N-1)/N·P each (two when resharding, one
    without), a reduce-scatter (N-1)/N·G over the N = ``shard`` ranks, then an all-reduce
    2·(R-1)/R·G/N of the shard across the R = ``replicas`` (ring all-reduce, Patarasuk &
    Yuan 2009; nccl-tests' busbw factors)."""
    n, r = shard, replicas
    gathers = 1 if not reshard else 2
    return FSDPTraffic(gathers * (n - 1) / n * param_bytes, (n - 1) / n * grad_bytes,
                       2 * (r - 1) / r * grad_bytes / n)

"""Expert parallelism (MoE): routed-token load per EP rank, and where expert gradients go.

The EP program itself (router, all-to-all dispatch, the local experts' grouped GEMMs,
all-to-all combine; Fedus et al. 2021, Megatron-Core) is built with the layer
(``shard.py``); its all-to-alls are plain ``Collective`` templates over the "ep" group.
What is particular to EP is here: an expert kernel's time scales with the tokens routed to
its rank (``expert_load``), and expert parameters are reduced over the expert-data-parallel
group (ranks holding the same experts), not over the whole data-parallel group.
"""

from __future__ import annotations

from collections.abc import Iterable

from simtrain.workload.model import Param


def expert_load(ep_index: int, layer: int, ep: int, imbalance: float,
                capacity_factor: float | None) -> float:
    """Routed tokens of EP rank ``ep_index`` in ``layer`` relative to the mean (deterministic).

    The rank ``layer % ep`` is hot with 1 + imbalance (capped by the capacity factor, the
    excess tokens are dropped); the others share the rest evenly so the mean stays 1.
    """
    if ep == 1 or imbalance == 0:
        return 1.0
    hot = 1.0 + imbalance
    if capacity_factor is not None:
        hot = min(hot, capacity_factor)
    if ep_index == layer % ep:
        return hot
    return max(0.0, (ep - (1.0 + imbalance)) / (ep - 1))


def is_expert(param: Param) -> bool:
    """Whether ``param`` belongs to an expert (reduced over the expert-data-parallel group)."""
    return param.expert


def split_expert(params: Iterable[Param]) -> tuple[list[Param], list[Param]]:
    """(dense, expert) parameters, each in registration order."""
    dense: list[Param] = []
    expert: list[Param] = []
    for p in params:
        (expert if is_expert(p) else dense).append(p)
    return dense, expert

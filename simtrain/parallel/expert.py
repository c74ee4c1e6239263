"""Expert parallelism (MoE): routed-token load per EP rank, the all-to-all-v it implies,
and where expert gradients go.

The EP program itself (router, all-to-all dispatch, the local experts' grouped GEMMs,
all-to-all combine; Fedus et al. 2021, Megatron-Core) is built with the layer
(``shard.py``); its all-to-alls are ``Collective`` templates over the "ep" group.
What is particular to EP is here: an expert kernel's time scales with the tokens routed to
its rank (``expert_load``); with routing imbalance every rank's dispatch and combine move
different bytes (``route_splits``: the hot rank receives (1 + imbalance)x the mean in
dispatch and sends as much back in combine), so the all-to-alls become all-to-all-v with a
per-pair splits matrix; expert parameters are reduced over the expert-data-parallel group
(ranks holding the same experts), not over the whole data-parallel group.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Literal

from simtrain.parallel.templates import Collective, Template
from simtrain.workload.model import Param

# Which way an EP all-to-all moves tokens: to the experts (dispatch forward, combine
# backward: the gradients of the expert outputs) or back from them (combine forward,
# dispatch backward).
Route = Literal["to_experts", "from_experts"]
Splits = tuple[tuple[float, ...], ...]


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


def route_loads(layer: int, ep: int, imbalance: float,
                capacity_factor: float | None) -> tuple[float, ...]:
    """``expert_load`` of every EP index 0..ep-1 in ``layer`` (their mean is 1 when no token
    is dropped; below 1 when the capacity factor drops the hot rank's excess)."""
    return tuple(expert_load(i, layer, ep, imbalance, capacity_factor) for i in range(ep))


def route_splits(nbytes: float, loads: tuple[float, ...], route: Route) -> Splits:
    """The all-to-all-v matrix ``splits[i][j]`` (bytes EP index i sends to j) of an EP
    all-to-all whose balanced size is ``nbytes`` per rank (k·m·h·dt: every rank's top-k
    token copies, the nccl-tests size convention).

    Each rank's tokens choose experts alike, so rank i sends rank j the share of its copies
    that j's experts receive: ``nbytes · load_j / ep`` toward the experts; the way back is
    the transpose. Hence rank j receives ``nbytes · load_j`` in dispatch (the hot rank
    (1 + imbalance)x the mean) and sends as much in combine. Tokens over capacity are
    dropped before dispatch (Megatron-Core's drop policy), so they are never sent. The
    diagonal (a rank's tokens for its own experts) stays on the GPU.
    """
    ep = len(loads)
    if nbytes < 0 or ep < 1 or min(loads) < 0:
        raise ValueError(f"route_splits needs nbytes >= 0 and loads >= 0, got {nbytes}, "
                         f"{loads}")
    to = tuple(tuple(nbytes * loads[j] / ep for j in range(ep)) for _ in range(ep))
    if route == "to_experts":
        return to
    return tuple(tuple(to[j][i] for j in range(ep)) for i in range(ep))


def received_bytes(splits: Splits) -> tuple[float, ...]:
    """Bytes each index receives from the others (the diagonal stays local)."""
    n = len(splits)
    return tuple(sum(splits[i][j] for i in range(n) if i != j) for j in range(n))


def sent_bytes(splits: Splits) -> tuple[float, ...]:
    """Bytes each index sends to the others (the diagonal stays local)."""
    n = len(splits)
    return tuple(sum(splits[i][j] for j in range(n) if j != i) for i in range(n))


def with_route_splits(templates: list[Template], ep: int, imbalance: float,
                      capacity_factor: float | None) -> list[Template]:
    """``templates`` with every EP all-to-all made an all-to-all-v of its layer's loads.

    Balanced routing (``imbalance`` 0 or ep 1) keeps the plain all-to-all: every rank
    moves the same bytes and the network sees the same flows."""
    if ep == 1 or imbalance == 0:
        return templates
    out: list[Template] = []
    for t in templates:
        if isinstance(t, Collective) and t.route and t.op == "all_to_all":
            loads = route_loads(t.layer, ep, imbalance, capacity_factor)
            t = replace(t, op="all_to_all_v", splits=route_splits(t.nbytes, loads, t.route))
        out.append(t)
    return out


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

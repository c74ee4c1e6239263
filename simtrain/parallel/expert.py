"""Expert parallelism (MoE): routed-token load per EP rank, the all-to-all-v it implies,
and where expert gradients go.

The EP program itself (router, all-to-all dispatch, the local experts' grouped GEMMs,
all-to-all combine; Fedus et al. 2021, Megatron-Core) is built with the layer
(``shard.py``); its all-to-alls are ``Collective`` templates over the "ep" group.
What is particular to EP is here: an expert kernel's time scales with the tokens routed to
its rank (``expert_load``); with routing imbalance every rank's dispatch and combine move
different bytes (``route_splits``: the hot rank receives (1 + imbalance)x the mean in
dispatch and sends as much back in combine), so the all-to-alls become all-to-all-v with a
per-pair splits matrix; a DeepEP-style dispatch sends one network copy per destination
node and forwards it over NVLink (``deepep_splits``, with node-limited routing); which
expert layouts fit a stage (``expert_layout_problem``: etp x ep folded into tp·cp·dp);
expert parameters are reduced over the expert-data-parallel group (ranks holding the same
experts), not over the whole data-parallel group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
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


def distinct_nodes(k: int, nodes: int, node_limit: int | None) -> float:
    """Expected nodes one token's k expert copies land on: n·(1 - (1 - 1/n)^k) for k
    independent uniform choices among n nodes, at most ``node_limit`` (device/node-limited
    routing: DeepSeek-V2 Sec. 2.2.2, DeepSeek-V3 Sec. 2.1.2 "each token will be sent to at
    most M nodes", M = 4)."""
    if k < 1 or nodes < 1:
        raise ValueError(f"distinct_nodes needs k >= 1 and nodes >= 1, got {k}, {nodes}")
    spread = nodes * (1.0 - (1.0 - 1.0 / nodes) ** k)
    return min(spread, float(node_limit)) if node_limit else spread


def deepep_splits(nbytes: float, k: int, nodes_of: tuple[int, ...], loads: tuple[float, ...],
                  node_limit: int | None, route: Route) -> Splits:
    """All-to-all-v matrix of a DeepEP-style dispatch (DeepSeek-V3 Sec. 3.2.2; DeepEP's
    normal kernels): a token crosses the network once per destination node, to the GPU of
    the same local index (its rail), which forwards the node's copies over NVLink while
    later tokens still arrive (the two run as one pipelined phase).

    ``nbytes`` = k·m·h·dt, the balanced per-rank size; ``nodes_of[i]`` the node of EP index
    i (the same number g on each of n nodes). With u = ``distinct_nodes`` per token, rank
    (a, l) sends (q, l) for every other node q m·h·dt·u/n bytes (x the mean load of q's
    ranks), and each GPU sends each other GPU of its node m·k·h·dt/g (x load_j): the
    copies its own tokens and the tokens it received hold for that GPU's experts. The
    combine is the transpose (reduced on the way back). On one node this is
    ``route_splits``; over n nodes the network carries u/k of a plain all-to-all's bytes.
    """
    ep = len(nodes_of)
    by_node: dict[int, list[int]] = {}
    for i, node in enumerate(nodes_of):
        by_node.setdefault(node, []).append(i)
    sizes = {len(v) for v in by_node.values()}
    if len(sizes) != 1:
        raise ValueError(f"a DeepEP dispatch needs the same number of EP ranks on every "
                         f"node; this EP group has {sorted(len(v) for v in by_node.values())}")
    n, g = len(by_node), sizes.pop()
    local = {i: members.index(i) for members in by_node.values() for i in members}
    node_load = {q: sum(loads[i] for i in v) / g for q, v in by_node.items()}
    per_token = nbytes / k
    u = distinct_nodes(k, n, node_limit)
    to = [[0.0] * ep for _ in range(ep)]
    for i in range(ep):
        for j in range(ep):
            if nodes_of[i] == nodes_of[j]:
                to[i][j] = nbytes * loads[j] / g
            elif local[i] == local[j]:
                to[i][j] = per_token * u / n * node_load[nodes_of[j]]
    if route == "to_experts":
        return tuple(tuple(row) for row in to)
    return tuple(tuple(to[j][i] for j in range(ep)) for i in range(ep))


def deepep_problem(groups: Iterable[tuple[int, ...]], server_of: Callable[[int], int]) -> str:
    """Why a DeepEP dispatch cannot lower these EP groups ("" when it can): every group
    must be spread over nodes alike, the same number of its ranks on each node."""
    layouts = set()
    for group in groups:
        nodes = [server_of(r) for r in group]
        counts = {n: nodes.count(n) for n in nodes}
        if len(set(counts.values())) > 1:
            return (f"deepep needs the same number of EP ranks "
                    f"on every node of a group; the group {group} has {sorted(counts.values())}"
                    f"; use alltoall or an ep that fits the nodes")
        layouts.add(tuple(nodes.index(n) for n in nodes))
    if len(layouts) > 1:
        return ("deepep needs every EP group spread over nodes "
                "alike; this cluster and plan place them differently: use alltoall")
    return ""


@dataclass(frozen=True)
class Dispatch:
    """How EP all-to-alls move tokens: ``deepep`` (node-deduplicated, ``deepep_splits``)
    or not, the routing's top-k and node limit, and the node of each EP index."""

    deepep: bool = False
    experts_per_token: int = 1
    node_limit: int | None = None
    nodes_of: tuple[int, ...] = ()


def with_route_splits(templates: list[Template], ep: int, imbalance: float,
                      capacity_factor: float | None,
                      dispatch: Dispatch | None = None) -> list[Template]:
    """``templates`` with every EP all-to-all made an all-to-all-v of its layer's loads
    (and, with a DeepEP dispatch, of its node-deduplicated pairs).

    Balanced routing (``imbalance`` 0 or ep 1) through NCCL's all-to-all keeps the plain
    all-to-all: every rank moves the same bytes and the network sees the same flows."""
    deepep = dispatch is not None and dispatch.deepep and ep > 1
    if not deepep and (ep == 1 or imbalance == 0):
        return templates
    out: list[Template] = []
    for t in templates:
        if isinstance(t, Collective) and t.route and t.op == "all_to_all":
            loads = route_loads(t.layer, ep, imbalance, capacity_factor)
            route: Route = "to_experts" if t.route == "to_experts" else "from_experts"
            if deepep:
                assert dispatch is not None
                splits = deepep_splits(t.nbytes, dispatch.experts_per_token,
                                       dispatch.nodes_of, loads, dispatch.node_limit, route)
            else:
                splits = route_splits(t.nbytes, loads, route)
            t = replace(t, op="all_to_all_v", splits=splits)
        out.append(t)
    return out


def expert_layout_problem(tp: int, cp: int, dp: int, ep: int, etp: int, sp: bool) -> str:
    """Why etp x ep cannot be cut from a stage's tp·cp·dp ranks ("" when it can).

    An expert-TP group of etp ranks runs its experts on the tokens of its etp TP peers, so
    etp divides tp; etp < tp needs sequence parallelism (each TP rank then routes only its
    own s/tp tokens, as Megatron-Core requires for MoE with TP)."""
    stage = tp * cp * dp
    if stage % (etp * ep):
        return (f"parallelism.etp x ep = {etp} x {ep} = {etp * ep} does not divide the "
                f"{stage} ranks of a pipeline stage (tp x cp x dp = {tp} x {cp} x {dp}); "
                f"experts are cut from those ranks: pick etp and ep whose product divides "
                f"{stage}")
    if tp % etp:
        return (f"parallelism.etp={etp} must divide tp={tp} (an expert-TP group gathers "
                f"the tokens of its TP peers); use etp 1 or a divisor of {tp}")
    if etp < tp and not sp:
        return (f"parallelism.etp={etp} < tp={tp} needs sequence parallelism (each TP rank "
                f"routes its own tokens); set parallelism.sp: true or etp: {tp}")
    return ""


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

"""What a collective lowers to: phases of concurrent flows, the call, and the lowering's view.

A ``Phase`` is a set of flows that run together after an alpha latency; a ``Call`` is one
collective; a ``Context`` is what a lowering may ask of the world (the fabric, per-hop
alphas, the in-network switches). The ring helpers here are shared by the host-based
lowerings (``simtrain.comm.algorithms``) and the in-network ones (``in_network``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from simtrain.engine.network import Endpoint, Fabric

Flow = tuple[Endpoint, Endpoint, float]  # (src, dst, bytes): ranks, or switches


@dataclass(frozen=True, slots=True)
class Phase:
    """Flows that run concurrently after ``latency`` seconds of alpha terms.

    ``coupled`` (one label per flow, or None) marks pipelined rings: flows with the same
    label are the hops of one ring, which moves at its slowest hop's pace, so they share
    one rate and end together (see ``simtrain.engine.network.couple``).
    """

    latency: float
    flows: tuple[Flow, ...]
    coupled: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class Call:
    """One collective call: ``op`` over ``ranks`` (ranks[0] is the root where one is needed).

    ``nbytes`` follows nccl-tests: the whole array for all-reduce, reduce-scatter,
    all-gather, broadcast, reduce, scatter and gather; each rank's send buffer for
    all-to-all. ``splits[i][j]`` are the bytes ranks[i] sends ranks[j] in all-to-all-v.
    """

    op: str
    ranks: tuple[int, ...]
    nbytes: float
    splits: tuple[tuple[float, ...], ...] | None = None


def _no_switch(_level: str, _rank: int) -> str | None:
    return None


def _no_alpha(_level: str) -> float:
    return 0.0


def _unit_wire(_ranks: int) -> float:
    return 1.0


@dataclass(frozen=True)
class Context:
    """What a lowering may ask of the world: the fabric, the alpha of one step a -> b,
    the reducing switch of a level above a rank (None where the hardware has none) and
    the alpha of one in-network reduction through a level, and the wire bytes per payload
    byte of an NVLS all-reduce over a domain of P GPUs (for lowerings that mix NVLS flows
    with others; 1 where the backend models no NVSwitch gain)."""

    fabric: Fabric
    hop_latency: Callable[[int, int], float]
    reducer: Callable[[str, int], str | None] = _no_switch
    switch_alpha: Callable[[str], float] = _no_alpha
    nvls_wire: Callable[[int], float] = _unit_wire

    def step_alpha(self, hops: Sequence[tuple[int, int]]) -> float:
        """Alpha of one synchronous step: its slowest hop."""
        return max((self.hop_latency(a, b) for a, b in hops), default=0.0)


Lowering = Callable[[Call, Context], list[Phase]]


class AlgorithmError(ValueError):
    """An algorithm that cannot run on this group (e.g. halving-doubling on 6 ranks)."""


# ----------------------------------------------------------------------------- helpers


def ring_hops(order: Sequence[int]) -> list[tuple[int, int]]:
    return [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]


def heap_edges(order: Sequence[int]) -> list[tuple[int, int]]:
    """(child, parent) edges of a heap-ordered binary tree over ``order``."""
    return [(order[i], order[(i - 1) // 2]) for i in range(1, len(order))]


def servers(ranks: Sequence[int], fabric: Fabric) -> list[list[int]]:
    """The group's ranks per server, servers in order of first appearance."""
    by_server: dict[int, list[int]] = {}
    for rank in ranks:
        by_server.setdefault(fabric.server_of(rank), []).append(rank)
    return list(by_server.values())


def ring_channels(ranks: Sequence[int], fabric: Fabric) -> list[list[int]]:
    """Ring orders, one per channel.

    Within one server a single ring suffices (every GPU has its own NVLink/PCIe port).
    Across servers there is one channel per local GPU, each rotated so that it leaves a
    server through a different GPU (and NIC), as NCCL's rings on rail-optimized clusters
    do; odd servers run backwards so every inter-server hop joins GPUs of the same local
    index, keeping traffic on its rail (what NCCL's PXN achieves).
    """
    groups = servers(ranks, fabric)
    if len(groups) == 1:
        return [list(ranks)]
    orders = []
    for c in range(min(len(g) for g in groups)):
        order: list[int] = []
        for j, g in enumerate(groups):
            rotated = g[c:] + g[:c]
            order.extend(rotated if j % 2 == 0 else rotated[::-1])
        orders.append(order)
    return orders


def ring_phase(orders: Sequence[Sequence[int]], per_order_bytes: float, steps: int,
                ctx: Context) -> Phase:
    """Pipelined rings: the first chunk crosses ``steps`` hops one after another, so the
    latency is ``steps`` times the ring's mean hop alpha (NCCL's model: intra-node steps at
    the intra latency, inter-node steps at the network latency)."""
    flows: list[Flow] = []
    labels: list[int] = []
    alpha = 0.0
    for k, order in enumerate(orders):
        hops = ring_hops(order)
        alpha = max(alpha, sum(ctx.hop_latency(a, b) for a, b in hops) / len(hops))
        flows.extend((a, b, per_order_bytes) for a, b in hops)
        labels.extend([k] * len(hops))
    return Phase(steps * alpha, tuple(flows), tuple(labels))

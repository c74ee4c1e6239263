"""Collective algorithms lowered to phases of concurrent flows, and their closed-form costs.

A collective becomes a list of ``Phase``s executed one after another: each phase first pays
its latency (the alpha terms), then runs its flows concurrently over the topology. NCCL
pipelines a ring's steps in chunks, so all 2(P-1) steps of a ring all-reduce keep the same
neighbour links busy at once; a ring is therefore one phase whose flows each carry
2(P-1)/P of the message, after 2(P-1) step latencies. On an idle uniform ring that gives
exactly the alpha-beta closed form, and under contention the flows slow down as they should.

Multi-server rings use one channel per local GPU, each rotated so that it leaves a server
through a different GPU (and so a different NIC), as NCCL's rings on rail-optimized
clusters do; a single ring would push every byte through one NIC. Every inter-server hop
joins GPUs of the same local index, so traffic stays on its rail (what NCCL's PXN achieves).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from simtrain.engine.network import Fabric

Flow = tuple[int, int, float]  # (src_rank, dst_rank, bytes)


@dataclass(frozen=True, slots=True)
class Phase:
    """Flows that run concurrently after ``latency`` seconds of alpha terms."""

    latency: float
    flows: tuple[Flow, ...]


# --------------------------------------------------------------------------------------
# Closed forms (Hockney alpha-beta). n bytes, P ranks, alpha seconds per step, beta = 1/B.
# --------------------------------------------------------------------------------------


def ring_all_reduce_time(n: float, p: int, alpha: float, bandwidth: float) -> float:
    """Ring all-reduce: 2(P-1)·alpha + 2(P-1)/P · n/B (reduce-scatter then all-gather).

    The seed notes write the factor 2P/(P-1); that is a typo, see DESIGN.md.
    """
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / bandwidth


def ring_reduce_scatter_time(n: float, p: int, alpha: float, bandwidth: float) -> float:
    """Ring reduce-scatter (or all-gather) of an n-byte array: (P-1)·alpha + (P-1)/P · n/B."""
    if p <= 1:
        return 0.0
    return (p - 1) * alpha + (p - 1) / p * n / bandwidth


ring_all_gather_time = ring_reduce_scatter_time


def point_to_point_time(n: float, alpha: float, bandwidth: float) -> float:
    """One message: alpha + n/B."""
    return alpha + n / bandwidth


# --------------------------------------------------------------------------------------
# Lowering to flows.
# --------------------------------------------------------------------------------------


def ring_channels(ranks: Sequence[int], fabric: Fabric) -> list[list[int]]:
    """Ring orders, one per channel: servers in order, each server's ranks rotated per channel.

    Within one server a single ring suffices (every GPU has its own NVLink/PCIe port);
    across servers there is one channel per local GPU so each exits through its own NIC.
    """
    by_server: dict[int, list[int]] = {}
    for rank in ranks:
        by_server.setdefault(fabric.server_of(rank), []).append(rank)
    groups = list(by_server.values())
    if len(groups) == 1:
        return [list(ranks)]
    channels = min(len(g) for g in groups)
    orders = []
    for c in range(channels):
        order: list[int] = []
        for j, g in enumerate(groups):
            rotated = g[c:] + g[:c]
            # Odd servers run the ring backwards so that every server-to-server hop joins
            # the same local GPU index (the same rail / NIC) on both sides.
            order.extend(rotated if j % 2 == 0 else rotated[::-1])
        orders.append(order)
    return orders


def _ring_hops(order: Sequence[int]) -> list[tuple[int, int]]:
    return [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]


def _step_latency(hops: Sequence[tuple[int, int]], fabric: Fabric) -> float:
    """Alpha of one ring step: the slowest hop's route latency (steps are synchronous)."""
    return max((fabric.route_latency(fabric.route(a, b)) for a, b in hops), default=0.0)


def _ring(
    ranks: Sequence[int], nbytes: float, fabric: Fabric, steps: int, fraction: float
) -> list[Phase]:
    """One phase: every channel's ring hops carry ``fraction`` of its share of the message."""
    channels = ring_channels(ranks, fabric)
    per_channel = nbytes / len(channels)
    flows: list[Flow] = []
    alpha = 0.0
    for order in channels:
        hops = _ring_hops(order)
        alpha = max(alpha, _step_latency(hops, fabric))
        flows.extend((a, b, per_channel * fraction) for a, b in hops)
    return [Phase(latency=steps * alpha, flows=tuple(flows))]


def ring_all_reduce(ranks: Sequence[int], nbytes: float, fabric: Fabric) -> list[Phase]:
    """Ring all-reduce: 2(P-1) pipelined steps, each rank sends 2(P-1)/P · n to its neighbour."""
    p = len(ranks)
    if p <= 1:
        return []
    return _ring(ranks, nbytes, fabric, steps=2 * (p - 1), fraction=2 * (p - 1) / p)


def ring_reduce_scatter(ranks: Sequence[int], nbytes: float, fabric: Fabric) -> list[Phase]:
    """Ring reduce-scatter of an n-byte array: P-1 steps, (P-1)/P · n per rank."""
    p = len(ranks)
    if p <= 1:
        return []
    return _ring(ranks, nbytes, fabric, steps=p - 1, fraction=(p - 1) / p)


ring_all_gather = ring_reduce_scatter


def chain_broadcast(ranks: Sequence[int], nbytes: float, fabric: Fabric) -> list[Phase]:
    """Pipelined chain broadcast/reduce from ranks[0]: P-1 hops each carrying n bytes."""
    if len(ranks) <= 1:
        return []
    hops = _ring_hops(ranks)[:-1]
    return [Phase(latency=len(hops) * _step_latency(hops, fabric),
                  flows=tuple((a, b, nbytes) for a, b in hops))]


def direct_all_to_all(ranks: Sequence[int], nbytes: float, fabric: Fabric) -> list[Phase]:
    """Every rank sends n/P to every other rank at once (nccl-tests size: n per rank)."""
    p = len(ranks)
    if p <= 1:
        return []
    pairs = [(a, b) for a in ranks for b in ranks if a != b]
    return [Phase(latency=_step_latency(pairs, fabric),
                  flows=tuple((a, b, nbytes / p) for a, b in pairs))]


def send_recv(ranks: Sequence[int], nbytes: float, fabric: Fabric) -> list[Phase]:
    """Point-to-point from ranks[0] to ranks[1]."""
    src, dst = ranks
    return [Phase(latency=fabric.route_latency(fabric.route(src, dst)),
                  flows=((src, dst, nbytes),))]


Lowering = Callable[[Sequence[int], float, Fabric], list[Phase]]

# Algorithms by (op, name). The full collective library (trees, halving-doubling,
# hierarchical, protocols) extends this table; "auto" picks the first entry for an op.
ALGORITHMS: dict[str, dict[str, Lowering]] = {
    "all_reduce": {"ring": ring_all_reduce},
    "reduce_scatter": {"ring": ring_reduce_scatter},
    "all_gather": {"ring": ring_all_gather},
    "broadcast": {"chain": chain_broadcast},
    "reduce": {"chain": chain_broadcast},
    "all_to_all": {"direct": direct_all_to_all},
    "send_recv": {"direct": send_recv},
}


def lower(op: str, algorithm: str, ranks: Sequence[int], nbytes: float,
          fabric: Fabric) -> tuple[str, list[Phase]]:
    """Phases of ``op`` with ``algorithm`` ("auto" = the default for the op); returns the name."""
    table = ALGORITHMS[op]
    name = next(iter(table)) if algorithm == "auto" else algorithm
    if name not in table:
        raise ValueError(
            f"algorithm {algorithm!r} is not available for {op}; choose one of: "
            f"{', '.join(['auto', *table])}"
        )
    return name, table[name](ranks, nbytes, fabric)

"""What the engine needs of a cluster: links, endpoints (GPUs and switches) and routes.

Kept apart from the flow network so that the topology builders and the collective
lowering can name endpoints without importing the SimPy side.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol


class LinkLike(Protocol):
    """What the network needs of a link: capacity in bytes/s in one direction, and its kind."""

    @property
    def bandwidth(self) -> float: ...

    @property
    def kind(self) -> str: ...  # "nvlink", "pcie", "ib", "ethernet", "qpi"


@dataclass(frozen=True, slots=True)
class SwitchPort:
    """A flow endpoint inside the network: the reducing switch ``level`` above GPU ``rank``.

    In-network reductions (NVLS in an NVSwitch, SHARP in an InfiniBand switch) send data
    to a switch, which reduces or multicasts it and sends the result back; a flow may
    therefore start or end at ``SwitchPort(rank, "nvswitch")`` (the NVSwitch that GPU
    ``rank`` hangs off) or ``SwitchPort(rank, "leaf")`` / ``"spine"`` (the InfiniBand
    switch above its NIC). Naming the switch through a rank keeps the endpoint meaningful
    for symmetric copies of a group: the copy's switch sits above the copy's rank.
    """

    rank: int
    level: str

    def moved(self, rank: int) -> SwitchPort:
        """The same switch level above another rank."""
        return SwitchPort(rank, self.level)


Endpoint = int | SwitchPort  # a GPU rank or a switch
SWITCH_LEVELS = ("nvswitch", "leaf", "spine")


def anchor(endpoint: Endpoint) -> int:
    """The GPU rank an endpoint belongs to (itself, or the rank a switch is named through)."""
    return endpoint.rank if isinstance(endpoint, SwitchPort) else endpoint


def relocate(endpoint: Endpoint, rank: int) -> Endpoint:
    """``endpoint`` moved onto ``rank``: the rank itself, or the same switch above it."""
    return endpoint.moved(rank) if isinstance(endpoint, SwitchPort) else rank


def switch_bytes(flows: Iterable[tuple[Endpoint, Endpoint, float]]) -> tuple[float, float]:
    """(bytes into switches, bytes out of switches) over ``flows``: an in-network
    reduction conserves what it multicasts, a test's invariant."""
    into = sum(nb for _src, dst, nb in flows if isinstance(dst, SwitchPort))
    out = sum(nb for src, _dst, nb in flows if isinstance(src, SwitchPort))
    return into, out


class Fabric(Protocol):
    """What the engine needs of a cluster: links, routes between endpoints, servers.

    ``route`` takes GPU ranks or ``SwitchPort``s (switch endpoints of in-network
    reductions); ``server_of`` takes ranks.
    """

    @property
    def links(self) -> Sequence[LinkLike]: ...

    @property
    def num_gpus(self) -> int: ...

    def route(self, src_rank: Endpoint, dst_rank: Endpoint) -> tuple[int, ...]: ...

    def route_latency(self, route: tuple[int, ...]) -> float: ...

    def server_of(self, rank: int) -> int: ...


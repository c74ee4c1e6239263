"""Shared fakes: tiny fabrics whose routes and costs are obvious by hand."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import settings

# Property tests check invariants, not speed (benchmarks and the CPU-timed tests do that):
# no per-example deadline, which a loaded 2-core CI machine running two test workers can
# exceed for reasons that have nothing to do with the code.
settings.register_profile("simtrain", deadline=None)
settings.load_profile("simtrain")


@dataclass(frozen=True)
class FakeLink:
    bandwidth: float
    latency: float
    kind: str = "nvlink"


class RingFabric:
    """P GPUs on a directed ring: link i carries i -> i+1 (mod P), all with one B and alpha.

    Routes follow the ring forward, so a neighbour is one link away.
    """

    def __init__(self, p: int, bandwidth: float, latency: float, gpus_per_server: int = 0):
        self.num_gpus = p
        self.links = [FakeLink(bandwidth, latency) for _ in range(p)]
        self._per_server = gpus_per_server or p

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        hops = []
        r = src
        while r != dst:
            hops.append(r)
            r = (r + 1) % self.num_gpus
        return tuple(hops)

    def route_latency(self, route: tuple[int, ...]) -> float:
        return sum(self.links[i].latency for i in route)

    def server_of(self, rank: int) -> int:
        return rank // self._per_server


class StarFabric:
    """P GPUs on one switch: GPU i has uplink 2i and downlink 2i+1, each B and alpha/2.

    ``gpus_per_server`` only groups ranks into servers (for hierarchical algorithms); the
    network stays one full-bisection switch.
    """

    def __init__(self, p: int, bandwidth: float, latency: float, gpus_per_server: int = 0):
        self.num_gpus = p
        self.links = [FakeLink(bandwidth, latency / 2) for _ in range(2 * p)]
        self._per_server = gpus_per_server or p

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        return () if src == dst else (2 * src, 2 * dst + 1)

    def route_latency(self, route: tuple[int, ...]) -> float:
        return sum(self.links[i].latency for i in route)

    def server_of(self, rank: int) -> int:
        return rank // self._per_server


class DuplexRingFabric:
    """P GPUs on a ring of full-duplex links: 2i carries i -> i+1, 2i+1 carries i+1 -> i."""

    def __init__(self, p: int, bandwidth: float, latency: float):
        self.num_gpus = p
        self.links = [FakeLink(bandwidth, latency) for _ in range(2 * p)]

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        p = self.num_gpus
        forward = (dst - src) % p
        if forward <= p - forward:
            return tuple(2 * ((src + k) % p) for k in range(forward))
        return tuple(2 * ((src - k - 1) % p) + 1 for k in range(p - forward))

    def route_latency(self, route: tuple[int, ...]) -> float:
        return sum(self.links[i].latency for i in route)

    def server_of(self, rank: int) -> int:
        return 0


@pytest.fixture(scope="session")
def duplex_ring_fabric():
    return DuplexRingFabric


@pytest.fixture(scope="session")
def ring_fabric():
    return RingFabric


@pytest.fixture(scope="session")
def star_fabric():
    return StarFabric

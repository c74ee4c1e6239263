"""What the network runs for one phase of a lowered collective, prepared once per phase.

A step repeats each layer's collectives every microbatch with the same lowering (the comm
model caches one ``Lowered`` per call), so the routes of a phase's flows, their sizes on
the wire, their symmetric-copy weights and, for pipelined rings, their merge into one flow
per ring (``couple``) are the same every time: ``PhaseCache`` computes them on the first
run of a phase and hands the same lists afterwards (which the network also recognises by
identity, ``network.FlowNetwork.transfer_all``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from simtrain.engine.fabric import Endpoint
from simtrain.engine.sharing import couple

Route = tuple[int, ...]
Weights = list[tuple[float, ...]]


@dataclass(frozen=True, slots=True)
class Prepared:
    """One phase's flows as the network and the timeline take them."""

    transfers: list[tuple[Route, float]]  # what the network runs (one per ring if coupled)
    weights: Weights | None
    owner: list[int] | None  # coupled: per flow of the phase, the transfer standing for it
    sizes: list[float]  # per flow of the phase: wire bytes
    paths: list[Route]  # per flow of the phase: its links

    def spread(self, ends: Sequence[float]) -> Sequence[float]:
        """Per flow of the phase, its end, from the network's ends of ``transfers``."""
        if self.owner is None:
            return ends
        return [ends[k] for k in self.owner]


class PhaseCache:
    """``Prepared`` phases by (phase, wire factor, copies); ``weights_of(flows, routes)``
    gives the symmetric-copy weights of a phase's flows (the executor's)."""

    def __init__(self, route: Callable[[Endpoint, Endpoint], Route]) -> None:
        self._route = route
        self._cache: dict[tuple[int, float, int], tuple[object, object, Prepared]] = {}

    def get(self, phase: object, flows: Sequence[tuple[Endpoint, Endpoint, float]],
            coupled: Sequence[int] | None, wire: float, copies: object,
            weights_of: Callable[[Sequence[tuple[Route, float]]], Weights] | None
            ) -> Prepared:
        """The prepared form of ``phase`` (its ``flows`` and ``coupled`` labels) at ``wire``
        bytes per byte, with weights when the collective has symmetric ``copies``."""
        key = (id(phase), wire, id(copies))
        hit = self._cache.get(key)
        if hit is not None and hit[0] is phase and hit[1] is copies:
            return hit[2]
        route = self._route
        routes = [(route(src, dst), nbytes * wire) for src, dst, nbytes in flows]
        weights = weights_of(routes) if weights_of is not None else None
        sizes = [nb for _, nb in routes]
        paths = [path for path, _ in routes]
        if coupled is not None:
            merged, merged_weights, members = couple(routes, weights, coupled)
            owner = [0] * len(routes)
            for k, index in enumerate(members):
                for i in index:
                    owner[i] = k
            prepared = Prepared(merged, merged_weights, owner, sizes, paths)
        else:
            prepared = Prepared(routes, weights, None, sizes, paths)
        self._cache[key] = (phase, copies, prepared)  # holds both: their ids stay theirs
        return prepared

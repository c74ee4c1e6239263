"""Flows over links with max-min fair bandwidth sharing, driven by SimPy.

A transfer is a flow along a route (a tuple of directed link ids). Concurrent flows on a
link share its bandwidth max-min fairly (progressive filling); rates are recomputed only
when a flow starts or ends, and the network sleeps until the next completion. This is what
makes contention real: flows that share a link slow each other, flows on disjoint links
do not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import simpy

# A flow whose projected finish lies within this relative tolerance of "now" is complete;
# guards against float residue of remaining = bytes - rate * dt.
_REL_EPS = 1e-12
_ABS_EPS = 1e-15


class LinkLike(Protocol):
    """What the network needs of a link: capacity in bytes/s in one direction, and its kind."""

    @property
    def bandwidth(self) -> float: ...

    @property
    def kind(self) -> str: ...  # "nvlink", "pcie", "ib", "ethernet", "qpi"


class Fabric(Protocol):
    """What the engine needs of a cluster: links, routes between ranks, servers."""

    @property
    def links(self) -> Sequence[LinkLike]: ...

    @property
    def num_gpus(self) -> int: ...

    def route(self, src_rank: int, dst_rank: int) -> tuple[int, ...]: ...

    def route_latency(self, route: tuple[int, ...]) -> float: ...

    def server_of(self, rank: int) -> int: ...


@dataclass(eq=False, slots=True)
class _Flow:
    route: tuple[int, ...]
    remaining: float
    done: simpy.Event
    cap: float = float("inf")
    rate: float = 0.0
    finish: float = 0.0


def max_min_rates(
    routes: Sequence[tuple[int, ...]],
    capacity: Sequence[float],
    caps: Sequence[float] | None = None,
) -> list[float]:
    """Max-min fair rates (bytes/s) for flows with the given routes over links of ``capacity``.

    Progressive filling: repeatedly find the link whose remaining capacity divided by its
    unfrozen flows is smallest, give those flows that share, and remove them. ``caps``
    optionally bounds each flow's own rate (a protocol or host-staging limit), modelled as
    a private link. A flow with an empty route (same device) gets an infinite rate.
    """
    rates = [0.0] * len(routes)
    remaining_cap: dict[int, float] = {}
    users: dict[int, list[int]] = {}
    paths: list[tuple[int, ...]] = []
    for i, route in enumerate(routes):
        if not route:
            rates[i] = float("inf")
            paths.append(route)
            continue
        if caps is not None and caps[i] < float("inf"):
            private = -1 - i  # negative ids never clash with real links
            route = (*route, private)
            remaining_cap[private] = caps[i]
            users[private] = []
        paths.append(route)
        for link in route:
            if link not in users:
                users[link] = []
                remaining_cap[link] = capacity[link]
            users[link].append(i)
    frozen = [not route for route in routes]
    active_count = {link: len(flows) for link, flows in users.items()}
    while active_count:
        # Ties broken by link id so the result does not depend on dict order.
        bottleneck = min(active_count, key=lambda ln: (remaining_cap[ln] / active_count[ln], ln))
        share = remaining_cap[bottleneck] / active_count[bottleneck]
        for i in users[bottleneck]:
            if frozen[i]:
                continue
            frozen[i] = True
            rates[i] = share
            for link in paths[i]:
                remaining_cap[link] -= share
                active_count[link] -= 1
                if active_count[link] == 0:
                    del active_count[link]
    return rates


def isolated_time(
    flows: Sequence[tuple[tuple[int, ...], float]],
    capacity: Sequence[float],
    caps: Sequence[float] | None = None,
) -> float:
    """Seconds until the last of ``flows`` (route, bytes) ends when they start together alone.

    The same max-min sharing as the engine, without SimPy: used to predict an algorithm's
    uncongested time (for NCCL-style selection) and in tests.
    """
    active = [(route, nbytes, i) for i, (route, nbytes) in enumerate(flows) if nbytes > 0 and route]
    now = 0.0
    remaining = {i: nbytes for _, nbytes, i in active}
    while active:
        rates = max_min_rates([r for r, _, _ in active], capacity,
                              None if caps is None else [caps[i] for _, _, i in active])
        step = min(remaining[i] / rate for (_, _, i), rate in zip(active, rates, strict=True))
        now += step
        still = []
        for (route, nbytes, i), rate in zip(active, rates, strict=True):
            remaining[i] -= rate * step
            if remaining[i] > nbytes * 1e-12:
                still.append((route, nbytes, i))
        active = still
    return now


class FlowNetwork:
    """Executes byte transfers as flows sharing link bandwidth inside a SimPy environment."""

    def __init__(
        self, env: simpy.Environment, links: Sequence[LinkLike],
        capacity: Sequence[float] | None = None,
    ) -> None:
        self.env = env
        # Usable bytes/s per link: line rate unless the caller derates it (protocol overhead).
        self.capacity = list(capacity) if capacity is not None else [ln.bandwidth for ln in links]
        self._flows: list[_Flow] = []
        self._last_update = 0.0
        self._version = 0
        self.bytes_on_link = [0.0] * len(self.capacity)

    def transfer(self, route: tuple[int, ...], nbytes: float) -> simpy.Event:
        """Start moving ``nbytes`` along ``route``; the event fires (value: the time) on arrival."""
        return self.transfer_all([(route, nbytes)])[0]

    def transfer_all(
        self, transfers: Sequence[tuple[tuple[int, ...], float]], cap: float = float("inf")
    ) -> list[simpy.Event]:
        """Start several flows at the same instant, recomputing rates once for all of them.

        ``cap`` bounds each new flow's rate (bytes/s) on top of link sharing.
        """
        events = []
        started = False
        for route, nbytes in transfers:
            done = self.env.event()
            events.append(done)
            for link in route:
                self.bytes_on_link[link] += nbytes
            if nbytes <= 0 or not route:
                done.succeed(self.env.now)
                continue
            if not started:
                self._advance()
                started = True
            self._flows.append(_Flow(route=route, remaining=nbytes, done=done, cap=cap))
        if started:
            self._reschedule()
        return events

    @property
    def active_flows(self) -> int:
        return len(self._flows)

    def _advance(self) -> None:
        """Charge every active flow for the bytes it moved since the last update."""
        now = self.env.now
        dt = now - self._last_update
        if dt > 0:
            for flow in self._flows:
                flow.remaining -= flow.rate * dt
        self._last_update = now

    def _reschedule(self) -> None:
        caps = [f.cap for f in self._flows]
        capped = any(c < float("inf") for c in caps)
        rates = max_min_rates([f.route for f in self._flows], self.capacity,
                              caps if capped else None)
        now = self.env.now
        soonest = float("inf")
        for flow, rate in zip(self._flows, rates, strict=True):
            flow.rate = rate
            flow.finish = now + max(flow.remaining, 0.0) / rate
            soonest = min(soonest, flow.finish)
        self._version += 1
        if self._flows:
            wake = self.env.timeout(max(soonest - now, 0.0))
            version = self._version
            wake.callbacks.append(lambda _event: self._on_wake(version))

    def _on_wake(self, version: int) -> None:
        if version != self._version:
            return  # superseded by a later start or finish
        self._advance()
        now = self.env.now
        horizon = now + abs(now) * _REL_EPS + _ABS_EPS
        still: list[_Flow] = []
        for flow in self._flows:
            if flow.finish <= horizon:
                flow.done.succeed(now)
            else:
                still.append(flow)
        self._flows = still
        self._reschedule()

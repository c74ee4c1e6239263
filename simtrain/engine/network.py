"""Flows over links with max-min fair bandwidth sharing, driven by SimPy.

A transfer is a flow along a route (a tuple of directed link ids). Concurrent flows on a
link share its bandwidth max-min fairly (progressive filling); rates are recomputed only
when a flow starts or ends, and the network sleeps until the next completion. This is what
makes contention real: flows that share a link slow each other, flows on disjoint links
do not.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
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


@dataclass(eq=False, slots=True)
class _Batch:
    """Flows started together; ``done`` fires with their finish times when the last ends."""

    done: simpy.Event
    finish: list[float]
    pending: int


@dataclass(eq=False, slots=True)
class _Flow:
    id: int
    route: tuple[int, ...]
    remaining: float  # bytes left at time ``updated``
    batch: _Batch
    index: int
    cap: float = float("inf")
    weights: tuple[float, ...] | None = None
    rate: float = 0.0
    updated: float = 0.0
    finish: float = float("inf")
    stamp: int = 0  # bumped whenever ``finish`` changes; heap entries carry it

    def settle(self, now: float) -> None:
        """Charge the bytes moved at the current rate since the last update."""
        if now > self.updated:
            self.remaining -= self.rate * (now - self.updated)
            self.updated = now


def max_min_rates(
    routes: Sequence[tuple[int, ...]],
    capacity: Sequence[float],
    caps: Sequence[float] | None = None,
    weights: Sequence[tuple[float, ...] | None] | None = None,
) -> list[float]:
    """Max-min fair rates (bytes/s) for flows with the given routes over links of ``capacity``.

    Progressive filling: repeatedly find the link whose remaining capacity divided by the
    weight of its unfrozen flows is smallest, give those flows that share, and remove them.
    ``caps`` optionally bounds each flow's own rate (a protocol or host-staging limit),
    modelled as a private link. ``weights[i][k]`` (default 1) says how many identical copies
    of flow i cross its k-th link: a flow standing for m symmetric flows uses m times its
    rate there (symmetric fidelity). A flow with an empty route gets an infinite rate.
    """
    rates = [0.0] * len(routes)
    remaining_cap: dict[int, float] = {}
    users: dict[int, list[tuple[int, float]]] = {}
    load: dict[int, float] = {}  # total weight of unfrozen flows per link
    paths: list[list[tuple[int, float]]] = []
    # A link crossed by one flow only limits that flow alone, to capacity / weight: fold
    # all of a flow's private links (and its own cap) into one private limit, so the
    # filling below runs over shared links only (a wide ring crosses thousands of links
    # nobody else uses). The rates are the same as filling over every link.
    crossers: dict[int, int] = {}
    for route in routes:
        for link in route:
            crossers[link] = crossers.get(link, 0) + 1
    for i, route in enumerate(routes):
        if not route:
            rates[i] = float("inf")
            paths.append([])
            continue
        w = weights[i] if weights is not None else None
        limit = caps[i] if caps is not None else float("inf")
        path = []
        for k, link in enumerate(route):
            weight = 1.0 if w is None else w[k]
            if crossers[link] == 1:
                limit = min(limit, capacity[link] / weight)
            else:
                path.append((link, weight))
        if limit < float("inf"):
            private = -1 - i  # negative ids never clash with real links
            path.append((private, 1.0))
            remaining_cap[private] = limit
        paths.append(path)
        for link, weight in path:
            if link not in users:
                users[link] = []
                load[link] = 0.0
                if link >= 0:
                    remaining_cap[link] = capacity[link]
            users[link].append((i, weight))
            load[link] += weight
    frozen = [not route for route in routes]
    # Lazy min-heap of (fair share, link): a link's share only grows as flows freeze, so
    # stale entries (share no longer current) are skipped when popped. Ties break on the
    # link id, so the result does not depend on dict order.
    current = {link: remaining_cap[link] / w for link, w in load.items()}
    heap = [(share, link) for link, share in current.items()]
    heapq.heapify(heap)
    while heap:
        share, bottleneck = heapq.heappop(heap)
        if current.get(bottleneck) != share:
            continue
        del current[bottleneck]
        for i, _ in users[bottleneck]:
            if frozen[i]:
                continue
            frozen[i] = True
            rates[i] = share
            for link, weight in paths[i]:
                if link == bottleneck:
                    continue
                remaining_cap[link] -= share * weight
                load[link] -= weight
                if load[link] <= 1e-12:
                    current.pop(link, None)
                else:
                    updated = max(remaining_cap[link], 0.0) / load[link]
                    current[link] = updated
                    heapq.heappush(heap, (updated, link))
    return rates


def couple(
    transfers: Sequence[tuple[tuple[int, ...], float]],
    weights: Sequence[tuple[float, ...] | None] | None,
    labels: Sequence[int],
) -> tuple[list[tuple[tuple[int, ...], float]], list[tuple[float, ...]], list[list[int]]]:
    """Merge the flows of each label into one flow that moves them at one common rate.

    A pipelined ring forwards every chunk hop by hop, so all its hops carry data at the
    pace of the slowest: modelled as one flow over the union of their links, each link
    weighted by how many of the hops (and their symmetric copies) cross it, carrying one
    hop's bytes (the largest, when they differ). Under max-min sharing this flow's rate is
    the ring's rate; what the fast hops would not use stays free for other traffic. Returns
    (merged transfers, their weights, the original indices of each merged flow).
    """
    groups: dict[int, list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(label, []).append(i)
    merged: list[tuple[tuple[int, ...], float]] = []
    merged_weights: list[tuple[float, ...]] = []
    members: list[list[int]] = []
    for index in groups.values():
        counts: dict[int, float] = {}
        nbytes = 0.0
        for i in index:
            route, size = transfers[i]
            if size <= 0 or not route:
                continue
            w = weights[i] if weights is not None else None
            for k, link in enumerate(route):
                counts[link] = counts.get(link, 0.0) + (1.0 if w is None else w[k])
            nbytes = max(nbytes, size)
        merged.append((tuple(counts), nbytes))
        merged_weights.append(tuple(counts.values()))
        members.append(index)
    return merged, merged_weights, members


def isolated_time(
    flows: Sequence[tuple[tuple[int, ...], float]],
    capacity: Sequence[float],
    caps: Sequence[float] | None = None,
    weights: Sequence[tuple[float, ...] | None] | None = None,
    coupled: Sequence[int] | None = None,
) -> float:
    """Seconds until the last of ``flows`` (route, bytes) ends when they start together alone.

    The same max-min sharing as the engine, without SimPy: used to predict an algorithm's
    uncongested time (for NCCL-style selection) and in tests. ``coupled`` labels flows that
    move at one common rate (``couple``).
    """
    if coupled is not None:
        flows, merged_weights, members = couple(flows, weights, coupled)
        weights = list(merged_weights)
        if caps is not None:
            caps = [min(caps[i] for i in index) for index in members]
    # Only the links the flows cross: ``capacity`` lists every link of the cluster (a
    # million on 16k GPUs) and this runs for every candidate algorithm of every collective.
    check_transfers(flows, [capacity[link] for route, _ in flows for link in route], caps)
    active = [(route, nbytes, i) for i, (route, nbytes) in enumerate(flows) if nbytes > 0 and route]
    now = 0.0
    remaining = {i: nbytes for _, nbytes, i in active}
    while active:
        rates = max_min_rates([r for r, _, _ in active], capacity,
                              None if caps is None else [caps[i] for _, _, i in active],
                              None if weights is None else [weights[i] for _, _, i in active])
        times = [remaining[i] / rate for (_, _, i), rate in zip(active, rates, strict=True)]
        step = min(times)
        now += step
        still = []
        for (route, nbytes, i), rate, t in zip(active, rates, times, strict=True):
            # The flows whose own time is the step end now, whatever the float residue of
            # remaining - rate * step (for 5e-324 bytes, step underflows to 0): every
            # round ends at least one flow, so the loop runs at most len(flows) times.
            if t <= step:
                continue
            remaining[i] -= rate * step
            if remaining[i] > nbytes * 1e-12:
                still.append((route, nbytes, i))
        active = still
    return now


def check_transfers(flows: Sequence[tuple[tuple[int, ...], float]],
                    capacity: Sequence[float] | None = None,
                    caps: Sequence[float] | None = None) -> None:
    """Raise ValueError unless every size is finite and >= 0 and every capacity and cap is
    > 0 (a cap may be infinite): a NaN or infinite size would never finish."""
    for route, nbytes in flows:
        if not (math.isfinite(nbytes) and nbytes >= 0):
            raise ValueError(f"a transfer must move a finite, non-negative number of bytes, "
                             f"got {nbytes!r} over links {route}")
    for name, values, inf_ok in (("link capacity", capacity, False), ("flow cap", caps, True)):
        for value in values or ():
            if not (value > 0 and (inf_ok or math.isfinite(value))):
                raise ValueError(f"a {name} must be {'> 0' if inf_ok else 'finite and > 0'} "
                                 f"bytes/s, got {value!r}")


class FlowNetwork:
    """Executes byte transfers as flows sharing link bandwidth inside a SimPy environment.

    Rates are recomputed only for the flows connected (through shared links) to a flow
    that starts or ends: flows on disjoint links — a TP all-reduce on NVLink and a DP ring
    on the NICs — never cost each other a recomputation.
    """

    def __init__(
        self, env: simpy.Environment, links: Sequence[LinkLike],
        capacity: Sequence[float] | None = None,
    ) -> None:
        self.env = env
        # Usable bytes/s per link: line rate unless the caller derates it (protocol overhead).
        self.capacity = list(capacity) if capacity is not None else [ln.bandwidth for ln in links]
        check_transfers((), self.capacity)
        self._flows: dict[int, _Flow] = {}
        self._users: dict[int, dict[int, _Flow]] = {}  # link -> active flows on it, by id
        self._heap: list[tuple[float, int, int]] = []  # (finish, flow id, stamp)
        self._next_id = 0
        self._version = 0

    def transfer(self, route: tuple[int, ...], nbytes: float) -> simpy.Event:
        """Start moving ``nbytes`` along ``route``; the event fires on arrival."""
        return self.transfer_all([(route, nbytes)])

    def transfer_all(
        self,
        transfers: Sequence[tuple[tuple[int, ...], float]],
        cap: float = float("inf"),
        weights: Sequence[tuple[float, ...] | None] | None = None,
    ) -> simpy.Event:
        """Start several flows at the same instant, recomputing rates once for all of them.

        The returned event fires when the last one arrives; its value lists each flow's
        arrival time. ``cap`` bounds each new flow's rate (bytes/s) on top of link sharing;
        ``weights`` gives per-link multiplicities (see ``max_min_rates``).
        """
        check_transfers(transfers, None, [cap])
        for w in weights or ():
            if w is not None and not all(math.isfinite(x) and x > 0 for x in w):
                raise ValueError(f"flow weights must be finite and > 0, got {w}")
        now = self.env.now
        batch = _Batch(self.env.event(), [now] * len(transfers), 0)
        flows = []
        for i, (route, nbytes) in enumerate(transfers):
            if nbytes <= 0 or not route:
                continue
            flow = _Flow(self._next_id, route, nbytes, batch, i, cap,
                         None if weights is None else weights[i], updated=now)
            self._next_id += 1
            flows.append(flow)
        if not flows:
            batch.done.succeed(batch.finish)
            return batch.done
        batch.pending = len(flows)
        for flow in flows:
            self._flows[flow.id] = flow
            for link in flow.route:
                self._users.setdefault(link, {})[flow.id] = flow
        self._recompute(self._component(flow.route for flow in flows))
        self._schedule_wake()
        return batch.done

    def _component(self, routes: Iterable[tuple[int, ...]]) -> list[_Flow]:
        """Active flows connected to ``routes`` through shared links, in creation order."""
        seen_links: set[int] = set()
        found: dict[int, _Flow] = {}
        stack = [link for route in routes for link in route]
        while stack:
            link = stack.pop()
            if link in seen_links:
                continue
            seen_links.add(link)
            for fid, flow in self._users.get(link, {}).items():
                if fid not in found:
                    found[fid] = flow
                    stack.extend(flow.route)
        return [found[fid] for fid in sorted(found)]

    def _recompute(self, flows: list[_Flow]) -> None:
        """New max-min rates for a connected set of flows (no other flow shares its links)."""
        if not flows:
            return
        now = self.env.now
        caps = [f.cap for f in flows]
        capped = any(c < float("inf") for c in caps)
        weighted = any(f.weights is not None for f in flows)
        rates = max_min_rates([f.route for f in flows], self.capacity,
                              caps if capped else None,
                              [f.weights for f in flows] if weighted else None)
        for flow, rate in zip(flows, rates, strict=True):
            flow.settle(now)
            flow.rate = rate
            flow.finish = now + max(flow.remaining, 0.0) / rate
            if not math.isfinite(flow.finish):
                raise ValueError(f"a flow of {flow.remaining:.6g} bytes at {rate:.6g} B/s would "
                                 f"end at t={flow.finish}: sizes or bandwidths out of range")
            flow.stamp += 1
            heapq.heappush(self._heap, (flow.finish, flow.id, flow.stamp))

    def _top(self) -> tuple[float, int, int] | None:
        """The earliest current heap entry (stale entries are dropped)."""
        heap = self._heap
        while heap:
            finish, fid, stamp = heap[0]
            flow = self._flows.get(fid)
            if flow is not None and flow.stamp == stamp:
                return heap[0]
            heapq.heappop(heap)
        return None

    def _schedule_wake(self) -> None:
        top = self._top()
        self._version += 1
        if top is None:
            return
        wake = self.env.timeout(max(top[0] - self.env.now, 0.0))
        version = self._version
        due = top[0]
        wake.callbacks.append(lambda _event: self._on_wake(version, due))

    def _on_wake(self, version: int, due: float) -> None:
        if version != self._version:
            return  # superseded by a later start or finish
        now = self.env.now
        # The flow this wake was scheduled for ends now even when float rounding put
        # ``now`` a hair before ``due``: every wake ends at least one flow, so the loop
        # terminates for any finite sizes and rates.
        horizon = max(now + abs(now) * _REL_EPS + _ABS_EPS, due)
        finished: list[_Flow] = []
        while (top := self._top()) is not None and top[0] <= horizon:
            heapq.heappop(self._heap)
            flow = self._flows.pop(top[1])
            finished.append(flow)
            for link in flow.route:
                users = self._users[link]
                del users[flow.id]
                if not users:
                    del self._users[link]
        for flow in finished:
            batch = flow.batch
            batch.finish[flow.index] = now
            batch.pending -= 1
            if batch.pending == 0:
                batch.done.succeed(batch.finish)
        self._recompute(self._component(flow.route for flow in finished))
        self._schedule_wake()

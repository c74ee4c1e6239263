"""Flows over links with max-min fair bandwidth sharing, driven by SimPy.

A transfer is a flow along a route (a tuple of directed link ids). Concurrent flows on a
link share its bandwidth max-min fairly (progressive filling); rates are recomputed only
when a flow starts or ends, and the network sleeps until the next completion. This is what
makes contention real: flows that share a link slow each other, flows on disjoint links
do not. The sharing itself (``max_min_rates``) lives in ``simtrain.engine.sharing``, the
endpoints and the fabric interface in ``simtrain.engine.fabric``; both are re-exported here.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import simpy

from simtrain.engine.fabric import (  # noqa: F401  (re-exported: one import for callers)
    SWITCH_LEVELS,
    Endpoint,
    Fabric,
    LinkLike,
    SwitchPort,
    anchor,
    relocate,
    switch_bytes,
)
from simtrain.engine.sharing import (  # noqa: F401
    check_transfers,
    couple,
    isolated_time,
    max_min_rates,
)

# A flow whose projected finish lies within this relative tolerance of "now" is complete;
# guards against float residue of remaining = bytes - rate * dt.
_REL_EPS = 1e-12
_ABS_EPS = 1e-15
# Connected flow sets whose max-min rates are remembered, and weight tuples remembered as
# checked (each memo is emptied when full).
_RATES_MEMO = 4096


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
        self._fresh: list[_Flow] = []  # started this instant, not yet rated
        # max-min rates by (routes, caps, weights) of a connected set (``_recompute``)
        self._rates: dict[tuple[object, ...], list[float]] = {}
        self._checked: dict[int, tuple[float, ...]] = {}  # weight tuples found valid, by id
        self._flush_due = False

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
        checked = self._checked
        for w in weights or ():
            if w is None or checked.get(id(w)) is w:  # the engine hands cached tuples
                continue
            if not all(math.isfinite(x) and x > 0 for x in w):
                raise ValueError(f"flow weights must be finite and > 0, got {w}")
            if len(checked) >= _RATES_MEMO:
                checked.clear()
            checked[id(w)] = w
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
        # Flows that start at this instant are rated together: the first start schedules
        # one recomputation after the events already due now, and the starts that follow
        # at the same time (other collectives, other phases) join it.
        self._fresh.extend(flows)
        if not self._flush_due:
            self._flush_due = True
            flush = self.env.event()
            flush.callbacks.append(self._flush)
            flush.succeed()
        return batch.done

    def _flush(self, _event: simpy.Event) -> None:
        fresh, self._fresh = self._fresh, []
        self._flush_due = False
        live = [flow for flow in fresh if flow.id in self._flows]
        self._recompute(self._component(flow.route for flow in live))
        self._schedule_wake()

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
        routes = tuple(f.route for f in flows)
        caps = tuple(f.cap for f in flows)
        capped = any(c < float("inf") for c in caps)
        weights = tuple(f.weights for f in flows)
        weighted = any(w is not None for w in weights)
        # The rates depend on nothing but these inputs, and a step repeats the same
        # concurrent sets (every layer's all-to-all alone in its server, say): reuse them.
        key = (routes, caps if capped else None, weights if weighted else None)
        rates = self._rates.get(key)
        if rates is None:
            if len(self._rates) >= _RATES_MEMO:
                self._rates.clear()
            rates = self._rates[key] = max_min_rates(
                routes, self.capacity, caps if capped else None,
                weights if weighted else None)
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


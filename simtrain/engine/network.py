"""Flows over links with max-min fair bandwidth sharing, driven by SimPy.

A transfer is a flow along a route (a tuple of directed link ids). Concurrent flows on a
link share its bandwidth max-min fairly (progressive filling); rates are recomputed only
when a flow starts or ends, and the network sleeps until the next completion. This is what
makes contention real: flows that share a link slow each other, flows on disjoint links
do not. A batch of flows started together on links no other flow uses runs as one unit
(``simtrain.engine.isolated``, ``simtrain.engine.units``) until a later flow joins one of
its links; a batch starting on links only small units use joins them into one unit. The sharing
itself (``max_min_rates``) lives in ``simtrain.engine.sharing``, the endpoints and the
fabric interface in ``simtrain.engine.fabric``; both are re-exported here.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import NamedTuple

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
from simtrain.engine.isolated import ABS_EPS, REL_EPS, Trajectory
from simtrain.engine.sharing import (  # noqa: F401
    check_transfers,
    couple,
    isolated_time,
    max_min_rates,
)
from simtrain.engine.units import AloneUnits, Batch, Flow, Member, Pending, Unit

# Connected flow sets whose max-min rates are remembered, and weight tuples remembered as
# checked (each memo is emptied when full).
_RATES_MEMO = 4096


class _Split(NamedTuple):
    """A transfer list as checked, and the flows of it that move bytes."""

    transfers: Sequence[tuple[tuple[int, ...], float]]
    weights: Sequence[tuple[float, ...] | None] | None
    keep: list[int]  # indices of the flows that move bytes
    routes: tuple[tuple[int, ...], ...]
    nbytes: tuple[float, ...]
    kept: tuple[tuple[float, ...] | None, ...] | None


@dataclass(eq=False, slots=True)
class _Rated:
    """A flow set's max-min rates, and which of its flows are connected (the labels of
    ``FlowNetwork._pieces``, found when first needed)."""

    rates: list[float]
    labels: tuple[int, ...] | None = None


_ID, _ROUTE, _CAP, _WEIGHTS = (attrgetter(name) for name in ("id", "route", "cap", "weights"))


class FlowNetwork(AloneUnits):
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
        self._flows: dict[int, Flow | Member] = {}
        self._users: dict[int, dict[int, Flow]] = {}  # link -> active flows on it, by id
        self._heap: list[tuple[float, int, int]] = []  # (finish, flow id, stamp)
        self._next_id = 0
        self._version = 0
        self._fresh: list[Pending] = []  # started this instant, not yet rated
        # Batches running alone on their links (simtrain.engine.isolated): link -> batch,
        # and their evolutions by (routes, sizes, cap, weights).
        self._alone: dict[int, Unit] = {}
        self._paths: dict[tuple[object, ...], Trajectory] = {}
        self._mine: dict[tuple[object, ...], tuple[tuple[object, ...], Trajectory]] = {}
        self._links: dict[int, tuple[tuple[tuple[int, ...], ...], frozenset[int]]] = {}
        # max-min rates by (routes, caps, weights) of a connected set (``_recompute``)
        self._rates: dict[tuple[object, ...], _Rated] = {}
        self._checked: dict[int, tuple[float, ...]] = {}  # weight tuples found valid, by id
        self._split: dict[int, _Split] = {}  # transfer lists checked, by id
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
        # The engine hands the same lists for every run of a phase (engine.collective): they
        # are checked and split into the flows that move bytes once.
        split = self._split.get(id(transfers))
        if split is None or split[0] is not transfers or split[1] is not weights:
            split = self._checked_split(transfers, cap, weights)
        elif not cap > 0:
            check_transfers((), None, [cap])
        _, _, index, routes, nbytes, kept = split
        now = self.env.now
        batch = Batch(self.env.event(), [now] * len(transfers), 0)
        if not index:
            batch.done.succeed(batch.finish)
            return batch.done
        batch.pending = len(index)
        self._fresh.append(Pending(batch, index, routes, nbytes, cap, kept, self._next_id))
        self._next_id += len(index)
        # Flows that start at this instant are rated together: the first start schedules
        # one recomputation after the events already due now, and the starts that follow
        # at the same time (other collectives, other phases) join it.
        if not self._flush_due:
            self._flush_due = True
            flush = self.env.event()
            flush.callbacks.append(self._flush)
            flush.succeed()
        return batch.done

    def _checked_split(self, transfers: Sequence[tuple[tuple[int, ...], float]], cap: float,
                       weights: Sequence[tuple[float, ...] | None] | None
                       ) -> _Split:
        """ValueError on a bad size, cap or weight; else (transfers, weights, indices of
        the flows that move bytes, their routes, sizes and weights), remembered."""
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
        index = [i for i, (route, nbytes) in enumerate(transfers) if nbytes > 0 and route]
        routes = tuple(transfers[i][0] for i in index)
        nbytes = tuple(transfers[i][1] for i in index)
        kept = None if weights is None else tuple(weights[i] for i in index)
        split = _Split(transfers, weights, index, routes, nbytes, kept)
        if len(self._split) >= _RATES_MEMO:
            self._split.clear()
        self._split[id(transfers)] = split
        return split

    def _flush(self, _event: simpy.Event) -> None:
        fresh, self._fresh = self._fresh, []
        self._flush_due = False
        links = [self._links_of(p.routes) for p in fresh]
        shared: set[int] = set()
        if len(fresh) > 1:  # links two batches starting now both cross
            seen: set[int] = set()
            for crossed in links:
                shared |= seen & crossed
                seen |= crossed
        users, alone = self._users, self._alone
        live: list[Flow] = []
        for pending, crossed in zip(fresh, links, strict=True):
            # (set operations: C loops over the smaller side)
            if alone.keys().isdisjoint(crossed) and users.keys().isdisjoint(crossed) and \
                    shared.isdisjoint(crossed):
                self._run_alone(pending, crossed)
                continue
            joined = {id(a): a for a in (alone.get(link) for link in crossed) if a is not None}
            if users.keys().isdisjoint(crossed) and shared.isdisjoint(crossed) and \
                    self._joinable(joined.values()):
                self._join(pending, crossed, list(joined.values()))  # units only: one unit
                continue
            for unit in joined.values():
                live += self._expand(unit)
            live += self._register(pending)
        if live:
            self._recompute(self._component(live))
        self._schedule_wake()

    def _links_of(self, routes: tuple[tuple[int, ...], ...]) -> frozenset[int]:
        """Every link ``routes`` cross (remembered by the tuple's identity, kept alive)."""
        hit = self._links.get(id(routes))
        if hit is not None and hit[0] is routes:
            return hit[1]
        if len(self._links) >= _RATES_MEMO:
            self._links.clear()
        links = frozenset(link for r in routes for link in r)
        self._links[id(routes)] = (routes, links)
        return links

    def _register(self, p: Pending, first: int = 0) -> list[Flow]:
        """Make ``p``'s flows from ``first`` on active flows (unrated)."""
        now, batch, cap, weights = self.env.now, p.batch, p.cap, p.weights
        routes, nbytes, index = p.routes, p.nbytes, p.index
        flows = [Flow(p.first + k, routes[k], nbytes[k], batch, index[k], cap,
                       None if weights is None else weights[k], updated=now)
                 for k in range(first, len(routes))]
        self._add(flows)
        return flows

    def _add(self, flows: list[Flow]) -> None:
        by_id, users = self._flows, self._users
        for flow in flows:
            fid = flow.id
            by_id[fid] = flow
            for link in flow.route:
                on = users.get(link)
                if on is None:
                    users[link] = {fid: flow}
                else:
                    on[fid] = flow

    def _component(self, live: list[Flow]) -> list[Flow]:
        """``live`` flows (just added, no group yet) and the active flows connected to them
        through shared links, in creation order."""
        # Every other active flow is in its group, and a link's flows are all in one group:
        # the first flow on a link (the oldest) names it, unless it is a live one (then the
        # link carries live flows only: they precede no older flow in the dict's order).
        users = self._users
        groups: dict[int, list[Flow]] = {}
        for link in set(chain.from_iterable(flow.route for flow in live)):
            group = next(iter(users[link].values())).group
            if group is not None:
                groups[id(group)] = group
        if not groups:
            return sorted(live, key=_ID)
        return sorted(chain(live, *groups.values()), key=_ID)

    def _pieces(self, flows: list[Flow]) -> tuple[int, ...]:
        """Label each of ``flows`` (a set no other active flow shares a link with) with its
        connected set, numbered 0, 1, ... by their first flow; ``()`` when connected."""
        # Breadth first over the link table, a whole frontier of links at a time: the dict
        # and set operations run in C, Python touches each flow once.
        users = self._users
        label: dict[int, int] = {}
        pieces = 0
        for flow in flows:
            if flow.id in label:
                continue
            found: dict[int, Flow] = {}
            seen: set[int] = set()
            frontier = set(flow.route)
            while frontier:
                seen |= frontier
                reached: dict[int, Flow] = {}
                for link in frontier:
                    reached.update(users[link])
                new = reached.keys() - found.keys()
                found.update(reached)
                frontier = set(chain.from_iterable(reached[fid].route for fid in new))
                frontier -= seen
            if not label and len(found) == len(flows):
                return ()
            label.update(dict.fromkeys(found, pieces))
            pieces += 1
        return tuple(label[flow.id] for flow in flows)

    def _recompute(self, flows: list[Flow], grouped: bool = False) -> None:
        """New max-min rates for a set of flows no other flow shares a link with (in
        creation order); each flow's ``group`` becomes its connected set (``grouped``:
        ``flows`` is already the group of every flow in it)."""
        if not flows:
            return
        now, heap, push, inf = self.env.now, self._heap, heapq.heappush, math.inf
        routes = tuple(map(_ROUTE, flows))  # (map and tuple.count: C loops)
        rated = self._rated(routes, tuple(map(_CAP, flows)), tuple(map(_WEIGHTS, flows)))
        labels = rated.labels
        if labels is None:
            labels = rated.labels = self._pieces(flows)
        if labels:
            groups: list[list[Flow]] = [[] for _ in range(max(labels) + 1)]
            for flow, label in zip(flows, labels, strict=True):
                group = flow.group = groups[label]
                group.append(flow)
        elif not grouped:
            for flow in flows:
                flow.group = flows
        for flow, rate in zip(flows, rated.rates, strict=True):
            if rate == flow.rate and rate > 0.0:  # its finish and heap entry stand
                continue
            if now > flow.updated:  # settle the bytes moved at the old rate
                flow.remaining -= flow.rate * (now - flow.updated)
                flow.updated = now
            flow.rate = rate
            finish = flow.finish = now + max(flow.remaining, 0.0) / rate
            if not -inf < finish < inf:
                raise ValueError(f"a flow of {flow.remaining:.6g} bytes at {rate:.6g} B/s would "
                                 f"end at t={finish}: sizes or bandwidths out of range")
            flow.stamp += 1
            push(heap, (finish, flow.id, flow.stamp))

    def _rates_for(self, routes: tuple[tuple[int, ...], ...],
                   caps: tuple[float, ...] | None,
                   weights: tuple[tuple[float, ...] | None, ...] | None) -> list[float]:
        """Max-min rates of a set of flows (``_rated``)."""
        return self._rated(routes, caps, weights).rates

    def _rated(self, routes: tuple[tuple[int, ...], ...],
               caps: tuple[float, ...] | None,
               weights: tuple[tuple[float, ...] | None, ...] | None) -> _Rated:
        """Max-min rates of a set of flows, memoised: the rates depend on nothing but these
        inputs, and a step repeats the same concurrent sets (every layer's all-to-all alone
        in its server, say)."""
        if caps is not None and (not caps or min(caps) == math.inf):  # caps are > 0
            caps = None
        if weights is not None and weights.count(None) == len(weights):
            weights = None
        key = (routes, caps, weights)
        rated = self._rates.get(key)
        if rated is None:
            if len(self._rates) >= _RATES_MEMO:
                self._rates.clear()
            rated = self._rates[key] = _Rated(max_min_rates(routes, self.capacity, caps,
                                                            weights))
        return rated

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
        horizon = max(now + abs(now) * REL_EPS + ABS_EPS, due)
        finished: list[Flow | Member] = []
        while (top := self._top()) is not None and top[0] <= horizon:
            heapq.heappop(self._heap)
            flow = self._flows[top[1]]
            finished.append(flow)
            if isinstance(flow, Member):
                self._member_ended(flow)
                continue
            del self._flows[top[1]]
            for link in flow.route:
                users = self._users[link]
                del users[flow.id]
                if not users:
                    del self._users[link]
        for flow in finished:
            if isinstance(flow, Member):  # alone on its links: nobody to re-rate
                self._end_member(flow, now)
                continue
            batch = flow.batch
            batch.finish[flow.index] = now
            batch.pending -= 1
            if batch.pending == 0:
                batch.done.succeed(batch.finish)
        ended = [flow for flow in finished if isinstance(flow, Flow)]
        if ended:
            self._rerate(ended)
        self._schedule_wake()

    def _rerate(self, ended: list[Flow]) -> None:
        """Re-rate the flows that were connected to the ``ended`` ones (now inactive)."""
        # A connected set less some of its flows is what a walk from the ended flows'
        # links finds: each part the ends split it into was linked to an ended flow.
        groups = {id(flow.group): flow.group for flow in ended}
        for flow in ended:
            flow.group = None
        if len(groups) == 1:  # the group stays one list object, its flows' ``group``
            group = groups.popitem()[1]
            assert group is not None
            if len(ended) <= 8:  # (index and del: C loops)
                for flow in ended:
                    del group[group.index(flow)]
            else:
                dead = set(map(id, ended))
                group[:] = [flow for flow in group if id(flow) not in dead]
            if group:  # else nothing was connected to them
                self._recompute(group, grouped=True)
            return
        dead = set(map(id, ended))
        rest = [flow for g in groups.values() if g is not None for flow in g
                if id(flow) not in dead]
        rest.sort(key=_ID)
        if rest:
            self._recompute(rest)


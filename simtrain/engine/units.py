"""The flow network's records, and its batches running alone on their links as one unit.

A batch of flows whose links no other active flow crosses runs as one unit
(``simtrain.engine.isolated``): its evolution is computed once, and the network schedules
one wake-up per batch instead of a heap entry, a rate and a component walk per flow at
every end. When a new batch starts on links only units use (no active flow, no other
batch starting with it), the units' flows still running and the new batch's flows form
one new unit from that instant (``AloneUnits._join``): its evolution starts from the
bytes each flow has left, and each batch in it still ends at its own last flow's end.
When a later flow joins a unit any other way, the unit is expanded back into its flows
(``AloneUnits._expand``) and shares bandwidth like any other. The evolution is the
network's own max-min sharing, so the only difference from running the flows one by one
is float rounding in the last place of their end times.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import simpy

from simtrain.engine.isolated import Ends, Trajectory, trajectory

# A new batch joins units into one only while they hold at most this many running flows:
# each join evolves the new unit to its end, so joining a grown unit again and again
# re-evolves it. Measured (CPU s, loaded 2 cores): DeepSeek-V3 256-GPU AutoModel row 8.6-11.3
# never joining, 7.5-7.8 at 16, 8.2-11.0 at 64, 22.9 unbounded (units of 900-3,600 flows
# joined again); GB200 Qwen3-235B on 64 GPUs (a 4,032-flow all-to-all joining one running
# ring) 10.3 never joining, 6.5 joined.
JOIN_MAX_FLOWS = 16
# Memoised evolutions of single batches (by routes, sizes, cap, weights; emptied when full).
_PATHS_MEMO = 4096


@dataclass(eq=False, slots=True)
class Batch:
    """Flows started together; ``done`` fires with their finish times when the last ends."""

    done: simpy.Event
    finish: list[float]
    pending: int


@dataclass(eq=False, slots=True)
class Flow:
    """An active flow rated on its own (``remaining`` bytes left at time ``updated``)."""

    id: int
    route: tuple[int, ...]
    remaining: float
    batch: Batch
    index: int
    cap: float = float("inf")
    weights: tuple[float, ...] | None = None
    rate: float = 0.0
    updated: float = 0.0
    finish: float = float("inf")
    stamp: int = 0  # bumped whenever ``finish`` changes; heap entries carry it
    # The active flows connected to this one through shared links, itself included, in
    # creation order (one list object shared by all of them; ``FlowNetwork._recompute``).
    group: list[Flow] | None = None


@dataclass(eq=False, slots=True)
class Pending:
    """A batch's flows (sizes > 0, routes not empty) started this instant, not yet rated;
    their flow ids are ``first``, ``first + 1``, ... (reserved at the start)."""

    batch: Batch
    index: list[int]  # each flow's position in the batch's finish list
    routes: tuple[tuple[int, ...], ...]
    nbytes: tuple[float, ...]
    cap: float
    weights: tuple[tuple[float, ...] | None, ...] | None
    first: int
    stamp: int = 0  # the last stamp a heap entry under id ``first`` carried


@dataclass(eq=False, slots=True)
class Member:
    """A batch inside a unit: its flows ``ks`` (numbers within ``pending``) are the unit's
    flows ``lo``, ``lo + 1``, ...; the last of them ends ``last`` seconds after the unit's
    start. The heap orders it as the batch's first flow (id ``pending.first``)."""

    pending: Pending
    ks: Sequence[int]
    lo: int
    last: float
    stamp: int
    unit: Unit | None = None
    ended: bool = False

    @property
    def id(self) -> int:
        return self.pending.first


@dataclass(eq=False, slots=True)
class Unit:
    """Batches running alone on ``links`` from ``start`` on, along ``path``."""

    members: list[Member]
    links: frozenset[int]
    start: float
    path: Trajectory
    left: int  # members not ended yet


class AloneUnits:
    """The flow network's handling of units (mixed into ``FlowNetwork``)."""

    env: simpy.Environment
    _flows: dict[int, Flow | Member]
    _alone: dict[int, Unit]
    _heap: list[tuple[float, int, int]]
    _paths: dict[tuple[object, ...], Trajectory]
    _mine: dict[tuple[object, ...], tuple[tuple[object, ...], Trajectory]]
    _rates_for: Callable[..., list[float]]
    _add: Callable[[list[Flow]], None]

    def _run_alone(self, p: Pending, links: frozenset[int]) -> None:
        """Run ``p`` as one unit: its whole evolution is known until a flow joins a link."""
        # By identity first (the engine hands the same tuples for a phase), then by value.
        mine = self._mine.get((id(p.routes), id(p.nbytes), p.cap, id(p.weights)))
        key = (p.routes, p.nbytes, p.cap, p.weights)
        path = mine[1] if mine is not None and mine[0] == key else self._paths.get(key)
        if path is None:
            if len(self._paths) >= _PATHS_MEMO:
                self._paths.clear()
            caps = tuple(p.cap for _ in p.routes)
            path = self._paths[key] = self._evolve(p.routes, p.nbytes, caps, p.weights)
        if mine is None:
            if len(self._mine) >= _PATHS_MEMO:
                self._mine.clear()
            self._mine[(id(p.routes), id(p.nbytes), p.cap, id(p.weights))] = (key, path)
        p.stamp += 1
        self._start_unit([Member(p, range(len(p.routes)), 0, path.last, p.stamp)], links,
                         path)

    def _evolve(self, routes: tuple[tuple[int, ...], ...], nbytes: Sequence[float],
                caps: tuple[float, ...],
                weights: tuple[tuple[float, ...] | None, ...] | None) -> Trajectory:
        def rates_of(active: tuple[int, ...]) -> list[float]:
            return self._rates_for(tuple(routes[i] for i in active),
                                   tuple(caps[i] for i in active),
                                   None if weights is None else tuple(
                                       weights[i] for i in active))

        return trajectory(nbytes, rates_of)

    def _start_unit(self, members: list[Member], links: frozenset[int],
                    path: Trajectory) -> None:
        unit = Unit(members, links, self.env.now, path, len(members))
        for member in members:
            member.unit = unit
            self._flows[member.id] = member
            heapq.heappush(self._heap, (unit.start + member.last, member.id, member.stamp))
        for link in links:
            self._alone[link] = unit

    def _drop_unit(self, unit: Unit) -> None:
        for member in unit.members:
            member.unit = None  # no member <-> unit cycle left for the garbage collector
            if not member.ended:
                del self._flows[member.id]
        for link in unit.links:
            del self._alone[link]

    def _member_ended(self, member: Member) -> None:
        """``member``'s wake came (its heap entry is popped): the unit keeps its links
        until its last member ends."""
        del self._flows[member.id]
        member.ended = True
        unit = member.unit
        assert unit is not None
        unit.left -= 1
        if unit.left == 0:
            for link in unit.links:
                del self._alone[link]

    def _running(self, unit: Unit) -> list[tuple[Member, list[tuple[int, float, float]]]]:
        """Drop ``unit`` now: report its ended flows (and batches) ended; per member still
        running, its flows [(number in the batch, bytes left, rate)]."""
        now = self.env.now
        self._drop_unit(unit)
        done, running = unit.path.state_at(now - unit.start)
        owner = [(m, k) for m in unit.members for k in m.ks]
        ends, start = unit.path.ends, unit.start
        for i in done:
            m, k = owner[i]
            if not m.ended:
                batch = m.pending.batch
                batch.finish[m.pending.index[k]] = start + ends[i]
                batch.pending -= 1
        out: dict[int, tuple[Member, list[tuple[int, float, float]]]] = {}
        for i, left, rate in running:
            m, k = owner[i]
            if m.ended:  # its wake came (its end a rounding hair past ``now - start``)
                continue
            out.setdefault(id(m), (m, []))[1].append((k, left, rate))
        for m in unit.members:
            batch = m.pending.batch
            if not m.ended and id(m) not in out and batch.pending == 0:
                batch.done.succeed(batch.finish)  # ended by now, before its wake
        return list(out.values())

    def _expand(self, unit: Unit) -> list[Flow]:
        """A flow joins ``unit``'s links: its flows still running become active flows
        again, with the bytes they have left now; the ended ones are reported ended."""
        now = self.env.now
        flows = []
        for m, running in self._running(unit):
            p = m.pending
            stamp = p.stamp + 1  # past every entry of its member
            for k, left, rate in running:
                flow = Flow(p.first + k, p.routes[k], left, p.batch, p.index[k], p.cap,
                            None if p.weights is None else p.weights[k], rate=rate,
                            updated=now, finish=now + max(left, 0.0) / rate, stamp=stamp)
                heapq.heappush(self._heap, (flow.finish, flow.id, flow.stamp))
                flows.append(flow)
        self._add(flows)
        return flows

    def _joinable(self, units: Iterable[Unit]) -> bool:
        """Whether a new batch may join ``units`` into one (``JOIN_MAX_FLOWS``)."""
        return sum(len(m.ks) for u in units for m in u.members if not m.ended) \
            <= JOIN_MAX_FLOWS

    def _join(self, p: Pending, links: frozenset[int], units: list[Unit]) -> None:
        """``p`` starts on links only ``units`` use: one new unit of their running flows
        and ``p``'s, evolving from the bytes each has left now."""
        parts: list[tuple[Pending, list[int], list[float]]] = []
        for unit in units:
            links |= unit.links
            for m, running in self._running(unit):
                parts.append((m.pending, [k for k, _, _ in running],
                              [left for _, left, _ in running]))
        parts.append((p, list(range(len(p.routes))), list(p.nbytes)))
        routes = tuple(q.routes[k] for q, ks, _ in parts for k in ks)
        nbytes = [b for _, _, left in parts for b in left]
        caps = tuple(q.cap for q, ks, _ in parts for _ in ks)
        weights = None if all(q.weights is None for q, _, _ in parts) else tuple(
            None if q.weights is None else q.weights[k] for q, ks, _ in parts for k in ks)
        path = self._evolve(routes, nbytes, caps, weights)
        members, lo = [], 0
        for q, ks, _ in parts:
            q.stamp += 1
            members.append(Member(q, ks, lo, max(path.ends[lo:lo + len(ks)]), q.stamp))
            lo += len(ks)
        self._start_unit(members, links, path)

    def _end_member(self, member: Member, now: float) -> None:
        """``member``'s last flow ends ``now``: its batch ends (the flows due last at
        ``now``, the others at their own end in the unit's evolution)."""
        unit, p = member.unit, member.pending
        assert unit is not None
        member.unit = None  # ended: no member <-> unit cycle left for the garbage collector
        batch = p.batch
        batch.pending -= len(member.ks)
        assert batch.pending == 0, batch.pending  # a member holds its batch's running flows
        if len(unit.members) == 1 and len(p.index) == len(batch.finish) == len(member.ks):
            batch.done.succeed(Ends(unit.start, unit.path, now))  # every flow moved bytes
            return
        ends, start, last, lo = unit.path.ends, unit.start, member.last, member.lo
        for j, k in enumerate(member.ks):
            end = ends[lo + j]
            batch.finish[p.index[k]] = end + start if end < last else now
        batch.done.succeed(batch.finish)

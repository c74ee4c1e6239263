"""Compute slowed by the collectives running beside it on the same GPU, and the clock the
executor schedules on.

While a rank's collectives run, its compute progresses at a rate below 1 (a fixed
1 / (1 + interference), or the interference model's rate under the SM and HBM shares the
collectives hold). The rate is piecewise constant: it changes only when a collective on
that rank starts or ends. Each running compute task is therefore a countdown of work
seconds at a rate; a change settles the work done since the last change and re-times the
countdown with one timeout (stale timeouts are ignored by their stamp), instead of waking
the task's process on every change.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from heapq import heappush

import simpy
from simpy.events import NORMAL, URGENT


class Clock(simpy.Environment):
    """A SimPy environment that can also schedule an event at an absolute time.

    ``timeout(t - now)`` lands on ``now + (t - now)``, which float rounding can put one ulp
    away from ``t``; a time computed ahead (a stream's ready chain) must land exactly.
    """

    def at(self, when: float, event: simpy.Event | None = None) -> simpy.Event:
        """Trigger ``event`` (a new one by default) successfully at time ``when`` >= now."""
        assert when >= self._now, (when, self._now)
        event = event if event is not None else simpy.Event(self)
        event._ok = True
        event._value = None
        heappush(self._queue, (when, NORMAL, next(self._eid), event))  # as schedule() does
        return event

    def start_now(self, callback: Callable[[simpy.Event], None]) -> None:
        """Call ``callback`` at this instant before the events already due, as SimPy starts
        a new process (an urgent event)."""
        event = simpy.Event(self)
        event._ok = True
        event._value = None
        event.callbacks.append(callback)  # type: ignore[union-attr]
        self.schedule(event, URGENT)


@dataclass(eq=False, slots=True)
class _Run:
    """One compute task counting down ``remaining`` work seconds at ``rate``."""

    rank: int
    work: float
    flops: float
    remaining: float
    rate: float
    since: float
    done: simpy.Event
    stamp: int = 0


@dataclass(eq=False)
class ComputeSharing:
    """Running compute tasks per rank and the collectives' load on each rank.

    ``rate_of(work, flops, load)`` gives a task's progress rate (work seconds per second)
    under a rank's load ([running collectives, SM share, HBM share]; None: none yet).
    """

    env: simpy.Environment
    rate_of: Callable[[float, float, list[float] | None], float]
    load: dict[int, list[float]] = field(default_factory=dict)
    running: dict[int, list[_Run]] = field(default_factory=dict)
    # Called with the ranks whose load changed, in order (the executor re-times the chains
    # it ran ahead on them: simtrain.engine.ahead); per rank, right after its change.
    on_change: Callable[[tuple[int, ...]], None] | None = None
    # Ranks nobody simulates (symmetric fidelity's mirrors): they run no compute, so a
    # collective's load on them is not kept (a 64-rank all-to-all may hold one real rank).
    virtual: AbstractSet[int] = frozenset()
    _members: dict[tuple[int, ...], tuple[int, ...]] = field(default_factory=dict)

    def run(self, rank: int, work: float, flops: float) -> simpy.Event:
        """Start ``work`` seconds of compute on ``rank``; the event fires when it is done."""
        env = self.env
        run = _Run(rank, work, flops, work, self.rate_of(work, flops, self.load.get(rank)),
                   env.now, env.event())
        self.running.setdefault(rank, []).append(run)
        self._wake(run)
        return run.done

    def change(self, ranks: tuple[int, ...], delta: int, share: tuple[float, float]) -> None:
        """A collective with (SM, HBM) ``share`` starts (+1) or ends (-1) on ``ranks``:
        settle each running compute there and re-time it at its new rate."""
        now = self.env.now
        members = self._members.get(ranks)
        if members is None:
            members = self._members[ranks] = tuple(r for r in ranks if r not in self.virtual)
        loads, running, on_change = self.load, self.running, self.on_change
        sm, hbm = delta * share[0], delta * share[1]
        for rank in members:
            load = loads.get(rank)
            if load is None:
                load = loads[rank] = [0.0, 0.0, 0.0]
            load[0] += delta
            load[1] += sm
            load[2] += hbm
            if running:
                for run in running.get(rank, ()):
                    rate = self.rate_of(run.work, run.flops, load)
                    if rate == run.rate:
                        continue
                    run.remaining -= (now - run.since) * run.rate
                    run.since = now
                    run.rate = rate
                    self._wake(run)
                if on_change is not None:
                    on_change((rank,))
        # With no countdown running, a rank's re-timing reads its own load only and
        # schedules nothing before the next rank's: one call for all, in the same order.
        if not running and on_change is not None:
            on_change(members)

    def _wake(self, run: _Run) -> None:
        run.stamp += 1
        stamp = run.stamp
        if run.remaining <= run.work * 1e-12:
            self._end(run)  # what is left is below the clock's resolution: done
            return
        timeout = self.env.timeout(run.remaining / run.rate)
        timeout.callbacks.append(lambda _e: self._end(run) if run.stamp == stamp else None)

    def _end(self, run: _Run) -> None:
        run.stamp += 1
        self.running[run.rank].remove(run)
        run.done.succeed()

"""A rank's stream walking its tasks in program order, driven by the events it waits for.

A stream runs its ready chain of compute tasks ahead (simtrain.engine.ahead), waits for
the dependencies of the task that stops the chain, waits for the host to issue a
collective's kernels, arrives at the collective (the last member to arrive starts it:
simtrain.engine.collective) and waits for its end. ``Stream`` does this as a callback on
each event it waits for: no SimPy process, no generator to resume per wait. It appends its
callback where the process it replaces appended its resume, to the same events, so the
order of everything at one instant is that of the process.

A rank that hangs runs ``hung_stream``, a SimPy process running each task as its own
countdown, so it can stop issuing work at its hang time between any two tasks.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from simtrain.engine.ahead import Tentative, extend, flush, run_fixed
from simtrain.engine.collective import Collective

if TYPE_CHECKING:
    from simtrain.engine.sim import Executor

# Where a stream resumes: the top of its loop, after the wait for a fixed chain's end,
# after a tentative chain's wake-up, after the task's dependencies, after the host issued
# a collective, after the collective ended, after the dependency that stopped its chain;
# and (never waited in) where it runs a chain from the task it is at.
_TOP, _REACHED, _CHAIN, _DEPS, _HOST, _COMM, _SKIPPED, _AHEAD = range(8)
_NONE: tuple[int, ...] = ()


class Stream:
    """One (rank, stream) of a rank that does not hang; call ``begin`` at t = 0."""

    __slots__ = ("ex", "rank", "tasks", "places", "n", "i", "cursor", "slowdown", "chain",
                 "state", "since", "until", "finish", "waiters", "graph_columns", "first")

    def __init__(self, ex: Executor, rank: int, tasks: Sequence[int], places: Sequence[int],
                 cursor: list[int]) -> None:
        self.ex, self.rank, self.tasks, self.places = ex, rank, tasks, places
        self.n, self.i, self.cursor = len(tasks), 0, cursor
        self.slowdown = ex.slowdowns.get(rank, 1.0)
        # Final chains without interference; tentative ones (re-timed when a collective
        # starts or ends on the rank) with it. A stream of collectives only (a process
        # group's) runs no chain: it has nothing to re-time.
        computes = ex.interferes and len(tasks) > 0 and bool(
            np.any(np.frombuffer(ex.graph.comm, dtype=np.int32)[np.asarray(tasks)] < 0))
        self.chain = Tentative(rank, tasks, places, self.slowdown) if computes else None
        if self.chain is not None:
            ex._chains.setdefault(rank, []).append(self.chain)
            self.chain.slot, ex.chain_count = ex.chain_count, ex.chain_count + 1
        self.state = _TOP
        self.since = 0.0
        # What ``step`` reads per task (``Executor._pending`` / ``_waiter``, inline).
        self.finish, self.waiters = ex.finish, ex._waiters
        g = ex.graph
        self.graph_columns = (g.comm, g.group, ex.sizes, g.dep_start, g.dep_ids)
        self.first = ex.issue.first if ex._issue_any else None  # host issue times
        self.until = 0.0  # when a fixed chain run ahead ends

    @property
    def reach(self) -> float:
        """When the stream reaches the task after the chain it ran ahead."""
        return self.chain.until if self.chain is not None else self.until

    def _skip(self) -> bool:
        """The chain ends in the future at a compute task that needs a task not yet ended
        (a collective, typically): wait for that task instead of the chain's end, which the
        stream would only wake at to find the task still pending. Whether it waits."""
        i = self.chain.i if self.chain is not None else self.i
        if i >= self.n:
            return False
        tid = self.tasks[i]
        comm_of, _, _, dep_start, dep_ids = self.graph_columns
        if comm_of[tid] >= 0:
            return False  # a collective: the stream must arrive at the chain's end
        finish = self.finish
        for k in range(dep_start[tid], dep_start[tid + 1]):
            d = dep_ids[k]
            if finish[d] == math.inf:
                self.cursor[0] = tid
                self.ex._skipping.add(self)
                self._wait(self._waiter(d), _SKIPPED)
                return True
        return False

    def settle(self) -> None:
        """The step stalled while this stream waited past its chain: end the chain as its
        wake-up would have (its spans recorded)."""
        if self.chain is not None:
            flush(self.ex, self.chain)

    def begin(self, _event: Any = None) -> None:
        delay = self.ex.delays.get(self.rank, 0.0)
        if delay > 0:  # a straggler starts its step late
            self._wait(self.ex.env.timeout(delay), _TOP)
        else:
            self.step()

    def _wait_deps(self, tid: int) -> bool:
        """Wait (state _DEPS) for the dependencies of ``tid`` not ended by now, if any:
        ``Executor._pending`` inline (this runs once per task a stream reaches)."""
        ex = self.ex
        now, finish = ex.env._now, self.finish
        _, group, sizes, dep_start, dep_ids = self.graph_columns
        if sizes[group[tid]] == 1:
            lo, hi = dep_start[tid], dep_start[tid + 1]
            deps: Sequence[int] = dep_ids[lo:hi] if hi - lo != 1 else (dep_ids[lo],)
        else:
            per = ex._group_deps.get(tid)
            deps = per.get(self.rank, _NONE) if per is not None else ex._dep_ids(tid, self.rank)
        if len(deps) == 1:  # the common case: no list, no AllOf to build
            d = deps[0]
            if finish[d] <= now:
                return False
            self.state = _DEPS
            self._waiter(d).callbacks.append(self.step)  # type: ignore[union-attr]
            return True
        pending = [d for d in deps if not finish[d] <= now]
        if not pending:
            return False
        self.state = _DEPS
        if len(pending) == 1:
            self._waiter(pending[0]).callbacks.append(self.step)  # type: ignore[union-attr]
        else:
            ex.env.all_of([ex._waiter(d) for d in pending]).callbacks.append(  # type: ignore[union-attr]
                self.step)
        return True

    def _waiter(self, tid: int) -> simpy.Event:
        """``Executor._waiter`` inline: an event that fires when ``tid`` ends (this runs at
        every collective's arrival and at every wait for a task run ahead)."""
        when = self.finish[tid]
        if when == math.inf:  # not ended, nor run ahead: its end's event, made on demand
            waiter = self.waiters.get(tid)
            if waiter is None:
                waiter = self.waiters[tid] = simpy.Event(self.ex.env)
            return waiter
        ex = self.ex
        if when > ex.env._now:  # a chain run ahead: its end may move (Executor._at_end)
            return ex._at_end(tid, when, simpy.Event(ex.env))
        return ex.env.at(ex.env._now)

    def _wait(self, event: simpy.Event, state: int) -> None:
        self.state = state
        event.callbacks.append(self.step)  # type: ignore[union-attr]

    def step(self, _event: Any = None) -> None:
        """Walk on from where the stream waited until it must wait again (or is done)."""
        ex = self.ex
        env = ex.env
        tasks, n = self.tasks, self.n
        comm_of = self.graph_columns[0]
        chain = self.chain
        state = self.state
        # Where this call's last chain stopped: a compute task there waits for a dependency
        # (the chain checked them now). At any other compute task the stream reaches, the
        # chain runs it without a wait for its dependencies first (it checks them itself).
        stop = -1
        while True:
            if state == _TOP:
                if self.i >= n:
                    self.cursor[0] = -1
                    return
                # a collective: no chain to run
                state = _REACHED if comm_of[tasks[self.i]] >= 0 else _AHEAD
            if state == _AHEAD:
                if chain is None:
                    self.i, until = run_fixed(ex, self.rank, tasks, self.places, self.i,
                                              self.slowdown)
                    stop = self.i
                    if until > env._now:
                        self.until = until
                        if not self._skip():
                            self._wait(env.at(until), _REACHED)
                        return
                    state = _REACHED
                else:
                    chain.i = self.i
                    extend(ex, chain, env._now)
                    stop = chain.i
                    if chain.until > env._now and self._skip():
                        return
                    state = _CHAIN
            if state == _SKIPPED:  # the task after the chain can start: has the chain ended?
                ex._skipping.discard(self)
                if chain is not None:
                    state = _CHAIN
                elif self.until > env._now:
                    self._wait(env.at(self.until), _REACHED)
                    return
                else:
                    state = _REACHED
            if state == _CHAIN:
                assert chain is not None
                if chain.until > env._now:  # the wake-up moves when the chain is re-timed
                    chain.wake = env.at(chain.until)
                    self._wait(chain.wake, _CHAIN)
                    return
                flush(ex, chain)
                self.i = chain.i
                state = _REACHED
            if state == _REACHED:
                if self.i == n:
                    self.cursor[0] = -1
                    return
                tid = tasks[self.i]
                self.cursor[0] = tid
                if comm_of[tid] < 0 and self.i != stop:
                    state = _AHEAD  # a compute task: the chain runs it if it is ready
                    continue
                state = _DEPS
                if self._wait_deps(tid):
                    return
            if state == _DEPS:
                tid = tasks[self.i]
                if comm_of[tid] < 0:
                    state = _AHEAD  # its dependencies have ended: the chain runs it
                    continue
                first = self.first[self.places[self.i]] if self.first is not None else math.nan
                if first > env._now:  # (NaN: no issue time)
                    self.since = env._now  # the GPU waits for the host: a "host" span
                    self._wait(env.timeout(first - env._now), _HOST)
                    return
                state = _HOST
                self.since = -1.0
            if state == _HOST:
                self._arrive(tasks[self.i])
                return
            if state == _COMM:
                self.i += 1
                state = _TOP

    def _arrive(self, tid: int) -> None:
        """Arrive at collective ``tid`` (its dependencies and the host done): close a host
        span, count the arrival, start the collective when every member is there, and wait
        for its end."""
        ex = self.ex
        now = ex.env._now
        if self.since >= 0:
            ex.timeline.record_host(self.rank, self.since, now, tid)
        arrived = ex.arrivals.get(tid)
        if arrived is None:
            arrived = ex.arrivals[tid] = {}
        arrived[self.rank] = now
        if len(arrived) == ex.need[self.graph_columns[1][tid]]:
            Collective(ex, tid, arrived)
        self._wait(self._waiter(tid), _COMM)


class CommStream(Stream):
    """A stream of collectives only (a process group's): it reaches each, waits for its
    dependencies and the host, arrives and waits for the collective's end; ``Stream``'s
    walk without its chain states."""

    __slots__ = ()

    def step(self, _event: Any = None) -> None:
        ex = self.ex
        env = ex.env
        state = self.state
        if state == _COMM or state == _TOP:
            if state == _COMM:
                self.i += 1
            if self.i >= self.n:
                self.cursor[0] = -1
                return
            tid = self.tasks[self.i]
            self.cursor[0] = tid
            if self._wait_deps(tid):
                return
        else:
            tid = self.tasks[self.i]
        if state != _HOST:
            first = self.first[self.places[self.i]] if self.first is not None else math.nan
            if first > env._now:  # (NaN: no issue time)
                self.since = env._now  # the GPU waits for the host: a "host" span
                self._wait(env.timeout(first - env._now), _HOST)
                return
            self.since = -1.0
        self._arrive(tid)


def collectives_only(ex: Executor, tasks: Sequence[int]) -> bool:
    """Whether every one of ``tasks`` is a collective (a process group's stream)."""
    return len(tasks) > 0 and not bool(
        np.any(np.frombuffer(ex.graph.comm, dtype=np.int32)[np.asarray(tasks)] < 0))


def hung_stream(ex: Executor, rank: int, stream: str, tasks: Sequence[int],
                places: Sequence[int]) -> Generator[Any, Any, None]:
    """The walk of a stream of a rank that hangs at ``ex.hangs[rank]``: each task its own
    countdown (no chain run ahead), stopping before the first task it reaches after then."""
    env = ex.env
    g = ex.graph
    comm_of, duration, flops = g.comm, g.duration, g.flops
    cursor = ex._cursor[(rank, stream)]
    hang_at = ex.hangs[rank]
    slowdown = ex.slowdowns.get(rank, 1.0)
    if ex.delays.get(rank, 0.0) > 0:
        yield env.timeout(ex.delays[rank])  # a straggler starts its step late
    for i, tid in enumerate(tasks):
        cursor[0] = tid
        pending = ex._pending(tid, rank)
        if len(pending) == 1:
            yield ex._waiter(pending[0])
        elif pending:
            yield env.all_of([ex._waiter(d) for d in pending])
        if env._now >= hang_at:
            ex.stopped[(rank, stream)] = env._now
            return  # a hung process issues nothing more, as with a dead NCCL rank
        issued = ex.issue.at(places[i]) if ex._issue_any else None
        if issued is not None and issued[0] > env._now:
            yield from ex._wait_host(rank, tid, issued[0])
        if comm_of[tid] < 0:
            start = env._now
            work = duration[tid]
            if work > 0:
                work = work * slowdown
                if ex.interferes:
                    yield ex.sharing.run(rank, work, flops[tid])
                else:
                    yield env.timeout(work)
            ex.timeline.record(rank, start, env._now, tid)
            if issued is not None:
                # The last kernel can end no earlier than its issue plus its own share.
                tail = issued[1] + duration[tid] * slowdown / ex._kernels(tid)
                if tail > env._now:
                    yield from ex._wait_host(rank, tid, tail)
            ex._finished(tid, env._now)
        else:
            arrived = ex.arrivals.setdefault(tid, {})
            arrived[rank] = env._now
            if len(arrived) == ex._members(tid):
                Collective(ex, tid, arrived)
            yield ex._waiter(tid)
    cursor[0] = -1

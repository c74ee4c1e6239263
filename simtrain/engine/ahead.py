"""A stream's ready chain of compute tasks, run ahead of the clock without a process switch.

Once a compute task's dependencies have known ends, when it starts and ends is arithmetic:
``start = max(reach, deps, host issue)``, ``end = start + work / rate``. A stream walks such
a chain in one call and sleeps until the chain's end, instead of one SimPy process switch
(and two or three events) per task.

Without interference (``run_fixed``) the rate is fixed, so the chain's times are final.
Under interference the rate depends on the collectives running on the rank, which start and
end later, so the chain is *tentative* (``Tentative``): its ends are computed at the load
of now, published (dependants and waiters see them), and re-timed when a collective starts
or ends on the rank before the chain is done (``retime``): the task running at that instant
is settled (work done at the old rate) and continues at the new one, the tasks after it
start again from its new end. The arithmetic is that of ``ComputeSharing`` step for step,
so the times equal those of running each task as its own countdown. Events scheduled at a
tentative end (a waiter, the stream's own wake-up) are moved when the end moves: their
callbacks go to a new event at the new time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import simpy

from simtrain.engine.timeline import HOST_SPAN, TASK_SPAN

if TYPE_CHECKING:
    from simtrain.engine.sim import Executor


def run_fixed(ex: Executor, rank: int, tasks: Sequence[int], places: Sequence[int], i: int,
              slowdown: float) -> tuple[int, float]:
    """Run ``tasks[i:]`` ahead while each is compute whose dependencies have a known end, at
    a fixed rate: record their spans and ends with the same float steps SimPy would take
    (``now + delay``). Returns the first task not run and the time the stream reaches it."""
    now = ex.env._now
    at = ex.env.at
    finish, waiters, comm_of, duration, _, dep_start, dep_ids, first, last, issue_any = \
        ex.columns
    add_rank, add_start, add_end, add_ref = ex.rows
    kernels, meta = ex._meta_kernels, ex.graph.meta
    n = len(tasks)
    while i < n:
        tid = tasks[i]
        if comm_of[tid] >= 0:
            break
        ready = now
        for k in range(dep_start[tid], dep_start[tid + 1]):
            end = finish[dep_ids[k]]  # a compute task has one rank: its deps are its own
            if end > ready:
                ready = end
        if ready == math.inf:
            break
        now = ready
        f = first[places[i]] if issue_any else 0.0
        issued = issue_any and f == f
        if issued and f > now:
            began, now = now, now + (f - now)
            add_rank(rank), add_start(began), add_end(now), add_ref(tid * 4 + HOST_SPAN)
        start = now
        work = duration[tid]
        if work > 0:
            now = now + work * slowdown
        add_rank(rank), add_start(start), add_end(now), add_ref(tid * 4 + TASK_SPAN)
        if issued:
            tail = last[places[i]] + work * slowdown / kernels[meta[tid]]
            if tail > now:
                began, now = now, now + (tail - now)
                add_rank(rank), add_start(began), add_end(now), add_ref(tid * 4 + HOST_SPAN)
        finish[tid] = now  # as _finished, inline: this loop runs once per task
        if waiters:
            waiter = waiters.pop(tid, None)
            if waiter is not None:
                at(now, waiter)
        i += 1
    return i, now


# One tentative task of a chain, a list (cheaper to make than an object: one per task):
# reached at READY, computing [START, END), passed at REACH (after the wait for its last
# kernel's issue); a countdown of REMAINING work seconds at RATE since SINCE; TAIL: when its
# last kernel can end by the host's issue (-inf: no bound).
POS, TID, READY, START, END, REACH, WORK, FLOPS, RATE, SINCE, REMAINING, TAIL = range(12)
Entry = list[Any]  # [pos (index in the stream's task list), tid, ready, start, end, ...]


@dataclass(eq=False, slots=True)
class Tentative:
    """The chain a stream has run ahead under interference, until it has passed it."""

    rank: int
    tasks: Sequence[int]
    places: Sequence[int]  # each task's member index (issue times)
    slowdown: float
    i: int = 0  # first task not in the chain
    base: float = 0.0  # when the stream reached the chain's first task
    until: float = 0.0  # when it reaches tasks[i]
    entries: list[Entry] = field(default_factory=list)
    own: set[int] = field(default_factory=set)
    wake: simpy.Event | None = None
    slot: int = 0  # its index in Executor.chain_end (the end of its last entry)


def extend(ex: Executor, st: Tentative, now: float) -> None:
    """Run ``st.tasks[st.i:]`` ahead from ``now`` at the rank's current load while each is
    compute whose dependencies have ended or are earlier tasks of the chain."""
    clock = ex.env._now
    finish, waiters, comm_of, duration, flops, dep_start, dep_ids, first, last, issue_any = \
        ex.columns
    load = ex.sharing.load.get(st.rank)
    # The rate is 1 where no collective runs on the rank (Executor._rate's first case).
    rate_of = ex.sharing.rate_of if load is not None and load[0] > 0 else None
    tasks, places, slowdown, own, entries = st.tasks, st.places, st.slowdown, st.own, st.entries
    moves = ex._moves
    kernels, meta = ex._meta_kernels, ex.graph.meta
    if not entries:
        st.base = now
    i, n = st.i, len(tasks)
    while i < n:
        tid = tasks[i]
        if comm_of[tid] >= 0:
            break
        ready = now
        for k in range(dep_start[tid], dep_start[tid + 1]):
            d = dep_ids[k]
            end = finish[d]
            if end > clock and d not in own:
                ready = math.inf  # not ended, or tentative on another stream: wait for it
                break
            if end > ready:
                ready = end
        if ready == math.inf:
            break
        now = ready
        tail = -math.inf
        if issue_any:
            f = first[places[i]]
            if f == f:  # (NaN: no issue time)
                if f > now:
                    now = now + (f - now)
                tail = last[places[i]] + duration[tid] * slowdown / kernels[meta[tid]]
        start = now
        work = duration[tid]
        rate, f = 1.0, flops[tid]
        if work > 0:
            work = work * slowdown
            if rate_of is not None:
                rate = rate_of(work, f, load)
            now = now + work / rate
        end = now
        if tail > now:
            now = now + (tail - now)
        entries.append([i, tid, ready, start, end, now, work, f, rate, start, work, tail])
        own.add(tid)
        finish[tid] = now  # _publish, inline
        if moves:
            moved = moves.get(tid)
            if moved:
                moves[tid] = [_move(ex.env, ev, now) for ev in moved]
        if waiters:
            waiter = waiters.pop(tid, None)
            if waiter is not None:
                ex._at_end(tid, now, waiter)
        i += 1
    st.i = i
    st.until = now
    ex.chain_end[st.slot] = entries[-1][END] if entries else -math.inf


def _publish(ex: Executor, tid: int, end: float) -> None:
    """Task ``tid`` ends at ``end``: move the events already scheduled at its old end."""
    ex.finish[tid] = end
    moved = ex._moves.get(tid)
    if moved:
        ex._moves[tid] = [_move(ex.env, ev, end) for ev in moved]


def _move(env: simpy.Environment, event: simpy.Event, when: float) -> simpy.Event:
    """A new event at ``when`` carrying ``event``'s callbacks (``event`` fires empty)."""
    new = env.at(max(when, env.now))  # type: ignore[attr-defined]
    new.callbacks, event.callbacks = event.callbacks, []
    return new


def retime(ex: Executor, st: Tentative) -> None:
    """The rank's load changed now: re-time the chain from the task computing now on."""
    now = ex.env.now
    entries = st.entries
    k = next((j for j, e in enumerate(entries) if e[END] > now), None)
    if k is None:
        return  # every task of the chain has computed: only host waits remain
    e = entries[k]
    if e[START] < now:  # running: settle at the old rate, continue at the new one
        rate = ex.sharing.rate_of(e[WORK], e[FLOPS], ex.sharing.load.get(st.rank))
        if rate != e[RATE]:
            e[REMAINING] -= (now - e[SINCE]) * e[RATE]
            e[SINCE], e[RATE] = now, rate
            e[END] = end = (now if e[REMAINING] <= e[WORK] * 1e-12
                            else now + e[REMAINING] / rate)
            e[REACH] = end + (e[TAIL] - end) if e[TAIL] > end else end
            _publish(ex, e[TID], e[REACH])
        drop, base, st.i = entries[k + 1:], e[REACH], e[POS] + 1
        del entries[k + 1:]
    else:  # not started: it and the rest start again at the new load
        drop, st.i = entries[k:], e[POS]
        base = entries[k - 1][REACH] if k else st.base
        del entries[k:]
    for d in drop:
        st.own.discard(d[TID])
        ex.finish[d[TID]] = math.inf
    old = st.until
    extend(ex, st, base)
    if not entries:
        st.base = base
    if st.until != old and st.wake is not None:
        st.wake = _move(ex.env, st.wake, st.until)


def flush(ex: Executor, st: Tentative) -> None:
    """The stream has passed its chain: record the spans, forget the tentative state."""
    add_rank, add_start, add_end, add_ref = ex.rows
    rank, moves = st.rank, ex._moves
    for _, tid, ready, start, end, reach, _, _, _, _, _, _ in st.entries:  # an Entry
        ref = tid * 4
        if start > ready:
            add_rank(rank), add_start(ready), add_end(start), add_ref(ref + HOST_SPAN)
        add_rank(rank), add_start(start), add_end(end), add_ref(ref + TASK_SPAN)
        if reach > end:
            add_rank(rank), add_start(end), add_end(reach), add_ref(ref + HOST_SPAN)
        if moves:
            moves.pop(tid, None)
    st.entries.clear()
    st.own.clear()
    st.wake = None
    ex.chain_end[st.slot] = -math.inf

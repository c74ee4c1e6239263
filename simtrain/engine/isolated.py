"""Isolated batches: flows started together on links no other flow uses, run as one unit.

A batch of flows (one phase of a collective) whose links no other active flow crosses
evolves on its own until some later flow joins one of those links: its max-min rates, the
order its flows end in and their end times depend on nothing but its routes, sizes, cap
and weights. The flow network (``network.py``) therefore computes that evolution once per
distinct batch (``trajectory``, relative to the batch's start, memoised) and schedules a
single wake-up at the batch's last end, instead of a heap entry, a rate and a component
walk per flow at every end. If a later flow joins one of its links, the batch is expanded
back into its flows at that instant (``state_at``) and shares bandwidth like any other.

The evolution is the network's own: rates from max-min over the flows still running, the
earliest end (with the network's float tolerance) ends every flow due by then, the others
are charged the bytes they moved and re-rated. Flows the ended ones were not connected to
get the same rate again (max-min is computed per connected set), so the only difference
from running the flows one by one is float rounding in the last place of their end times.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload

# A flow whose projected finish lies within this relative tolerance of "now" is complete;
# guards against float residue of remaining = bytes - rate * dt (the network's too).
REL_EPS = 1e-12
ABS_EPS = 1e-15


@dataclass(frozen=True, slots=True)
class Segment:
    """A stretch of the evolution during which the same flows run at the same rates."""

    start: float  # seconds after the batch's start
    active: tuple[int, ...]  # indices of the flows running
    rates: tuple[float, ...]  # bytes/s of each active flow
    remaining: tuple[float, ...]  # bytes each active flow had left at ``start``


@dataclass(frozen=True, slots=True)
class Trajectory:
    """The evolution of an isolated batch, in seconds after its start."""

    ends: tuple[float, ...]  # per flow: when it ends
    last: float  # when the last flow ends
    segments: tuple[Segment, ...]

    def state_at(self, tau: float) -> tuple[list[int], list[tuple[int, float, float]]]:
        """At ``tau`` seconds after the start: (flows ended by then, [(flow, bytes left,
        rate)] of the flows still running)."""
        seg = self.segments[0]
        for s in self.segments[1:]:
            if s.start > tau:
                break
            seg = s
        done = [i for i, end in enumerate(self.ends) if end <= tau]
        ended = set(done)
        running = [(i, left - rate * (tau - seg.start), rate)
                   for i, rate, left in zip(seg.active, seg.rates, seg.remaining, strict=True)
                   if i not in ended]
        return done, running


def trajectory(nbytes: Sequence[float],
               rates_of: Callable[[tuple[int, ...]], Sequence[float]]) -> Trajectory:
    """The evolution of flows of ``nbytes`` started together, alone on their links;
    ``rates_of(indices)`` is the max-min rates of those flows sharing among themselves.

    Raises ValueError when a flow's end is not finite (sizes or rates out of range), as the
    network does."""
    n = len(nbytes)
    remaining = list(nbytes)
    ends = [0.0] * n
    active = tuple(range(n))
    now = 0.0
    segments = []
    while active:
        rates = tuple(rates_of(active))
        finish = []
        for i, rate in zip(active, rates, strict=True):
            end = now + max(remaining[i], 0.0) / rate
            if not math.isfinite(end):
                raise ValueError(f"a flow of {remaining[i]:.6g} bytes at {rate:.6g} B/s would "
                                 f"end at t={end}: sizes or bandwidths out of range")
            finish.append(end)
        segments.append(Segment(now, active, rates, tuple(remaining[i] for i in active)))
        due = min(finish)
        horizon = max(due + abs(due) * REL_EPS + ABS_EPS, due)
        still = []
        for i, rate, end in zip(active, rates, finish, strict=True):
            if end <= horizon:
                ends[i] = due
            else:
                remaining[i] -= rate * (due - now)
                still.append(i)
        now = due
        active = tuple(still)
    return Trajectory(tuple(ends), now, tuple(segments))


class Ends(Sequence[float]):
    """Each flow's end time of an isolated batch that started at ``start``, computed when
    read (a batch may hold thousands of flows): the flows due last end at ``now``, the wake
    that ended the batch, the others at ``start`` + their end in the trajectory."""

    __slots__ = ("_start", "_path", "_now")

    def __init__(self, start: float, path: Trajectory, now: float) -> None:
        self._start, self._path, self._now = start, path, now

    def __len__(self) -> int:
        return len(self._path.ends)

    def _at(self, end: float) -> float:
        return end + self._start if end < self._path.last else self._now

    @overload
    def __getitem__(self, i: int) -> float: ...

    @overload
    def __getitem__(self, i: slice) -> list[float]: ...

    def __getitem__(self, i: int | slice) -> float | list[float]:
        if isinstance(i, slice):
            return [self._at(e) for e in self._path.ends[i]]
        return self._at(self._path.ends[i])

    def __iter__(self) -> Iterator[float]:
        return (self._at(e) for e in self._path.ends)

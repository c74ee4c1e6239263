"""Host issue times as the engine reads them: when a task's first and last kernel are issued.

A mapping (task id, rank) -> (first, last) host seconds (simtrain.workload.host builds it),
held as two float columns over the graph's *members*: every (task, simulated rank) pair in
walk order (``TaskGraph.members``), NaN where a member has no issue time. A stream knows the
member position of each of its tasks (``TaskGraph.stream_members``) and reads its times by
position. A dict of tuple keys cost 0.7 GB on an explicit 512-GPU step (6M members), the
columns 16 bytes per member.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from simtrain.engine.taskgraph import TaskGraph

Key = tuple[int, int]  # (task id, rank)


class IssueTimes(Mapping[Key, tuple[float, float]]):
    """(task id, rank) -> (host time the first kernel is issued, host time the last is).

    ``first[p]`` / ``last[p]`` are member p's times (NaN: none); ``tid`` / ``rank`` name
    the members; ``start[t]`` is task t's first member (its members are contiguous).
    """

    def __init__(self, first: np.ndarray, last: np.ndarray, graph: TaskGraph) -> None:
        # array('d'): 8 bytes a member, read one float at a time by the streams
        self.first, self.last = array("d", first.tobytes()), array("d", last.tobytes())
        self.graph = graph
        self.count = int(np.count_nonzero(~np.isnan(first)))
        self._members: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @classmethod
    def blank(cls, members: int, graph: TaskGraph) -> IssueTimes:
        """No issue time yet for any of ``members`` members (fill through ``columns``,
        then set ``count``): the columns are made at their size, with no copy."""
        out = cls.__new__(cls)
        out.first, out.last = array("d", [math.nan]) * members, array("d", [math.nan]) * members
        out.graph, out.count, out._members = graph, 0, None
        return out

    def columns(self) -> tuple[np.ndarray, np.ndarray]:
        """Writable numpy views of the first and last columns (they never grow)."""
        return (np.frombuffer(self.first, dtype=np.float64),
                np.frombuffer(self.last, dtype=np.float64))

    def _names(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(task, rank) of each member and each task's first member (built when asked)."""
        if self._members is None:
            tid, rank = self.graph.members()
            self._members = (tid, rank, np.searchsorted(tid, np.arange(len(self.graph) + 1)))
        return self._members

    @classmethod
    def of(cls, table: Mapping[Key, tuple[float, float]], graph: TaskGraph) -> IssueTimes:
        """From a plain mapping over ``graph``'s members (an IssueTimes passes through)."""
        if isinstance(table, IssueTimes):
            return table
        tid, _ = graph.members()
        first, last = np.full(len(tid), np.nan), np.full(len(tid), np.nan)
        out = cls(first, last, graph)
        for (t, r), (f, e) in table.items():
            p = out.position((t, r))
            if p < 0:
                raise KeyError(f"issue time for task {t} on rank {r}: not a simulated member")
            first[p], last[p] = f, e
        return cls(first, last, graph)

    def position(self, key: Key) -> int:
        """Member index of (task, rank), or -1."""
        t, r = key
        _, rank, start = self._names()
        if not 0 <= t < len(start) - 1:
            return -1
        lo = int(start[t])
        where = np.flatnonzero(rank[lo:int(start[t + 1])] == r)
        return lo + int(where[0]) if len(where) else -1

    def at(self, p: int) -> tuple[float, float] | None:
        """Member ``p``'s times, or None."""
        f = self.first[p]
        return None if f != f else (f, self.last[p])

    def __getitem__(self, key: Key) -> tuple[float, float]:
        p = self.position(key)
        found = self.at(p) if p >= 0 else None
        if found is None:
            raise KeyError(key)
        return found

    def __iter__(self) -> Iterator[Key]:
        tid, rank, _ = self._names()
        for p, f in enumerate(self.first):
            if f == f:
                yield (int(tid[p]), int(rank[p]))

    def __len__(self) -> int:
        return self.count

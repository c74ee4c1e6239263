"""Host issue times as the engine reads them: when a task's first and last kernel are issued.

A mapping (task id, rank) -> (first, last) host seconds (simtrain.workload.host builds it).
Held as two float columns indexed by task id for single-rank tasks (NaN: no issue time),
which is nearly every task, and a dict for the members of group tasks: a dict of millions
of tuple keys cost 0.7 GB on an explicit 512-GPU step, the columns 16 bytes per task.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Mapping

import numpy as np

Key = tuple[int, int]  # (task id, rank)


class IssueTimes(Mapping[Key, tuple[float, float]]):
    """(task id, rank) -> (host time the first kernel is issued, host time the last is).

    ``first[t]`` / ``last[t]`` hold single-rank task t's times (NaN when it has none), and
    ``rank_of[t]`` its rank; ``group`` holds the entries of tasks over several ranks.
    """

    def __init__(self, first: array, last: array, rank_of: array,
                 group: dict[Key, tuple[float, float]] | None = None) -> None:
        self.first, self.last, self.rank_of = first, last, rank_of
        self.group = group or {}
        self._count: int | None = None

    @classmethod
    def of(cls, table: Mapping[Key, tuple[float, float]], num_tasks: int) -> IssueTimes:
        """From a plain mapping (every entry kept in ``group``)."""
        if isinstance(table, IssueTimes):
            return table
        first = array("d", [math.nan]) * num_tasks
        last, rank_of = array("d", first), array("q", [-1]) * num_tasks
        group = {}
        for (tid, rank), (f, e) in table.items():
            if rank_of[tid] < 0:
                first[tid], last[tid], rank_of[tid] = f, e, rank
            else:
                group[(tid, rank)] = (f, e)
        return cls(first, last, rank_of, group)

    def __getitem__(self, key: Key) -> tuple[float, float]:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def get(self, key: Key, default: tuple[float, float] | None = None  # type: ignore[override]
            ) -> tuple[float, float] | None:
        tid, rank = key
        if 0 <= tid < len(self.first) and self.rank_of[tid] == rank:
            f = self.first[tid]
            if f == f:
                return (f, self.last[tid])
        return self.group.get(key, default)

    def __iter__(self) -> Iterator[Key]:
        for tid, f in enumerate(self.first):
            if f == f:
                yield (tid, self.rank_of[tid])
        yield from self.group

    def __len__(self) -> int:
        if self._count is None:
            values = np.frombuffer(self.first, dtype=np.float64) if len(self.first) else \
                np.zeros(0)
            self._count = int(np.count_nonzero(~np.isnan(values))) + len(self.group)
        return self._count

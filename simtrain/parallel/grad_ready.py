"""Which task produces each (rank, parameter)'s last-microbatch gradient, kept by batch.

A kernel emitted on every rank of a stage produces its parameters' gradients on each of
those ranks: (rank, param) -> first task + the rank's place among the stage's ranks. As a
dict of (rank, param) keys that was ranks x params entries per kernel (1,024 ranks x every
parameter of a stage at 16k GPUs, stage granularity: a fifth of the lowering), so a batch
is kept as one entry per parameter, and a reduction asks for a whole group's tasks at once
(``tasks``). Single entries (TP overlap, bucket prepasses) are kept as such; the latest
write of a (rank, param) wins, as in a dict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import product


class GradReady:
    """(rank, param) -> task id, written one entry at a time (``ready[(r, p)] = t``) or a
    batch at a time (``batch``), read with ``get`` or ``tasks``."""

    def __init__(self) -> None:
        self._stamp = 0  # write order: the latest write of a key wins
        self._single: dict[tuple[int, str], tuple[int, int]] = {}  # key -> (stamp, task)
        # param -> its batches in write order: (stamp, rank -> place, first task)
        self._batches: dict[str, list[tuple[int, Mapping[int, int], int]]] = {}
        self._single_params: set[str] = set()

    def __setitem__(self, key: tuple[int, str], task: int) -> None:
        self._stamp += 1
        self._single[key] = (self._stamp, task)
        self._single_params.add(key[1])

    def batch(self, place: Mapping[int, int], first: int, params: Iterable[str]) -> None:
        """Rank r of ``place`` produced every one of ``params`` in task ``first + place[r]``
        (``place``: rank -> its index among the batch's ranks; kept, not copied)."""
        self._stamp += 1
        entry = (self._stamp, place, first)
        for p in params:
            self._batches.setdefault(p, []).append(entry)

    def get(self, key: tuple[int, str], default: int | None = None) -> int | None:
        """The task of ``key``, or ``default`` when none was written."""
        rank, param = key
        single = self._single.get(key)
        for stamp, place, first in reversed(self._batches.get(param, ())):
            if single is not None and stamp < single[0]:
                break
            i = place.get(rank)
            if i is not None:
                return first + i
        return default if single is None else single[1]

    def tasks(self, ranks: Sequence[int], params: Sequence[str]) -> set[int | None]:
        """``{get((r, p)) for r in ranks for p in params}``: a parameter written by one batch
        only gives the ranks' tasks of that batch (once per batch, not per parameter)."""
        out: set[int | None] = set()
        done: set[tuple[int, int]] = set()  # (stamp, first) of batches already added
        for p in params:
            found = self._batches.get(p)
            if p in self._single_params or found is None or len(found) != 1:
                out.update(map(self.get, product(ranks, [p])))
                continue
            stamp, place, first = found[0]
            if (stamp, first) in done:
                continue
            done.add((stamp, first))
            for r in ranks:
                i = place.get(r)
                out.add(None if i is None else first + i)
        return out

"""Every simulated rank's streams as one flat array, and lookups into it (for lockstep.py).

``StreamLayout`` sorts the graph's member entries (``TaskGraph.members``: tasks by id,
each task's simulated ranks in group order) by (rank, stream name) and keeps program order
inside each stream: rank ``r``'s tasks are ``tid[start[r]:start[r] + length[r]]``, its
streams one after another in name order (``counts[r]`` their lengths). An entry's *place*
is its index in ``members`` (what host issue times are indexed by). The same order as
``TaskGraph.stream_members``, built with one packed-key sort instead of a stable argsort.
"""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from simtrain.engine.taskgraph import TaskGraph


class StreamLayout:
    """The rank-by-rank stream layout of one graph (see the module docstring)."""

    def __init__(self, graph: TaskGraph) -> None:
        n, ranks = len(graph), graph.num_ranks
        virtual = graph.virtual
        full = list(graph.groups)
        nv = [tuple(r for r in g if r not in virtual) for g in full] if virtual else full
        self.num_ranks, self.virtual = ranks, virtual
        self.full_groups, self.nv_groups = full, nv
        self.sizes = np.fromiter(map(len, nv), dtype=np.int64, count=len(nv))
        self.flat = np.fromiter(chain.from_iterable(nv), dtype=np.int64,
                                count=int(self.sizes.sum()))
        self.gstart = np.cumsum(self.sizes) - self.sizes
        self.gcode = column(graph, "group").astype(np.int64)
        count = self.sizes[self.gcode] if n else np.zeros(0, dtype=np.int64)
        self.count = count  # simulated ranks per task
        self.tstart = np.cumsum(count) - count  # place of each task's first member entry
        total = int(count.sum())
        names = list(graph.stream_names)
        width = max(len(names), 1)
        by_name = sorted(range(len(names)), key=names.__getitem__)
        self.stream_order = [names[c] for c in by_name]  # counts' columns
        rank_of_name = np.empty(len(names), dtype=np.int64)
        rank_of_name[by_name] = np.arange(len(names))
        idx = np.arange(total, dtype=np.int64)
        pos = np.repeat(self.gstart[self.gcode] - self.tstart, count)
        pos += idx
        key = self.flat[pos]
        key *= width
        if n:
            key += np.repeat(rank_of_name[column(graph, "stream")], count)
        self.counts = np.bincount(key, minlength=ranks * width).reshape(ranks, width)
        bits = max(total - 1, 1).bit_length()
        if (ranks * width).bit_length() + bits <= 62:  # (key, place) unique: a plain sort
            key <<= bits
            key |= idx
            key.sort()
            key &= (1 << bits) - 1
            place = key
        else:
            place = np.argsort(key, kind="stable")
        del key
        self.place = place  # entry -> place
        self.tid = np.repeat(np.arange(n, dtype=np.int32), count)[place]  # entry -> task
        pos[place] = idx
        self.entry_of = pos  # place -> entry
        del idx
        self.length = self.counts.sum(axis=1)
        self.start = np.cumsum(self.length) - self.length
        # (group code, rank) -> index among the group's simulated ranks, groups of >= 2
        multi = np.repeat(self.sizes >= 2, self.sizes)
        self.mkeys, self.midx = self._table(self.sizes, self.flat, multi)
        fsizes = np.fromiter(map(len, full), dtype=np.int64, count=len(full))
        fflat = np.fromiter(chain.from_iterable(full), dtype=np.int64, count=int(fsizes.sum()))
        self.full_sizes, self.full_flat = fsizes, fflat  # groups with their virtual ranks
        self.full_start = np.cumsum(fsizes) - fsizes
        self.fkeys, _ = self._table(fsizes, fflat, np.ones(len(fflat), dtype=bool))
        self.is_virtual = np.zeros(ranks, dtype=bool)
        self.is_virtual[[r for r in virtual if 0 <= r < ranks]] = True
        self.scratch = np.zeros(total, dtype=bool)  # per entry, cleared after each use

    def _table(self, sizes: np.ndarray, flat: np.ndarray,
               keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sorted keys ``group * num_ranks + rank`` and each one's index in its group."""
        code = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
        within = np.arange(len(flat), dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes,
                                                                  sizes)
        keys = (code * self.num_ranks + flat)[keep]
        order = np.argsort(keys, kind="stable")
        return keys[order], within[keep][order]

    def entry(self, tids: np.ndarray, ranks: np.ndarray) -> np.ndarray:
        """The entry of task ``tids[i]`` on rank ``ranks[i]``, -1 where that rank does not
        run it."""
        out = np.full(len(tids), -1, dtype=np.int64)
        gc = self.gcode[tids]
        size = self.sizes[gc]
        one = np.flatnonzero(size == 1)
        hit = one[self.flat[self.gstart[gc[one]]] == ranks[one]]
        out[hit] = self.entry_of[self.tstart[tids[hit]]]
        many = np.flatnonzero(size >= 2)
        if len(many):  # first try the task's first rank: the entry lies in the rank's own
            rank = ranks[many]
            guess = self.entry_of[self.tstart[tids[many]]]
            found = (guess >= self.start[rank]) & (guess < self.start[rank] + self.length[rank])
            out[many[found]] = guess[found]
            many = many[~found]
        if len(many) and len(self.mkeys):
            key = gc[many] * self.num_ranks + ranks[many]
            at = np.minimum(np.searchsorted(self.mkeys, key), len(self.mkeys) - 1)
            found = self.mkeys[at] == key
            hit = many[found]
            out[hit] = self.entry_of[self.tstart[tids[hit]] + self.midx[at[found]]]
        return out

    def in_full_group(self, codes: np.ndarray, ranks: np.ndarray) -> np.ndarray:
        """Whether ``ranks[i]`` is in group ``codes[i]`` (its full rank tuple, virtual
        ranks included)."""
        key = codes * self.num_ranks + ranks
        if not len(self.fkeys):
            return np.zeros(len(key), dtype=bool)
        at = np.minimum(np.searchsorted(self.fkeys, key), len(self.fkeys) - 1)
        return self.fkeys[at] == key


def column(graph: TaskGraph, name: str) -> np.ndarray:
    """A task column as a read-only numpy view of the graph's array (``TaskGraph.codes``
    without the copy: the graph must not grow while the view lives)."""
    values = getattr(graph, name)
    if not len(values):
        return graph.codes(name)
    view = np.frombuffer(values, dtype=values.typecode)
    return view


def expand(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The concatenated ranges ``starts[i] : starts[i] + counts[i]``."""
    total = int(counts.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    return np.arange(total, dtype=np.int64) + np.repeat(starts - (np.cumsum(counts) - counts),
                                                        counts)

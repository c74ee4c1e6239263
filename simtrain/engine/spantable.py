"""A timeline's spans as numpy columns, and the interval algebra the metrics need on them.

The step metrics ask, per rank, for the union of its compute spans, of each communication
kind, of everything, and how much two unions overlap. Asked of per-span objects that is a
sort of tuples and a Python loop per question; here the merging and the pairing of
intervals are array operations, and only the final sums run in Python, left to right over
the same terms as ``merge_intervals`` / ``overlap_length``, so the results are the same to
the last bit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from simtrain.engine.timeline import Timeline

Intervals = tuple[np.ndarray, np.ndarray]  # (starts, ends) of sorted, disjoint intervals


@dataclass(frozen=True)
class SpanTable:
    """Columns of a timeline's spans in timeline order; ``kinds[kind[i]]`` is span i's kind."""

    rank: np.ndarray
    kind: np.ndarray
    start: np.ndarray
    end: np.ndarray
    bytes: np.ndarray
    flops: np.ndarray
    kinds: tuple[str, ...]

    @classmethod
    def of(cls, timeline: Timeline) -> SpanTable:
        """Read the timeline's columns; per-task fields come from the task graph's columns
        (or one pass over the tasks its spans refer to). Rank is int32 and kind int16: an
        explicit 512-GPU step has 7M spans, and the metrics only group and mask them."""
        from simtrain.engine.timeline import COMM_SPAN, FREE_SPAN, HOST_SPAN

        rank, start, end, ref, extra = timeline._raw_columns()
        n = len(rank)
        task, form = ref >> 2, (ref & 3).astype(np.int8)
        del ref
        code: dict[str, int] = {}
        free = form == FREE_SPAN
        any_free = bool(free.any())
        if not n or bool(free.all()):  # no engine span
            kind, nbytes, flops = np.empty(n, dtype=np.int16), np.zeros(n), np.zeros(n)
        else:
            tasks = timeline.tasks
            assert tasks is not None, "engine spans need the graph's tasks"
            if any_free:
                task[free] = task[np.flatnonzero(~free)[0]]  # any engine task: set below
            graph = getattr(tasks, "graph", None)
            if graph is not None:  # a TaskGraph's columns: no Task objects
                used = np.zeros(len(graph), dtype=bool)
                used[task] = True
                kind_of = graph.codes("kind").astype(np.int64)
                seen, at = np.unique(kind_of[used], return_index=True)
                del used
                remap = np.zeros(len(graph.kinds), dtype=np.int16)
                for c in seen[np.argsort(at)].tolist():  # codes in order of first use
                    remap[c] = code.setdefault(graph.kinds[c], len(code))
                t_kind = remap[kind_of]
                del kind_of
                t_bytes, t_flops = graph.codes("nbytes"), graph.codes("flops")
            else:
                unique, task = np.unique(task, return_inverse=True)
                picked = [tasks[int(t)] for t in unique]
                t_kind = np.fromiter((code.setdefault(t.kind, len(code)) for t in picked),
                                     dtype=np.int16, count=len(picked))
                t_bytes = np.fromiter((t.bytes for t in picked), dtype=np.float64,
                                      count=len(picked))
                t_flops = np.fromiter((t.flops for t in picked), dtype=np.float64,
                                      count=len(picked))
            # Each column gathered once, then host spans (and comm spans' FLOPs) zeroed in
            # place: no full-size temporaries beyond the columns themselves.
            host = form == HOST_SPAN
            kind = t_kind[task]
            kind[host] = code.setdefault("host", len(code))
            nbytes = t_bytes[task]
            nbytes[host] = 0.0
            flops = t_flops[task]
            host |= form == COMM_SPAN
            flops[host] = 0.0
            del host, t_kind, t_bytes, t_flops
        del task, form
        for i in np.flatnonzero(free).tolist():
            span = extra[i]
            kind[i] = code.setdefault(span.kind, len(code))
            nbytes[i] = span.bytes
            flops[i] = span.flops
        return cls(rank, kind, start, end, nbytes, flops, tuple(code))

    def mask(self, kinds: Iterable[str]) -> np.ndarray:
        """Which spans are of one of ``kinds``."""
        codes = [i for i, k in enumerate(self.kinds) if k in set(kinds)]
        return np.isin(self.kind, codes)

    @cached_property
    def _by_rank(self) -> dict[int, np.ndarray]:
        if not len(self.rank):
            return {}
        order = np.argsort(self.rank, kind="stable").astype(np.int32)  # held per table
        ranks, first = np.unique(self.rank[order], return_index=True)
        bounds = [*first.tolist(), len(order)]
        return {int(r): order[bounds[k]:bounds[k + 1]] for k, r in enumerate(ranks.tolist())}

    def by_rank(self) -> dict[int, np.ndarray]:
        """Rank -> indices of its spans in timeline order, ranks ascending (computed once;
        the arrays are shared: do not change them)."""
        return self._by_rank

    def merged(self, rows: np.ndarray) -> Intervals:
        """Sorted, disjoint union of the spans ``rows`` (touching intervals merge)."""
        return merge(self.start[rows], self.end[rows])


def merge(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """``merge_intervals`` on arrays: sort by (start, end), then a new interval begins
    where a start exceeds every end before it."""
    if not len(starts):
        return np.zeros(0), np.zeros(0)
    order = np.lexsort((ends, starts))
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    begins = np.empty(len(s), dtype=bool)
    begins[0] = True
    begins[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(begins)
    last = np.r_[first[1:], len(s)] - 1
    return s[first], reach[last]


def length(intervals: Intervals) -> float:
    """Total length of disjoint intervals, summed left to right as ``union_length``."""
    return sum((intervals[1] - intervals[0]).tolist())


def overlap(a: Intervals, b: Intervals) -> float:
    """``overlap_length`` on arrays: the pieces where an interval of ``a`` meets one of
    ``b`` (each pair found by binary search), summed in time order."""
    (a_s, a_e), (b_s, b_e) = a, b
    if not len(a_s) or not len(b_s):
        return 0.0
    lo = np.searchsorted(b_e, a_s, side="right")  # first b ending after a starts
    hi = np.searchsorted(b_s, a_e, side="left")  # b's starting before a ends
    count = np.maximum(hi - lo, 0)
    if not count.any():
        return 0.0
    ai = np.repeat(np.arange(len(a_s)), count)
    offsets = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    bi = np.repeat(lo, count) + offsets
    piece = np.minimum(a_e[ai], b_e[bi]) - np.maximum(a_s[ai], b_s[bi])
    return sum(piece[piece > 0].tolist())

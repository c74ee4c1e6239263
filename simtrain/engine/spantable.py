"""A timeline's spans as numpy columns, and the interval algebra the metrics need on them.

The step metrics ask, per rank, for the union of its compute spans, of each communication
kind, of everything, and how much two unions overlap. Asked of per-span objects that is a
sort of tuples and a Python loop per question; here the merging and the pairing of
intervals are array operations, and only the final sums run in Python, left to right over
the same terms as ``timeline.merge_intervals`` / ``union_length`` / ``overlap_length``, so
the results are the same to the last bit (tests/engine/test_spantable_ranks.py).

The per-rank forms (``SpanTable.unions``, ``SpanTable.sums``, ``RankIntervals.lengths``,
``overlaps``) answer a question for every rank at once: ranks are segments of one array,
kept apart by pairing each time with its segment as a complex number (numpy orders complex
values by real part, then imaginary, so a running maximum or a binary search never crosses
a segment and the times it returns are the inputs' own floats). They work on blocks of
ranks of at most ``BLOCK_ROWS`` spans, which bounds their temporaries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from simtrain.engine.rankarrays import first_use, rank_order, search_by_rank

if TYPE_CHECKING:
    from simtrain.engine.timeline import Timeline

Intervals = tuple[np.ndarray, np.ndarray]  # (starts, ends) of sorted, disjoint intervals

# Spans per block of ranks the per-rank algebra handles at once: about 50 MB of temporaries
# (sort order, gathered times, complex keys), where all 7M spans of an explicit 512-GPU step
# at once would take 300 MB. A rank is never split; a rank with more spans is one block.
BLOCK_ROWS = 1 << 20


@dataclass(frozen=True)
class SpanTable:
    """Columns of a timeline's spans in timeline order; ``kinds[kind[i]]`` is span i's kind.

    ``rank``, ``start`` and ``end`` are read-only views of the timeline's own columns (it
    copies them before it changes); bytes and FLOPs are read per row from the task graph
    when asked (``column``, ``sums``): an explicit 512-GPU step has 7M spans, and two full
    float columns of them were 110 MB the metrics never needed at once.
    """

    rank: np.ndarray
    kind: np.ndarray
    start: np.ndarray
    end: np.ndarray
    kinds: tuple[str, ...]
    task: np.ndarray = field(repr=False)  # per row: its task's index in ``per_task``'s
    form: np.ndarray = field(repr=False)  # per row: TASK_SPAN, HOST_SPAN, COMM_SPAN, FREE_SPAN
    per_task: Callable[[str], np.ndarray] = field(repr=False)  # "bytes"/"flops" per task
    free: dict[int, Any] = field(repr=False)  # row -> its free-form Span

    @classmethod
    def of(cls, timeline: Timeline) -> SpanTable:
        """Read the timeline's columns; per-task fields come from the task graph's columns
        (or one pass over the tasks its spans refer to). Rank is int32 and kind int16: an
        explicit 512-GPU step has 7M spans, and the metrics only group and mask them."""
        from simtrain.engine.timeline import FREE_SPAN, HOST_SPAN

        rank, start, end, ref, extra = timeline._raw_columns()
        n = len(rank)
        task, form = ref >> 2, (ref & 3).astype(np.int8)
        del ref
        code: dict[str, int] = {}
        free = form == FREE_SPAN
        any_free = bool(free.any())
        per_task: Callable[[str], np.ndarray]
        if not n or bool(free.all()):  # no engine span
            kind = np.empty(n, dtype=np.int16)
            task[:] = 0
            per_task = _no_tasks
        else:
            tasks = timeline.tasks
            assert tasks is not None, "engine spans need the graph's tasks"
            if any_free:
                task[free] = task[np.flatnonzero(~free)[0]]  # any engine task: set below
            graph = getattr(tasks, "graph", None)
            if graph is not None:  # a TaskGraph's columns: no Task objects
                used = np.zeros(len(graph), dtype=bool)
                used[task] = True
                kind_of = graph.codes("kind")
                remap = np.zeros(len(graph.kinds), dtype=np.int16)
                for c in first_use(kind_of[used]):  # codes in order of first use
                    remap[c] = code.setdefault(graph.kinds[c], len(code))
                del used
                t_kind = remap[kind_of]
                del kind_of
                per_task = _graph_columns(graph)
            else:
                unique, inverse = np.unique(task, return_inverse=True)
                task = inverse.astype(np.int32)
                picked = [tasks[int(t)] for t in unique]
                t_kind = np.fromiter((code.setdefault(t.kind, len(code)) for t in picked),
                                     dtype=np.int16, count=len(picked))
                per_task = _task_columns(picked)
            kind = t_kind[task]
            kind[form == HOST_SPAN] = code.setdefault("host", len(code))
            del t_kind
        rows = np.flatnonzero(free).tolist()
        del free
        for i in rows:
            kind[i] = code.setdefault(extra[i].kind, len(code))
        return cls(rank, kind, start, end, tuple(code), task, form, per_task,
                   {i: extra[i] for i in rows})

    def column(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        """Each span's "bytes" or "flops" (of ``rows`` only, when given): its task's, zero
        for host spans, and zero FLOPs for communication spans."""
        return self._reader(name)(np.arange(len(self.rank)) if rows is None else rows)

    @cached_property
    def bytes(self) -> np.ndarray:
        """Every span's bytes (``column("bytes")``, kept once read)."""
        return self.column("bytes")

    @cached_property
    def flops(self) -> np.ndarray:
        """Every span's FLOPs (``column("flops")``, kept once read)."""
        return self.column("flops")

    def _reader(self, name: str) -> Callable[[np.ndarray], np.ndarray]:
        """A function of row indices giving their ``column(name)`` (the per-task values
        read once)."""
        from simtrain.engine.timeline import COMM_SPAN, FREE_SPAN, HOST_SPAN

        if name not in ("bytes", "flops"):
            raise ValueError(f"span column {name!r}: expected 'bytes' or 'flops'")
        values = self.per_task(name)

        def read(rows: np.ndarray) -> np.ndarray:
            form = self.form[rows]
            out = values[self.task[rows]]
            out[form == HOST_SPAN] = 0.0
            if name == "flops":
                out[form == COMM_SPAN] = 0.0
            if self.free:
                for i in np.flatnonzero(form == FREE_SPAN).tolist():
                    out[i] = getattr(self.free[int(rows[i])], name)
            return out
        return read

    def mask(self, kinds: Iterable[str]) -> np.ndarray:
        """Which spans are of one of ``kinds``."""
        codes = [i for i, k in enumerate(self.kinds) if k in set(kinds)]
        return np.isin(self.kind, codes)

    @cached_property
    def _rank_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ranks ascending, rows grouped by rank in timeline order, each rank's first row
        in that order plus the end)."""
        order = rank_order(self.rank)  # held per table
        counts = np.bincount(self.rank) if len(self.rank) else np.zeros(0, np.int64)
        ranks = np.flatnonzero(counts).astype(self.rank.dtype)
        return ranks, order, np.r_[0, np.cumsum(counts[ranks])]

    @cached_property
    def _by_rank(self) -> dict[int, np.ndarray]:
        ranks, order, bounds = self._rank_rows
        edge = bounds.tolist()
        return {int(r): order[edge[k]:edge[k + 1]] for k, r in enumerate(ranks.tolist())}

    def by_rank(self) -> dict[int, np.ndarray]:
        """Rank -> indices of its spans in timeline order, ranks ascending (computed once;
        the arrays are shared: do not change them)."""
        return self._by_rank

    def ranks(self) -> list[int]:
        """The ranks with spans, ascending: the order of every per-rank answer below."""
        return [int(r) for r in self._rank_rows[0].tolist()]

    def _blocks(self) -> Iterator[tuple[int, int, np.ndarray]]:
        """(first rank index, end rank index, their rows in rank then timeline order)."""
        _, order, bounds = self._rank_rows
        for k0, k1 in blocks(bounds, BLOCK_ROWS):
            yield k0, k1, order[int(bounds[k0]):int(bounds[k1])]

    def unions(self, kinds: Iterable[str] | None = None) -> RankIntervals:
        """Per rank (``ranks()`` order), the sorted, disjoint union of its spans of
        ``kinds`` (None: all): ``merge_intervals`` of each rank's rows, all ranks at once (kept:
        the metrics ask for some twice)."""
        key = None if kinds is None else tuple(kinds)
        found = self._unions.get(key)
        if found is None:
            self.prepare_unions([key])
            found = self._unions[key]
        return found

    def prepare_unions(self, keys: Iterable[Iterable[str] | None]) -> None:
        """Compute and keep ``unions(k)`` of each of ``keys`` not kept yet, in one pass over
        the blocks of ranks: each block's rows are gathered once for all of them (a
        gather of 7M rows costs more than the merge it feeds)."""
        todo: dict[tuple[str, ...] | None, np.ndarray | None] = {}
        ranks = self._rank_rows[0]
        for kinds in keys:
            key = None if kinds is None else tuple(kinds)
            if key in self._unions or key in todo:
                continue
            if key is not None and not set(key) & set(self.kinds):  # no span of these kinds
                self._unions[key] = RankIntervals.concat(ranks, [])
                continue
            # which kind codes are in: a lookup by code instead of an isin per row
            todo[key] = None if key is None else np.array([k in set(key) for k in self.kinds])
        if not todo:
            return
        # Each key's pieces go straight into arrays of its row count (a bound on them):
        # pages never written cost nothing, and no per-block parts are left between the
        # blocks' temporaries (the allocator could not give them back: 130 MB at 7M spans).
        per_code = np.bincount(self.kind, minlength=len(self.kinds))
        out = {key: _Pieces(int(per_code.sum() if w is None else per_code[w].sum()))
               for key, w in todo.items()}
        for k0, k1, rows in self._blocks():
            r, s, e = self.rank[rows], self.start[rows], self.end[rows]
            kind = self.kind[rows]
            for key, wanted in todo.items():
                if wanted is None:
                    out[key].add(merge_by_rank(r, s, e, ranks[k0:k1]))
                else:
                    m = wanted[kind]
                    out[key].add(merge_by_rank(r[m], s[m], e[m], ranks[k0:k1]))
            del r, s, e, kind
        for key in todo:
            self._unions[key] = out.pop(key).intervals(ranks)

    @cached_property
    def _unions(self) -> dict[tuple[str, ...] | None, RankIntervals]:
        return {}

    def sums(self, mask: np.ndarray,
             values: str | Callable[[np.ndarray], np.ndarray]) -> list[float]:
        """Per rank (``ranks()`` order), the sum left to right, in timeline order, of
        ``values`` over its rows where ``mask`` (``values``: "bytes" or "flops", or a
        function of row indices giving theirs)."""
        out: list[float] = []
        bounds = self._rank_rows[2]
        read = self._reader(values) if isinstance(values, str) else values
        for k0, k1, rows in self._blocks():
            keep = mask[rows]
            got = read(rows[keep]).tolist()
            kept = np.r_[0, np.cumsum(keep)][bounds[k0:k1 + 1] - bounds[k0]].tolist()
            out.extend(sum(got[kept[k]:kept[k + 1]]) for k in range(k1 - k0))
        return out


def _no_tasks(_name: str) -> np.ndarray:
    return np.zeros(1)


def _graph_columns(graph: Any) -> Callable[[str], np.ndarray]:
    """A TaskGraph's per-task bytes and FLOPs (copies, read when asked)."""
    return lambda name: graph.codes("nbytes" if name == "bytes" else "flops")


def _task_columns(tasks: list[Any]) -> Callable[[str], np.ndarray]:
    """Per-task bytes and FLOPs of ``tasks`` (Task objects), in their order."""
    return lambda name: np.fromiter((getattr(t, name) for t in tasks), dtype=np.float64,
                                    count=len(tasks))


def blocks(bounds: np.ndarray, rows: int) -> list[tuple[int, int]]:
    """Split segments (segment k is ``bounds[k]:bounds[k+1]``) into consecutive runs
    [k0, k1) of at most ``rows`` elements each, or one segment where a segment alone is
    more; no segments, no runs."""
    out: list[tuple[int, int]] = []
    edge = bounds.tolist()
    k0, n = 0, len(edge) - 1
    while k0 < n:
        # the last k1 with edge[k1] - edge[k0] <= rows, at least k0 + 1
        k1 = max(int(np.searchsorted(bounds, edge[k0] + rows, side="right")) - 1, k0 + 1)
        out.append((k0, min(k1, n)))
        k0 = min(k1, n)
    return out


@dataclass(frozen=True)
class RankIntervals:
    """Sorted, disjoint intervals per rank: rank ``ranks[k]``'s are ``starts[bounds[k]:
    bounds[k+1]]`` to ``ends[...]`` (``bounds`` has one more entry than ``ranks``)."""

    ranks: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    bounds: np.ndarray

    @classmethod
    def concat(cls, ranks: np.ndarray, parts: list[RankIntervals]) -> RankIntervals:
        """Consecutive blocks of ranks as one (``ranks``: theirs, in order)."""
        if not parts:
            return cls(ranks, np.zeros(0), np.zeros(0), np.zeros(len(ranks) + 1, np.int64))
        offsets = np.cumsum([0, *(len(p.starts) for p in parts)])
        bounds = np.concatenate([*(p.bounds[:-1] + o for p, o in zip(parts, offsets,
                                                                     strict=False)),
                                 offsets[-1:]])
        return cls(ranks, np.concatenate([p.starts for p in parts]),
                   np.concatenate([p.ends for p in parts]), bounds)

    def of(self, k: int) -> Intervals:
        """The intervals of the k-th rank."""
        a, b = int(self.bounds[k]), int(self.bounds[k + 1])
        return self.starts[a:b], self.ends[a:b]

    def counts(self) -> list[int]:
        """How many intervals each rank has."""
        return np.diff(self.bounds).tolist()

    def lengths(self) -> list[float]:
        """Each rank's total length, summed left to right (as ``union_length``)."""
        out: list[float] = []
        for k0, k1 in blocks(self.bounds, BLOCK_ROWS):
            a, b = int(self.bounds[k0]), int(self.bounds[k1])
            d = (self.ends[a:b] - self.starts[a:b]).tolist()
            edge = (self.bounds[k0:k1 + 1] - a).tolist()
            out.extend(sum(d[edge[k]:edge[k + 1]]) for k in range(k1 - k0))
        return out

    def block(self, k0: int, k1: int) -> RankIntervals:
        """Ranks k0 to k1 (exclusive) alone."""
        a, b = int(self.bounds[k0]), int(self.bounds[k1])
        return RankIntervals(self.ranks[k0:k1], self.starts[a:b], self.ends[a:b],
                             self.bounds[k0:k1 + 1] - a)


class _Pieces:
    """Consecutive blocks' ``RankIntervals`` written into arrays of at most ``bound``
    intervals, shrunk in place at the end (``concat`` without holding the blocks)."""

    def __init__(self, bound: int) -> None:
        self.starts, self.ends = np.empty(bound), np.empty(bound)
        self.bounds: list[np.ndarray] = []
        self.n = 0

    def add(self, part: RankIntervals) -> None:
        k = len(part.starts)
        self.starts[self.n:self.n + k] = part.starts
        self.ends[self.n:self.n + k] = part.ends
        self.bounds.append(part.bounds[:-1] + self.n)
        self.n += k

    def intervals(self, ranks: np.ndarray) -> RankIntervals:
        self.starts.resize(self.n, refcheck=False)  # in place: no copy
        self.ends.resize(self.n, refcheck=False)
        bounds = np.concatenate([*self.bounds, np.array([self.n])]) if self.bounds else \
            np.zeros(len(ranks) + 1, np.int64)
        return RankIntervals(ranks, self.starts, self.ends, bounds.astype(np.int64))


def merge_by_rank(rank: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                  ranks: np.ndarray) -> RankIntervals:
    """``merge_intervals`` of each rank's intervals (``starts[i] <= ends[i]``), for every rank of
    ``ranks`` (ascending; a superset of ``rank``'s values, those without intervals get
    none) at once.

    Walked in order of end within each rank, as a timeline's rows already are (else they
    are sorted so first): interval i closes a piece when every later interval of its rank
    starts after it ends (a running minimum of the starts from the right); the piece runs
    from that minimum at its first interval to its last interval's end. These are the
    pieces, and the floats, of ``merge_intervals``' walk by start.
    """
    n = len(starts)
    if not n:
        return RankIntervals(ranks, np.zeros(0), np.zeros(0),
                             np.zeros(len(ranks) + 1, np.int64))
    r, s, e = rank, starts, ends
    if not bool(np.all((r[1:] > r[:-1]) | ((r[1:] == r[:-1]) & (e[1:] >= e[:-1])))):
        order = np.lexsort((e, r))  # by rank, then end
        r, s, e = r[order], s[order], e[order]
        del order
    # the smallest start from each interval to its rank's last: (rank, start) pairs compared
    # in order, from the right; each interval's own start where starts never fall within a
    # rank (one stream's spans: no complex temporaries)
    same = r[1:] == r[:-1]
    if bool(np.all(~same | (s[1:] >= s[:-1]))):
        later = s
    else:
        later = np.minimum.accumulate((r + 1j * s)[::-1])[::-1].imag
    closes = np.empty(n, dtype=bool)
    closes[-1] = True
    closes[:-1] = ~same | (later[1:] > e[:-1])
    last = np.flatnonzero(closes)
    first = np.r_[0, last[:-1] + 1]
    owner = r[last]
    bounds = np.r_[np.searchsorted(owner, ranks, side="left"), len(last)]
    return RankIntervals(ranks, later[first], e[last], bounds)


def overlaps(a: RankIntervals, b: RankIntervals) -> list[float]:
    """``overlap_length`` of a's and b's intervals, rank by rank (the same ranks in both)."""
    assert len(a.ranks) == len(b.ranks), "overlaps: a and b cover different ranks"
    out: list[float] = []
    for k0, k1 in blocks(a.bounds + b.bounds, BLOCK_ROWS):
        out.extend(_overlaps(a.block(k0, k1), b.block(k0, k1)))
    return out


def _overlaps(a: RankIntervals, b: RankIntervals) -> list[float]:
    k = len(a.ranks)
    na, nb = np.diff(a.bounds), np.diff(b.bounds)
    lo, hi = search_by_rank(a.starts, a.ends, na, b.starts, b.ends, nb)
    count = np.maximum(hi - lo, 0)
    ai = np.repeat(np.arange(len(a.starts)), count)
    offsets = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    bi = np.repeat(lo, count) + offsets
    piece = np.minimum(a.ends[ai], b.ends[bi]) - np.maximum(a.starts[ai], b.starts[bi])
    keep = piece > 0
    got = piece[keep].tolist()
    pieces = np.r_[0, np.cumsum(count)][a.bounds]  # each rank's first piece, and the end
    kept = np.r_[0, np.cumsum(keep)][pieces].tolist()
    # from 0.0, as overlap_length: a rank without a piece gets 0.0
    return [sum(got[kept[j]:kept[j + 1]], 0.0) for j in range(k)]


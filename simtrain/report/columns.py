"""A timeline's spans as columns (numpy arrays), built once per chart.

The Gantt chart asks many questions of every span (which rows exist, where the step ends,
whether the job is pipelined, which spans a drawn row holds, when a rank is busy); asked of
per-span Python objects each is a full pass in the interpreter. Here one pass builds the
columns, and the questions become array operations. The ``Span`` objects stay reachable by
index for what only they carry (names and meta for hover text), and are touched only for
the spans actually drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simtrain.engine.timeline import Span, Timeline


@dataclass(frozen=True)
class SpanColumns:
    """Columns of ``spans`` in timeline order: rank, stream and kind codes, start, end (s).

    ``streams[stream[i]]`` and ``kinds[kind[i]]`` are span i's stream and kind names.
    """

    spans: Sequence[Span]
    rank: np.ndarray
    stream: np.ndarray
    kind: np.ndarray
    start: np.ndarray
    end: np.ndarray
    streams: tuple[str, ...]
    kinds: tuple[str, ...]

    @classmethod
    def from_timeline(cls, timeline: Timeline) -> SpanColumns:
        """One pass over the timeline's spans."""
        spans = timeline.spans
        stream_code: dict[str, int] = {}
        kind_code: dict[str, int] = {}
        n = len(spans)
        rank = np.fromiter((s.rank for s in spans), dtype=np.int64, count=n)
        stream = np.fromiter((stream_code.setdefault(s.stream, len(stream_code))
                              for s in spans), dtype=np.int64, count=n)
        kind = np.fromiter((kind_code.setdefault(s.kind, len(kind_code)) for s in spans),
                           dtype=np.int64, count=n)
        start = np.fromiter((s.start for s in spans), dtype=np.float64, count=n)
        end = np.fromiter((s.end for s in spans), dtype=np.float64, count=n)
        return cls(spans, rank, stream, kind, start, end, tuple(stream_code),
                   tuple(kind_code))

    @property
    def step_end(self) -> float:
        """Latest span end (0 for no spans), as ``Timeline.end``."""
        return float(self.end.max()) if len(self.end) else 0.0

    def has_kind(self, kind: str) -> bool:
        """Whether any span is of ``kind``."""
        return kind in self.kinds

    def row_code(self) -> np.ndarray:
        """One integer per span naming its (rank, stream) row."""
        return self.rank * len(self.streams) + self.stream

    def code_of(self, row: tuple[int, str]) -> int | None:
        """The ``row_code`` of (rank, stream); None when no span has that stream."""
        try:
            return row[0] * len(self.streams) + self.streams.index(row[1])
        except ValueError:
            return None

    def rows_spans(self, rows: Sequence[tuple[int, str]], *, by_time: bool = False
                   ) -> list[np.ndarray]:
        """Per row of ``rows``, the indices of its spans: in timeline order, or (``by_time``)
        by (start, end) with timeline order breaking ties (a stable sort's order)."""
        codes = self.row_code()
        size = int(codes.max()) + 1 if len(codes) else 0
        row_index = np.full(size, -1, dtype=np.int64)
        for i, row in enumerate(rows):
            code = self.code_of(row)
            if code is not None and code < size:
                row_index[code] = i
        row_of = row_index[codes]
        idx = np.flatnonzero(row_of >= 0)
        keys = ((idx, self.end[idx], self.start[idx], row_of[idx]) if by_time
                else (idx, row_of[idx]))
        idx = idx[np.lexsort(keys)]
        bounds = np.searchsorted(row_of[idx], np.arange(len(rows) + 1))
        return [idx[bounds[i]:bounds[i + 1]] for i in range(len(rows))]

    def busy_by_rank(self, ranks: Sequence[int]) -> dict[int, list[tuple[float, float]]]:
        """(start, end) of every span of each of ``ranks``, in timeline order."""
        mask = np.isin(self.rank, np.asarray(list(ranks), dtype=np.int64))
        idx = np.flatnonzero(mask)
        idx = idx[np.argsort(self.rank[idx], kind="stable")]
        ranks_sorted = self.rank[idx]
        out: dict[int, list[tuple[float, float]]] = {}
        if not len(idx):
            return out
        cuts = np.flatnonzero(np.diff(ranks_sorted)) + 1
        starts, ends = self.start[idx].tolist(), self.end[idx].tolist()
        for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(idx)].tolist(), strict=True):
            out[int(ranks_sorted[lo])] = list(zip(starts[lo:hi], ends[lo:hi], strict=True))
        return out

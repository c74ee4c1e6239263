"""The timeline: every span the engine executed, the single output all reports derive from."""

from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from simtrain.engine.spantable import SpanTable


class SpanKind(StrEnum):
    """What a span's time was spent on: the one list of span kinds (colours, breakdowns,
    critical-path shares and the trace all read it). Members equal their strings, so a
    strategy may write ``kind="dp_comm"`` or ``SpanKind.DP_COMM`` alike."""

    FORWARD = "forward"
    BACKWARD = "backward"
    RECOMPUTE = "recompute"
    OPTIMIZER = "optimizer"
    COMPUTE = "compute"  # compute that is none of the above (tests, hand-built graphs)
    HOST = "host"  # host-side work per step the GPUs wait for: busy, neither compute nor comm
    DP_COMM = "dp_comm"  # data parallel: DDP gradient buckets, ZeRO/FSDP gathers and scatters
    TP_COMM = "tp_comm"  # tensor / sequence parallel collectives inside a layer
    CP_COMM = "cp_comm"  # context parallel: ring-attention KV passes, KV all-gathers
    PP_COMM = "pp_comm"  # pipeline sends and receives between stages
    EP_COMM = "ep_comm"  # expert parallel all-to-all dispatch and combine
    COMM = "comm"  # communication of no parallel group above
    # Markers in a deadlocked step's report (simtrain.engine.sim): the rank that stopped
    # issuing work, and the ranks blocked behind it. Never part of a finished step.
    HUNG = "hung"
    BLOCKED = "blocked"


# Compute kinds run on a compute stream, communication kinds on a communication stream.
COMPUTE_KINDS: tuple[str, ...] = (SpanKind.FORWARD, SpanKind.BACKWARD, SpanKind.RECOMPUTE,
                                  SpanKind.OPTIMIZER, SpanKind.COMPUTE)
HOST_KINDS: tuple[str, ...] = (SpanKind.HOST,)
COMM_KINDS: tuple[str, ...] = (SpanKind.DP_COMM, SpanKind.TP_COMM, SpanKind.CP_COMM,
                               SpanKind.PP_COMM, SpanKind.EP_COMM, SpanKind.COMM)
FAULT_KINDS: tuple[str, ...] = (SpanKind.HUNG, SpanKind.BLOCKED)


@dataclass(frozen=True, slots=True)
class Span:
    """One executed task on one rank: [start, end) in seconds on ``stream``."""

    rank: int
    stream: str
    kind: str
    name: str
    start: float
    end: float
    bytes: float = 0.0
    flops: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    task: int = -1  # id of the TaskGraph task this span executed (-1: not from a graph)

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def is_comm(self) -> bool:
        return self.kind in COMM_KINDS


@dataclass(frozen=True, slots=True)
class FlowRecord:
    """One network flow: ``nbytes`` moved over the directed links ``route`` in [start, end)."""

    start: float
    end: float
    nbytes: float
    route: tuple[int, ...]
    task: int = -1


# How a span row reads its fields (see Timeline): row ref = task id * 4 + form.
TASK_SPAN, HOST_SPAN, COMM_SPAN, FREE_SPAN = 0, 1, 2, 3


class Timeline:
    """All spans of one simulated step, in the order they finished (deterministic).

    ``flows`` lists every network flow (for link utilisation). Spans are held as columns
    (rank, start, end, ref = task id x 4 + form), not objects: a span the engine records
    for a task reads its stream, kind, name, bytes, FLOPs and meta from the task graph's
    ``tasks`` (a comm span keeps its own meta, a host-issue span is named after its task).
    ``spans`` builds the ``Span`` objects on first use and keeps them until the next span
    is added; ``columns`` answers the metrics without building any, over views of the
    columns (a change after it first copies the columns, as a viewed array cannot grow).
    """

    def __init__(self, num_ranks: int, spans: Iterable[Span] = (),
                 flows: Iterable[FlowRecord] = (), events: int = 0,
                 tasks: Sequence[Any] | None = None) -> None:
        self.num_ranks = num_ranks
        self.events = events  # SimPy events the engine processed (for benchmarks)
        self.tasks = tasks  # the graph's tasks the engine's spans refer to
        # 32-bit rank, ref and comm row columns (ref < 4 x MAX_TASKS): an explicit 512-GPU
        # step records about 7M spans.
        self._rank = array("i")
        self._start = array("d")
        self._end = array("d")
        self._ref = array("i")
        self._extra: dict[int, Any] = {}  # row -> Span (free form)
        self._comm_meta: dict[int, dict[str, Any]] = {}  # comm task -> its spans' meta
        # rows of comm spans, and when each member arrived (its wait: start - arrival)
        self._comm_rows = array("i")
        self._comm_arrived = array("d")
        self._spans: list[Span] | None = None
        # The engine's flow batches as recorded (start, ends, sizes, routes, task): a batch
        # is one list reference each, expanded into FlowRecords when ``flows`` is read.
        self._flow_batches: list[tuple[float, Sequence[float], Sequence[float],
                                       Sequence[tuple[int, ...]], int]] = []
        self._flows: list[FlowRecord] = list(flows)
        self._table: Any = None  # SpanTable cache
        self._flows_read = 0  # engine flow batches already moved into ``_flows``
        for span in spans:
            self.add(span)

    # -- recording -------------------------------------------------------------------
    def add(self, span: Span) -> None:
        """Append a span given as an object."""
        self._row(span.rank, span.start, span.end, span.task * 4 + FREE_SPAN, span)

    def record(self, rank: int, start: float, end: float, task: int) -> None:
        """Append the span of graph task ``task`` on ``rank`` (fields from the task)."""
        self._row(rank, start, end, task * 4 + TASK_SPAN, None)

    def record_host(self, rank: int, start: float, end: float, task: int) -> None:
        """Append a span of ``rank`` waiting for the host to issue task ``task``."""
        self._row(rank, start, end, task * 4 + HOST_SPAN, None)

    def record_comm_group(self, ranks: Sequence[int], start: float, end: float, task: int,
                          meta: dict[str, Any], arrived: Mapping[int, float]) -> None:
        """Communication task ``task``'s spans, one per member of ``ranks`` in ``arrived``
        (member -> arrival time), in group order; virtual members are skipped. ``meta`` is
        the task's (shared by its members, kept once); each span's wait for the others
        (start - arrival) is in its meta as "waited_s" when > 0."""
        self._comm_meta.setdefault(task, meta)
        ref = task * 4 + COMM_SPAN
        rows, arrivals = self._comm_rows, self._comm_arrived
        k = len(ranks)
        if len(arrived) == k:  # every member simulated: the rows in one go per column
            if self._table is not None:
                self._release()
            row = len(self._rank)
            rows.extend(range(row, row + k))
            arrivals.extend(map(arrived.__getitem__, ranks))
            self._rank.extend(ranks)
            self._start.extend([start] * k)
            self._end.extend([end] * k)
            self._ref.extend([ref] * k)
            self._spans = None
            return
        if self._table is not None:
            self._release()
        add_rank, add_start, add_end, add_ref = (self._rank.append, self._start.append,
                                                 self._end.append, self._ref.append)
        row = len(self._rank)
        for rank in ranks:
            when = arrived.get(rank)
            if when is None:
                continue  # a virtual member: mirrored, not recorded
            rows.append(row)
            arrivals.append(when)
            add_rank(rank), add_start(start), add_end(end), add_ref(ref)
            row += 1
        self._spans = None

    def appenders(self) -> tuple[Any, Any, Any, Any]:
        """The engine's fast path: the ``append`` of the rank, start, end and ref columns
        (ref = task id x 4 + TASK_SPAN or HOST_SPAN). Spans must not be read meanwhile."""
        self._release()
        self._spans = None
        return self._rank.append, self._start.append, self._end.append, self._ref.append

    def _row(self, rank: int, start: float, end: float, ref: int, extra: Any) -> None:
        if self._table is not None:
            self._release()
        if extra is not None:
            self._extra[len(self._rank)] = extra
        self._rank.append(rank)
        self._start.append(start)
        self._end.append(end)
        self._ref.append(ref)
        self._spans = None

    def _release(self) -> None:
        """Forget the span table; if one was built, the columns it views are replaced by
        copies (a buffer that is viewed cannot grow, and an in-place sort would change
        the table under its holder)."""
        if self._table is not None:
            self._table = None
            self._rank = array("i", self._rank)
            self._start, self._end = array("d", self._start), array("d", self._end)

    def record_flows(self, start: float, ends: Sequence[float], sizes: Sequence[float],
                     routes: Sequence[tuple[int, ...]], task: int) -> None:
        """Append flows that started together at ``start`` (empty routes are skipped).
        The sequences are kept, not copied: the caller must not change them afterwards."""
        if len(ends) != len(sizes) or len(sizes) != len(routes):
            raise ValueError(f"record_flows: {len(ends)} ends, {len(sizes)} sizes and "
                             f"{len(routes)} routes")
        self._flow_batches.append((start, ends, sizes, routes, task))

    def sort_by_end(self) -> None:
        """Reorder the rows by end time, ties in recording order (the engine records a
        ready chain's spans before they end)."""
        self._release()
        end = np.frombuffer(self._end, dtype=np.float64) if len(self._end) else np.zeros(0)
        if len(end) < 2 or bool(np.all(end[1:] >= end[:-1])):
            return
        # In place, one column at a time (a copy of all four doubled the engine's peak
        # memory on large steps); int32 positions (rows < 2**31: MAX_TASKS).
        order = np.argsort(end, kind="stable").astype(np.int32)
        del end
        for name in ("_rank", "_start", "_end", "_ref"):
            column = getattr(self, name)
            view = np.frombuffer(column, dtype=column.typecode)
            view[:] = view[order]
            del view  # a live view would pin the column's buffer
        where = np.empty(len(order), dtype=np.int32)
        where[order] = np.arange(len(order), dtype=np.int32)
        del order
        self._extra = {int(where[i]): v for i, v in self._extra.items()}
        if len(self._comm_rows):
            rows = np.frombuffer(self._comm_rows, dtype=np.int32)
            rows[:] = where[rows]
            del rows
        self._spans = self._table = None

    # -- reading ---------------------------------------------------------------------
    @property
    def spans(self) -> list[Span]:
        """Every span as an object, in timeline order (built once, then cached)."""
        if self._spans is None:
            starts, waited = self._start, dict[int, float]()
            for row, arrival in zip(self._comm_rows, self._comm_arrived, strict=True):
                w = starts[row] - arrival
                if w > 0:
                    waited[row] = w
            self._spans = [self._span(i, waited) for i in range(len(self._rank))]
        return self._spans

    def _span(self, i: int, waited: dict[int, float]) -> Span:
        ref = self._ref[i]
        form = ref & 3
        if form == FREE_SPAN:
            span: Span = self._extra[i]
            return span
        assert self.tasks is not None, "engine spans need the graph's tasks"
        t = self.tasks[ref >> 2]
        rank, start, end = self._rank[i], self._start[i], self._end[i]
        if form == TASK_SPAN:
            return Span(rank, t.stream, t.kind, t.name, start, end, t.bytes, t.flops, t.meta,
                        t.id)
        if form == HOST_SPAN:
            return Span(rank, t.stream, "host", f"host issue {t.name}", start, end, 0.0, 0.0,
                        {}, t.id)
        meta = self._comm_meta[t.id]
        if i in waited:
            meta = {**meta, "waited_s": waited[i]}
        return Span(rank, t.stream, t.kind, t.name, start, end, t.bytes, 0.0, meta, t.id)

    @property
    def flows(self) -> list[FlowRecord]:
        """Every network flow as an object (the engine's rows are moved in on first read)."""
        batches = self._flow_batches
        if self._flows_read < len(batches):
            self._flows.extend(FlowRecord(start, end, size, route, task)
                               for start, ends, sizes, routes, task in
                               batches[self._flows_read:]
                               for end, size, route in zip(ends, sizes, routes, strict=True)
                               if route)
            self._flows_read = len(batches)
        return self._flows

    def columns(self) -> SpanTable:
        """The spans as numpy columns (rank, kind code, start, end, bytes, FLOPs), cached."""
        if self._table is None:
            from simtrain.engine.spantable import SpanTable
            self._table = SpanTable.of(self)
        table: SpanTable = self._table
        return table

    def _raw_columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                    dict[int, Any]]:
        """Read-only views of the rank (int32), start, end and ref (int32) columns, and the
        per-row extras. The views pin the columns: only ``columns`` may ask, as every
        change first ``_release``s the table it builds."""
        def col(a: array) -> np.ndarray:
            view = np.frombuffer(a, dtype=a.typecode) if len(a) else np.zeros(0, a.typecode)
            view.flags.writeable = False
            return view
        return (col(self._rank), col(self._start), col(self._end), col(self._ref),
                self._extra)

    def __iter__(self) -> Iterator[Span]:
        return iter(self.spans)

    def __len__(self) -> int:
        return len(self._rank)

    @property
    def end(self) -> float:
        """Time the last span ended: the step time when the step starts at 0."""
        if not len(self._end):
            return 0.0
        return float(np.frombuffer(self._end, dtype=np.float64).max())  # the largest end

    def for_rank(self, rank: int) -> list[Span]:
        return [s for s in self.spans if s.rank == rank]

    def by_rank(self) -> dict[int, list[Span]]:
        out: dict[int, list[Span]] = defaultdict(list)
        for s in self.spans:
            out[s.rank].append(s)
        return dict(out)

    def streams(self) -> list[tuple[int, str]]:
        """Distinct (rank, stream) rows, sorted by rank then stream name (compute first)."""
        rows = {(s.rank, s.stream) for s in self.spans}
        return sorted(rows, key=lambda r: (r[0], r[1] != "compute", r[1]))

    def signature(self) -> tuple[tuple[Any, ...], ...]:
        """Hashable content of the timeline, for determinism checks."""
        return tuple(
            (s.rank, s.stream, s.kind, s.name, s.start, s.end, s.bytes, s.flops) for s in self.spans
        )


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by a set of [start, end) intervals (overlaps counted once)."""
    return sum(end - start for start, end in merge_intervals(intervals))


def merge_intervals(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted, disjoint union of [start, end) intervals."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def overlap_length(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of the intersection of two sorted disjoint interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total

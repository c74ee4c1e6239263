"""The timeline: every span the engine executed, the single output all reports derive from."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


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


@dataclass
class Timeline:
    """All spans of one simulated step, in the order they finished (deterministic).

    ``flows`` lists every network flow (for link utilisation); ``links`` may hold the
    fabric's link objects so reports can name them.
    """

    num_ranks: int
    spans: list[Span] = field(default_factory=list)
    flows: list[FlowRecord] = field(default_factory=list)
    events: int = 0  # SimPy events the engine processed (for benchmarks)

    def add(self, span: Span) -> None:
        self.spans.append(span)

    def __iter__(self) -> Iterator[Span]:
        return iter(self.spans)

    def __len__(self) -> int:
        return len(self.spans)

    @property
    def end(self) -> float:
        """Time the last span ended: the step time when the step starts at 0."""
        return max((s.end for s in self.spans), default=0.0)

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

"""The critical path of a step: the chain of spans that, made longer, makes the step longer.

Walk back from the span that ended last. A span could start only once its predecessors
ended: its task's dependencies (``Task.deps``), the previous task on the same
(rank, stream), and, for a collective, the predecessors of every member rank (it starts
when the last member arrives). Among those, the one that ended latest is the one the span
waited for; repeat from it. Each span is visited at most once per member, so the walk is
O(spans).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simtrain.engine.taskgraph import TaskGraph
from simtrain.engine.timeline import Span, Timeline


@dataclass(frozen=True, slots=True)
class Segment:
    """Consecutive critical spans of one kind on one (rank, stream), merged for display."""

    rank: int
    stream: str
    kind: str
    first: str
    last: str
    count: int
    start: float
    end: float
    busy: float  # sum of span durations (gaps between spans not counted)

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class CriticalPath:
    """The critical spans in time order, and the step time they explain."""

    spans: tuple[Span, ...]
    step_time: float

    @property
    def busy(self) -> float:
        """Time the path spends inside spans (the rest is waiting, e.g. launch gaps)."""
        return sum(s.duration for s in self.spans)

    def segments(self) -> list[Segment]:
        """Spans merged into runs of one kind on one (rank, stream)."""
        out: list[Segment] = []
        for s in self.spans:
            prev = out[-1] if out else None
            if prev and (prev.rank, prev.stream, prev.kind) == (s.rank, s.stream, s.kind):
                out[-1] = Segment(prev.rank, prev.stream, prev.kind, prev.first, s.name,
                                  prev.count + 1, prev.start, s.end, prev.busy + s.duration)
            else:
                out.append(Segment(s.rank, s.stream, s.kind, s.name, s.name, 1, s.start, s.end,
                                   s.duration))
        return out

    def stretches(self) -> list[list[Span]]:
        """Spans grouped into runs on one rank: the path moves to another rank at a
        point-to-point transfer or a collective that waited for a slower member."""
        out: list[list[Span]] = []
        for s in self.spans:
            if out and out[-1][-1].rank == s.rank:
                out[-1].append(s)
            else:
                out.append([s])
        return out

    def share_by_kind(self) -> dict[str, float]:
        """Fraction of the step time each span kind takes on the path."""
        out: dict[str, float] = {}
        for s in self.spans:
            out[s.kind] = out.get(s.kind, 0.0) + s.duration
        step = self.step_time or 1.0
        return {k: v / step for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


def critical_path(timeline: Timeline, graph: TaskGraph | None = None) -> CriticalPath:
    """The critical path of ``timeline``; with ``graph`` it follows task dependencies too.

    Without a graph (or for spans not from one, ``task == -1``) only stream order is known.
    """
    spans = timeline.spans
    if not spans:
        return CriticalPath((), 0.0)
    # Previous span on the same (rank, stream), by start time (program order on a stream).
    prev: list[int] = [-1] * len(spans)
    rows: dict[tuple[int, str], list[int]] = {}
    for i, s in enumerate(spans):
        rows.setdefault((s.rank, s.stream), []).append(i)
    for idx in rows.values():
        idx.sort(key=lambda i: (spans[i].start, spans[i].end))
        for a, b in zip(idx, idx[1:], strict=False):
            prev[b] = a
    by_task: dict[int, list[int]] = {}
    for i, s in enumerate(spans):
        if s.task >= 0:
            by_task.setdefault(s.task, []).append(i)
    deps_of = graph.deps if graph is not None else None  # not the Task view: no objects
    count = len(graph) if graph is not None else 0

    def members(i: int) -> Sequence[int]:
        task = spans[i].task
        return by_task.get(task, (i,)) if task >= 0 else (i,)

    def dep_spans(i: int) -> list[int]:
        s = spans[i]
        if deps_of is None or not 0 <= s.task < count:
            return []
        out: list[int] = []
        for dep in deps_of(s.task):
            cands = by_task.get(dep)
            if not cands:
                continue
            same_rank = [j for j in cands if spans[j].rank == s.rank]
            out.append(same_rank[0] if same_rank else max(cands, key=lambda j: spans[j].end))
        return out

    current = max(range(len(spans)), key=lambda i: (spans[i].end, -i))
    path = [current]
    seen = {current}
    while True:
        start = spans[current].start
        best, best_end = -1, float("-inf")
        for m in members(current):
            for j in (prev[m], *dep_spans(m)):
                if j < 0 or j in seen:
                    continue
                end = spans[j].end
                if end <= start + 1e-15 and end > best_end:
                    best, best_end = j, end
        if best < 0:
            break
        # A collective appears once per member; continue from the member that waited.
        path.append(best)
        seen.update(members(best))
        current = best
    path.reverse()
    return CriticalPath(tuple(spans[i] for i in path), timeline.end)

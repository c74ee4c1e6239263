"""Deadlock diagnosis: walk the wait-for graph to the ranks that stopped issuing work.

When a step stalls, most ranks are blocked on someone who is blocked too: in a pipeline,
stage 0 waits in the gradient all-reduce for its data-parallel peer, which waits for a
backward activation from stage 1, which waits for the hung rank on stage 2. Naming the
collective the first rank is stuck in names the wrong rank. Instead each blocked stream
points at the streams it waits for (the members missing from the collective it sits in,
or the owners of the dependencies it waits on); following the pointers ends at the
streams that stopped (a hang) — those ranks are named first, then the longest chain of
waits behind them. If no chain ends at a stopped stream, the waits form a cycle. The error
the executor raises (``SimulationDeadlock``) and the partial timeline a report shows
(``stalled_timeline``) live here too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simtrain.engine.taskgraph import Task
from simtrain.engine.timeline import Span, SpanKind, Timeline

if TYPE_CHECKING:
    from simtrain.engine.sim import Executor


class SimulationDeadlock(RuntimeError):
    """The simulation ended with tasks that can never run; the message says who waits for whom.

    ``timeline`` holds the spans that ran before the hang, ``blocked`` each blocked rank's
    wait (rank -> (since when, what it waits in)) and ``at`` the time the step stalled, so
    a report can still show the step up to the hang.
    """

    def __init__(self, message: str, *, timeline: Timeline | None = None,
                 blocked: Mapping[int, tuple[float, str, str]] | None = None,
                 at: float = 0.0) -> None:
        super().__init__(message)
        self.timeline = timeline
        self.blocked = dict(blocked or {})
        self.at = at
        self.result: Any = None  # simulate() attaches the partial SimulationResult


def stalled_timeline(exc: SimulationDeadlock, num_ranks: int) -> Timeline:
    """The spans run before a deadlock, plus one span per blocked rank from when it last
    worked to the stall: kind "hung" for a rank that stopped, "blocked" for its victims
    (named after what they wait for), so a Gantt chart shows who stopped and who waits."""
    timeline = Timeline(num_ranks=num_ranks)
    if exc.timeline is not None:
        for span in exc.timeline.spans:
            timeline.add(span)
        timeline.flows.extend(exc.timeline.flows)
    for rank, (since, stream, what) in sorted(exc.blocked.items()):
        kind = SpanKind.HUNG if what.startswith("stopped") else SpanKind.BLOCKED
        timeline.add(Span(rank, stream, kind, what, since, max(exc.at, since), 0.0, 0.0,
                          {"deadlock": True}, -1))
    return timeline


Node = tuple[int, str]  # (rank, stream)
MAX_HOPS = 6  # chain hops spelled out in the message; the rest are counted


@dataclass(frozen=True)
class Diagnosis:
    """The one-line message and, per blocked rank, (blocked since, stream, what it waits in)."""

    message: str
    blocked: dict[int, tuple[float, str, str]]


def _label(task: Task) -> str:
    what = task.comm.op if task.comm is not None else "compute"
    return f"{what} {task.name!r}"


Why = tuple[str, str]  # a hop reads f"rank {a} {why[0]} rank {b}{why[1]}"


def wait_for(ex: Executor) -> dict[Node, list[tuple[Node, Why]]]:
    """Blocked stream -> [(stream it waits for, why)], for every stream stuck at a task."""
    edges: dict[Node, list[tuple[Node, Why]]] = {}
    virtual = ex.graph.virtual
    for (rank, stream), task in sorted(ex.position.items()):
        if task is None or ex.is_done(task.id) or (rank, stream) in ex.stopped:
            continue
        outs: list[tuple[Node, Why]] = []
        arrived = ex.arrivals.get(task.id, {})
        if task.comm is not None and rank in arrived:
            why = (f"waits since t={arrived[rank]:.6g}s in {_label(task)} (stream {stream!r}) for",
                   "")
            outs += [((m, task.stream), why) for m in task.ranks
                     if m not in arrived and m not in virtual]
        else:
            for dep_id in ex._dep_ids(task.id, rank):
                if ex.is_done(dep_id):
                    continue
                dep = ex.graph.tasks[dep_id]
                why = (f"needs {_label(dep)} from",
                       f" before {_label(task)} (stream {stream!r})")
                got = ex.arrivals.get(dep_id, {})
                outs += [((m, dep.stream), why) for m in dep.ranks
                         if m not in got and m not in virtual]
        edges[(rank, stream)] = outs
    return edges


def diagnose(ex: Executor) -> Diagnosis:
    """Who stopped, who waits for whom; see the module docstring."""
    head = f"simulation deadlocked at t={ex.env.now:.6g}s: "
    edges = wait_for(ex)
    blocked = _blocked_since(ex, edges)
    reverse: dict[Node, list[tuple[Node, Why]]] = {}
    for node, outs in edges.items():
        for target, why in outs:
            reverse.setdefault(target, []).append((node, why))
    # Breadth-first from the stopped streams along reversed waits: nxt[u] is the step
    # from u toward the nearest stopped stream.
    roots = sorted(ex.stopped)
    dist = dict.fromkeys(roots, 0)
    root_of = {r: r for r in roots}
    nxt: dict[Node, tuple[Node, Why]] = {}
    queue = deque(roots)
    while queue:
        v = queue.popleft()
        for u, why in sorted(reverse.get(v, ()), key=lambda e: e[0]):
            if u not in dist:
                dist[u] = dist[v] + 1
                nxt[u] = (v, why)
                root_of[u] = root_of[v]
                queue.append(u)
    stopped_ranks = {r for r, _ in roots}
    reached = {r for r, _ in nxt} - stopped_ranks
    waiting = {r for r, _ in edges} - stopped_ranks
    if not nxt:
        return Diagnosis(head + _cycle(ex, edges), blocked)
    causes = sorted({root_of[u][0] for u in nxt})
    stops = "; ".join(_stopped(ex, r) for r in causes)
    far = max(nxt, key=lambda n: (dist[n], -n[0], n[1]))
    hops = _chain(far, nxt)
    shown = "; ".join(hops[:MAX_HOPS])
    more = f"; ... {len(hops) - MAX_HOPS} more hops" if len(hops) > MAX_HOPS else ""
    pronoun = "it" if len(causes) == 1 else "them"
    rest = len(waiting - reached)
    tail = f"; {rest} other ranks blocked elsewhere" if rest else ""
    return Diagnosis(
        f"{head}{stops}; {len(reached)} ranks wait on {pronoun}, the longest chain: {shown}{more}"
        f"{tail}", blocked)


def _stopped(ex: Executor, rank: int) -> str:
    """'rank 9 stopped issuing work at t=0.01s (sim.hangs), before compute 'x' (stream ...)'"""
    streams = sorted((s, t) for (r, s), t in ex.stopped.items() if r == rank)
    when = min(t for _, t in streams)
    stream = streams[0][0]
    task = ex.position.get((rank, stream))
    before = f", before {_label(task)} (stream {stream!r})" if task is not None else ""
    hang = ex.hangs.get(rank, when)
    return (f"rank {rank} stopped issuing work at t={when:.6g}s (hung from t={hang:.6g}s, "
            f"sim.hangs){before}")


def _chain(start: Node, nxt: dict[Node, tuple[Node, Why]]) -> list[str]:
    """Rank-to-rank hops from ``start`` to its stopped stream (same-rank hops folded)."""
    hops = []
    node = start
    while node in nxt:
        target, why = nxt[node]
        if target[0] != node[0]:
            hops.append(f"rank {node[0]} {why[0]} rank {target[0]}{why[1]}")
        node = target
    return hops


def _cycle(ex: Executor, edges: dict[Node, list[tuple[Node, Why]]]) -> str:
    shown = []
    for (rank, stream), outs in list(edges.items())[:8]:
        targets = sorted({r for (r, _), _ in outs})
        task = ex.position[(rank, stream)]
        assert task is not None
        shown.append(f"rank {rank} {stream}: {task.name!r} waits for ranks {targets}")
    return "no rank stopped, the tasks wait on each other in a cycle: " + "; ".join(shown)


def _blocked_since(ex: Executor, edges: dict[Node, list[tuple[Node, Why]]]
                   ) -> dict[int, tuple[float, str, str]]:
    """Per blocked rank: since when it has done nothing, and its first wait."""
    last: dict[int, float] = {}
    for span in ex.timeline:
        last[span.rank] = max(last.get(span.rank, 0.0), span.end)
    out: dict[int, tuple[float, str, str]] = {}
    for (rank, stream), outs in sorted(edges.items()):
        if rank in out or not outs:
            continue
        target, why = outs[0]
        out[rank] = (last.get(rank, 0.0), stream,
                     f"blocked: {why[0]} rank {target[0]}{why[1]}")
    for (rank, stream), when in sorted(ex.stopped.items()):
        if rank not in out or out[rank][2].startswith("blocked"):
            out[rank] = (when, stream, "stopped issuing work (hang)")
    return out

"""Replay a pipeline step's task rows instead of lowering it again.

Every microbatch of a (stage, chunk, phase) runs the same templates on the same ranks, so
its tasks are the previous microbatch's rows with three things changed: the ids (shifted),
the dependencies on what came before the step (each rank's frontier on entry), and the
meta (the microbatch). A step whose templates are plain kernels and collectives, and that
neither produces the last gradients nor waits for parameter all-gathers, is lowered once
(``record``); a later one with the same templates and the same shape of entry frontier is
appended as a copy of those rows (``replay``): the task graph and the emitter's frontier
end exactly as ``Emitter.kernel`` and ``Emitter.collective`` would leave them (the
lowering lowers normally whenever a check below fails).

The checks that make the copy exact: every dependency of a recorded row is either a row of
the step or a task of the entry frontier; the old and new entry frontiers pair task for
task, rank by rank, into a map that is one-to-one and keeps their order (so a collective's
sorted union of its members' frontiers maps to the new one's, in order); and every task of
the exit frontier is a row of the step or of the entry frontier.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any

import numpy as np

from simtrain.engine.rankarrays import first_use
from simtrain.engine.taskgraph import TaskGraph
from simtrain.limits import MAX_TASKS

# Columns copied as they are (their codes and values repeat every microbatch).
_SAME = ("kind", "name", "stream", "group", "duration", "flops", "nbytes", "comm")


@dataclass(frozen=True)
class Entry:
    """The frontier of a stage's ranks when a step begins: their tasks one rank after
    another (``tasks``) and how many each rank has (``counts``)."""

    tasks: list[int]
    counts: list[int]

    @classmethod
    def of(cls, frontier: Mapping[int, list[int]], ranks: Sequence[int]) -> Entry:
        lists = list(map(frontier.get, ranks, repeat(())))
        return cls(list(chain.from_iterable(lists)), list(map(len, lists)))


@dataclass
class Recorded:
    """One lowered step: rows ``first:end`` of the graph over ``ranks``, its entry, each
    rank's exit frontier (flat, with counts), and the meta fields it was lowered with."""

    first: int
    end: int
    ranks: Sequence[int]
    entry: Entry
    distinct: int  # distinct tasks of the entry
    exit: np.ndarray
    exit_counts: list[int]
    meta: dict[str, Any]
    one_each: bool  # every rank leaves with one task


class Replay:
    """Recorded steps of ``graph`` by key (see the module docstring)."""

    def __init__(self, graph: TaskGraph) -> None:
        self.graph = graph
        self._steps: dict[object, Recorded] = {}

    def record(self, key: object, first: int, ranks: Sequence[int], entry: Entry,
               frontier: Mapping[int, list[int]], meta: dict[str, Any]) -> None:
        """Keep rows ``first:`` (just lowered on ``ranks`` from ``entry``, leaving
        ``frontier``) under ``key``, if they can be replayed; else forget any of ``key``."""
        g = self.graph
        end = len(g)
        self._steps.pop(key, None)
        if end <= first:
            return
        after = Entry.of(frontier, ranks)
        outside = set(entry.tasks)
        deps = np.frombuffer(g.dep_ids, dtype=np.int64)[g.dep_start[first]:g.dep_start[end]]
        before = np.unique(deps[deps < first]).tolist()
        del deps
        if not outside.issuperset(before) or not outside.issuperset(
                t for t in after.tasks if t < first):
            return
        self._steps[key] = Recorded(first, end, ranks, entry, len(outside),
                                    np.array(after.tasks, dtype=np.int64), after.counts,
                                    dict(meta), all(c == 1 for c in after.counts))

    def replay(self, key: object, ranks: Sequence[int], entry: Entry, meta: dict[str, Any],
               frontier: dict[int, list[int]]) -> bool:
        """Append the rows recorded under ``key`` for a step on ``ranks`` entered with
        ``entry`` and lowered with ``meta``, and set ``frontier`` as lowering it would;
        False (nothing changed) when there is no such step or the checks fail."""
        rec = self._steps.get(key)
        g = self.graph
        if rec is None or rec.ranks is not ranks or entry.counts != rec.entry.counts:
            return False
        n = rec.end - rec.first
        start = len(g)
        if start + n > MAX_TASKS:
            return False
        pairs = sorted(set(zip(rec.entry.tasks, entry.tasks, strict=True)))
        # a map old -> new (each old task once) that is one-to-one (each new task once)
        if len(pairs) != rec.distinct or len(set(entry.tasks)) != rec.distinct:
            return False
        olds = np.array([o for o, _ in pairs], dtype=np.int64)
        news = np.array([t for _, t in pairs], dtype=np.int64)
        shift = start - rec.first
        self._copy(rec, shift, olds, news, meta, monotone=bool(np.all(news[1:] > news[:-1])))
        moved = rec.exit + shift
        outer = rec.exit < rec.first  # entry tasks left as they were (in olds: recorded so)
        if bool(outer.any()):
            moved[outer] = news[np.searchsorted(olds, rec.exit[outer])]
        tasks = moved.tolist()
        if rec.one_each:  # one task each (a kernel or collective ran on every rank)
            frontier.update(zip(ranks, [[t] for t in tasks], strict=True))
        else:
            at = 0
            for r, k in zip(ranks, rec.exit_counts, strict=True):
                frontier[r] = tasks[at:at + k]
                at += k
        return True

    def _copy(self, rec: Recorded, shift: int, olds: np.ndarray, news: np.ndarray,
              meta: dict[str, Any], *, monotone: bool) -> None:
        """Append rows ``rec.first:rec.end`` again, ids moved by ``shift``, entry tasks
        ``olds`` as ``news``. Unless the map is ``monotone``, each collective's
        dependencies are sorted again (``Emitter.group_deps`` sorts them; a kernel's keep
        its frontier's order)."""
        g = self.graph
        a, b = rec.first, rec.end
        is_comm = np.frombuffer(g.comm, dtype=np.int32)[a:b] >= 0 if not monotone else None
        for name in _SAME:
            column: array = getattr(g, name)
            column.extend(column[a:b])  # an array slice is a copy
        codes = np.frombuffer(g.meta, dtype=np.uint32)[a:b].copy()  # no view: it grows
        remap: dict[int, int] = {}
        for c in first_use(codes):  # in order of first use, as lowering interns them
            remap[c] = g._meta_code(_moved_meta(g.metas[c], rec.meta, meta))
        table = np.zeros(max(remap) + 1, dtype=np.uint32)
        table[list(remap)] = list(remap.values())
        g.meta.frombytes(table[codes].tobytes())
        lo, hi = g.dep_start[a], g.dep_start[b]
        deps = np.frombuffer(g.dep_ids, dtype=np.int64)[lo:hi].copy()
        inside = deps >= a
        deps[inside] += shift
        if not bool(inside.all()):
            outer = deps[~inside]
            deps[~inside] = news[np.searchsorted(olds, outer)]
        bounds = np.frombuffer(g.dep_start, dtype=np.int64)[a:b + 1]
        if is_comm is not None and len(deps):
            row = np.repeat(np.arange(b - a), np.diff(bounds))
            within = np.where(is_comm[row], deps, np.arange(len(deps)))  # by id, or as is
            deps = deps[np.lexsort((within, row))]
            del row, within, is_comm
        starts = bounds[1:] + (len(g.dep_ids) - lo)
        del bounds
        g.dep_ids.frombytes(deps.tobytes())
        g.dep_start.frombytes(starts.tobytes())


def _moved_meta(old: Mapping[str, Any], was: Mapping[str, Any],
                now: Mapping[str, Any]) -> dict[str, Any]:
    """``old`` (a recorded row's meta, built from ``was``) as built from ``now``: the
    step's fields replaced where they are ``was``'s, in the same key order."""
    return {k: (now[k] if k in was and v == was[k] else v) for k, v in old.items()}


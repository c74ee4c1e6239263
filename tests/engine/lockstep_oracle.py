"""The lockstep check as it was before the vectorised one (simtrain.engine.lockstep): one
group at a time, per-task Python for member collectives. Kept as the tests' oracle: the
new implementation must return identical groups, arrays and syncs.

The docstring of simtrain/engine/lockstep.py states the conditions both check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from simtrain.engine.lockstep import LockstepGroup  # the same value type

if TYPE_CHECKING:
    from simtrain.engine.taskgraph import TaskGraph

# Task columns a member task must share with its counterpart.
_SAME = ("kind", "name", "stream", "duration", "flops", "nbytes", "comm", "meta")


def lockstep_groups(graph: TaskGraph, *, delays: Mapping[int, float] | None = None,
                    slowdowns: Mapping[int, float] | None = None,
                    hangs: Mapping[int, float] | None = None,
                    issue: tuple[np.ndarray, np.ndarray] | None = None) -> list[LockstepGroup]:
    """The disjoint lockstep groups of ``graph``: candidates are the rank groups of its
    collectives (two or more simulated ranks), tried in order of how many collectives
    they hold (most first: those are the tasks a group runs once), then size and ranks; a
    rank joins the first group that passes. ``issue``: the host issue times' (first,
    last) columns by member position (``IssueTimes.first`` / ``last``)."""
    streams = graph.stream_members()
    by_rank: dict[int, list[str]] = {}
    for rank, stream in streams:
        by_rank.setdefault(rank, []).append(stream)
    columns = {name: graph.codes(name) for name in _SAME}
    dep_start, dep_ids = graph.codes("dep_start"), graph.codes("dep_ids")
    comm = columns["comm"]
    held: dict[tuple[int, ...], int] = {}
    codes, counts = np.unique(graph.codes("group")[comm >= 0], return_counts=True)
    for code, count in zip(codes.tolist(), counts.tolist(), strict=True):
        ranks = tuple(r for r in graph.groups[code] if r not in graph.virtual)
        if len(ranks) >= 2:
            held[ranks] = held.get(ranks, 0) + count
    faults = (delays or {}, slowdowns or {}, hangs or {})
    taken: set[int] = set()
    out = []
    for ranks in sorted(held, key=lambda r: (-held[r], -len(r), r)):
        if taken.intersection(ranks):
            continue  # a rank is in one group; checking it again would cost, not change
        group = _check(graph, ranks, streams, by_rank, columns, dep_start, dep_ids, faults, issue)
        if group is not None:
            taken.update(group.ranks)
            out.append(group)
    return out


def _check(graph: TaskGraph, ranks: tuple[int, ...],
           streams: Mapping[tuple[int, str], tuple[object, object]],
           by_rank: Mapping[int, list[str]], columns: Mapping[str, np.ndarray],
           dep_start: np.ndarray, dep_ids: np.ndarray,
           faults: tuple[Mapping[int, float], ...],
           issue: tuple[np.ndarray, np.ndarray] | None) -> LockstepGroup | None:
    """``ranks`` as a lockstep group, or None where any condition fails."""
    delays, slowdowns, hangs = faults
    if any(r in hangs for r in ranks):
        return None
    if len({delays.get(r, 0.0) for r in ranks}) > 1 or \
            len({slowdowns.get(r, 1.0) for r in ranks}) > 1:
        return None
    names = sorted(by_rank.get(ranks[0], ()))
    if any(sorted(by_rank.get(r, ())) != names for r in ranks):
        return None
    tasks, shared, places = {}, {}, {}
    for s in names:
        rows = [np.frombuffer(streams[(r, s)][0], dtype=np.int32) for r in ranks]  # type: ignore[call-overload]
        if len({len(row) for row in rows}) > 1:
            return None
        matrix = np.stack(rows)
        same = (matrix == matrix[0]).all(axis=0)
        if len(ranks) > 2:  # a position is shared by all or owned by each, never mixed
            own = ~same
            sorted_cols = np.sort(matrix[:, own], axis=0)
            if own.any() and bool((sorted_cols[1:] == sorted_cols[:-1]).any()):
                return None
        tasks[s], shared[s] = matrix, same
        places[s] = np.stack([np.frombuffer(streams[(r, s)][1], dtype=np.int64)  # type: ignore[call-overload]
                              for r in ranks])
    # Counterparts: first member's own task -> each member's (sorted for searchsorted).
    keys = np.concatenate([tasks[s][0, ~shared[s]] for s in names]).astype(np.int64)
    values = np.concatenate([tasks[s][:, ~shared[s]] for s in names], axis=1).astype(np.int64)
    order = np.argsort(keys)
    keys, values = keys[order], values[:, order]
    syncs = 0
    members: list[tuple[np.ndarray, np.ndarray]] = []  # member collectives per stream
    for s in names:
        own = ~shared[s]
        first, rest = tasks[s][0, own], tasks[s][1:, own]
        for column in columns.values():
            if (column[rest] != column[first]).any():
                return None
        if issue is not None:
            for times in issue:
                a, b = times[places[s][0, own]], times[places[s][1:, own]]
                if not np.array_equal(np.broadcast_to(a, b.shape), b, equal_nan=True):
                    return None
        collective = columns["comm"][first] >= 0
        syncs += int(collective.sum())
        for k in range(1, len(ranks)):
            if not _deps_parallel(first[~collective], tasks[s][k, own][~collective], keys,
                                  values[k], dep_start, dep_ids):
                return None
        if not _shared_deps_parallel(tasks[s][0, shared[s]], keys, values, dep_start,
                                     dep_ids):
            return None
        members.append((first[collective], tasks[s][:, own][:, collective]))
    # Last (a loop per task): what each member waits for at its member collectives.
    for first, each in members:
        for k in range(1, len(ranks)):
            for t0, tk in zip(first.tolist(), each[k].tolist(), strict=True):
                mapped = _counterpart(np.asarray(_waited(graph, t0, ranks[0]), dtype=np.int64),
                                      keys, values[k])
                if mapped.tolist() != _waited(graph, tk, ranks[k]):
                    return None
    return LockstepGroup(ranks, tasks, shared, syncs)


def _waited(graph: TaskGraph, tid: int, rank: int) -> list[int]:
    """The dependencies ``rank`` waits for before it reaches collective ``tid``, as the
    executor splits them (``Executor._dep_ids``): those it takes part in, and those none of
    the collective's members does (the other members' own are theirs to wait for)."""
    members = set(graph.ranks(tid))
    out = []
    for dep in graph.deps(tid):
        dep_ranks = graph.ranks(dep)
        if rank in dep_ranks or (not members.intersection(dep_ranks)
                                 and not all(r in graph.virtual for r in dep_ranks)):
            out.append(dep)
    return out


def _deps(tids: np.ndarray, dep_start: np.ndarray, dep_ids: np.ndarray) -> tuple[np.ndarray,
                                                                                 np.ndarray]:
    """(dependency ids, how many per task) of ``tids``, concatenated in order."""
    lo, hi = dep_start[tids], dep_start[np.asarray(tids) + 1]
    count = hi - lo
    where = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count) + \
        np.repeat(lo, count)
    return dep_ids[where], count


def _counterpart(deps: np.ndarray, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each dependency's counterpart on one member (``keys`` -> ``values``), or itself."""
    if not len(keys):
        return deps
    at = np.minimum(np.searchsorted(keys, deps), len(keys) - 1)
    return np.where(keys[at] == deps, values[at], deps)


def _deps_parallel(first: np.ndarray, other: np.ndarray, keys: np.ndarray, values: np.ndarray,
                   dep_start: np.ndarray, dep_ids: np.ndarray) -> bool:
    """Whether each of ``other``'s tasks depends on the counterparts of the same position's
    task in ``first`` (same count, same order)."""
    a, count_a = _deps(first, dep_start, dep_ids)
    b, count_b = _deps(other, dep_start, dep_ids)
    return bool(np.array_equal(count_a, count_b) and
                np.array_equal(_counterpart(a, keys, values), b))


def _shared_deps_parallel(tids: np.ndarray, keys: np.ndarray, values: np.ndarray,
                          dep_start: np.ndarray, dep_ids: np.ndarray) -> bool:
    """Whether each shared task of ``tids`` depends on every member's counterpart of each
    dependency it has on the first member's own tasks."""
    if not len(keys) or not len(tids):
        return True
    deps, count = _deps(tids, dep_start, dep_ids)
    owner = np.repeat(np.asarray(tids, dtype=np.int64), count)
    width = int(max(int(dep_ids.max(initial=0)), int(values.max(initial=0)))) + 1
    pairs = owner * width + deps  # (shared task, dependency) as one int64
    at = np.minimum(np.searchsorted(keys, deps), len(keys) - 1)
    mine = keys[at] == deps
    owner, at = owner[mine], at[mine]
    return all(bool(np.isin(owner * width + values[k][at], pairs).all())
               for k in range(1, len(values)))

"""The per-position parts of the lockstep check, vectorised over a batch (for lockstep.py).

Arrays are over the batch's entries (see ``lockstep._check_aligned``): ``t`` each entry's
task, ``tr`` the first member's task at the same position, ``row_of`` the entry's row
(``rows[row]`` its rank), ``back[row]`` how far the row's entries lie after its first
member's; ``own`` marks the first members' entries at positions each member holds its own
task. ``mark(entries)`` fails the groups of those entries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from simtrain.engine.lockstep_layout import StreamLayout, expand
from simtrain.engine.lockstep_waits import waited

if TYPE_CHECKING:
    from simtrain.engine.lockstep import _Columns

Mark = Callable[[np.ndarray], None]


def compare_columns(layout: StreamLayout, columns: _Columns, at: np.ndarray,
                    entry: np.ndarray, ref: np.ndarray, t: np.ndarray, tr: np.ndarray,
                    issue: tuple[np.ndarray, np.ndarray] | None, mark: Mark) -> None:
    """Member tasks ``t[at]`` must equal their counterparts ``tr[at]`` in every compared
    column and in host issue times (NaN equal to NaN)."""
    mine, first = t[at], tr[at]
    bad = np.zeros(len(at), dtype=bool)
    for column in (*columns.words, *columns.floats):
        bad |= column[mine] != column[first]
    if issue is not None:
        places, ref_places = layout.place[entry[at]], layout.place[ref[at]]
        for times in issue:
            a, b = times[ref_places], times[places]
            bad |= (a != b) & ~(np.isnan(a) & np.isnan(b))
    mark(at[bad])


def index_in(values: np.ndarray, queries: np.ndarray, bound: int) -> np.ndarray:
    """Each query's index in ``values`` (each query is one of them, all below ``bound``)."""
    place = np.empty(bound, dtype=np.int64)
    place[values] = np.arange(len(values))
    return place[queries]


def _relative(layout: StreamLayout, own: np.ndarray, deps: np.ndarray,
              rank0: np.ndarray) -> np.ndarray:
    """Where each of ``deps`` is one of its first member's own tasks (a task with a
    counterpart on each member): its position among that rank's entries; else -1."""
    where = layout.entry(deps, rank0)
    keyed = where >= 0
    keyed[keyed] = own[where[keyed]]
    return np.where(keyed, where - layout.start[rank0], -1)


def _counterparts(layout: StreamLayout, rel: np.ndarray, deps: np.ndarray,
                  rank: np.ndarray) -> np.ndarray:
    """``deps`` on member ``rank``: the task at position ``rel`` where it has one, else
    itself."""
    return np.where(rel >= 0, layout.tid[layout.start[rank] + np.maximum(rel, 0)], deps)


def member_deps(layout: StreamLayout, columns: _Columns, at: np.ndarray, t: np.ndarray,
                tr: np.ndarray, rows: np.ndarray, row_of: np.ndarray, back: np.ndarray,
                firsts: np.ndarray, own: np.ndarray, mark: Mark) -> None:
    """Member compute tasks ``t[at]`` must depend on their first member's task's
    dependencies, each replaced by its counterpart (``firsts``: the first members'
    entries of those positions, in order)."""
    start, ids, count = columns.dep_start, columns.dep_ids, columns.dep_count
    mine = t[at]
    n = count[mine]
    unequal = n != count[tr[at]]
    mark(at[unequal])
    at, mine, n = at[~unequal], mine[~unequal], n[~unequal]
    if not len(at) or not int(n.sum()):
        return
    first_tasks = t[firsts]
    n0 = count[first_tasks]
    deps = ids[expand(start[first_tasks], n0)]
    rel = _relative(layout, own, deps, np.repeat(rows[row_of[firsts]], n0))
    where = index_in(firsts, at - back[row_of[at]], len(t))  # each entry's first member's
    src = expand((np.cumsum(n0) - n0)[where], n)
    expected = _counterparts(layout, rel[src], deps[src], np.repeat(rows[row_of[at]], n))
    bad = np.flatnonzero(expected != ids[expand(start[mine], n)])
    mark(at[np.searchsorted(np.cumsum(n), bad, side="right")])


def shared_deps(layout: StreamLayout, columns: _Columns, at: np.ndarray, t: np.ndarray,
                rows: np.ndarray, row_of: np.ndarray, row0: np.ndarray, size: np.ndarray,
                group_of_row: np.ndarray, own: np.ndarray, mark: Mark) -> None:
    """Shared tasks ``t[at]`` (first members' entries) must depend on every member's
    counterpart of each dependency they have on the first member's own tasks."""
    if not len(at):
        return
    tasks = t[at].astype(np.int64)
    n = columns.dep_count[tasks]
    deps = columns.dep_ids[expand(columns.dep_start[tasks], n)]
    owner = np.repeat(np.arange(len(at)), n)
    rank0 = rows[row_of[at]]
    rel = _relative(layout, own, deps, rank0[owner])
    hit = np.flatnonzero(rel >= 0)
    if not len(hit):
        return
    group = group_of_row[row_of[at[owner[hit]]]]
    others = size[group] - 1
    member_rows = expand(row0[group] + 1, others)
    hit = np.repeat(hit, others)
    value = layout.tid[layout.start[rows[member_rows]] + rel[hit]].astype(np.int64)
    # First try the dependency k places after the first member's (deps listed by member)
    task_of = owner[hit]
    guess = hit - (np.cumsum(n) - n)[task_of] + member_rows - np.repeat(row0[group], others)
    inside = guess < n[task_of]
    found = np.zeros(len(hit), dtype=bool)
    found[inside] = columns.dep_ids[columns.dep_start[tasks[task_of[inside]]] +
                                    guess[inside]] == value[inside]
    missed = np.flatnonzero(~found)
    if not len(missed):
        return
    pairs = np.sort(tasks[owner] * columns.tasks + deps)
    query = tasks[task_of[missed]] * columns.tasks + value[missed]
    found = pairs[np.minimum(np.searchsorted(pairs, query), len(pairs) - 1)] == query
    mark(at[task_of[missed[~found]]])


def member_waits(layout: StreamLayout, columns: _Columns, own: np.ndarray,
                 first_tasks: np.ndarray, first_ranks: np.ndarray, tasks: np.ndarray,
                 ranks: np.ndarray, where: np.ndarray) -> np.ndarray:
    """Which member collectives (``tasks`` on ``ranks``, each at the position of first
    member collective ``where``) fail: a member must wait for the counterparts of what its
    first member waits for (``waited``), in the same order."""
    bad_at = np.zeros(len(tasks), dtype=bool)
    if not len(tasks):
        return bad_at
    start, n, deps = waited(layout, columns,
                            np.concatenate([first_tasks, tasks]).astype(np.int64),
                            np.concatenate([first_ranks, ranks]))
    k = len(first_tasks)
    n0 = n[:k]
    pos0 = expand(start[:k], n0)
    deps0 = deps[pos0]
    rel = _relative(layout, own, deps0, np.repeat(first_ranks, n0))
    mine_n = n[k:]
    bad_at |= mine_n != n0[where]
    keep = np.flatnonzero(~bad_at)
    where, mine_n = where[keep], mine_n[keep]
    if not int(mine_n.sum()):
        return bad_at
    src = expand((np.cumsum(n0) - n0)[where], mine_n)
    expected = _counterparts(layout, rel[src], deps0[src], np.repeat(ranks[keep], mine_n))
    actual = deps[expand(start[k:][keep], mine_n)]
    bad = np.flatnonzero(expected != actual)
    bad_at[keep[np.searchsorted(np.cumsum(mine_n), bad, side="right")]] = True
    return bad_at

"""Lockstep groups: ranks whose streams do the same work, task for task (the static check).

The members of a tensor-parallel group (or of any group of ranks) often run the same
compute at the same times and meet at the same collectives. An engine that runs such a
group as one actor does its bookkeeping once instead of once per member; it is exact only
while nothing makes one member differ from the others. This module finds the groups for
which nothing *in the task graph or the fault tables* can: ``lockstep_groups`` returns
rank sets whose every stream is *parallel* to the first member's:

- each member has the same streams, with the same number of tasks;
- at each position, either every member holds the same task (a *shared* task: a
  collective of the whole group), or each holds its own (a *member* task) and those
  tasks agree in kind, name, duration, FLOPs, bytes, meta and communication spec;
- a member task's dependencies are the first member's, each replaced by its counterpart
  on this member where it has one (the task at the same position of the same stream),
  and kept where it has none (a task outside the group, which every member then waits
  for alike); a shared task's dependencies hold each member's counterparts;
- the members have the same straggler delay and slowdown, none hangs, and each position's
  host issue times are equal.

What the static check cannot rule out is named per group: ``syncs`` counts the member
collectives (a pipeline send, a data-parallel all-reduce with other groups), where each
member meets ranks outside the group, so members may leave them at different times (a
slow link on one rail, contention). An actor must compare the members' times there and
split when they differ. ``benchmarks/bench_lockstep.py`` measures how often they do.

The check runs on ``StreamLayout`` (every rank's streams as one flat array, lockstep_layout.py)
and compares all candidate groups of a batch at once with numpy: the members' tasks position
by position, each task's columns packed into integer words, dependencies through each task's
entry on the first member (``StreamLayout.entry``). Cost: near-linear in the members' tasks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from simtrain.engine.lockstep_deps import (
    compare_columns,
    index_in,
    member_deps,
    member_waits,
    shared_deps,
)
from simtrain.engine.lockstep_layout import StreamLayout, column, expand

if TYPE_CHECKING:
    from simtrain.engine.taskgraph import TaskGraph

_CHUNK = 1 << 18  # entries checked at once (a few MiB of arrays)

# Task columns a member task must share with its counterpart (the stream follows from the
# position: members' streams have the same names and lengths).
_SAME = ("kind", "name", "stream", "duration", "flops", "nbytes", "comm", "meta")


@dataclass(frozen=True)
class LockstepGroup:
    """Ranks whose streams are parallel (see the module docstring).

    ``tasks[s]`` is an (members x tasks) array of task ids on stream ``s``, row k for
    ``ranks[k]``; ``shared[s]`` marks the positions where every row holds the same task.
    Streams in name order; the arrays are read-only views into one array per group.
    """

    ranks: tuple[int, ...]
    tasks: dict[str, np.ndarray]
    shared: dict[str, np.ndarray]
    syncs: int  # member collectives: where members may leave at different times

    @property
    def member_tasks(self) -> int:
        """Tasks the members run that are their own (counted over every member)."""
        return sum(int((~self.shared[s]).sum()) * len(self.ranks) for s in self.tasks)


def lockstep_groups(graph: TaskGraph, *, delays: Mapping[int, float] | None = None,
                    slowdowns: Mapping[int, float] | None = None,
                    hangs: Mapping[int, float] | None = None,
                    issue: tuple[np.ndarray, np.ndarray] | None = None) -> list[LockstepGroup]:
    """The disjoint lockstep groups of ``graph``: candidates are the rank groups of its
    collectives (two or more simulated ranks), tried in order of how many collectives
    they hold (most first: those are the tasks a group runs once), then size and ranks; a
    rank joins the first group that passes. ``issue``: the host issue times' (first,
    last) columns by member position (``IssueTimes.first`` / ``last``)."""
    held: dict[tuple[int, ...], int] = {}
    comm = graph.codes("comm")
    codes, counts = np.unique(graph.codes("group")[comm >= 0], return_counts=True)
    for code, count in zip(codes.tolist(), counts.tolist(), strict=True):
        ranks = tuple(r for r in graph.groups[code] if r not in graph.virtual)
        if len(ranks) >= 2:
            held[ranks] = held.get(ranks, 0) + count
    if not held:
        return []
    delays, slowdowns, hangs = delays or {}, slowdowns or {}, hangs or {}
    layout, columns = StreamLayout(graph), _Columns(graph)
    simulated = len({r for ranks in held for r in ranks})
    order = sorted(held, key=lambda r: (-held[r], -len(r), r))
    taken: set[int] = set()
    out: list[LockstepGroup] = []
    i = 0
    # A batch: the next candidates that share no rank with each other or a taken group.
    # Each would be checked in turn one by one, and its check does not depend on the
    # others' outcome, so the batch is checked at once.
    while i < len(order) and len(taken) < simulated:
        batch: list[tuple[int, ...]] = []
        used: set[int] = set()
        while i < len(order):
            ranks = order[i]
            if not taken.isdisjoint(ranks):
                i += 1
                continue  # a rank is in one group; checking it again would cost, not change
            if not used.isdisjoint(ranks):
                break
            i += 1
            if any(r in hangs for r in ranks) or \
                    len({delays.get(r, 0.0) for r in ranks}) > 1 or \
                    len({slowdowns.get(r, 1.0) for r in ranks}) > 1:
                continue  # fails: its ranks stay free for the candidates after it
            batch.append(ranks)
            used.update(ranks)
        for group in _check(layout, columns, batch, issue):
            if group is not None:
                taken.update(group.ranks)
                out.append(group)
    return out


class _Columns:
    """The task columns the check compares, integer codes packed into int64 words."""

    def __init__(self, graph: TaskGraph) -> None:
        self.words: list[np.ndarray] = []
        used = 63
        for name, size in (("kind", len(graph.kinds)), ("name", len(graph.names)),
                           ("comm", len(graph.comms) + 1), ("meta", len(graph.metas))):
            codes = column(graph, name)
            bits = max(size - 1, 1).bit_length()
            if used + bits > 63:
                self.words.append(codes.astype(np.int64))
                used = bits
            else:
                self.words[-1] <<= bits
                self.words[-1] |= codes
                used += bits
            if name == "comm":
                self.words[-1] += 1  # -1 (compute) -> 0
        self.floats = [column(graph, name) for name in ("duration", "flops", "nbytes")]
        self.comm = column(graph, "comm")
        self.dep_start = column(graph, "dep_start")
        self.dep_ids = column(graph, "dep_ids")
        self.dep_count = np.diff(self.dep_start)
        self.tasks = len(graph)


def _check(layout: StreamLayout, columns: _Columns, batch: Sequence[tuple[int, ...]],
           issue: tuple[np.ndarray, np.ndarray] | None) -> list[LockstepGroup | None]:
    """Each of ``batch``'s disjoint rank groups as a lockstep group, or None. Checked in
    chunks of about ``_CHUNK`` entries (arrays that stay in cache), the member
    collectives' waits once for the batch (a collective may reach every chunk)."""
    out: list[LockstepGroup | None] = [None] * len(batch)
    if not batch:
        return out
    rows = np.fromiter(chain.from_iterable(batch), dtype=np.int64)
    first = rows[np.repeat(np.cumsum([0, *map(len, batch)])[:-1], list(map(len, batch)))]
    split = (layout.counts[rows] != layout.counts[first]).any(axis=1)
    bad = set(np.repeat(np.arange(len(batch)), list(map(len, batch)))[split].tolist())
    aligned = [g for g in range(len(batch)) if g not in bad]
    entries = (layout.length[[batch[g][0] for g in aligned]] *
               np.fromiter((len(batch[g]) for g in aligned), dtype=np.int64)).tolist()
    waits: list[list[np.ndarray]] = [[] for _ in range(7)]
    try:
        chunk: list[int] = []
        total = 0
        for g, n in zip([*aligned, -1], [*entries, 0], strict=True):
            if chunk and (g < 0 or total + n > _CHUNK):
                groups = _check_aligned(layout, columns, [batch[c] for c in chunk], issue,
                                        np.asarray(chunk), waits)
                for at, group in zip(chunk, groups, strict=True):
                    out[at] = group
                chunk, total = [], 0
            chunk.append(g)
            total += n
        if waits[0]:
            first_tasks, first_ranks, tasks, ranks, where, owners = (
                np.concatenate(w) for w in waits[:6])
            offsets = np.cumsum([0, *(len(w) for w in waits[0])])[:-1]
            where += np.repeat(offsets, [len(w) for w in waits[2]])
            failed = member_waits(layout, columns, layout.scratch, first_tasks, first_ranks,
                                  tasks, ranks, where)
            for g in set(owners[failed].tolist()):
                out[g] = None
    finally:
        for owned in waits[6]:
            layout.scratch[owned] = False
    return out


def _check_aligned(layout: StreamLayout, columns: _Columns, batch: Sequence[tuple[int, ...]],
                   issue: tuple[np.ndarray, np.ndarray] | None, index: np.ndarray,
                   waits: list[list[np.ndarray]]) -> list[LockstepGroup | None]:
    """As ``_check``, for groups whose members' streams have equal names and lengths, but
    the member collectives' waits: appended to ``waits`` (with the first members' entries
    this marks as own, to clear) for ``_check``, ``index`` the groups' places in its batch.

    Batch entry arrays: each member's entries in order, members of a group one after
    another (row k for member k); ``ref`` is the first member's entry at the same position.
    """
    if not batch:
        return []
    size = np.fromiter(map(len, batch), dtype=np.int64, count=len(batch))
    rows = np.fromiter(chain.from_iterable(batch), dtype=np.int64, count=int(size.sum()))
    row0 = np.cumsum(size) - size
    group_of_row = np.repeat(np.arange(len(batch)), size)
    rank0 = rows[row0[group_of_row]]
    length, base = layout.length[rows], layout.start[rows]
    offset = np.cumsum(length) - length
    back = offset - offset[row0[group_of_row]]  # a row's entries minus its first member's
    row_of = np.repeat(np.arange(len(rows), dtype=np.int32), length)
    entry = expand(base, length)
    ref = entry - np.repeat(base - layout.start[rank0], length)
    t, tr = layout.tid[entry], layout.tid[ref]
    fail = np.zeros(len(batch), dtype=bool)

    def mark(at: np.ndarray) -> None:
        fail[group_of_row[row_of[at]]] = True

    differ = t != tr  # a member's own task (entries of members 1.. only)
    own = layout.scratch
    owned = ref[differ]
    own[owned] = True
    waits[6].append(owned)
    own_at = own[ref]
    rest = ref != entry
    mark(np.flatnonzero(own_at & ~differ & rest))  # shared by some members only
    many = np.flatnonzero(differ & (layout.count[t] >= 2))
    if len(many) > 1:  # one task at one position of two members
        key = ref[many] * columns.tasks + t[many]
        order = np.argsort(key, kind="stable")
        key = key[order]
        mark(many[order[1:][key[1:] == key[:-1]]])
    compared = np.flatnonzero(differ)
    compare_columns(layout, columns, compared, entry, ref, t, tr, issue, mark)
    collective = columns.comm[tr[compared]] >= 0
    ref_row = ~rest & own_at
    member_deps(layout, columns, compared[~collective], t, tr, rows, row_of, back,
                 np.flatnonzero(ref_row & (columns.comm[t] < 0)), own, mark)
    shared_deps(layout, columns, np.flatnonzero(~rest & ~own_at), t, rows, row_of,
                 row0, size, group_of_row, own, mark)
    ones = np.flatnonzero(ref_row & (columns.comm[t] >= 0))
    coll = compared[collective]
    for pending, values in zip(waits, (
            t[ones], rows[row_of[ones]], t[coll], rows[row_of[coll]],
            index_in(ones, coll - back[row_of[coll]], len(t)), index[group_of_row[row_of[coll]]]),
            strict=False):
        pending.append(values)
    syncs = np.bincount(group_of_row[row_of[ones]], minlength=len(batch))
    t.setflags(write=False)
    out: list[LockstepGroup | None] = []
    for g, ranks in enumerate(batch):
        if fail[g]:
            out.append(None)
            continue
        r, m = int(row0[g]), len(ranks)
        n, at = int(length[r]), int(offset[r])
        matrix = t[at:at + m * n].reshape(m, n)
        same = ~own_at[at:at + n]
        same.setflags(write=False)
        tasks, shared = {}, {}
        a = 0
        for name, count in zip(layout.stream_order, layout.counts[ranks[0]].tolist(),
                               strict=True):
            if count:
                tasks[name], shared[name] = matrix[:, a:a + count], same[a:a + count]
                a += count
        out.append(LockstepGroup(tuple(ranks), tasks, shared, int(syncs[g])))
    return out

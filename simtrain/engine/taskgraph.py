"""The task graph: the only contract between parallel strategies and the engine.

Strategies emit compute tasks (a fixed duration on one rank's stream) and communication
tasks (a collective or point-to-point transfer over a group of ranks, on one stream of each
member). Tasks on the same (rank, stream) run in the order they were added, like kernels
launched on a CUDA stream; ``deps`` add cross-stream ordering. A task may only depend on
tasks added before it, so the graph is acyclic by construction.

The graph is held as columns (structure of arrays), not one object per task: integer
codes into interned tables for kind, name, stream, rank group, communication spec and
meta, floats for duration / FLOPs / bytes, and the dependencies as one CSR array. An
explicit 512-GPU step has millions of tasks; as objects they cost ~600 bytes each, as
columns ~80. ``tasks`` is a read-only sequence view that builds a ``Task`` per access.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain, repeat
from typing import Any, cast

import numpy as np

from simtrain.engine.task import (  # noqa: F401  (re-exported: the graph's public types)
    COMM_OPS,
    CommSpec,
    Task,
    TaskGraphError,
    TaskList,
)
from simtrain.engine.taskcolumns import TaskColumns, finite_at_least, listed, row_values
from simtrain.limits import MAX_TASKS


class TaskGraph(TaskColumns):
    """An append-only table of tasks over ``num_ranks`` ranks (see the module docstring).

    ``virtual``: ranks not simulated (symmetric fidelity): they mirror simulated ranks, so
    a collective does not wait for them and records no spans for them.
    """

    def __init__(self, num_ranks: int, virtual: Iterable[int] = ()) -> None:
        super().__init__(num_ranks)
        self.virtual: set[int] = set(virtual)
        # Validated copies by the identity of the caller's sequence: the lowering hands the
        # same object for every collective of a group, so tasks share one tuple (and the
        # executor's per-copies link-weight cache hits across them).
        self._checked_copies: dict[int, tuple[Sequence[Sequence[int]],
                                              tuple[tuple[int, ...], ...]]] = {}
        # Validated all-to-all-v matrices by the identity of the caller's splits (the
        # lowering hands one object per layer template for every microbatch), kept alive.
        self._checked_splits: dict[int, tuple[object, tuple[tuple[float, ...], ...],
                                              float]] = {}

    @property
    def tasks(self) -> TaskList:
        """The tasks in id order, as a read-only sequence of ``Task`` views."""
        return TaskList(self)

    # ---- reading one row ---------------------------------------------------------------
    def task(self, i: int) -> Task:
        """Task ``i`` as an object."""
        c = self.comm[i]
        return Task(i, self.kinds[self.kind[i]], self.names[self.name[i]],
                    self.groups[self.group[i]], self.stream_names[self.stream[i]],
                    self.duration[i], self.flops[i],
                    self.nbytes[i], self.deps(i), None if c < 0 else self.comms[c],
                    dict(self.metas[self.meta[i]]))

    def deps(self, i: int) -> tuple[int, ...]:
        """Ids of the tasks task ``i`` depends on."""
        return tuple(self.dep_ids[self.dep_start[i]:self.dep_start[i + 1]])

    def ranks(self, i: int) -> tuple[int, ...]:
        return self.groups[self.group[i]]

    def comm_spec(self, i: int) -> CommSpec | None:
        c = self.comm[i]
        return None if c < 0 else self.comms[c]

    def meta_of(self, i: int) -> dict[str, Any]:
        """Task ``i``'s meta (shared by every task with the same meta: do not mutate)."""
        meta: dict[str, Any] = self.metas[self.meta[i]]
        return meta

    # ---- building ----------------------------------------------------------------------
    def _append(self, kind: str, name: str, group: int, stream: str, duration: float,
                flops: float, nbytes: float, deps: Sequence[int], comm: int,
                meta: Mapping[str, Any] | None) -> int:
        tid = len(self.kind)
        self.kind.append(self.kinds.code(kind))
        self.name.append(self.names.code(name))
        self.stream.append(self.stream_names.code(stream))
        self.group.append(group)
        self.duration.append(duration)
        self.flops.append(flops)
        self.nbytes.append(nbytes)
        self.comm.append(comm)
        self.meta.append(self._meta_code(meta))
        self.dep_ids.extend(deps)
        self.dep_start.append(len(self.dep_ids))
        return tid

    def _check(self, name: str, ranks: tuple[int, ...], deps: tuple[int, ...]) -> None:
        tid = len(self.kind)
        if tid >= MAX_TASKS:
            raise TaskGraphError(
                f"the task graph exceeds {MAX_TASKS:,} tasks (about 100 bytes each): use "
                "sim.granularity: layer or stage, fewer microbatches or layers, "
                "or sim.fidelity: symmetric")
        for rank in ranks:
            if not 0 <= rank < self.num_ranks:
                raise TaskGraphError(
                    f"task {name!r} uses rank {rank}, outside 0..{self.num_ranks - 1}"
                )
        if len(set(ranks)) != len(ranks):
            raise TaskGraphError(f"task {name!r} lists a rank twice: {ranks}")
        for dep in deps:
            if not 0 <= dep < tid:
                raise TaskGraphError(
                    f"task {name!r} depends on task {dep}, which was not added before it"
                )

    def compute(
        self,
        rank: int,
        name: str,
        duration: float,
        *,
        kind: str = "compute",
        stream: str = "compute",
        deps: Iterable[int] = (),
        flops: float = 0.0,
        nbytes: float = 0.0,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Add a compute task of ``duration`` seconds on ``rank``; returns its id."""
        if not (math.isfinite(duration) and duration >= 0):
            raise TaskGraphError(f"task {name!r} needs a finite duration >= 0 s, got {duration}")
        if not (math.isfinite(flops) and math.isfinite(nbytes)):
            raise TaskGraphError(f"task {name!r} has non-finite FLOPs or bytes "
                                 f"({flops}, {nbytes})")
        deps = deps if isinstance(deps, tuple | list) else tuple(deps)
        # The checks of _check for one rank and the appends of _append, inline: a large
        # graph adds millions of these.
        tid = len(self.kind)
        if tid >= MAX_TASKS or not 0 <= rank < self.num_ranks or (
                deps and not (0 <= min(deps) and max(deps) < tid)):
            self._check(name, (rank,), tuple(deps))  # raises the error
        single = self._single
        group = single[rank] if rank < len(single) else -1
        if group < 0:
            group = self._single_code(rank)
        code = self.kinds.lookup.get(kind)
        self.kind.append(code if code is not None else self.kinds.code(kind))
        code = self.names.lookup.get(name)
        self.name.append(code if code is not None else self.names.code(name))
        code = self.stream_names.lookup.get(stream)
        self.stream.append(code if code is not None else self.stream_names.code(stream))
        self.group.append(group)
        self.duration.append(duration)
        self.flops.append(flops)
        self.nbytes.append(nbytes)
        self.comm.append(-1)
        self.meta.append(self._meta_code(meta))
        if deps:
            self.dep_ids.extend(deps)
        self.dep_start.append(len(self.dep_ids))
        return tid

    def compute_each(
        self,
        ranks: Sequence[int],
        name: str,
        durations: Sequence[float] | float,
        *,
        kind: str = "compute",
        stream: str = "compute",
        deps: Sequence[Sequence[int]],
        flops: Sequence[float] | float,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Add one compute task per rank: ``ranks[i]`` runs ``durations[i]`` seconds of
        ``flops[i]`` after ``deps[i]`` (a number: every rank's), in rank order, as
        ``compute`` would one by one. Returns the first task's id (the others follow)."""
        n = len(ranks)
        first = len(self.kind)
        if not n:
            return first
        flat = list(chain.from_iterable(deps))
        durations, flops = row_values(durations), row_values(flops)
        if (first + n > MAX_TASKS or min(ranks) < 0 or max(ranks) >= self.num_ranks
                or flat and (min(flat) < 0 or max(flat) >= first) or len(deps) != n
                or not finite_at_least(durations, n, 0.0)
                or not finite_at_least(flops, n, -math.inf)):
            for r, t, d, f in zip(ranks, listed(durations, n), deps, listed(flops, n),
                                  strict=True):  # raises the error
                self.compute(r, name, t, kind=kind, stream=stream, deps=d, flops=f, meta=meta)
            return first
        return self._extend(n, kind, name, stream, self._single_codes(ranks), durations, flops,
                            0.0, -1, meta, deps, flat)

    def collective(
        self,
        op: str,
        ranks: Iterable[int],
        nbytes: float,
        name: str,
        *,
        kind: str = "comm",
        stream: str = "comm",
        deps: Iterable[int] = (),
        algorithm: str = "auto",
        splits: Sequence[Sequence[float]] | None = None,
        copies: Sequence[Sequence[int]] = (),
        meta: Mapping[str, Any] | None = None,
        sms: int = 0,
    ) -> int:
        """Add a collective ``op`` of ``nbytes`` over ``ranks`` (ranks[0] is the root where one
        is needed); ``splits[i][j]`` gives all-to-all-v's bytes from ranks[i] to ranks[j];
        ``copies`` are identical unsimulated groups whose traffic shares the network; ``sms``
        > 0: the SMs its kernels hold (not NCCL's channels, ``CommSpec.sms``)."""
        if op not in COMM_OPS:
            raise TaskGraphError(f"unknown communication op {op!r}; known: {', '.join(COMM_OPS)}")
        if not (math.isfinite(nbytes) and nbytes >= 0):
            raise TaskGraphError(f"task {name!r} needs a finite size >= 0 bytes, got {nbytes}")
        group = tuple(ranks)
        if not group:
            raise TaskGraphError(f"task {name!r} has an empty group")
        matrix = None
        known_splits = self._checked_splits.get(id(splits)) if splits is not None else None
        if op == "all_to_all_v" and splits is not None and known_splits is not None \
                and known_splits[0] is splits and len(splits) == len(group):
            _, matrix, nbytes = known_splits
        elif op == "all_to_all_v":
            if splits is None or len(splits) != len(group) or any(
                len(row) != len(group) for row in splits
            ):
                raise TaskGraphError(
                    f"all_to_all_v {name!r} needs a {len(group)}x{len(group)} splits matrix")
            matrix = tuple(tuple(float(x) for x in row) for row in splits)
            if not all(math.isfinite(x) and x >= 0 for row in matrix for x in row):
                raise TaskGraphError(f"all_to_all_v {name!r}: splits must be finite bytes >= 0")
            nbytes = max(sum(row) for row in matrix)
            self._checked_splits[id(splits)] = (splits, matrix, nbytes)
        deps = tuple(deps)
        self._check(name, group, deps)
        checked = self._copies(name, group, copies)
        # Specs repeat every microbatch: intern them, keyed by the copies' identity (the
        # copies tuple can hold thousands of groups; it is kept alive by _checked_copies).
        key = (op, nbytes, algorithm, matrix, id(checked), sms)
        code = self.comms.lookup.get(key)
        if code is None:
            code = self._spec(key, checked)
        return self._append(kind, name, self.groups.code(group), stream, 0.0, 0.0, nbytes,
                            deps, code, meta)

    def _copies(self, name: str, group: tuple[int, ...],
                copies: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
        known = self._checked_copies.get(id(copies))
        if known is not None and known[0] is copies and len(group) == len(known[1][0]):
            return known[1]
        out = tuple(tuple(c) for c in copies)
        for copy in out:
            if len(copy) != len(group):
                raise TaskGraphError(f"task {name!r}: copy {copy} does not match the group "
                                     f"size {len(group)}")
            for rank in copy:
                if not 0 <= rank < self.num_ranks:
                    raise TaskGraphError(f"task {name!r}: copy uses rank {rank}, outside "
                                         f"0..{self.num_ranks - 1}")
        if out:
            self._checked_copies[id(copies)] = (copies, out)
        return out

    def send_recv(
        self,
        src: int,
        dst: int,
        nbytes: float,
        name: str,
        *,
        kind: str = "comm",
        stream: str = "comm",
        deps: Iterable[int] = (),
        copies: Sequence[Sequence[int]] = (),
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Add a point-to-point transfer; both ranks must reach it on ``stream`` (send/recv)."""
        return self.collective(
            "send_recv", (src, dst), nbytes, name, kind=kind, stream=stream, deps=deps,
            algorithm="direct", copies=copies, meta=meta,
        )

    def collective_each(
        self,
        op: str,
        groups: Sequence[tuple[int, ...]],
        nbytes: float,
        name: str,
        *,
        kind: str = "comm",
        stream: str = "comm",
        deps: Sequence[Sequence[int]],
        algorithm: str = "auto",
        splits: Sequence[Sequence[float]] | None = None,
        copies: Sequence[Sequence[Sequence[int]]] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Add one collective per group: ``op`` of ``nbytes`` over ``groups[i]`` after
        ``deps[i]`` (with ``copies[i]``; None: none), in group order, as ``collective``
        would one by one. Returns the first task's id (the others follow it)."""
        n = len(groups)
        first = len(self.kind)
        if not n:
            return first
        flat = list(chain.from_iterable(deps))
        codes = list(map(self.groups.lookup.get, groups))  # interned groups were checked
        if (None in codes or op not in COMM_OPS or op == "all_to_all_v" or n != len(deps)
                or copies is not None and len(copies) != n or first + n > MAX_TASKS
                or not (math.isfinite(nbytes) and nbytes >= 0)
                or flat and (min(flat) < 0 or max(flat) >= first)):
            return self._collectives(op, groups, nbytes, name, kind, stream, deps, algorithm,
                                     splits, copies, meta)
        comms = self.comms
        if copies is None or not any(copies):
            key = (op, nbytes, algorithm, None, id(()), 0)
            code = comms.lookup.get(key)
            spec: int | list[int] = code if code is not None else self._spec(key, ())
        else:
            try:
                checked = list(map(self._copies, repeat(name), groups, copies))
            except TaskGraphError:  # raised again, after the tasks before it, one by one
                return self._collectives(op, groups, nbytes, name, kind, stream, deps,
                                         algorithm, splits, copies, meta)
            spec = []
            for c in checked:
                key = (op, nbytes, algorithm, None, id(c), 0)
                code = comms.lookup.get(key)
                spec.append(self._spec(key, c) if code is None else code)
        return self._extend(n, kind, name, stream, cast(list[int], codes), 0.0, 0.0, nbytes,
                            spec, meta, deps, flat)

    def _collectives(self, op: str, groups: Sequence[tuple[int, ...]], nbytes: float,
                     name: str, kind: str, stream: str, deps: Sequence[Sequence[int]],
                     algorithm: str, splits: Sequence[Sequence[float]] | None,
                     copies: Sequence[Sequence[Sequence[int]]] | None,
                     meta: Mapping[str, Any] | None) -> int:
        """``collective_each`` one task at a time (new groups, checks that fail)."""
        first = len(self.kind)
        for group, dep, copy in zip(groups, deps, [()] * len(groups) if copies is None else copies,
                                    strict=True):
            self.collective(op, group, nbytes, name, kind=kind, stream=stream, deps=dep,
                            algorithm=algorithm, splits=splits, copies=copy, meta=meta)
        return first

    def send_recv_each(
        self,
        srcs: Sequence[int],
        dsts: Sequence[int],
        nbytes: float,
        name: str,
        *,
        kind: str = "comm",
        stream: str = "comm",
        deps: Sequence[Sequence[int]],
        copies: Sequence[Sequence[Sequence[int]]] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """One transfer ``srcs[i]`` -> ``dsts[i]`` after ``deps[i]`` per pair, in order,
        as ``send_recv`` would one by one; returns the first task's id."""
        if len(srcs) != len(dsts):
            raise TaskGraphError(f"task {name!r}: {len(srcs)} senders for {len(dsts)} "
                                 "receivers")
        return self.collective_each("send_recv", list(zip(srcs, dsts, strict=True)), nbytes, name,
                                    kind=kind, stream=stream, deps=deps, algorithm="direct",
                                    copies=copies, meta=meta)

    def members(self) -> tuple[np.ndarray, np.ndarray]:
        """(task id, rank) of every task's simulated ranks, in walk order: tasks by id,
        each task's ranks in group order (int32: an explicit 512-GPU step has 6M)."""
        n = len(self.kind)
        sizes = np.fromiter(map(len, self.groups), dtype=np.int32, count=len(self.groups))
        flat = np.fromiter(chain.from_iterable(self.groups), dtype=np.int32,
                           count=int(sizes.sum()))
        group = np.frombuffer(self.group, dtype=np.uint32) if n else np.zeros(0, np.uint32)
        count = sizes[group]
        # int32 throughout (half the memory traffic of int64): fewer than 2^31 members
        total = int(count.sum(dtype=np.int64))
        assert total < 2**31, "members are counted in int32"
        tid = np.repeat(np.arange(n, dtype=np.int32), count)
        # member k of task t sits at flat[first of t's group + k]: where = its position
        # in the walk, less (t's first position - its group's first place in flat)
        shift = np.cumsum(count, dtype=np.int32)
        shift -= count
        shift -= (np.cumsum(sizes, dtype=np.int32) - sizes)[group]
        del group
        where = np.arange(total, dtype=np.int32)
        where -= np.repeat(shift, count)
        del shift, count
        rank = flat[where] if total else np.zeros(0, dtype=np.int32)
        del where
        if self.virtual:
            keep = ~np.isin(rank, np.fromiter(self.virtual, dtype=np.int32))
            tid, rank = tid[keep], rank[keep]
        return tid, rank

    def stream_ids(self) -> dict[tuple[int, str], array]:
        """Task ids per (rank, stream) of simulated ranks, in program order (streams in the
        order a walk over the tasks and their ranks meets them)."""
        return {key: ids for key, (ids, _) in self.stream_members().items()}

    def stream_members(self) -> dict[tuple[int, str], tuple[array, array]]:
        """As ``stream_ids``, with each task's member index (its place in ``members``)."""
        tid, rank = self.members()
        if not len(tid):
            return {}
        width = len(self.stream_names)
        key = rank.astype(np.int64) * width + self.codes("stream")[tid]
        order = np.argsort(key, kind="stable")
        key, tid = key[order], tid[order]
        cuts = np.flatnonzero(np.diff(key)) + 1
        starts = np.r_[0, cuts]
        order_of_first = order[starts]
        pieces = np.split(tid, cuts)
        places = np.split(order, cuts)
        out: dict[tuple[int, str], tuple[array, array]] = {}
        names = self.stream_names
        for s in np.argsort(order_of_first).tolist():  # in the order a walk meets them
            k = int(key[starts[s]])
            out[(k // width, names[k % width])] = (array("i", pieces[s].tobytes()),
                                                   array("q", places[s].tobytes()))
        return out


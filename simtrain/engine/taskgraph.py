"""The task graph: the only contract between parallel strategies and the engine.

Strategies emit compute tasks (a fixed duration on one rank's stream) and communication
tasks (a collective or point-to-point transfer over a group of ranks, on one stream of each
member). Tasks on the same (rank, stream) run in the order they were added, like kernels
launched on a CUDA stream; ``deps`` add cross-stream ordering. A task may only depend on
tasks added before it, so the graph is acyclic by construction.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from simtrain.comm.ops import CollectiveOp
from simtrain.limits import MAX_TASKS

# Communication operations the engine can execute (see simtrain.comm for their algorithms).
COMM_OPS: tuple[str, ...] = tuple(CollectiveOp)


@dataclass(frozen=True, slots=True)
class CommSpec:
    """What a communication task moves: ``op`` of ``nbytes`` (nccl-tests size convention)."""

    op: str
    nbytes: float
    algorithm: str = "auto"
    splits: tuple[tuple[float, ...], ...] | None = None  # all_to_all_v: bytes i -> j
    # Symmetric fidelity: groups that run an identical copy of this collective at the same
    # time without being simulated; copies[k][i] plays the part of ranks[i].
    copies: tuple[tuple[int, ...], ...] = ()


@dataclass(slots=True)
class Task:
    """One unit of work. Compute tasks have one rank; communication tasks a group."""

    id: int
    kind: str
    name: str
    ranks: tuple[int, ...]
    stream: str
    duration: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0
    deps: tuple[int, ...] = ()
    comm: CommSpec | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def is_comm(self) -> bool:
        return self.comm is not None


class TaskGraphError(ValueError):
    """A task graph that cannot be executed (bad rank, unknown dependency, bad op)."""


@dataclass
class TaskGraph:
    """An append-only list of tasks over ``num_ranks`` ranks."""

    num_ranks: int
    tasks: list[Task] = field(default_factory=list)
    # Ranks not simulated (symmetric fidelity): they mirror simulated ranks, so a
    # collective does not wait for them and records no spans for them.
    virtual: set[int] = field(default_factory=set)
    # Validated copies by the identity of the caller's sequence: the lowering hands the
    # same object for every collective of a group, so tasks share one tuple (and the
    # executor's per-copies link-weight cache hits across them).
    _checked_copies: dict[int, tuple[Sequence[Sequence[int]], tuple[tuple[int, ...], ...]]] = \
        field(default_factory=dict, repr=False)

    def _add(self, task: Task) -> int:
        if len(self.tasks) >= MAX_TASKS:
            raise TaskGraphError(
                f"the task graph exceeds {MAX_TASKS:,} tasks (about 600 bytes each while it is "
                "built): use sim.granularity: layer or stage, fewer microbatches or layers, "
                "or sim.fidelity: symmetric")
        for rank in task.ranks:
            if not 0 <= rank < self.num_ranks:
                raise TaskGraphError(
                    f"task {task.name!r} uses rank {rank}, outside 0..{self.num_ranks - 1}"
                )
        if len(set(task.ranks)) != len(task.ranks):
            raise TaskGraphError(f"task {task.name!r} lists a rank twice: {task.ranks}")
        for dep in task.deps:
            if not 0 <= dep < task.id:
                raise TaskGraphError(
                    f"task {task.name!r} depends on task {dep}, which was not added before it"
                )
        self.tasks.append(task)
        return task.id

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
        # The checks of _add for one rank, inline: a large graph adds millions of these.
        tasks = self.tasks
        tid = len(tasks)
        if tid >= MAX_TASKS or not 0 <= rank < self.num_ranks:
            return self._add(Task(tid, kind, name, (rank,), stream, duration, flops, nbytes,
                                  tuple(deps), None, dict(meta or {})))  # raises the error
        deps = tuple(deps)
        if deps and not (0 <= min(deps) and max(deps) < tid):
            return self._add(Task(tid, kind, name, (rank,), stream, duration, flops, nbytes,
                                  deps, None, dict(meta or {})))  # raises the error
        tasks.append(Task(tid, kind, name, (rank,), stream, duration, flops, nbytes, deps,
                          None, dict(meta) if meta else {}))
        return tid

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
    ) -> int:
        """Add a collective ``op`` of ``nbytes`` over ``ranks`` (ranks[0] is the root where one
        is needed); ``splits[i][j]`` gives all-to-all-v's bytes from ranks[i] to ranks[j];
        ``copies`` are identical unsimulated groups whose traffic shares the network."""
        if op not in COMM_OPS:
            raise TaskGraphError(f"unknown communication op {op!r}; known: {', '.join(COMM_OPS)}")
        if not (math.isfinite(nbytes) and nbytes >= 0):
            raise TaskGraphError(f"task {name!r} needs a finite size >= 0 bytes, got {nbytes}")
        group = tuple(ranks)
        if not group:
            raise TaskGraphError(f"task {name!r} has an empty group")
        matrix = None
        if op == "all_to_all_v":
            if splits is None or len(splits) != len(group) or any(
                len(row) != len(group) for row in splits
            ):
                raise TaskGraphError(
                    f"all_to_all_v {name!r} needs a {len(group)}x{len(group)} splits matrix")
            matrix = tuple(tuple(float(x) for x in row) for row in splits)
            if not all(math.isfinite(x) and x >= 0 for row in matrix for x in row):
                raise TaskGraphError(f"all_to_all_v {name!r}: splits must be finite bytes >= 0")
            nbytes = max(sum(row) for row in matrix)
        return self._add(
            Task(
                id=len(self.tasks),
                kind=kind,
                name=name,
                ranks=group,
                stream=stream,
                bytes=nbytes,
                deps=tuple(deps),
                comm=CommSpec(op=op, nbytes=nbytes, algorithm=algorithm, splits=matrix,
                              copies=self._copies(name, group, copies)),
                meta=dict(meta or {}),
            )
        )

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

    def streams(self) -> dict[tuple[int, str], list[Task]]:
        """Tasks per (rank, stream) of simulated ranks, in program order."""
        out: dict[tuple[int, str], list[Task]] = {}
        virtual = self.virtual
        for task in self.tasks:
            for rank in task.ranks:
                if rank not in virtual:
                    out.setdefault((rank, task.stream), []).append(task)
        return out

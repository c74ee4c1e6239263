"""A task graph's row types: what a task is (``Task``, ``CommSpec``), the error a bad graph
raises, and ``TaskList``, the read-only view of a graph's rows as ``Task`` objects."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

from simtrain.comm.ops import CollectiveOp

if TYPE_CHECKING:
    from simtrain.engine.taskgraph import TaskGraph

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
    # SMs its kernels hold beside compute when they are not NCCL's (TE userbuffers,
    # simtrain.workload.userbuffers); 0: NCCL's channels (simtrain.workload.interference).
    sms: int = 0


@dataclass(slots=True)
class Task:
    """One unit of work (a view of a graph row). Compute tasks have one rank; communication
    tasks a group."""

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



class TaskList(Sequence[Task]):
    """A graph's tasks as a read-only sequence; each access builds a ``Task`` view."""

    def __init__(self, graph: TaskGraph) -> None:
        self.graph = graph

    def __len__(self) -> int:
        return len(self.graph)

    @overload
    def __getitem__(self, i: int) -> Task: ...

    @overload
    def __getitem__(self, i: slice) -> list[Task]: ...

    def __getitem__(self, i: int | slice) -> Task | list[Task]:
        n = len(self.graph)
        if isinstance(i, slice):
            return [self.graph.task(k) for k in range(*i.indices(n))]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"task {i} out of range 0..{n - 1}")
        return self.graph.task(i)

    def __iter__(self) -> Iterator[Task]:
        task = self.graph.task
        return (task(i) for i in range(len(self.graph)))

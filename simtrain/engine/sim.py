"""SimPy executor: runs a TaskGraph on a fabric and returns the Timeline.

Each (rank, stream) walks its tasks in program order (simtrain.engine.streams). A
compute task waits for its dependencies, then occupies its stream for its duration. A
communication task is a rendezvous: every member rank must reach it on its stream (after
its own dependencies); when the last one arrives the collective is lowered to phases of
flows (simtrain.comm) and runs on the flow network (simtrain.engine.collective), and every
member's stream is blocked until it ends. A rank that never arrives is reported as a
deadlock with a diagnosis, never as a silent end.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Generator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import simpy

from simtrain.comm.algorithms import Call
from simtrain.comm.model import CommModel
from simtrain.engine.ahead import Tentative, retime
from simtrain.engine.collective import Program
from simtrain.engine.collector import collection_paused
from simtrain.engine.contention import ComputeSharing
from simtrain.engine.fabric import Endpoint, Fabric, anchor, relocate
from simtrain.engine.issue import IssueTimes
from simtrain.engine.loop import Loop
from simtrain.engine.network import FlowNetwork
from simtrain.engine.streams import CommStream, Stream, collectives_only, hung_stream
from simtrain.engine.taskgraph import CommSpec, Task, TaskGraph
from simtrain.engine.timeline import Timeline
from simtrain.engine.waits import (  # noqa: F401  (re-exported: the engine's errors)
    SimulationDeadlock,
    diagnose,
    stalled_timeline,
)

# A group with more chains than this finds those to re-time with one numpy pass over their
# ends (a few microseconds) instead of a Python test per chain (about 0.06 us each):
# bench_scale dense-16384 explicit's data-parallel groups hold 128 ranks' chains.
_MANY_CHAINS = 32


class InterferenceModel(Protocol):
    """What the executor asks about compute/communication interference
    (implemented by simtrain.workload.interference.Interference)."""

    def load(self, op: str, nbytes: float, nranks: int, protocol: str, algorithm: str,
             seconds: float, sms: int = 0) -> tuple[float, float]: ...  # (SM, HBM share)

    def rate(self, flops: float, duration: float, sm_share: float,
             hbm_share: float) -> float: ...


class Executor:
    """One simulation of one task graph; use :func:`execute`."""

    def __init__(
        self,
        graph: TaskGraph,
        fabric: Fabric,
        *,
        comm: CommModel | None = None,
        collective_latency: float | None = None,
        hangs: Mapping[int, float] | None = None,
        delays: Mapping[int, float] | None = None,
        slowdowns: Mapping[int, float] | None = None,
        interference: float | InterferenceModel = 0.0,
        network: str = "flow",
        issue: Mapping[tuple[int, int], tuple[float, float]] | None = None,
    ):
        if network not in ("flow", "analytic"):
            raise ValueError(f"network must be 'flow' or 'analytic', got {network!r}")
        if isinstance(interference, int | float) and interference < 0:
            raise ValueError(f"interference must be >= 0 (a fractional slowdown), got "
                             f"{interference}")
        # An interference model (simtrain.workload.interference) checks its own inputs.
        fixed = {0: interference} if isinstance(interference, int | float) else {}
        _check_times(hangs=hangs, delays=delays, slowdowns=slowdowns,
                     collective_latency={0: collective_latency or 0.0}, interference=fixed)
        if graph.num_ranks > fabric.num_gpus:
            raise ValueError(
                f"the task graph uses {graph.num_ranks} ranks but the cluster has only "
                f"{fabric.num_gpus} GPUs"
            )
        self.graph = graph
        self.fabric = fabric
        self.comm = comm or CommModel(fabric, launch_latency=collective_latency)
        self.hangs = dict(hangs or {})
        self.delays = dict(delays or {})
        self.slowdowns = dict(slowdowns or {})
        # A fixed fractional slowdown (0 = none), or a model of the SMs and HBM bandwidth
        # each running collective takes (simtrain.workload.interference).
        self.fixed = float(interference) if isinstance(interference, int | float) else 0.0
        self.model = None if isinstance(interference, int | float) else interference
        self.interferes = self.model is not None or self.fixed > 0
        # (task id, rank) -> host times its first and last kernel are issued
        # (simtrain.workload.host): a kernel cannot start before the host issued it.
        self.issue = IssueTimes.of(issue or {}, graph)
        self._issue_any = bool(self.issue)
        self._meta_kernels = [m.get("kernels", 1) for m in graph.metas]
        # Per rank group (code): its size, and how many of its ranks are simulated (must
        # arrive at its collectives); the graph is complete when it runs.
        self.sizes = [len(ranks) for ranks in graph.groups]
        self.need = [sum(1 for r in ranks if r not in graph.virtual) for ranks in graph.groups]
        # "flow": collectives move flows that share links (contention). "analytic": each
        # collective takes its idle-network time, still waiting for all members.
        self.analytic = network == "analytic"
        self.env = Loop()
        self.sharing = ComputeSharing(self.env, self._rate, on_change=self._retime,
                                      virtual=frozenset(graph.virtual))
        self._chains: dict[int, list[Tentative]] = {}  # rank -> its streams' chains
        self.chain_count = 0  # chains made (a chain's slot: its index in chain_end)
        # Per chain (by slot), the computing end of its last tentative task (-inf: none):
        # entries[-1][END], kept by simtrain.engine.ahead, read by _retime.
        self.chain_end = array("d")
        self._chain_ends = np.zeros(0)
        # ranks -> their chains, and their slots where there are many (_retime)
        self._chains_on: dict[tuple[int, ...], tuple[list[Tentative], Any]] = {}
        self._moves: dict[int, list[simpy.Event]] = {}  # task -> events at its tentative end
        self.network = FlowNetwork(self.env, fabric.links, self.comm.capacity)
        # When each task ended (inf: not yet known). Without interference a stream runs its
        # ready chain of compute tasks ahead (``_chain``), so a finish may lie in the future.
        self.finish = array("d", [math.inf]) * len(graph)
        # Events for tasks someone waits for, made on demand (most tasks have none).
        self._waiters: dict[int, simpy.Event] = {}
        self.arrivals: dict[int, dict[int, float]] = {}
        self._group_deps: dict[int, dict[int, list[int]]] = {}
        self._weight_cache: dict[tuple[object, ...], tuple[float, ...]] = {}
        # Per (comm spec, group): the prepared run (simtrain.engine.collective); per
        # (meta, how it ran): the spans' meta.
        self.programs: dict[tuple[int, int], Program] = {}
        self.program_flows = 0  # flows (plus one per program) the cache holds
        self.metas: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._cursor: dict[tuple[int, str], list[int]] = {}  # stream -> [task at, or -1]
        self.stopped: dict[tuple[int, str], float] = {}  # hung streams: when they stopped
        self._skipping: set[Stream] = set()  # streams waiting past their chain's end
        self.blocked: dict[int, tuple[float, str, str]] = {}
        self.timeline = Timeline(num_ranks=graph.num_ranks, tasks=graph.tasks)
        self.rows = self.timeline.appenders()
        # What the chains run ahead read per task (simtrain.engine.ahead), in one tuple.
        self.columns = (self.finish, self._waiters, graph.comm, graph.duration, graph.flops,
                        graph.dep_start, graph.dep_ids, self.issue.first, self.issue.last,
                        self._issue_any)

    @property
    def position(self) -> dict[tuple[int, str], Task | None]:
        """Per stream, the task it last reached and has not passed (None: none or done)."""
        task = self.graph.task
        return {key: task(c[0]) if c[0] >= 0 else None for key, c in self._cursor.items()}

    def run(self) -> Timeline:
        # The event loop makes and drops millions of small objects, none of them in a
        # reference cycle (the flow units break theirs): the cyclic garbage collector's
        # passes over them found nothing and cost a fifth of the engine's CPU (bench_scale
        # dense-512 explicit). It is off while the loop runs, on again after.
        with collection_paused():
            return self._run()

    def _run(self) -> Timeline:
        for (rank, stream), (tasks, places) in self.graph.stream_members().items():
            cursor = self._cursor[(rank, stream)] = [-1]
            if rank in self.hangs:
                self.env.process(hung_stream(self, rank, stream, tasks, places))
            else:
                kind = CommStream if collectives_only(self, tasks) else Stream
                self.env.start_now(kind(self, rank, tasks, places, cursor).begin)
        self.chain_end = array("d", [-math.inf]) * self.chain_count
        self._chain_ends = np.frombuffer(self.chain_end, dtype=np.float64)  # a view of it
        self.env.run()
        if any(math.isinf(t) for t in self.finish):
            self._settle()
            raise SimulationDeadlock(self._diagnose(), timeline=self.timeline,
                                     blocked=self.blocked, at=self.env.now)
        # SimPy numbers every scheduled event from one counter; reading it once here keeps
        # the count off the per-event path.
        self.timeline.events = next(self.env._eid)
        # The appenders hold the unsorted columns: let the sort free them.
        self.rows = self.columns = ()  # type: ignore[assignment]
        self.timeline.sort_by_end()
        return self.timeline

    def _settle(self) -> None:
        """The step stalled: streams that waited past their chain's end for a task that
        never ends reach that end now, as if they had woken at it (the stall's time)."""
        if self._skipping:
            late = max(stream.reach for stream in self._skipping)
            if late > self.env.now:
                self.env._now = late
            for stream in sorted(self._skipping, key=lambda s: (s.rank, s.cursor[0])):
                stream.settle()
            self._skipping.clear()

    def is_done(self, task_id: int) -> bool:
        """Whether ``task_id`` has ended by now."""
        return self.finish[task_id] <= self.env.now

    def _finished(self, task_id: int, when: float) -> None:
        """``task_id`` ends at ``when`` (now)."""
        self.finish[task_id] = when
        waiter = self._waiters.pop(task_id, None)
        if waiter is not None:
            self.env.at(when, waiter)

    def _waiter(self, task_id: int) -> simpy.Event:
        """An event that fires when ``task_id`` ends."""
        when = self.finish[task_id]
        if when != math.inf:
            if when > self.env._now:  # a chain run ahead: the end may move (_at_end)
                return self._at_end(task_id, when, simpy.Event(self.env))
            return self.env.at(self.env._now)
        waiter = self._waiters.get(task_id)
        if waiter is None:
            waiter = self._waiters[task_id] = self.env.event()
        return waiter

    def _pending(self, tid: int, rank: int) -> list[int]:
        """Dependencies ``rank`` must see before it can reach task ``tid``, not yet ended."""
        finish, now, g = self.finish, self.env._now, self.graph
        if self.sizes[g.group[tid]] == 1:  # _dep_ids' first case, inline (the common one)
            dep_ids = g.dep_ids
            return [dep_ids[k] for k in range(g.dep_start[tid], g.dep_start[tid + 1])
                    if not finish[dep_ids[k]] <= now]
        return [d for d in self._dep_ids(tid, rank) if not finish[d] <= now]

    def _dep_ids(self, tid: int, rank: int) -> Sequence[int]:
        """Ids of the dependencies ``rank`` waits for before it reaches ``task``.

        For a group task, a rank waits only for dependencies it takes part in; the others
        are waited for by their own ranks before they arrive at the rendezvous. A
        dependency on a task none of the members takes part in (a compute on a rank outside
        the group) is waited for by every member, so the collective cannot start before
        it; one on mirrored (virtual) ranks only never runs and is mirrored instead. The
        split is computed once per group task (its deps can be many: one per member).
        """
        g = self.graph
        start, end = g.dep_start[tid], g.dep_start[tid + 1]
        ranks = g.groups[g.group[tid]]
        if len(ranks) == 1:
            return g.dep_ids[start:end]
        per_rank = self._group_deps.get(tid)
        if per_rank is None:
            per_rank = self._group_deps[tid] = {}
            members = set(ranks)
            virtual = g.virtual
            groups, group = g.groups, g.group
            for dep in g.dep_ids[start:end]:
                dep_ranks = groups[group[dep]]
                if len(dep_ranks) == 1:  # the common case (a member's compute), no set op
                    if dep_ranks[0] in members:
                        per_rank.setdefault(dep_ranks[0], []).append(dep)
                        continue
                    if dep_ranks[0] in virtual:
                        continue
                inside = members.intersection(dep_ranks)
                if not inside and not all(r in virtual for r in dep_ranks):
                    inside = members
                for member in inside:
                    per_rank.setdefault(member, []).append(dep)
        return per_rank.get(rank, ())

    def _retime(self, ranks: tuple[int, ...]) -> None:
        """``ranks``' collective load changed: re-time the chains run ahead on them."""
        now = self.env._now
        # Every collective's start and end asks, for its group: the group's chains (in rank
        # order, each rank's in stream order) are listed once per group.
        found = self._chains_on.get(ranks)
        if found is None:
            chains = [chain for rank in ranks for chain in self._chains.get(rank, ())]
            slots = (np.array([c.slot for c in chains], dtype=np.intp)
                     if len(chains) > _MANY_CHAINS else None)
            found = self._chains_on[ranks] = (chains, slots)
        chains, slots = found
        # A stream waits for its wake-up or past it (Stream._skip); a chain whose every
        # task has computed by now has nothing to re-time. Re-timing one chain moves no
        # other's tasks, so which chains need it can be read before the first is re-timed.
        if slots is None:
            chain_end = self.chain_end
            for chain in chains:
                if chain_end[chain.slot] > now:
                    retime(self, chain)
        else:  # a wide group (data parallel at scale): few of its chains run ahead now
            ends = self._chain_ends[slots]
            for j in np.flatnonzero(ends > now).tolist():
                retime(self, chains[j])

    def _at_end(self, tid: int, when: float, event: simpy.Event) -> simpy.Event:
        """Schedule ``event`` at task ``tid``'s end ``when``; a tentative end (in the future,
        under interference) may move, so the event is kept to be moved with it."""
        self.env.at(when, event)
        if when > self.env.now and self.interferes:
            self._moves.setdefault(tid, []).append(event)
        return event

    def _kernels(self, tid: int) -> int:
        """How many kernels task ``tid`` launches (its meta's "kernels", default 1)."""
        kernels: int = self._meta_kernels[self.graph.meta[tid]]
        return kernels

    def _members(self, tid: int) -> int:
        """How many ranks must arrive at task ``tid``: its simulated members."""
        return self.need[self.graph.group[tid]]

    def _weights(self, spec: CommSpec, ranks: tuple[int, ...],
                 flows: Sequence[tuple[Endpoint, Endpoint, float]],
                 routes: Sequence[tuple[tuple[int, ...], float]]) -> list[tuple[float, ...]]:
        """Per-link multiplicity of each flow: 1 + the copies whose same flow uses the link."""
        copies = spec.copies
        index = {rank: i for i, rank in enumerate(ranks)}
        route = self.fabric.route
        out = []
        for (src, dst, _nb), (path, _wire) in zip(flows, routes, strict=True):
            i, j = index[anchor(src)], index[anchor(dst)]  # switch endpoints: via a rank
            key = (id(copies), i, j, path)  # graph-owned tuples
            weights = self._weight_cache.get(key)
            if weights is None:
                counts = dict.fromkeys(path, 1.0)
                for copy in copies:
                    for link in route(relocate(src, copy[i]), relocate(dst, copy[j])):
                        if link in counts:
                            counts[link] += 1.0
                weights = self._weight_cache[key] = tuple(counts[link] for link in path)
            out.append(weights)
        return out

    def _wait_host(self, rank: int, tid: int, until: float) -> Generator[Any, Any, None]:
        """The GPU waits for the host to issue task ``tid``'s kernels: a "host" span."""
        start = self.env.now
        yield self.env.timeout(until - start)
        self.timeline.record_host(rank, start, self.env.now, tid)

    def _rate(self, work: float, flops: float, load: list[float] | None) -> float:
        """Compute progress rate under a rank's collective load (see ComputeSharing)."""
        if not load or load[0] <= 0:
            return 1.0
        if self.model is None:
            return 1.0 / (1.0 + self.fixed)
        return self.model.rate(flops, work, load[1], load[2])

    def _comm_state(self, ranks: tuple[int, ...], delta: int,
                    load: tuple[float, float] = (0.0, 0.0)) -> None:
        if self.interferes:
            self.sharing.change(ranks, delta, load)

    def _load(self, call: Call, algorithm: str, protocol: str,
              seconds: float, sms: int = 0) -> tuple[float, float]:
        if self.model is None:
            return (0.0, 0.0)
        # sms > 0: not NCCL's kernels, their own SM count (TE userbuffers)
        return self.model.load(call.op, call.nbytes, len(call.ranks), protocol, algorithm,
                               seconds, sms=sms)

    def _diagnose(self) -> str:
        """Name the ranks that stopped issuing work first, then the chain of waits behind."""
        diagnosis = diagnose(self)
        self.blocked = diagnosis.blocked
        return diagnosis.message


def _check_times(**tables: Mapping[int, float] | None) -> None:
    """Raise ValueError unless every fault time, factor and latency is finite and >= 0:
    a NaN or infinite time would make the step spin or never end."""
    for name, table in tables.items():
        for rank, value in (table or {}).items():
            if not (math.isfinite(value) and value >= 0):
                where = f" of rank {rank}" if name not in ("collective_latency",
                                                           "interference") else ""
                raise ValueError(f"{name}{where} must be a finite number >= 0, got {value!r}")


def execute(
    graph: TaskGraph,
    fabric: Fabric,
    *,
    comm: CommModel | None = None,
    collective_latency: float | None = None,
    hangs: Mapping[int, float] | None = None,
    delays: Mapping[int, float] | None = None,
    slowdowns: Mapping[int, float] | None = None,
    interference: float | InterferenceModel = 0.0,
    network: str = "flow",
    issue: Mapping[tuple[int, int], tuple[float, float]] | None = None,
) -> Timeline:
    """Run ``graph`` on ``fabric``.

    ``comm`` chooses and lowers collectives (default: the ideal backend, line-rate links, no
    software latency — the alpha-beta closed forms); ``collective_latency`` overrides its
    launch latency. Faults: ``hangs`` maps a rank to the time it stops issuing work (a hung
    process, which blocks its groups); ``delays`` makes a rank start late by that many
    seconds; ``slowdowns`` multiplies a rank's compute durations. ``interference`` slows a
    rank's compute by that fraction while one of its collectives runs (0 = none), or is a
    model of the SMs and HBM bandwidth each running collective takes. ``issue`` gives the
    host times a task's first and last kernels are issued (launch-bound steps).
    ``network="analytic"`` gives each collective its idle-network time (no contention, no
    flows): much faster on huge clusters, exact where links are not shared.
    """
    ex = Executor(graph, fabric, comm=comm, collective_latency=collective_latency,
                  hangs=hangs, delays=delays, slowdowns=slowdowns,
                  interference=interference, network=network, issue=issue)
    try:
        return ex.run()
    finally:
        # The executor is held in reference cycles (its streams and sharing callbacks
        # point back at it), so its tables (task ends, issue times, per-stream task lists:
        # ~50 MB per 1M tasks) would wait for a full garbage collection, past the metrics'
        # peak memory. Dropping its attributes frees them now.
        ex.__dict__.clear()

"""SimPy executor: runs a TaskGraph on a fabric and returns the Timeline.

Each (rank, stream) is a SimPy process that walks its tasks in program order. A compute
task waits for its dependencies, then occupies its stream for its duration. A
communication task is a rendezvous: every member rank must reach it on its stream (after
its own dependencies); when the last one arrives the collective is lowered to phases of
flows (simtrain.comm) and runs on the flow network, and every member's stream is blocked
until it ends. A rank that never arrives is reported as a deadlock with a diagnosis,
never as a silent end.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Generator, Mapping, Sequence
from functools import partial
from typing import Any, Protocol

import simpy

from simtrain.comm.algorithms import Call
from simtrain.comm.model import CommModel, Lowered
from simtrain.engine.ahead import Tentative, extend, flush, retime, run_fixed
from simtrain.engine.contention import Clock, ComputeSharing
from simtrain.engine.fabric import Endpoint, Fabric, anchor, relocate
from simtrain.engine.issue import IssueTimes
from simtrain.engine.network import FlowNetwork
from simtrain.engine.prepared import PhaseCache
from simtrain.engine.taskgraph import CommSpec, Task, TaskGraph
from simtrain.engine.timeline import Timeline
from simtrain.engine.waits import (  # noqa: F401  (re-exported: the engine's errors)
    SimulationDeadlock,
    diagnose,
    stalled_timeline,
)


class InterferenceModel(Protocol):
    """What the executor asks about compute/communication interference
    (implemented by simtrain.workload.interference.Interference)."""

    def load(self, op: str, nbytes: float, nranks: int, protocol: str, algorithm: str,
             seconds: float) -> tuple[float, float]: ...  # (SM share, HBM share)

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
        # "flow": collectives move flows that share links (contention). "analytic": each
        # collective takes its idle-network time, still waiting for all members.
        self.analytic = network == "analytic"
        self.env = Clock()
        self.sharing = ComputeSharing(self.env, self._rate, on_change=self._retime,
                                      virtual=frozenset(graph.virtual))
        self._chains: dict[int, list[Tentative]] = {}  # rank -> its streams' chains
        self._moves: dict[int, list[simpy.Event]] = {}  # task -> events at its tentative end
        self.network = FlowNetwork(self.env, fabric.links, self.comm.capacity)
        self._phases = PhaseCache(fabric.route)
        # When each task ended (inf: not yet known). Without interference a stream runs its
        # ready chain of compute tasks ahead (``_chain``), so a finish may lie in the future.
        self.finish = array("d", [math.inf]) * len(graph)
        # Events for tasks someone waits for, made on demand (most tasks have none).
        self._waiters: dict[int, simpy.Event] = {}
        self.arrivals: dict[int, dict[int, float]] = {}
        self._group_deps: dict[int, dict[int, list[int]]] = {}
        self._weight_cache: dict[tuple[object, ...], tuple[float, ...]] = {}
        self._cursor: dict[tuple[int, str], list[int]] = {}  # stream -> [task at, or -1]
        self.stopped: dict[tuple[int, str], float] = {}  # hung streams: when they stopped
        self.blocked: dict[int, tuple[float, str, str]] = {}
        self.timeline = Timeline(num_ranks=graph.num_ranks, tasks=graph.tasks)
        self.rows = self.timeline.appenders()

    @property
    def position(self) -> dict[tuple[int, str], Task | None]:
        """Per stream, the task it last reached and has not passed (None: none or done)."""
        task = self.graph.task
        return {key: task(c[0]) if c[0] >= 0 else None for key, c in self._cursor.items()}

    def run(self) -> Timeline:
        for (rank, stream), (tasks, places) in self.graph.stream_members().items():
            self._cursor[(rank, stream)] = [-1]
            self.env.process(self._stream(rank, stream, tasks, places))
        self.env.run()
        if any(math.isinf(t) for t in self.finish):
            raise SimulationDeadlock(self._diagnose(), timeline=self.timeline,
                                     blocked=self.blocked, at=self.env.now)
        # SimPy numbers every scheduled event from one counter; reading it once here keeps
        # the count off the per-event path.
        self.timeline.events = next(self.env._eid)
        self.timeline.sort_by_end()
        return self.timeline

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
        if not math.isinf(when):
            if when > self.env.now:  # a chain run ahead: the end may move (_at_end)
                return self._at_end(task_id, when, simpy.Event(self.env))
            return self.env.at(self.env.now)
        waiter = self._waiters.get(task_id)
        if waiter is None:
            waiter = self._waiters[task_id] = self.env.event()
        return waiter

    def _pending(self, tid: int, rank: int) -> list[int]:
        """Dependencies ``rank`` must see before it can reach task ``tid``, not yet ended."""
        finish, now = self.finish, self.env.now
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
                inside = members.intersection(dep_ranks)
                if not inside and not all(r in virtual for r in dep_ranks):
                    inside = members
                for member in inside:
                    per_rank.setdefault(member, []).append(dep)
        return per_rank.get(rank, ())

    def _stream(self, rank: int, stream: str, tasks: Sequence[int],
                places: Sequence[int]) -> Generator[Any, Any, None]:
        env = self.env
        g = self.graph
        comm_of, duration, flops = g.comm, g.duration, g.flops
        cursor = self._cursor[(rank, stream)]
        hang_at = self.hangs.get(rank)
        slowdown = self.slowdowns.get(rank, 1.0)
        # Unless the rank hangs, a stream runs its ready chain of compute tasks ahead
        # (simtrain.engine.ahead): final without interference, tentative (re-timed when a
        # collective starts or ends on the rank) with it.
        fixed = hang_at is None and not self.interferes
        chain = Tentative(rank, tasks, places, slowdown) \
            if hang_at is None and self.interferes else None
        if chain is not None:
            self._chains.setdefault(rank, []).append(chain)
        ahead = fixed or chain is not None
        if self.delays.get(rank, 0.0) > 0:
            yield env.timeout(self.delays[rank])  # a straggler starts its step late
        i, n = 0, len(tasks)
        while i < n:
            if fixed:
                i, until = run_fixed(self, rank, tasks, places, i, slowdown)
                if until > env.now:
                    yield env.at(until)
                if i == n:
                    break
            elif chain is not None:
                chain.i = i
                extend(self, chain, env.now)
                while chain.until > env.now:  # the wake-up moves when the chain is re-timed
                    chain.wake = env.at(chain.until)
                    yield chain.wake
                flush(self, chain)
                i = chain.i
                if i == n:
                    break
            tid = tasks[i]
            cursor[0] = tid
            pending = self._pending(tid, rank)
            if len(pending) == 1:
                yield self._waiter(pending[0])  # the common case: no AllOf to build
            elif pending:
                yield env.all_of([self._waiter(d) for d in pending])
            if hang_at is not None and env.now >= hang_at:
                self.stopped[(rank, stream)] = env.now
                return  # a hung process issues nothing more, as with a dead NCCL rank
            is_compute = comm_of[tid] < 0
            if ahead and is_compute:
                continue  # its dependencies have ended: the chain runs it
            issued = self.issue.at(places[i]) if self._issue_any else None
            if issued is not None and issued[0] > env.now:
                yield from self._wait_host(rank, tid, issued[0])
            if is_compute:
                start = env.now
                work = duration[tid]
                if work > 0:
                    work = work * slowdown
                    if self.interferes:
                        yield self.sharing.run(rank, work, flops[tid])
                    else:
                        yield env.timeout(work)
                self.timeline.record(rank, start, env.now, tid)
                if issued is not None:
                    # The last kernel can end no earlier than its issue plus its own share.
                    tail = issued[1] + duration[tid] * slowdown / self._kernels(tid)
                    if tail > env.now:
                        yield from self._wait_host(rank, tid, tail)
                self._finished(tid, env.now)
            else:
                arrived = self.arrivals.setdefault(tid, {})
                arrived[rank] = env.now
                if len(arrived) == self._members(tid):
                    env.process(self._communicate(tid, arrived))
                yield self._waiter(tid)
            i += 1
        cursor[0] = -1

    def _retime(self, rank: int) -> None:
        """``rank``'s collective load changed: re-time the chains run ahead on it."""
        for chain in self._chains.get(rank, ()):
            if chain.entries and chain.wake is not None:
                retime(self, chain)

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
        ranks = self.graph.ranks(tid)
        if not self.graph.virtual:
            return len(ranks)
        return sum(1 for r in ranks if r not in self.graph.virtual)

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
              seconds: float) -> tuple[float, float]:
        if self.model is None:
            return (0.0, 0.0)
        return self.model.load(call.op, call.nbytes, len(call.ranks), protocol, algorithm,
                               seconds)

    def _communicate(self, tid: int, arrived: dict[int, float]) -> Generator[Any, Any, None]:
        env = self.env
        spec = self.graph.comm_spec(tid)
        assert spec is not None
        ranks = self.graph.ranks(tid)
        start = env.now
        self._group_deps.pop(tid, None)  # every member has arrived: no longer asked
        call = Call(spec.op, ranks, spec.nbytes, spec.splits)
        if self.analytic:
            algorithm, protocol, seconds = self.comm.choose(call, spec.algorithm)
            load = self._load(call, algorithm, protocol, seconds)
            self._comm_state(ranks, +1, load)
            yield env.timeout(seconds)
        else:
            plan = self.comm.plan(call, spec.algorithm)
            algorithm, protocol = plan.algorithm, plan.protocol
            load = self._load(call, algorithm, protocol, plan.predicted_s)
            self._comm_state(ranks, +1, load)
            yield from self._flows(tid, spec, ranks, plan)
        end = env.now
        self._comm_state(ranks, -1, load)
        meta = {**self.graph.meta_of(tid), "op": spec.op, "algorithm": algorithm,
                "protocol": protocol, "group_size": len(ranks)}
        for rank in ranks:
            if rank not in arrived:
                continue  # a virtual member: mirrored, not recorded
            self.timeline.record_comm(rank, start, end, tid, meta, start - arrived[rank])
        del self.arrivals[tid]  # kept only while members wait (hang diagnosis)
        self._finished(tid, env.now)

    def _flows(self, tid: int, spec: CommSpec, ranks: tuple[int, ...],
               plan: Lowered) -> Generator[Any, Any, None]:
        """Run ``plan``'s phases as flows on the network, recording each flow."""
        env = self.env
        if plan.phases and plan.launch_latency > 0:
            yield env.timeout(plan.launch_latency)
        for phase, cap in zip(plan.phases, plan.flow_caps, strict=True):
            if phase.latency > 0:
                yield env.timeout(phase.latency)
            # routes, weights and ring merges of a phase are computed once (engine.prepared)
            prep = self._phases.get(phase, phase.flows, phase.coupled, plan.wire_factor,
                                    spec.copies, partial(self._weights, spec, ranks,
                                                         phase.flows) if spec.copies else None)
            began = env.now
            ends = yield self.network.transfer_all(prep.transfers, cap, prep.weights)
            self.timeline.record_flows(began, prep.spread(ends), prep.sizes, prep.paths, tid)

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
    return Executor(graph, fabric, comm=comm, collective_latency=collective_latency,
                    hangs=hangs, delays=delays, slowdowns=slowdowns,
                    interference=interference, network=network, issue=issue).run()

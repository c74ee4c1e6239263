"""One collective's run on the network, as callbacks on the events it waits for.

When the last member of a communication task arrives, the task runs: its load on the
members' compute starts, it waits its launch latency, then each phase's alpha latency and
flows, and it ends (load off, one span per member, the task finished). This used to be a
SimPy process per collective; here each wait is a callback on the event (the same events,
created in the same order, so a step's times are unchanged), and what a run needs that
does not change between microbatches (the lowered plan, its flows' routes, link weights and
ring coupling, the spans' meta) is prepared once per (communication spec, rank group).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import simpy

from simtrain.comm.algorithms import Call
from simtrain.engine.sharing import couple

if TYPE_CHECKING:
    from simtrain.engine.sim import Executor

# What the per-executor caches hold before they are emptied. Programs are bounded by the
# flows they hold (an explicit MoE step has a spec per layer and microbatch, and an
# all-to-all's program holds its every flow) and by a count: a 16k-GPU dense step
# cycles through 36,096 (spec, group) pairs of a few flows each (every PP pair of every DP
# replica), which a bound of 8,192 programs rebuilt on every use (136 -> 124 CPU-s, RSS
# 747 -> 791 MiB, bench_scale dense-16384 explicit, identical step). Metas are small dicts.
_PROGRAM_FLOWS, _PROGRAMS = 1 << 19, 1 << 16
_METAS = 1 << 16


@dataclass(frozen=True, slots=True)
class Step:
    """One phase as the network runs it: after ``latency`` seconds, ``transfers`` (route,
    wire bytes) start together under ``cap`` with link ``weights``; ``members[k]`` lists the
    phase's flows that merged transfer k stands for (a coupled ring), None when unmerged.
    ``sizes`` / ``paths`` are the phase's own flows, as the timeline records them."""

    latency: float
    transfers: list[tuple[tuple[int, ...], float]]
    cap: float
    weights: list[tuple[float, ...]] | None
    members: list[list[int]] | None
    sizes: list[float]
    paths: list[tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class Program:
    """What running a collective of one spec over one group takes, prepared once."""

    algorithm: str
    protocol: str
    seconds: float  # analytic network: the idle-network time
    launch_latency: float
    steps: tuple[Step, ...]
    load: tuple[float, float]  # (SM share, HBM share) it takes from its members' compute


def program(ex: Executor, tid: int) -> Program:
    """The prepared program of communication task ``tid`` (cached by spec and group)."""
    g = ex.graph
    key = (g.comm[tid], g.group[tid])
    found: Program | None = ex.programs.get(key)
    if found is not None:
        return found
    spec = g.comm_spec(tid)
    assert spec is not None
    ranks = g.ranks(tid)
    call = Call(spec.op, ranks, spec.nbytes, spec.splits)
    steps: list[Step] = []
    if ex.analytic:
        algorithm, protocol, seconds = ex.comm.choose(call, spec.algorithm)
        launch = 0.0
    else:
        plan = ex.comm.plan(call, spec.algorithm)
        algorithm, protocol, seconds = plan.algorithm, plan.protocol, plan.predicted_s
        launch = plan.launch_latency if plan.phases else 0.0
        route = ex.fabric.route
        for phase, cap in zip(plan.phases, plan.flow_caps, strict=True):
            routes = [(route(src, dst), nbytes * plan.wire_factor)
                      for src, dst, nbytes in phase.flows]
            weights = ex._weights(spec, ranks, phase.flows, routes) if spec.copies else None
            members = None
            transfers = routes
            if phase.coupled is not None:
                transfers, weights, members = couple(routes, weights, phase.coupled)
            steps.append(Step(phase.latency, transfers, cap, weights, members,
                              [nb for _, nb in routes], [path for path, _ in routes]))
    load = ex._load(call, algorithm, protocol, seconds, spec.sms)
    found = Program(algorithm, protocol, seconds, launch, tuple(steps), load)
    flows = 1 + sum(len(step.transfers) for step in steps)
    if ex.program_flows + flows > _PROGRAM_FLOWS or len(ex.programs) >= _PROGRAMS:
        ex.programs.clear()
        ex.program_flows = 0
    ex.programs[key] = found
    ex.program_flows += flows
    return found


class Collective:
    """The run of one communication task once every member has arrived (``arrived``:
    member -> arrival time); see the module docstring."""

    __slots__ = ("ex", "tid", "arrived", "prog", "start", "k", "began")

    def __init__(self, ex: Executor, tid: int, arrived: dict[int, float]) -> None:
        self.ex, self.tid, self.arrived = ex, tid, arrived
        self.k = 0
        self.start = self.began = 0.0
        ex.env.start_now(self._begin)  # as a new process would begin

    def _begin(self, _event: Any) -> None:
        ex = self.ex
        tid = self.tid
        self.start = ex.env.now
        ex._group_deps.pop(tid, None)  # every member has arrived: no longer asked
        prog = self.prog = program(ex, tid)
        ex._comm_state(ex.graph.ranks(tid), +1, prog.load)
        if ex.analytic:
            self._wait(prog.seconds, self._end)
        elif prog.launch_latency > 0:
            self._wait(prog.launch_latency, self._phase)
        else:
            self._phase(None)

    def _wait(self, seconds: float, then: Any) -> None:
        self.ex.env.timeout(seconds).callbacks.append(then)  # type: ignore[union-attr]

    def _phase(self, _event: Any) -> None:
        """Start phase k after its latency, or end when every phase has run."""
        steps = self.prog.steps
        if self.k == len(steps):
            self._end(None)
            return
        if steps[self.k].latency > 0:
            self._wait(steps[self.k].latency, self._transfer)
        else:
            self._transfer(None)

    def _transfer(self, _event: Any) -> None:
        step = self.prog.steps[self.k]
        self.began = self.ex.env.now
        done = self.ex.network.transfer_all(step.transfers, step.cap, step.weights)
        done.callbacks.append(self._transferred)  # type: ignore[union-attr]

    def _transferred(self, event: simpy.Event) -> None:
        step = self.prog.steps[self.k]
        ends: list[float] = event._value
        if step.members is not None:
            finish = [0.0] * len(step.sizes)
            for index, end in zip(step.members, ends, strict=True):
                for i in index:
                    finish[i] = end
            ends = finish
        self.ex.timeline.record_flows(self.began, ends, step.sizes, step.paths, self.tid)
        self.k += 1
        self._phase(None)

    def _end(self, _event: Any) -> None:
        ex, tid, prog = self.ex, self.tid, self.prog
        end = ex.env.now
        ranks = ex.graph.ranks(tid)
        ex._comm_state(ranks, -1, prog.load)
        ex.timeline.record_comm_group(ranks, self.start, end, tid, self._meta(), self.arrived)
        del ex.arrivals[tid]  # kept only while members wait (hang diagnosis)
        ex._finished(tid, end)

    def _meta(self) -> dict[str, Any]:
        """The members' spans' meta: the task's and how it ran (shared, do not mutate)."""
        ex, prog = self.ex, self.prog
        g = ex.graph
        key = (g.meta[self.tid], prog.algorithm, prog.protocol, g.comm[self.tid],
               g.group[self.tid])
        meta: dict[str, Any] | None = ex.metas.get(key)
        if meta is None:
            spec = g.comm_spec(self.tid)
            assert spec is not None
            meta = {**g.meta_of(self.tid), "op": spec.op, "algorithm": prog.algorithm,
                    "protocol": prog.protocol, "group_size": len(g.ranks(self.tid))}
            if len(ex.metas) >= _METAS:
                ex.metas.clear()
            ex.metas[key] = meta
        return meta

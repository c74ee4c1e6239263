"""The communication model the engine asks: which algorithm and protocol, and which flows.

``CommModel.plan(call)`` chooses an algorithm and protocol the way NCCL's tuner does —
predict each candidate's time on an idle network (launch latency + per-step hop latencies
+ wire bytes over the bottleneck bandwidth, with the protocol's bandwidth factors and
caps) and take the fastest — then returns the lowering's phases for the engine to run as
flows. The prediction uses the same lowerings and max-min sharing as the simulation, so
the choice and the simulated time agree on an uncongested network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from simtrain.comm.algorithms import AlgorithmError, Call, Context, Phase, lowering
from simtrain.comm.backends import BACKENDS, IDEAL, Backend, link_class
from simtrain.comm.fitted import FittedLevel, FittedRange, lookup
from simtrain.comm.nvls_pipeline import nvls_overheads
from simtrain.comm.nvls_pipeline import wire_factor as nvls_wire_factor
from simtrain.comm.phases import servers
from simtrain.engine.network import Fabric, isolated_time

# nccl-tests bus bandwidth factor per op (../shared/reference/nccl.yaml), n = group size.
BUSBW_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "all_to_all_v": lambda n: (n - 1) / n,
}


def busbw_factor(op: str, n: int) -> float:
    """busbw / algbw for ``op`` over ``n`` ranks (1 for broadcast, reduce, send/recv...)."""
    return BUSBW_FACTOR.get(op, lambda _n: 1.0)(n) if n > 1 else 1.0


@dataclass(frozen=True)
class Lowered:
    """A chosen algorithm and protocol and what the engine must run for it."""

    algorithm: str
    protocol: str
    launch_latency: float
    phases: list[Phase]
    wire_factor: float
    flow_caps: list[float]  # per phase: each flow's rate limit (wire bytes/s)
    predicted_s: float


class CommModel:
    """Algorithm choice and lowering for one backend on one fabric."""

    def __init__(
        self,
        fabric: Fabric,
        backend: Backend | str = IDEAL,
        *,
        arch: str = "",
        algorithms: Mapping[str, str] | None = None,
        protocol: str = "auto",
        launch_latency: float | None = None,
        fitted: Sequence[FittedLevel] = (),
    ) -> None:
        self.fabric = fabric
        self.fitted = tuple(fitted)
        self.backend = BACKENDS[backend] if isinstance(backend, str) else backend
        self.arch = arch
        # Host CPU vendor (NCCL's multi-node LL cap row); preset clusters carry it.
        self.cpu = getattr(getattr(fabric, "config", None), "host_cpu", "intel")
        self.forced = dict(algorithms or {})
        self.forced_protocol = protocol
        self.launch_override = launch_latency
        self.capacity = [ln.bandwidth * self.backend.efficiency(ln.kind, arch)
                         for ln in fabric.links]
        self._kinds = [ln.kind for ln in fabric.links]
        if protocol != "auto" and protocol not in self.backend.protocols:
            raise ValueError(f"protocol {protocol!r} is not offered by {self.backend.name}; "
                             f"choose one of: auto, {', '.join(self.backend.protocols)}")
        self._lat_cache: dict[tuple[int, int, str, str, bool], float] = {}
        self._choices: dict[tuple[object, ...], tuple[str, str, float]] = {}
        self._plans: dict[tuple[Call, str], Lowered] = {}
        self._predict = lru_cache(maxsize=4096)(self._predict_uncached)
        self._unit_cost = lru_cache(maxsize=1024)(self._unit_cost_uncached)

    # -- latency ---------------------------------------------------------------------------
    def _hop(self, a: int, b: int, algorithm: str, protocol: str, multi_node: bool) -> float:
        key = (a, b, algorithm, protocol, multi_node)
        if key not in self._lat_cache:
            route = self.fabric.route(a, b)
            same = self.fabric.server_of(a) == self.fabric.server_of(b)
            cls = link_class({self._kinds[i] for i in route}, same)
            self._lat_cache[key] = self.backend.hop_latency(
                self.fabric.route_latency(route), cls, algorithm, protocol, multi_node)
        return self._lat_cache[key]

    def context(self, algorithm: str, protocol: str, multi_node: bool = False) -> Context:
        switch = getattr(self.fabric, "reducing_switch", None)  # preset clusters have it
        return Context(
            self.fabric, lambda a, b: self._hop(a, b, algorithm, protocol, multi_node),
            reducer=lambda level, rank: None if switch is None else switch(rank, level),
            switch_alpha=lambda cls: self.backend.switch_latency(cls, algorithm, protocol),
            nvls_wire=(lambda p: nvls_wire_factor(p, self.arch)) if self._pipelined("nvls")
            else (lambda p: 1.0))

    def _nodes(self, ranks: Sequence[int]) -> int:
        return len({self.fabric.server_of(r) for r in ranks})

    # -- choice ----------------------------------------------------------------------------
    def candidates(
        self, op: str, algorithm: str = "auto", nbytes: float = 0.0
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(algorithms, protocols) the choice ranges over for ``op``.

        ``algorithm`` (from the task) wins over the configured choice for ``op``, which wins
        over a global ("*") one; a global choice applies only to ops that have it.
        """
        available = self.backend.algorithms.get(op, ())
        if not available:
            raise AlgorithmError(f"{self.backend.name} does not implement {op}")
        explicit = algorithm != "auto" or op in self.forced
        forced = algorithm if algorithm != "auto" else self.forced.get(
            op, self.forced.get("*", "auto"))
        if forced != "auto":
            if forced not in available:
                if explicit:
                    raise AlgorithmError(
                        f"algorithm {forced!r} is not available for {op} on "
                        f"{self.backend.name}; choose one of: auto, {', '.join(available)}")
                forced = "auto"  # a global choice applies only where it exists
        rules = self.backend.size_rules.get(op)
        if forced != "auto":
            algos: tuple[str, ...] = (forced,)
        elif rules:
            algos = tuple(alg for limit, alg in rules if nbytes <= limit)
        else:
            algos = self.backend.auto_algorithms.get(op) or available[:1]
        protos = self.backend.protocols if self.forced_protocol == "auto" else (
            self.forced_protocol,)
        return algos, protos

    def _phases(self, call: Call, algorithm: str, protocol: str) -> list[Phase]:
        nodes = self._nodes(call.ranks)
        phases = lowering(call.op, algorithm)(call, self.context(algorithm, protocol,
                                                                   nodes > 1))
        factor = self.backend.latency_factor(call.op, algorithm, protocol, nodes, self.arch)
        if factor != 1.0:
            phases = [replace(ph, latency=ph.latency * factor) for ph in phases]
        return phases

    def flow_cap(self, phase: Phase, wire: float, protocol: str, nodes: int) -> float:
        """Rate limit of each flow of ``phase`` (wire bytes/s).

        The backend's per-flow limit, and the protocol's cap on a rank's bus bandwidth
        (NCCL's LL) shared by the flows one rank sends at once.
        """
        cap = self.backend.flow_cap
        bus_cap = self.backend.bandwidth_cap(protocol, self.arch, nodes, self.cpu)
        if bus_cap < float("inf") and phase.flows:
            senders: dict[object, int] = {}  # ranks, or switch ports (in-network)
            for src, _dst, _nb in phase.flows:
                senders[src] = senders.get(src, 0) + 1
            cap = min(cap, bus_cap * wire / max(senders.values()))
        return cap

    def _predict_uncached(self, call: Call, algorithm: str, protocol: str) -> float:
        """Idle-network time. Every lowering's flow bytes are proportional to n and its
        latencies independent of n, so the transfer time is linear in n: it is computed
        once per group, algorithm and protocol (per byte) and scaled, which makes a
        size sweep on a 1,440-GPU rack cost one max-min solve per candidate."""
        if call.splits is not None or call.nbytes <= 0:
            fixed, transfer = self._cost(call, algorithm, protocol)
            return fixed + transfer
        fixed, per_byte = self._unit_cost(call.op, call.ranks, algorithm, protocol)
        extra, eff = self._size_terms(call, algorithm, protocol, per_byte)
        return fixed + extra + per_byte * call.nbytes / eff

    def _pipelined(self, algorithm: str) -> bool:
        """Whether ``algorithm`` runs NCCL's chunked NVLS pipeline (simtrain.comm.nvls_pipeline)."""
        return algorithm == "nvls" and self.backend.tuning is not None

    def _size_terms(self, call: Call, algorithm: str, protocol: str,
                    per_byte: float) -> tuple[float, float]:
        """(latency added, bandwidth efficiency) that depend on the message size: NVLS's
        pipeline fill and per-round flag exchanges, or the tree's correction factor."""
        if self._pipelined(algorithm) and call.nbytes > 0:
            return nvls_overheads(call.nbytes, len(call.ranks), self.arch, per_byte)
        if algorithm == "nvls_tree" and self._pipelined("nvls") and call.nbytes > 0:
            # The NVLS rounds of one domain pace the whole pipeline (tree sends included:
            # the same channels run every stage, round by round).
            domain = tuple(servers(call.ranks, self.fabric)[0])
            inner = self._unit_cost("all_reduce", domain, "nvls", "Simple")[1]
            extra, eff = nvls_overheads(call.nbytes, len(domain), self.arch, inner)
            heads = getattr(getattr(self.fabric, "config", None), "effective_nics_per_node",
                            len(domain))
            cap = self.backend.nvls_tree_cap(self.arch, self._nodes(call.ranks), heads)
            # busbw = factor·eff/per_byte may not exceed the cap
            factor = busbw_factor("all_reduce", len(call.ranks))
            return extra, min(eff, cap * per_byte / factor)
        return 0.0, self.backend.size_efficiency(call.op, algorithm, protocol, call.nbytes)

    def _wire(self, op: str, algorithm: str, protocol: str, ranks: int, nodes: int) -> float:
        """Wire bytes per payload byte; NVLS all-reduce's depends on the group size."""
        if self._pipelined(algorithm) and op == "all_reduce":
            return nvls_wire_factor(ranks, self.arch)
        return self.backend.wire_factor(algorithm, protocol, nodes, self.arch)

    def _unit_cost_uncached(self, op: str, ranks: tuple[int, ...], algorithm: str,
                            protocol: str) -> tuple[float, float]:
        return self._cost(Call(op, ranks, 1.0), algorithm, protocol)

    def _cost(self, call: Call, algorithm: str, protocol: str) -> tuple[float, float]:
        """(launch + alpha terms, transfer seconds) of ``call`` on an idle network."""
        phases = self._phases(call, algorithm, protocol)
        if not phases:
            return 0.0, 0.0
        nodes = self._nodes(call.ranks)
        wire = self._wire(call.op, algorithm, protocol, len(call.ranks), nodes)
        route = self.fabric.route
        transfer = 0.0
        for ph in phases:
            cap = self.flow_cap(ph, wire, protocol, nodes)
            transfer += isolated_time([(route(a, b), nb * wire) for a, b, nb in ph.flows],
                                      self.capacity,
                                      None if cap == float("inf") else [cap] * len(ph.flows),
                                      coupled=ph.coupled)
        latency = sum(ph.latency for ph in phases)
        return self._launch(algorithm, protocol) + latency, transfer

    def _launch(self, algorithm: str, protocol: str) -> float:
        if self.launch_override is not None:
            return self.launch_override
        return self.backend.base_latency(algorithm, protocol)

    def predict(self, call: Call, algorithm: str, protocol: str) -> float:
        """Seconds ``call`` takes with ``algorithm``/``protocol`` on an idle network."""
        return self._predict(call, algorithm, protocol)

    def _shape(self, call: Call, algorithm: str) -> tuple[object, ...]:
        """Cache key of a choice: on uniform clusters a group translated by whole servers
        (same offsets, same position in its first server) costs the same."""
        if not getattr(self.fabric, "uniform", False) or not call.ranks:
            return (call, algorithm)
        first = call.ranks[0]
        per_server = getattr(self.fabric, "gpus_per_server", 1)
        return (call.op, call.nbytes, call.splits, algorithm, first % per_server,
                tuple(r - first for r in call.ranks))

    def choose(self, call: Call, algorithm: str = "auto") -> tuple[str, str, float]:
        """(algorithm, protocol, predicted seconds) for ``call``, cached by group shape."""
        key = self._shape(call, algorithm)
        choice = self._choices.get(key)
        if choice is None:
            choice = self._choices[key] = self._choose(call, algorithm)
        return choice

    def plan(self, call: Call, algorithm: str = "auto") -> Lowered:
        """Choose the fastest candidate for ``call`` and lower it to phases (cached: a
        layer's collectives repeat every microbatch)."""
        key = (call, algorithm)
        lowered = self._plans.get(key)
        if lowered is None:
            lowered = self._plans[key] = self._plan(call, algorithm)
        return lowered

    def _plan(self, call: Call, algorithm: str) -> Lowered:
        name, protocol, t = self.choose(call, algorithm)
        nodes = self._nodes(call.ranks)
        wire = self._wire(call.op, name, protocol, len(call.ranks), nodes)
        phases = self._phases(call, name, protocol)
        measured = self._fitted_range(call)
        if measured is not None:
            return self._measured_plan(call, name, protocol, phases, measured, t)
        # A size efficiency stretches every flow's time alike: the bytes grow by 1/eff
        # while the caps (computed with ``wire``) stay, so capped flows stretch too.
        per_byte = (self._unit_cost(call.op, call.ranks, name, protocol)[1]
                    if call.splits is None and call.nbytes > 0 else 0.0)
        extra, eff = self._size_terms(call, name, protocol, per_byte)
        if extra and phases:
            phases = [replace(phases[0], latency=phases[0].latency + extra), *phases[1:]]
        return Lowered(
            algorithm=name,
            protocol=protocol,
            launch_latency=self._launch(name, protocol),
            phases=phases,
            wire_factor=wire / eff,
            flow_caps=[self.flow_cap(ph, wire, protocol, nodes) for ph in phases],
            predicted_s=t,
        )

    def _choose(self, call: Call, algorithm: str) -> tuple[str, str, float]:
        algos, protos = self.candidates(call.op, algorithm, call.nbytes)
        first_that_runs = bool(self.backend.size_rules.get(call.op)) and algorithm == "auto"
        best: tuple[float, str, str] | None = None
        errors = []
        for name in algos:
            for protocol in protos:
                if not self.backend.supports(name, protocol):
                    if len(protos) == 1:
                        errors.append(f"{name} runs only the Simple protocol, not {protocol}")
                    continue
                try:
                    t = self.predict(call, name, protocol)
                except AlgorithmError as exc:
                    errors.append(str(exc))
                    break
                if best is None or t < best[0]:
                    best = (t, name, protocol)
            if first_that_runs and best is not None:
                break  # size rules: the first applicable algorithm that can run
        if best is None:
            raise AlgorithmError("; ".join(errors))
        t, name, protocol = best
        measured = self._fitted_range(call)
        if measured is not None:
            t = measured.time(call.nbytes, busbw_factor(call.op, len(call.ranks)))
        return name, protocol, t

    def _fitted_range(self, call: Call) -> FittedRange | None:
        """The measured range (``comm.fitted``) that replaces the model for ``call``."""
        if not self.fitted or call.splits is not None or call.nbytes <= 0:
            return None
        return lookup(self.fitted, call.op, len(call.ranks), self._nodes(call.ranks),
                      call.nbytes)

    def _measured_plan(self, call: Call, name: str, protocol: str, phases: list[Phase],
                       measured: FittedRange, t: float) -> Lowered:
        """The chosen algorithm's flows, scaled so that on an idle network they move the
        bytes at the measured bus bandwidth after the measured latency."""
        route = self.fabric.route
        raw = sum(isolated_time([(route(a, b), nb) for a, b, nb in ph.flows], self.capacity,
                                None, coupled=ph.coupled) for ph in phases)
        target = call.nbytes * busbw_factor(call.op, len(call.ranks)) / measured.busbw
        return Lowered(
            algorithm=name, protocol=protocol, launch_latency=measured.latency,
            phases=[replace(ph, latency=0.0) for ph in phases],
            wire_factor=target / raw if raw > 0 else 1.0,
            flow_caps=[float("inf")] * len(phases), predicted_s=t)


"""The plans ``simtrain plan`` considers, and why it turns some down without simulating.

:func:`enumerate_candidates` lists every combination of degrees and options for one node
count; :class:`Checker` rejects the impossible ones (``check_parallelism``) and those that do
not fit in memory (``memory_report``) and gives the others their step-time lower bound.
Plans that differ only in ZeRO stage or rank order share one model shard and pipeline
schedule, and (ZeRO aside) one memory report and the bound's chain costs: those are built
once per shape.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from simtrain.errors import ScenarioError
from simtrain.study.plan_spec import PlanSpec


@dataclass
class Candidate:
    """One parallel plan on one node count, and what the search learnt about it."""

    nodes: int
    parallelism: dict[str, Any]
    micro_batch: int
    status: str = "enumerated"  # invalid | oom | feasible | pruned | simulated | failed
    reason: str = ""
    field: str = ""  # the scenario field a rejection is about
    memory_gib: float = 0.0
    capacity_gib: float = 0.0
    bound_s: float = 0.0
    summary: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        p = self.parallelism
        parts = [f"TP{p['tp']}", f"PP{p['pp']}"]
        if p.get("vpp", 1) > 1:
            parts[-1] += f"x{p['vpp']}"
        if p.get("pp_layers"):
            parts[-1] += "u"  # uneven stages
        if p.get("cp", 1) > 1:
            parts.append(f"CP{p['cp']}")
        if p.get("ep", 1) > 1:
            parts.append(f"EP{p['ep']}")
        parts.append(f"DP{p['dp']}")
        extra = [f"mb{self.micro_batch}", f"zero{p['zero']}", f"recompute={p['recompute']}"]
        if p["pp"] > 1:
            extra.append(p["schedule"])
        if p.get("order", DEFAULT_ORDER) != DEFAULT_ORDER:
            extra.append(f"order={p['order']}")
        return " ".join(parts) + " · " + " ".join(extra)

    @property
    def headroom_gib(self) -> float:
        """GPU memory left unused by the fullest stage."""
        return self.capacity_gib - self.memory_gib


DEFAULT_ORDER = "tp-cp-pp-dp"


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _powers_of_two(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def uneven_stages(layers: int, pp: int) -> list[int] | None:
    """Layers per stage when ``pp`` does not divide ``layers``: ceil(L/p) each, one fewer on
    the end stages first (they also hold the embedding and the output layer), as Llama 3
    does for 126 layers on 16 stages (§3.3.2: 7, 8 × 14, 7). None if pp divides L or pp > L."""
    if layers % pp == 0 or pp > layers:
        return None
    per = -(-layers // pp)
    out = [per] * pp
    ends = [i for pair in zip(range(pp), reversed(range(pp)), strict=True) for i in pair]
    for i in list(dict.fromkeys(ends))[:per * pp - layers]:
        out[i] -= 1
    return out if min(out) >= 1 else None


def distinct_orders(orders: Sequence[str], degrees: dict[str, int]) -> list[str]:
    """The orders that place ranks differently: axes of degree 1 do not move anyone, so
    "tp-cp-dp-pp" and "dp-tp-cp-pp" are one layout when tp = cp = 1."""
    seen: dict[tuple[str, ...], str] = {}
    for order in orders:
        key = tuple(a for a in order.split("-") if degrees[a] > 1)
        seen.setdefault(key, order)
    return list(seen.values())


def pipeline_depths(spec: PlanSpec, layers: int) -> list[int]:
    """pp values: divisors of the layer count, and (``uneven_pp``) powers of two."""
    out = set(_divisors(layers))
    if spec.uneven_pp:
        out |= {p for p in _powers_of_two(layers) if uneven_stages(layers, p)}
    return sorted(p for p in out if spec.max_pp is None or p <= spec.max_pp)


def schedule_chunks(name: str, pp: int, layers: int, uneven: bool,
                    vpp: Sequence[int]) -> list[int]:
    """The chunks per stage (vpp) schedule ``name`` is searched with at ``pp`` stages: 1
    for one-chunk schedules (``1f1b`` only at pp 1), the searched ``vpp`` values for the
    interleaved schedule, 2 for a V (zb-v, dualpipe); only where the schedule accepts the
    degrees (``schedule_problems``) and the model chunks split the layers evenly (uneven
    stages only with one chunk per stage)."""
    from simtrain.parallel.schedule import model_chunks, schedule_problems

    if pp == 1:
        return [1] if name == "1f1b" else []
    tried = list(vpp) if name == "interleaved" else [1, 2]
    return [v for v in tried if not schedule_problems(name, pp, None, v)
            and (v == 1 or (not uneven and layers % model_chunks(name, pp, v) == 0))]


def enumerate_candidates(spec: PlanSpec, nodes: int, gpus: int, gpus_per_node: int,
                         model: Any) -> Iterable[Candidate]:
    """Every combination of degrees and options for ``gpus`` GPUs (not yet checked)."""
    tps = [t for t in _divisors(gpus_per_node) if spec.max_tp is None or t <= spec.max_tp]
    cps = _powers_of_two(16) if spec.seq_len >= spec.cp_min_seq_len else [1]
    eps = _powers_of_two(model.num_experts) if model.is_moe else [1]
    layers = model.num_layers
    pps = pipeline_depths(spec, layers)
    given = spec.degrees
    axes = [list(given.get(name, default)) for name, default in
            (("tp", tps), ("pp", pps), ("cp", cps), ("ep", eps))]
    for tp, pp, cp, ep in itertools.product(*axes):
        inner = tp * pp * cp
        if gpus % inner:
            continue
        dp = gpus // inner
        if dp % ep:
            continue
        uneven = uneven_stages(layers, pp)
        schedules = [(name, v) for name in spec.schedules
                     for v in schedule_chunks(name, pp, layers, uneven is not None, spec.vpp)]
        orders = distinct_orders(spec.orders, {"tp": tp, "cp": cp, "pp": pp, "dp": dp})
        for (schedule, vpp), mb, zero, recompute, order in itertools.product(
                schedules, spec.micro_batches, spec.zero, spec.recompute, orders):
            par = {"tp": tp, "pp": pp, "cp": cp, "dp": dp, "ep": ep, "vpp": vpp,
                   "sp": tp > 1, "zero": zero, "schedule": schedule, "recompute": recompute,
                   "order": order}
            if uneven is not None:
                par["pp_layers"] = uneven
            yield Candidate(nodes, par, mb)


def candidate_scenario(spec: PlanSpec, cand: Candidate, network: str = "analytic"
                       ) -> dict[str, Any]:
    """The full scenario dict of ``cand`` (loadable with ``simtrain.load_scenario``)."""
    base = spec.scenario(cand.nodes)
    base["training"]["micro_batch_size"] = cand.micro_batch
    base["parallelism"] = dict(cand.parallelism)
    base["sim"] = {**base["sim"], "network": network}
    return base


def final_scenario(spec: PlanSpec, cand: Candidate) -> dict[str, Any]:
    """``cand``'s scenario for its final run: the final network, and the plan's jittered
    steps when it has a variability section."""
    data = candidate_scenario(spec, cand, spec.final_network)
    if spec.variability is not None:
        data["sim"]["variability"] = spec.variability.model_dump()
    return data


class Checker:
    """Stage 1 of the search for one node count: invalid, oom, or feasible with a bound."""

    def __init__(self, spec: PlanSpec, base: Any, cluster: Any, per_node: int) -> None:
        self.spec, self.base, self.cluster, self.per_node = spec, base, cluster, per_node
        self._plans: dict[tuple[Any, ...], Any] = {}
        self._memory: dict[tuple[Any, ...], Any] = {}
        self._chains: dict[tuple[Any, ...], Any] = {}
        self._bounds: dict[tuple[Any, ...], float] = {}
        self._links: Any = None
        self._optimizer: Any = None

    def __call__(self, cand: Candidate) -> None:
        from pydantic import ValidationError

        from simtrain.parallel.plan import ParallelismConfig, check_parallelism
        from simtrain.simulate import build_plan, memory_report

        spec, cluster = self.spec, self.cluster
        try:
            par = ParallelismConfig(**cand.parallelism)
        except ValidationError as exc:
            cand.status, cand.reason = "invalid", str(exc.errors()[0]["msg"])
            cand.field = "parallelism"
            return
        problems = check_parallelism(par, self.base.model, num_gpus=cluster.num_gpus,
                                     gpus_per_node=self.per_node,
                                     global_batch=spec.global_batch,
                                     micro_batch=cand.micro_batch, seq_len=spec.seq_len)
        if problems:
            cand.status, (cand.field, cand.reason) = "invalid", problems[0]
            return
        p = cand.parallelism
        shape = (p["tp"], p["cp"], p["ep"], p["pp"], p["vpp"], tuple(p.get("pp_layers", ())),
                 p["schedule"], cand.micro_batch)
        train = self.base.training.model_copy(update={"micro_batch_size": cand.micro_batch})
        scenario = self.base.model_copy(update={"parallelism": par, "training": train})
        try:
            plan = self._plans.get(shape)
            if plan is None:
                plan = self._plans[shape] = build_plan(scenario, cluster)
            plan = replace(plan, dims=par.dims(cluster.num_gpus))
            key = (*shape, p["zero"], p["recompute"])
            memory = self._memory.get(key)
            if memory is None:
                memory = self._memory[key] = memory_report(scenario, cluster, plan)
        except (ValueError, ScenarioError) as exc:
            cand.status, cand.reason, cand.field = "invalid", str(exc), "parallelism"
            return
        cand.memory_gib = memory.total / 2**30
        cand.capacity_gib = memory.capacity / 2**30
        if not memory.fits():
            cand.status, cand.reason, cand.field = "oom", memory.describe(), "memory"
            return
        cand.status = "feasible"
        key = (*shape, p["zero"], p["recompute"])
        bound = self._bounds.get(key)
        if bound is None:
            bound = self._bounds[key] = self._bound(scenario, plan, (*shape, p["recompute"]))
        cand.bound_s = bound

    def _bound(self, scenario: Any, plan: Any, shape: tuple[Any, ...]) -> float:
        """The step-time bound (``plan_bound``) under the best of the searched rank orders
        (the search gives every order of a plan one bound); the chain costs are shared by
        the ZeRO stages and orders of a shape."""
        from simtrain.study.plan_bound import (
            chain_costs,
            link_limits,
            optimizer_seconds,
            plan_bound,
        )

        if self._links is None:
            self._links = link_limits(self.cluster)
            self._optimizer = optimizer_seconds(scenario, self.cluster)  # ddp: the plan's
        costs = self._chains.get(shape)
        if costs is None:
            costs = self._chains[shape] = chain_costs(scenario, self.cluster, plan)
        d = plan.dims
        orders = distinct_orders(self.spec.orders, {"tp": d.tp, "cp": d.cp, "pp": d.pp,
                                                    "dp": d.dp})
        return min(plan_bound(costs, scenario, self.cluster, replace(d, order=order),
                              plan.micro_batches, self._links, self._optimizer)
                   for order in orders)

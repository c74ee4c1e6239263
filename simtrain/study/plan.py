"""Capacity planning: search the parallel plans of a training job, best first.

``simtrain plan`` (``simtrain/cli_plan.py``) takes a model, a cluster (one node count or
several) and a training target (total tokens, global batch, sequence length) and returns the
best plans that fit in memory, with their time-to-train, GPU-hours and cost under failures
(:mod:`simtrain.study.goodput`).

The search has four stages:

1. **Enumerate** (:mod:`simtrain.study.plan_candidates`) every combination of tp, pp (even,
   and uneven stages for powers of two), vpp, cp, ep, micro batch, ZeRO stage, recompute,
   schedule and rank order, dp the rest of the GPUs. The base scenario leaves the degrees
   open: only the enumerated candidates are validated.
2. **Reject** impossible plans (``check_parallelism``) and those that do not fit in GPU
   memory (``memory_report``), without simulating either.
3. **Branch and bound**: each feasible plan gets an analytical lower bound of its step time
   (:mod:`simtrain.study.plan_bound`), hence of its ranking key (time-to-train and cost
   grow with the step time). Plans are simulated in increasing bound order
   (``sim.network: analytic``, ``sim.granularity: stage``, symmetric fidelity where
   replicas are identical) and the search stops once the next bound is no better than
   the k-th best simulated key; for a Pareto ranking, plans whose bounds are dominated by
   a simulated plan are skipped.
4. **Final runs**: the best k plans are simulated again with the flow network (link
   contention) unless ``final_network`` is "analytic", and ranked by that step time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from simtrain.errors import ScenarioError
from simtrain.study.plan_bound import (
    StageTail,
    chain_costs,
    plan_bound,
    stage_compute_times,
    step_time_bound,
)
from simtrain.study.plan_candidates import (
    Candidate,
    Checker,
    candidate_scenario,
    enumerate_candidates,
    final_scenario,
)
from simtrain.study.plan_result import PlanResult, fmt_duration, format_rows, pareto_front
from simtrain.study.plan_spec import (
    RECOMPUTE_MODES,
    ZERO_STAGES,
    PlanSpec,
    load_plan,
    parse_count,
    plan_spec,
)

__all__ = ["RECOMPUTE_MODES", "ZERO_STAGES", "Candidate", "PlanResult", "PlanSpec",
           "candidate_scenario", "enumerate_candidates", "fmt_duration", "format_rows",
           "load_plan", "parse_count", "plan_spec", "search", "simulate_candidate",
           "simulate_ranked", "StageTail", "chain_costs", "plan_bound", "stage_compute_times",
           "step_time_bound"]


# ---- the search ------------------------------------------------------------------------


Progress = Callable[[str, int, int], None]  # (phase, done, total)


def simulate_candidate(scenario: dict[str, Any]) -> dict[str, Any]:
    """Simulate one candidate scenario dict; {"summary": ...} or {"error": ...}."""
    import json

    from simtrain.engine.sim import SimulationDeadlock
    from simtrain.scenario import load_scenario
    from simtrain.simulate import simulate

    try:
        result = simulate(load_scenario(scenario))
    except (ScenarioError, SimulationDeadlock) as exc:
        return {"error": str(exc).replace("\n", " ")}
    except Exception as exc:  # noqa: BLE001 - one candidate must not end the search
        return {"error": f"{type(exc).__name__}: {exc}".replace("\n", " ")}
    return {"summary": json.loads(json.dumps(result.summary, default=str))}


def _components(cluster: Any) -> dict[str, float]:
    """What can fail in ``cluster``: GPUs, hosts, NICs, network switches (and software,
    counted per GPU)."""
    kinds = [d["kind"] for d in cluster.node_attrs.values()]  # no networkx graph needed
    return {"gpu": cluster.num_gpus, "host": cluster.num_servers,
            "nic": sum(1 for k in kinds if k == "nic"),
            "switch": sum(1 for k in kinds if k in ("leaf", "spine")),
            "software": cluster.num_gpus}


def _base(spec: PlanSpec, nodes: int) -> Any:
    from simtrain.scenario import load_scenario

    try:
        return load_scenario(spec.scenario(nodes), open_parallelism=True)
    except ScenarioError as exc:
        raise ScenarioError(exc.message, source=spec.name, field=exc.field) from None


def search(spec: PlanSpec, *, executor: Any = None, progress: Progress | None = None,
           batch: int | None = None, keep: int = 0) -> PlanResult:
    """Run the four stages (see the module docstring); return the ranked plans.

    ``executor`` (a :mod:`simtrain.study.executors` executor; default: this process) runs
    the simulations, ``batch`` at a time (default: its worker count). ``progress(phase,
    done, total)`` is called as candidates are checked ("check") and simulated ("simulate";
    the total is the feasible count, an upper bound) and for the final runs ("final").
    The final runs of the first ``keep`` plans are kept (``PlanResult.runs``, with their
    timelines) for the report. Raises ScenarioError when the base scenario is bad (unknown
    preset, ...) and ValueError when a given checkpoint interval is shorter than a step.
    """
    from simtrain.hardware.topology import build_cluster
    from simtrain.study.goodput import checkpoint_bytes
    from simtrain.workload.model import num_parameters

    t0, c0 = time.perf_counter(), time.process_time()
    candidates: list[Candidate] = []
    components: dict[int, dict[str, float]] = {}
    ckpt = 0.0
    for nodes in spec.nodes:
        base = _base(spec, nodes)
        cluster = build_cluster(base.cluster)
        components[nodes] = _components(cluster)
        ckpt = checkpoint_bytes(num_parameters(base.model), base.training.dtype_bytes)
        per_node = cluster.gpus_per_server
        found = list(enumerate_candidates(spec, nodes, cluster.num_gpus, per_node,
                                          base.model))
        check = Checker(spec, base, cluster, per_node)
        total = len(candidates) + len(found)
        for i, cand in enumerate(found):
            check(cand)
            if progress is not None and (i % 64 == 0 or i == len(found) - 1):
                progress("check", len(candidates) + i + 1, total)
        candidates.extend(found)
    result = PlanResult(spec, [], {}, 0.0, candidates, components=components,
                        checkpoint_bytes=ckpt)
    check_s, check_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    if executor is None:
        from simtrain.study.executors import SerialExecutor

        executor = SerialExecutor()
    _branch_and_bound(result, executor, progress, batch)
    _final_runs(result, executor, progress, keep)
    counts = {"enumerated": len(candidates)}
    for status in ("invalid", "oom", "pruned", "simulated", "failed"):
        counts[status] = sum(1 for c in candidates if c.status == status)
    counts["feasible"] = counts["pruned"] + counts["simulated"] + counts["failed"]
    result.counts = counts
    result.check_s, result.check_cpu_s = check_s, check_cpu_s
    result.wall_s = time.perf_counter() - t0
    return result


def _branch_and_bound(result: PlanResult, executor: Any, progress: Progress | None,
                      batch: int | None) -> None:
    """Simulate feasible plans in bound order until no plan left can enter the ranking.

    Rank orders change where groups sit, not the compute the bound counts, so every order
    of a plan has the same bound. The bound search runs over each plan's first order; the
    other orders of the best ``max(top, final_top)`` plans are simulated afterwards (a plan
    outside them is not re-tried in another order).
    """
    spec = result.spec
    feasible = [c for c in result.candidates if c.status == "feasible"]
    variants: dict[tuple[Any, ...], list[Candidate]] = {}
    for cand in feasible:
        variants.setdefault(_without_order(cand), []).append(cand)
    primary = [group[0] for group in variants.values()]
    keyed = sorted(primary, key=lambda c: result.key(c, c.bound_s))
    size = batch or max(1, executor.workers)
    need = max(spec.top, spec.final_count)
    best: list[float] = []  # simulated keys, sorted
    simulated: list[Candidate] = []
    done = [0]

    def run(chunk: list[Candidate]) -> None:
        jobs = [(j, candidate_scenario(spec, c)) for j, c in enumerate(chunk)]
        for j, outcome in executor.imap_unordered(_indexed, jobs):
            cand = chunk[j]
            if "summary" in outcome:
                cand.status, cand.summary = "simulated", outcome["summary"]
                best.append(result.key(cand, float(cand.summary["step_time_s"])))
                best.sort()
                simulated.append(cand)
            else:
                cand.status, cand.reason = "failed", outcome["error"]
            done[0] += 1
            if progress is not None:
                progress("simulate", done[0], len(feasible))

    i = 0
    while i < len(keyed):
        chunk: list[Candidate] = []
        while i < len(keyed) and len(chunk) < size:
            cand = keyed[i]
            threshold = best[need - 1] if len(best) >= need else math.inf
            if spec.rank_by != "pareto" and result.key(cand, cand.bound_s) >= threshold:
                result.stop_bound_s = cand.bound_s
                i = len(keyed)
                break
            i += 1
            if spec.rank_by == "pareto" and _dominated(result, cand, simulated):
                continue
            chunk.append(cand)
        if chunk:
            run(chunk)
    leaders = sorted(simulated, key=lambda c: result.key(c, result.step_of(c)))[:need]
    if spec.rank_by == "pareto":
        leaders = pareto_front(result, simulated)
    others = [v for c in leaders for v in variants[_without_order(c)][1:]]
    for start in range(0, len(others), size):
        run(others[start:start + size])
    if progress is not None and feasible:
        progress("simulate", done[0], done[0])  # the rest is pruned: the bar ends full
    for cand in feasible:
        if cand.status == "feasible":
            cand.status = "pruned"


def _without_order(cand: Candidate) -> tuple[Any, ...]:
    """Everything that makes a plan but its rank order."""
    par = {k: v for k, v in cand.parallelism.items() if k != "order"}
    return cand.nodes, cand.micro_batch, repr(sorted(par.items()))


def _dominated(result: PlanResult, cand: Candidate, simulated: Sequence[Candidate]) -> bool:
    """True if a simulated plan is no worse than ``cand``'s best case in time, cost and
    memory headroom (headroom is known exactly before simulating)."""
    t, c = result.time_and_cost(cand, cand.bound_s)
    for s in simulated:
        ts, cs = result.time_and_cost(s, float((s.summary or {})["step_time_s"]))
        if ts <= t and cs <= c and s.headroom_gib >= cand.headroom_gib:
            return True
    return False


def _final_runs(result: PlanResult, executor: Any, progress: Progress | None,
                keep: int) -> None:
    """Re-simulate the best k plans with the final network (in the executor's pool; the
    first ``keep`` here, keeping their timelines); set ``result.ranked``."""
    import json

    from simtrain.scenario import load_scenario
    from simtrain.simulate import simulate

    spec = result.spec
    simulated = [c for c in result.candidates if c.status == "simulated"]
    step = result.step_of
    if spec.rank_by == "pareto":
        order = sorted(pareto_front(result, simulated), key=lambda c: result.key(c, step(c)))
    else:
        order = sorted(simulated, key=lambda c: result.key(c, step(c)))
    final = order[:spec.final_count]
    # the search's own runs were analytic: rerun only for another network or jittered steps
    todo = final if spec.final_network != "analytic" or spec.variability is not None else []
    done = 0

    def finish(cand: Candidate, summary: dict[str, Any]) -> None:
        nonlocal done
        cand.summary = {**summary, "search_step_time_s": (cand.summary or {})["step_time_s"]}
        done += 1
        if progress is not None:
            progress("final", done, len(todo))

    pooled = todo[keep:]
    jobs = [(j, final_scenario(spec, c)) for j, c in enumerate(pooled)]
    for j, outcome in executor.imap_unordered(_indexed, jobs):
        if "summary" not in outcome:  # the analytic run passed: a bug, not a bad plan
            raise RuntimeError(f"final run of {pooled[j].label} failed: {outcome['error']}")
        finish(pooled[j], outcome["summary"])
    for cand in todo[:keep]:
        run = simulate(load_scenario(final_scenario(spec, cand)))
        result.runs[id(cand)] = run
        finish(cand, json.loads(json.dumps(run.summary, default=str)))
    final.sort(key=lambda c: result.key(c, result.rank_step(c)))
    rest = order[len(final):]
    # a Pareto ranking keeps the whole front; the others the top plans (final runs first)
    result.ranked = final + rest if spec.rank_by == "pareto" else (final + rest)[:spec.top]
    for cand in result.ranked:
        result.check_interval(cand)


def _indexed(index: int, scenario: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return index, simulate_candidate(scenario)


def simulate_ranked(result: PlanResult, count: int | None = None) -> list[Any]:
    """SimulationResults (with timelines) of the first ``count`` plans, for the report."""
    from simtrain.scenario import load_scenario
    from simtrain.simulate import simulate

    out = []
    for cand in result.ranked[:count]:
        if id(cand) in result.runs:
            out.append(result.runs[id(cand)])
            continue
        network = str((cand.summary or {}).get("network", "analytic"))
        out.append(simulate(load_scenario(candidate_scenario(result.spec, cand, network))))
    return out

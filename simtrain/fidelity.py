"""Which ranks a run simulates: ``sim.fidelity`` resolved against the scenario and cluster.

- ``explicit``: every rank.
- ``symmetric``: tp = dp = 0 of each stage stands for all (``parallel/symmetry.py``); an
  error when ranks differ.
- ``hybrid``: the ranks that differ and the replicas they synchronise with run explicitly,
  one replica stands for the rest (``parallel/hybrid.py``); explicit, with a note, when no
  symmetric remainder is left or the cluster is not wired alike.
- ``auto``: symmetric when every replica is identical and there is something to mirror,
  hybrid when some ranks differ, explicit otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from simtrain.hardware.topology import Cluster
from simtrain.parallel.hybrid import plan_hybrid
from simtrain.parallel.symmetry import Symmetry
from simtrain.scenario import Scenario, scenario_error
from simtrain.units import fmt_seconds


@dataclass(frozen=True)
class FidelityChoice:
    """The resolved fidelity: its name, its symmetry (None: explicit) and, for hybrid runs
    and fallbacks, what ran explicitly and why (the summary's ``fidelity_why``)."""

    mode: str
    symmetry: Symmetry | None = None
    why: dict[str, Any] | None = None
    weights: dict[int, int] | None = field(default=None, repr=False)  # hybrid: rank -> ranks


def differing_ranks(scenario: Scenario) -> dict[int, str]:
    """Rank -> why it behaves unlike its peers (sim.stragglers, sim.hangs)."""
    sim = scenario.sim
    out: dict[int, list[str]] = {}
    for rank, s in sim.stragglers.items():
        parts = ([f"starts {fmt_seconds(s.delay)} late"] if s.delay else []) + \
            ([f"computes {s.slowdown:g}x slower"] if s.slowdown != 1.0 else [])
        out.setdefault(rank, []).append(f"straggler ({', '.join(parts) or 'no effect'}; "
                                        f"sim.stragglers)")
    for rank, at in sim.hangs.items():
        out.setdefault(rank, []).append(f"hangs at t={fmt_seconds(at)} (sim.hangs)")
    return {r: "; ".join(w) for r, w in sorted(out.items())}


def choose_fidelity(scenario: Scenario, cluster: Cluster) -> FidelityChoice:
    """Resolve ``sim.fidelity`` (see the module docstring); ScenarioError for symmetric
    fidelity where ranks differ."""
    sim, model = scenario.sim, scenario.model
    uniform = bool(getattr(cluster, "uniform", False))
    imbalance = bool(model.num_experts and model.routing_imbalance)
    differ = [why for why, present in (
        ("hung or straggling ranks (sim.hangs, sim.stragglers)", sim.hangs or sim.stragglers),
        ("slow links (sim.link_slowdowns)", sim.link_slowdowns),
        ("MoE routing imbalance (expert ranks carry different loads)", imbalance),
        ("a custom topology (servers may be wired differently)",
         not uniform and not sim.link_slowdowns),
    ) if present]
    if sim.fidelity == "symmetric" and differ:
        raise scenario_error(
            scenario, "sim.fidelity",
            f"sim.fidelity: symmetric needs identical data-parallel replicas, but the "
            f"scenario has {'; '.join(differ)}; use sim.fidelity: hybrid, explicit or auto")
    dims = scenario.parallelism.dims(cluster.num_gpus)
    if sim.fidelity == "symmetric":
        return FidelityChoice("symmetric", Symmetry.symmetric(dims))
    if sim.fidelity == "explicit":
        return FidelityChoice("explicit")
    if sim.fidelity == "auto" and not differ:
        if dims.dp > 1 or dims.tp > 1:
            return FidelityChoice("symmetric", Symmetry.symmetric(dims))
        return FidelityChoice("explicit")
    if sim.fidelity == "auto" and not uniform:
        return FidelityChoice("explicit")
    if sim.link_slowdowns:  # a slowed cable makes the servers behind it unlike the rest
        return _fallback("slow links (sim.link_slowdowns) make the servers they connect "
                         "differ, and hybrid fidelity mirrors whole replicas only")
    if not uniform:
        return _fallback("the cluster has a custom topology, so servers may be wired "
                         "differently and no replica can stand for another")
    plan = plan_hybrid(dims, differing_ranks(scenario), expert_imbalance=imbalance)
    if isinstance(plan, str):
        return _fallback(plan)
    return FidelityChoice("hybrid", plan.symmetry, plan.describe(),
                          plan.symmetry.weights(dims))


def _fallback(reason: str) -> FidelityChoice:
    return FidelityChoice("explicit", why={
        "fallback": f"hybrid fidelity fell back to explicit: {reason}"})


def fidelity_note(choice: FidelityChoice, num_gpus: int) -> str | None:
    """One plain line for the summary's notes: what a hybrid run simulated explicitly and
    why, or why hybrid fell back to explicit; None otherwise."""
    why = choice.why
    if not why:
        return None
    if "fallback" in why:
        return str(why["fallback"])
    ranks = list(why["explicit_ranks"])
    shown = ", ".join(map(str, ranks[:8])) + (f", ... ({len(ranks)} ranks)" if len(ranks) > 8
                                              else "")
    simulated = len(ranks) + len(why["representative_ranks"])
    noun = "rank" if len(ranks) == 1 else "ranks"
    where = f"{noun} {shown} ran explicitly ({why['why']})" if ranks else str(why["why"])
    return (f"hybrid fidelity: {where}; {simulated} of {num_gpus} ranks simulated, the "
            f"others mirror them")

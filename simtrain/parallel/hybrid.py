"""Hybrid fidelity: the ranks that differ run explicitly, every other role stays symmetric.

A straggler or a hung rank changes the timeline of everything it synchronises with: its
TP, CP and EP groups and its pipeline neighbours wait for it, so its whole data-parallel
replica (its expert-parallel block of replicas, when ep > 1) runs differently, and the
data-parallel collectives of every stage wait for that replica. The other replicas are
still identical to one another. So the replicas holding a differing rank are simulated
explicitly, one more replica (block) stands for all the others, and their traffic loads
the network as link weights, as in symmetric fidelity (``symmetry.py``).

Along tp the same holds inside every simulated replica: the differing ranks' tp indices
are simulated, plus one other tp index that mirrors the remaining TP peers (they compute
at full speed and wait for the slow one in the same collectives). Routing imbalance makes
the EP ranks of a block differ from one another but not one block from the next, so the
simulated block keeps all its EP ranks.

A virtual rank's mirror always sits in each group it is in: DP groups hold every replica,
the representative's EP block is simulated whole, and TP groups keep their mirror index.
That is what lets a collective wait only for its simulated members.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from simtrain.parallel.plan import ParallelDims
from simtrain.parallel.symmetry import Symmetry


@dataclass(frozen=True)
class HybridPlan:
    """A hybrid run: its symmetry, the ranks simulated explicitly, and why."""

    symmetry: Symmetry
    explicit_ranks: tuple[int, ...]  # simulated ranks of the explicit replicas
    representative_ranks: tuple[int, ...]  # simulated ranks standing for everyone else
    explicit_replicas: tuple[int, ...]  # their data-parallel indices
    reasons: dict[int, str]  # differing rank -> why it differs

    def describe(self) -> dict[str, object]:
        """The summary's ``fidelity_why`` entry (JSON-ready)."""
        why = "; ".join(f"rank {r}: {w}" for r, w in sorted(self.reasons.items()))
        return {
            "explicit_ranks": list(self.explicit_ranks),
            "representative_ranks": list(self.representative_ranks),
            "explicit_replicas": list(self.explicit_replicas),
            "simulated_tp": self.symmetry.tp_indices,
            "why": why or "routing imbalance: the EP ranks of a block differ; one block "
                          "of each stage is simulated whole, the others mirror it",
        }


def plan_hybrid(dims: ParallelDims, differ: Mapping[int, str], *,
                expert_imbalance: bool) -> HybridPlan | str:
    """The hybrid plan for ranks ``differ`` (rank -> why), or why there is none (a string:
    every replica and TP index would have to run explicitly)."""
    block = dims.ep if dims.ep > 1 else 1
    explicit_blocks = sorted({dims.coords(r)["dp"] // block for r in differ})
    free = [b for b in range(dims.dp // block) if b not in explicit_blocks]
    mirror_dp = list(range(dims.dp))
    if free:
        rep = free[0] * block
        keep = {b * block + i for b in explicit_blocks for i in range(block)}
        mirror_dp = [d if d in keep else rep + d % block for d in range(dims.dp)]
    slow_tp = sorted({dims.coords(r)["tp"] for r in differ})
    spare = [t for t in range(dims.tp) if t not in slow_tp]
    mirror_tp = list(range(dims.tp))
    if spare:
        mirror_tp = [t if t in slow_tp else spare[0] for t in range(dims.tp)]
    if mirror_dp == list(range(dims.dp)) and mirror_tp == list(range(dims.tp)):
        return (f"no symmetric remainder: the differing ranks touch every one of the "
                f"{dims.dp // block} data-parallel {'blocks' if block > 1 else 'replicas'} "
                f"and every one of the {dims.tp} tensor-parallel indices")
    symmetry = Symmetry(tuple(mirror_dp), tuple(mirror_tp))
    explicit_dp = {d for d in symmetry.dp_indices if d // block in explicit_blocks}
    explicit: list[int] = []
    representative: list[int] = []
    for stage in range(dims.pp):
        for r in symmetry.stage_ranks(dims, stage):
            (explicit if dims.coords(r)["dp"] in explicit_dp else representative).append(r)
    return HybridPlan(symmetry, tuple(sorted(explicit)), tuple(sorted(representative)),
                      tuple(sorted(explicit_dp)), dict(differ))

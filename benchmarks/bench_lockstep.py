"""How much of an explicit step a lockstep actor could run once per group, and how often the
members of a group actually stay in step (measured on the per-member engine's timeline).

For each scenario: the static lockstep groups (``simtrain.engine.lockstep``), the share of
the step's member tasks they cover, the shared positions (collectives of a whole group,
whose arrival bookkeeping an actor does once), the member collectives (where members may
leave at different times), and, from the simulated timeline, the share of the groups' own
positions at which every member's span equals the first member's bit for bit, with the
number of groups that ever differ. Not part of the test run.

Usage: python benchmarks/bench_lockstep.py [--only NAME ...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_exact import EXTRA  # noqa: E402
from benchmarks.bench_scale import LADDER  # noqa: E402

_EXPLICIT = ["sim.fidelity=explicit", "sim.ignore_memory=true"]
CASES: dict[str, tuple[Any, list[str]]] = {
    **{name: (spec, _EXPLICIT) for name, _, spec in LADDER if name in ("dense-64", "dense-512")},
    **{name: EXTRA[name] for name in ("dense-tp8pp2", "dense-tp8pp2-late", "dense64-straggler",
                                      "dense64-slowlink", "pp_1f1b-jitter")},
}


def measure(source: Any, overrides: list[str]) -> dict[str, Any]:
    """The static groups of one scenario and how its timeline keeps them in step."""
    from simtrain import load_scenario, simulate
    from simtrain.engine.lockstep import lockstep_groups
    from simtrain.engine.timeline import TASK_SPAN

    if isinstance(source, dict) and "base" in source:
        source = ROOT / source["base"]
    elif isinstance(source, str):
        source = ROOT / source
    result = simulate(load_scenario(source, overrides))
    graph, sim = result.graph, result.scenario.sim
    start = time.process_time()
    groups = lockstep_groups(graph, delays={r: s.delay for r, s in sim.stragglers.items()},
                             slowdowns={r: s.slowdown for r, s in sim.stragglers.items()},
                             hangs=sim.hangs)
    find_s = time.process_time() - start
    rank, begin, end, ref, _ = result.timeline._raw_columns()
    task_rows = (ref & 3) == TASK_SPAN
    began = np.full(len(graph), np.nan)
    ended = np.full(len(graph), np.nan)
    began[ref[task_rows] >> 2], ended[ref[task_rows] >> 2] = begin[task_rows], end[task_rows]
    comm = graph.codes("comm")
    own = same = diverged = shared = 0
    for group in groups:
        ever = False
        for s, tasks in group.tasks.items():
            cols = tasks[:, ~group.shared[s]]
            compute = comm[cols[0]] < 0  # member collectives are compared through their deps
            t = cols[:, compute]
            equal = (began[t] == began[t[0]]).all(axis=0) & (ended[t] == ended[t[0]]).all(axis=0)
            own += int(compute.sum())
            same += int(equal.sum())
            ever |= not bool(equal.all())
            shared += int(group.shared[s].sum())
        diverged += ever
    members = len(graph.members()[0])
    covered = sum(g.member_tasks for g in groups)
    return {
        "ranks": graph.num_ranks, "member_tasks": members, "groups": len(groups),
        "grouped_ranks": sum(len(g.ranks) for g in groups),
        "grouped_member_tasks_pct": round(100 * covered / max(members, 1), 1),
        "shared_positions": shared, "member_collectives": sum(g.syncs for g in groups),
        "own_compute_positions": own,
        "in_step_pct": round(100 * same / max(own, 1), 2), "groups_that_differ": diverged,
        "find_cpu_s": round(find_s, 2), "step_time_s": result.summary.get("step_time_s"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = {}
    for name, (source, overrides) in CASES.items():
        if args.only and name not in args.only:
            continue
        try:
            rows[name] = measure(source, overrides)
        except Exception as exc:  # a deadlocked case has no finished timeline
            rows[name] = {"skipped": f"{type(exc).__name__}: {exc}"[:120]}
        print(name, json.dumps(rows[name]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

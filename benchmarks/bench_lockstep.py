"""How much of an explicit step a lockstep actor could run once per group, and how often the
members of a group actually stay in step (measured on the per-member engine's timeline).

For each scenario: the static lockstep groups (``simtrain.engine.lockstep``), the share of
the step's member tasks they cover, the shared positions (collectives of a whole group,
whose arrival bookkeeping an actor does once), the member collectives (where members may
leave at different times), and, from the simulated timeline, the share of the groups' own
positions at which every member's span equals the first member's bit for bit, with the
number of groups that ever differ. ``--wakes`` also counts how the per-member engine wakes
the groups' streams: the share of wakes that come as one consecutive run of callbacks
covering every member of a group (what one actor callback could stand for, keeping every
other callback's order). Not part of the test run.

``--finder`` instead times only the static finder (``lockstep_groups``, CPU seconds, best of
``--repeat``) on the lowered task graph, without simulating, over FINDER_CASES (dense-64,
dense-512 and dense-16384 of bench_scale's ladder, explicit, and the cases above);
``--oracle`` also times the previous implementation (tests/engine/lockstep_oracle.py) and
says whether the two return identical groups, arrays and syncs.

Usage: python benchmarks/bench_lockstep.py [--only NAME ...] [--wakes] [--json OUT]
       python benchmarks/bench_lockstep.py --finder [--oracle] [--repeat N] [--only NAME ...]
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


FINDER_CASES: dict[str, tuple[Any, list[str]]] = {
    **{name: (spec, _EXPLICIT) for name, _, spec in LADDER
       if name in ("dense-64", "dense-512", "dense-16384")},
    **{name: case for name, case in CASES.items() if name not in ("dense-64", "dense-512")},
}


def _source(source: Any) -> Any:
    if isinstance(source, dict) and "base" in source:
        return ROOT / source["base"]
    return ROOT / source if isinstance(source, str) else source


def finder(source: Any, overrides: list[str], repeat: int, oracle: bool) -> dict[str, Any]:
    """CPU seconds of ``lockstep_groups`` on one scenario's task graph (best of ``repeat``),
    and with ``oracle`` the previous implementation's and whether both agree."""
    from simtrain import load_scenario
    from simtrain.engine.lockstep import lockstep_groups
    from simtrain.fidelity import choose_fidelity
    from simtrain.hardware.topology import build_cluster
    from simtrain.simulate import OOM_HINT, lower_checked
    from simtrain.workload.host import issue_times

    scenario = load_scenario(_source(source), overrides)
    cluster = build_cluster(scenario.cluster).with_link_slowdowns(
        [(s.between, s.slowdown) for s in scenario.sim.link_slowdowns])
    _, _, graph = lower_checked(scenario, cluster, choose_fidelity(scenario, cluster), OOM_HINT)
    compute, sim = scenario.compute, scenario.sim
    issued = issue_times(graph, compute.host_kernel_issue, compute.host_microbatch)
    args: dict[str, Any] = {
        "delays": {r: s.delay for r, s in sim.stragglers.items()},
        "slowdowns": {r: s.slowdown for r, s in sim.stragglers.items()}, "hangs": sim.hangs,
        "issue": tuple(np.frombuffer(times, dtype=np.float64)
                       for times in (issued.first, issued.last))}
    row: dict[str, Any] = {"tasks": len(graph), "ranks": graph.num_ranks}
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        groups = lockstep_groups(graph, **args)
        best = min(best, time.process_time() - start)
    row.update(find_cpu_s=round(best, 3), groups=len(groups),
               grouped_ranks=sum(len(g.ranks) for g in groups),
               member_collectives=sum(g.syncs for g in groups))
    if oracle:
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "lockstep_oracle", ROOT / "tests" / "engine" / "lockstep_oracle.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["lockstep_oracle"] = module
        spec.loader.exec_module(module)
        start = time.process_time()
        old = module.lockstep_groups(graph, **args)
        row["oracle_cpu_s"] = round(time.process_time() - start, 3)
        row["identical"] = [(g.ranks, g.syncs, list(g.tasks)) for g in groups] == \
            [(g.ranks, g.syncs, list(g.tasks)) for g in old] and all(
                a.tasks[s].dtype == b.tasks[s].dtype and np.array_equal(a.tasks[s], b.tasks[s])
                and np.array_equal(a.shared[s], b.shared[s])
                for a, b in zip(groups, old, strict=True) for s in a.tasks)
    return row


def measure(source: Any, overrides: list[str]) -> dict[str, Any]:
    """The static groups of one scenario and how its timeline keeps them in step."""
    from simtrain import load_scenario, simulate
    from simtrain.engine.lockstep import lockstep_groups
    from simtrain.engine.timeline import TASK_SPAN
    from simtrain.workload.host import issue_times

    if isinstance(source, dict) and "base" in source:
        source = ROOT / source["base"]
    elif isinstance(source, str):
        source = ROOT / source
    result = simulate(load_scenario(source, overrides))
    graph, sim = result.graph, result.scenario.sim
    compute = result.scenario.compute
    issued = issue_times(graph, compute.host_kernel_issue, compute.host_microbatch)
    first, last = (np.frombuffer(times, dtype=np.float64) for times in (issued.first,
                                                                        issued.last))
    start = time.process_time()
    groups = lockstep_groups(graph, delays={r: s.delay for r, s in sim.stragglers.items()},
                             slowdowns={r: s.slowdown for r, s in sim.stragglers.items()},
                             hangs=sim.hangs, issue=(first, last))
    find_s = time.process_time() - start
    rank, begin, end, ref, _ = result.timeline._raw_columns()
    task_rows = (ref & 3) == TASK_SPAN
    began = np.full(len(graph), np.nan)
    ended = np.full(len(graph), np.nan)
    began[ref[task_rows] >> 2], ended[ref[task_rows] >> 2] = begin[task_rows], end[task_rows]
    comm = graph.codes("comm")
    own = same = diverged = shared = after = 0
    covered = 0
    first_split = float("inf")
    for group in groups:
        split_at = float("inf")  # when the group's members first differ (split, no rejoin)
        starts = []
        for s, tasks in group.tasks.items():
            covered += tasks.size
            cols = tasks[:, ~group.shared[s]]
            compute = comm[cols[0]] < 0  # member collectives are compared through their deps
            t = cols[:, compute]
            equal = (began[t] == began[t[0]]).all(axis=0) & (ended[t] == ended[t[0]]).all(axis=0)
            own += int(compute.sum())
            same += int(equal.sum())
            if not equal.all():
                split_at = min(split_at, float(began[t[:, ~equal]].min()))
            shared += int(group.shared[s].sum())
            starts.append(began[t[0]])
        diverged += split_at < float("inf")
        after += int((np.concatenate(starts) >= split_at).sum()) if starts else 0
        first_split = min(first_split, split_at)
    members = len(graph.members()[0])
    return {
        "ranks": graph.num_ranks, "member_tasks": members, "groups": len(groups),
        "grouped_ranks": sum(len(g.ranks) for g in groups),
        "grouped_member_tasks_pct": round(100 * covered / max(members, 1), 1),
        "shared_positions": shared, "member_collectives": sum(g.syncs for g in groups),
        "own_compute_positions": own,
        "in_step_pct": round(100 * same / max(own, 1), 2), "groups_that_differ": diverged,
        # own compute positions at or after their group's first difference: what a split
        # that never rejoins would run per member
        "after_first_split_pct": round(100 * after / max(own, 1), 2),
        "first_split_s": None if first_split == float("inf") else first_split,
        "find_cpu_s": round(find_s, 2), "step_time_s": result.summary.get("step_time_s"),
    }


def wakes(source: Any, overrides: list[str]) -> dict[str, Any]:
    """Stream wakes in whole-group consecutive runs (the engine's loop instrumented)."""
    from simtrain import load_scenario, simulate
    from simtrain.engine import loop
    from simtrain.engine.lockstep import lockstep_groups
    from simtrain.engine.streams import Stream

    if isinstance(source, str):
        source = ROOT / source
    seq: list[int | None] = []  # the woken stream's rank per callback; -1: batch member cut
    step_one, fire = loop.Loop.step_one, loop._Batch.fire

    def owners(callbacks: Any) -> None:
        for callback in callbacks or ():
            owner = getattr(callback, "__self__", None)
            seq.append(owner.rank if isinstance(owner, Stream) else None)

    def counted_step(env: Any) -> None:
        event = env._queue[0][3]
        callbacks = event.callbacks or []
        if not (len(callbacks) == 1 and getattr(callbacks[0], "__func__", None) is fire):
            owners(callbacks)
        step_one(env)

    def counted_fire(batch: Any, holder: Any) -> None:
        for event in batch.members:
            owners(event.callbacks)
            seq.append(-1)
        fire(batch, holder)

    loop.Loop.step_one, loop._Batch.fire = counted_step, counted_fire  # type: ignore[method-assign]
    try:
        result = simulate(load_scenario(source, overrides))
    finally:
        loop.Loop.step_one, loop._Batch.fire = step_one, fire  # type: ignore[method-assign]
    group_of = {r: (i, len(g.ranks)) for i, g in enumerate(lockstep_groups(result.graph))
                for r in g.ranks}
    total = whole = i = 0
    while i < len(seq):
        rank = seq[i]
        i += 1
        if rank is None or rank < 0:
            continue
        total += 1
        group, ranks = group_of.get(rank), {rank}
        while group is not None and i < len(seq):  # the run: distinct members, in a row
            nxt = seq[i]
            if nxt == -1:
                i += 1
                continue
            if nxt is None or group_of.get(nxt) != group or nxt in ranks:
                break
            ranks.add(nxt)
            total += 1
            i += 1
        if group is not None and len(ranks) == group[1]:
            whole += len(ranks)
    return {"stream_wakes": total, "whole_group_runs_pct": round(100 * whole / max(total, 1), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--wakes", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--finder", action="store_true")
    parser.add_argument("--oracle", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = {}
    if args.finder:
        for name, (source, overrides) in FINDER_CASES.items():
            if not args.only or name in args.only:
                rows[name] = finder(source, overrides, args.repeat, args.oracle)
                print(name, json.dumps(rows[name]), flush=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        return
    for name, (source, overrides) in CASES.items():
        if args.only and name not in args.only:
            continue
        try:
            rows[name] = measure(source, overrides)
            if args.wakes:
                rows[name].update(wakes(source, overrides))
        except Exception as exc:  # a deadlocked case has no finished timeline
            rows[name] = {"skipped": f"{type(exc).__name__}: {exc}"[:120]}
        print(name, json.dumps(rows[name]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

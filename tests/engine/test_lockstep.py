"""Lockstep groups: the static check that a group's members do the same work task for task."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.engine import lockstep
from simtrain.engine.lockstep import LockstepGroup, lockstep_groups
from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph

_spec = importlib.util.spec_from_file_location("lockstep_oracle",
                                               Path(__file__).with_name("lockstep_oracle.py"))
assert _spec is not None and _spec.loader is not None
oracle = sys.modules.setdefault("lockstep_oracle", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(oracle)

_KINDS = ("duration", "dep", "slowdown", "delay", "hang", "outside")


def _graph(m: int, plan: list[str], seed: int, diverge: str | None = None,
           who: int = 1) -> tuple[TaskGraph, dict[str, dict[int, float]]]:
    """Members 0..m-1 (a group), peers m..2m-1 (one per member) and one outside rank 2m.
    ``plan``: per position "compute" (each member its own), "shared" (an all-reduce of the
    group) or "member" (a send from each member to its peer). ``diverge`` makes member
    ``who`` differ in one way (see _KINDS); the faults go to the returned tables."""
    rng = random.Random(seed)
    g = TaskGraph(2 * m + 1)
    outside = g.compute(2 * m, "outside", 0.5)
    last: list[list[int]] = [[] for _ in range(m)]
    faults: dict[str, dict[int, float]] = {"slowdowns": {}, "delays": {}, "hangs": {}}
    computes = [i for i, step in enumerate(plan) if step == "compute"]
    odd = rng.choice(computes) if computes else -1
    for i, step in enumerate(plan):
        if step == "compute":
            work = rng.choice((0.25, 0.5, 1.0))
            durations = [work] * m
            deps = [list(d) for d in last]
            if diverge == "duration" and i == odd:
                durations[who] = work * 2
            if diverge == "dep" and i == odd:
                deps[who].append(len(g) - 1 if len(g) > 1 else outside)
            if diverge == "outside" and i == odd:  # every member waits for an outside
                other = g.compute(2 * m, "other outside", 0.5)  # task, `who` for another
                deps = [[*d, other if k == who else outside] for k, d in enumerate(deps)]
            first = g.compute_each(range(m), f"c{i}", durations, deps=deps,
                                   flops=[1e9] * m)
            last = [[first + k] for k in range(m)]
        elif step == "shared":
            ar = g.collective("all_reduce", range(m), 1e6, f"ar{i}", stream="tp",
                              deps=[d for ds in last for d in ds])
            last = [[ar] for _ in range(m)]
        else:
            last = [[g.send_recv(k, m + k, 1e6, f"send{i}", stream="pp", deps=last[k])]
                    for k in range(m)]
    if diverge in ("slowdown", "delay"):
        faults[diverge + "s"][who] = 1.5
    if diverge == "hang":
        faults["hangs"][who] = 0.5
    return g, faults


_plans = st.lists(st.sampled_from(("compute", "shared", "member")), min_size=1, max_size=12)


@settings(max_examples=40)
@given(m=st.integers(2, 4), plan=_plans, seed=st.integers(0, 2**16))
def test_parallel_members_form_a_group_and_run_in_step(m, plan, seed, star_fabric):
    # Nothing differs: the members are found as one group, and the per-member engine runs
    # every one of their own tasks at the first member's times, bit for bit (what a
    # lockstep actor would write for all of them at once).
    g, _ = _graph(m, plan, seed)
    found = {group.ranks: group for group in lockstep_groups(g)}
    group = found.get(tuple(range(m)))
    if "shared" not in plan:
        return  # no collective of the whole group: not a candidate
    assert group is not None
    assert group.syncs == plan.count("member")
    spans = {(s.rank, s.name): (s.start, s.end) for s in
             execute(g, star_fabric(2 * m + 1, 1e9, 1e-6), interference=0.1)}
    for i, step in enumerate(plan):
        if step == "compute":
            assert len({spans[(k, f"c{i}")] for k in range(m)}) == 1


@settings(max_examples=40)
@given(m=st.integers(2, 4), plan=_plans, seed=st.integers(0, 2**16),
       kind=st.sampled_from(_KINDS), data=st.data())
def test_a_member_that_differs_leaves_no_group(m, plan, seed, kind, data):
    # One member differs (its own duration, an extra or outside dependency, a straggler's
    # slowdown or delay, a hang): the members are not a lockstep group.
    plan = ["compute", *plan, "shared"]
    who = data.draw(st.integers(0, m - 1))
    g, faults = _graph(m, plan, seed, diverge=kind, who=who)
    groups = lockstep_groups(g, **faults)
    assert tuple(range(m)) not in {group.ranks for group in groups}
    same, _ = _graph(m, plan, seed)  # the same graph without the difference: a group
    assert tuple(range(m)) in {group.ranks for group in lockstep_groups(same)}


def test_a_dependency_every_member_shares_keeps_the_group():
    # Each member's first compute waits for the same outside task: no member differs.
    g = TaskGraph(3)
    out = g.compute(2, "outside", 1.0)
    first = g.compute_each((0, 1), "c", [1.0, 1.0], deps=[[out], [out]], flops=[0.0, 0.0])
    g.collective("all_reduce", (0, 1), 1e6, "ar", stream="tp", deps=[first, first + 1])
    (group,) = lockstep_groups(g)
    assert group.ranks == (0, 1)
    assert group.tasks["compute"].tolist() == [[first], [first + 1]]
    assert group.shared["tp"].tolist() == [True]
    assert group.member_tasks == 2  # one own compute per member


def test_a_collective_missing_one_members_part_leaves_no_group():
    # The all-reduce waits for member 0's compute only: member 1 may reach it earlier.
    g = TaskGraph(2)
    first = g.compute_each((0, 1), "c", [1.0, 1.0], deps=[[], []], flops=[0.0, 0.0])
    g.collective("all_reduce", (0, 1), 1e6, "ar", stream="tp", deps=[first])
    assert lockstep_groups(g) == []


def test_a_position_shared_by_some_members_only_leaves_no_group():
    # Members 0 and 1 meet in one all-reduce where member 2 runs its own compute.
    g = TaskGraph(3)
    g.collective("all_reduce", (0, 1, 2), 1e6, "ar", stream="tp")
    g.collective("all_reduce", (0, 1), 1e6, "pair", stream="x")
    g.compute(2, "alone", 1.0, stream="x")
    assert (0, 1, 2) not in {group.ranks for group in lockstep_groups(g)}


def test_unequal_host_issue_times_leave_no_group():
    # Same tasks, but member 1's kernel is issued later by its host.
    g = TaskGraph(2)
    first = g.compute_each((0, 1), "c", [1.0, 1.0], deps=[[], []], flops=[0.0, 0.0])
    g.collective("all_reduce", (0, 1), 1e6, "ar", stream="tp", deps=[first, first + 1])
    tid, _ = g.members()
    same = (tid * 0.0, tid * 0.0 + 1e-3)
    assert [x.ranks for x in lockstep_groups(g, issue=same)] == [(0, 1)]
    later = (same[0].copy(), same[1].copy())
    later[0][1] = 5e-4  # member position 1: task `first + 1` on rank 1
    assert lockstep_groups(g, issue=later) == []


def test_a_rank_joins_the_group_that_runs_more_shared_tasks_once():
    # Pairs (0, 1) and (2, 3) meet in two all-reduces on "s", pairs (0, 2) and (1, 3) in one
    # on "t": all four pairs are parallel, but a rank joins one group, the one with more
    # shared tasks; the "t" all-reduces are then member collectives of the first two.
    g = TaskGraph(4)
    for pair in ((0, 1), (2, 3)):
        for name in ("a", "b"):
            g.collective("all_reduce", pair, 1e6, name, stream="s")
    for pair in ((0, 2), (1, 3)):
        g.collective("all_reduce", pair, 1e6, "c", stream="t")
    groups = lockstep_groups(g)
    assert [(x.ranks, x.syncs) for x in groups] == [((0, 1), 1), ((2, 3), 1)]


def _same(new: list[LockstepGroup], old: list[Any]) -> None:
    """The two implementations' groups are identical: ranks, syncs, streams in order,
    arrays by dtype, shape and value."""
    assert [(g.ranks, g.syncs, list(g.tasks), list(g.shared)) for g in new] == \
        [(g.ranks, g.syncs, list(g.tasks), list(g.shared)) for g in old]
    for a, b in zip(new, old, strict=True):
        for s in a.tasks:
            assert a.tasks[s].dtype == b.tasks[s].dtype and a.shared[s].dtype == b.shared[s].dtype
            assert np.array_equal(a.tasks[s], b.tasks[s])
            assert np.array_equal(a.shared[s], b.shared[s])
        assert a.member_tasks == b.member_tasks


def _random_graph(seed: int) -> tuple[TaskGraph, dict[str, Any]]:
    """Ranks running a mostly common program over a few rank groups, each step perturbed
    with small probability (a duration, a dependency, a stream, a missing part), plus
    stray tasks, virtual ranks, faults and host issue times with ties and NaNs."""
    rng = random.Random(seed)
    n = rng.randint(3, 7)
    virtual = {n - 1} if rng.random() < 0.3 else set()
    g = TaskGraph(n, virtual=virtual)
    groups = [tuple(range(0, n, 2)), tuple(range(1, n, 2)), tuple(range(n)),
              tuple(rng.sample(range(n), 2)), tuple(rng.sample(range(n), 3))]
    last: list[list[int]] = [[] for _ in range(n)]
    odd = rng.choice((0.0, 0.02, 0.1))  # how often a step is perturbed
    for _ in range(rng.randint(1, 16)):
        ranks = rng.choice(groups)
        stream = rng.choice(("compute", "tp", "pp"))
        step = rng.choice(("each", "each", "each", "coll", "coll", "send", "stray"))
        if step == "each":
            durations = [0.5 if rng.random() > odd else 0.25 for _ in ranks]
            deps = [list(last[r]) if rng.random() > odd else [] for r in ranks]
            if len(g) and rng.random() < odd:
                deps[0].append(rng.randrange(len(g)))
            first = g.compute_each(ranks, "c", durations, deps=deps, flops=[1.0] * len(ranks),
                                   stream=stream if rng.random() < odd else "compute")
            for k, r in enumerate(ranks):
                last[r] = [first + k]
        elif step == "coll":
            deps = [d for r in ranks for d in last[r] if rng.random() > odd]
            if len(g) and rng.random() < 0.2:  # a task any member may wait for, or not
                deps.insert(rng.randint(0, len(deps)), rng.randrange(len(g)))
            tid = g.collective(rng.choice(("all_reduce", "all_gather")), ranks, 1e6, "ar",
                               stream=stream, deps=deps)
            for r in ranks:
                last[r] = [tid]
        elif step == "send":
            shift = rng.randrange(1, n)
            for r in ranks:
                peer = (r + shift) % n if rng.random() > odd else rng.randrange(n)
                extra = [rng.randrange(len(g))] if len(g) and rng.random() < 0.2 else []
                if peer != r:
                    last[r] = [g.send_recv(r, peer, 1e6, "send", stream="pp",
                                           deps=[*last[r], *extra])]
        elif rng.random() < 0.3:
            r = rng.randrange(n)
            deps = rng.sample(range(len(g)), min(len(g), rng.randint(0, 2)))
            last[r] = [g.compute(r, "stray", 1.0, deps=deps, stream=stream)]
    faults: dict[str, Any] = {"delays": {}, "slowdowns": {}, "hangs": {}}
    if rng.random() < 0.2:
        faults[rng.choice(("delays", "slowdowns", "hangs"))][rng.randrange(n)] = 1.5
    tid, _ = g.members()
    if rng.random() < 0.5:
        times = np.array([rng.choice((0.0, 1.0, np.nan)) if rng.random() < odd else 0.0
                          for _ in range(len(tid))])
        faults["issue"] = (times, times + 1.0)
    return g, faults


@settings(max_examples=150)
@given(seed=st.integers(0, 2**32 - 1), chunk=st.sampled_from((1, 8, 1 << 18)))
def test_the_vectorised_check_matches_the_oracle_on_random_graphs(seed, chunk):
    # ``chunk``: entries checked at once; small ones split a batch into many chunks.
    g, args = _random_graph(seed)
    saved, lockstep._CHUNK = lockstep._CHUNK, chunk
    try:
        _same(lockstep_groups(g, **args), oracle.lockstep_groups(g, **args))
    finally:
        lockstep._CHUNK = saved


@settings(max_examples=60)
@given(m=st.integers(2, 4), plan=_plans, seed=st.integers(0, 2**16),
       kind=st.sampled_from((None, *_KINDS)), who=st.integers(0, 3))
def test_the_vectorised_check_matches_the_oracle_on_group_programs(m, plan, seed, kind, who):
    g, faults = _graph(m, ["compute", *plan, "shared"], seed, diverge=kind, who=who % m)
    _same(lockstep_groups(g, **faults), oracle.lockstep_groups(g, **faults))

"""Ready chains run ahead under interference, the columnar task graph and issue columns."""

from __future__ import annotations

import random

import pytest

from simtrain.engine.issue import IssueTimes
from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph


def _retimed_graph() -> TaskGraph:
    g = TaskGraph(2)
    a = g.compute(0, "a", 2.0)
    g.compute(0, "b", 3.0, deps=[a])
    g.compute(0, "c", 1.0, deps=[a], stream="side")
    w = g.compute(1, "w", 1.0)
    g.collective("all_reduce", (0, 1), 2e9, "ar", deps=[w], stream="dp")
    return g


def test_a_chain_run_ahead_is_retimed_when_a_collective_starts_and_ends(star_fabric):
    # Rank 0 runs a (2 s) then b (3 s), ahead from t=0 at full rate. Rank 1's all-reduce
    # of 2e9 B over 1e9 B/s links takes 2(P-1)/P x 2e9 / 1e9 = 2 s: [1, 3). Interference
    # 0.25 makes rank 0 compute at 1/1.25 = 0.8 in [1, 3). a: 1 s of work by t=1, the other
    # 1 s at 0.8 takes 1.25 s -> ends 2.25 (not 2). b from 2.25: 0.75 s x 0.8 = 0.6 s of
    # work by t=3, the remaining 2.4 s at full rate -> ends 5.4. c (1 s, stream "side")
    # waits for a, so for its moved end: 2.25 + 0.6 work by t=3, 0.4 s after -> 3.4.
    spans = {s.name: s for s in execute(_retimed_graph(), star_fabric(2, 1e9, 0.0),
                                        interference=0.25) if s.rank == 0}
    assert spans["ar"].start == pytest.approx(1.0) and spans["ar"].end == pytest.approx(3.0)
    assert spans["a"].end == pytest.approx(2.25)
    assert spans["b"].start == pytest.approx(2.25) and spans["b"].end == pytest.approx(5.4)
    assert spans["c"].start == pytest.approx(2.25) and spans["c"].end == pytest.approx(3.4)


def _random_graph(seed: int) -> TaskGraph:
    """Compute chains on 3 ranks with collectives (some overlapping compute) between."""
    rng = random.Random(seed)
    g = TaskGraph(3)
    last: dict[int, list[int]] = {r: [] for r in range(3)}
    for step in range(30):
        if rng.random() < 0.3:
            group = tuple(sorted(rng.sample(range(3), 2)))
            deps = sorted({d for r in group for d in last[r]}) if rng.random() < 0.5 else []
            tid = g.collective("all_reduce", group, rng.uniform(1e6, 1e9), f"ar{step}",
                               stream=f"s{group}", deps=deps)
            if rng.random() < 0.5:
                for r in group:
                    last[r] = [tid]
        else:
            r = rng.randrange(3)
            last[r] = [g.compute(r, f"k{step}", rng.choice([0.0, rng.uniform(0.01, 2.0)]),
                                 deps=last[r], flops=1e12)]
    return g


@pytest.mark.parametrize("seed", range(8))
def test_chains_ahead_equal_running_every_task_as_its_own_process(seed, star_fabric):
    # A far hang time switches a rank's chains off (the per-task countdown path) without
    # stopping it: both paths must give the same spans, bit for bit.
    fabric = star_fabric(3, 1e9, 1e-6)
    ahead = execute(_random_graph(seed), fabric, interference=0.3)
    per_task = execute(_random_graph(seed), fabric, interference=0.3,
                       hangs=dict.fromkeys(range(3), 1e9))
    assert sorted(ahead.signature()) == sorted(per_task.signature())


def _wide_graph(seed: int, ranks: int) -> TaskGraph:
    """Every rank computes layers of random length; after each layer a data-parallel
    all-reduce over all ranks (needing that layer) overlaps the next layer's compute."""
    rng = random.Random(seed)
    g = TaskGraph(ranks)
    last = {r: [] for r in range(ranks)}  # type: dict[int, list[int]]
    for layer in range(4):
        done = {r: g.compute(r, f"k{layer}", rng.uniform(0.01, 0.02), deps=last[r],
                             flops=1e12) for r in range(ranks)}
        g.collective("all_reduce", tuple(range(ranks)), 1e6, f"ar{layer}",
                     deps=sorted(done.values()), stream="dp")
        last = {r: [done[r]] for r in range(ranks)}
    return g


@pytest.mark.parametrize("seed", range(3))
def test_a_wide_groups_chains_are_re_timed_as_each_would_be_alone(seed, star_fabric,
                                                                  monkeypatch):
    # 40 ranks: more chains than _MANY_CHAINS, so the executor finds the chains to
    # re-time at each all-reduce's start and end with one pass over their ends; the
    # spans equal those of running every task as its own process, bit for bit.
    from simtrain.engine import sim
    from simtrain.engine.sim import _MANY_CHAINS, Executor

    retimed: list[int] = []
    inner = sim.retime

    def counted(ex, st):  # type: ignore[no-untyped-def]
        retimed.append(st.rank)
        inner(ex, st)

    monkeypatch.setattr(sim, "retime", counted)
    ranks = 40
    assert ranks > _MANY_CHAINS
    fabric = star_fabric(ranks, 1e9, 1e-6)
    ex = Executor(_wide_graph(seed, ranks), fabric, interference=0.3)
    ahead = ex.run()
    wide = ex._chains_on[tuple(range(ranks))]
    assert wide[1] is not None and len(wide[0]) == ranks
    assert retimed  # chains were re-timed through the wide path
    per_task = execute(_wide_graph(seed, ranks), fabric, interference=0.3,
                       hangs=dict.fromkeys(range(ranks), 1e9))
    assert sorted(ahead.signature()) == sorted(per_task.signature())
    moved = [s for s in ahead if s.name.startswith("k") and s.end - s.start > 0.0201]
    assert moved  # some compute was slowed by an all-reduce it overlapped


def test_the_task_view_reads_back_what_was_added():
    g = TaskGraph(4)
    a = g.compute(1, "a", 2.0, kind="forward", flops=3.0, nbytes=4.0, meta={"microbatch": 0})
    c = g.collective("all_gather", (0, 1), 8.0, "ag", deps=[a], stream="tp")
    task = g.tasks[a]
    assert (task.id, task.kind, task.name, task.ranks, task.stream) == (a, "forward", "a",
                                                                       (1,), "compute")
    assert (task.duration, task.flops, task.bytes, task.deps, task.comm) == (2.0, 3.0, 4.0,
                                                                            (), None)
    task.meta["microbatch"] = 9  # a view's meta is its own copy
    assert g.tasks[a].meta == {"microbatch": 0}
    coll = g.tasks[-1]
    assert coll.id == c and coll.deps == (a,) and coll.comm is not None
    assert coll.comm.op == "all_gather" and coll.bytes == 8.0 and coll.ranks == (0, 1)
    assert [t.name for t in g.tasks] == ["a", "ag"] and len(g.tasks[0:1]) == 1
    with pytest.raises(IndexError):
        g.tasks[2]


def test_stream_ids_follow_program_order_and_the_walk_order_of_streams():
    g = TaskGraph(3)
    g.compute(2, "x", 1.0)
    g.collective("all_reduce", (1, 0), 1.0, "ar", stream="dp")
    g.compute(0, "y", 1.0)
    g.compute(2, "z", 1.0)
    g.virtual = {1}
    streams = g.stream_ids()
    assert list(streams) == [(2, "compute"), (0, "dp"), (0, "compute")]
    assert [list(v) for v in streams.values()] == [[0, 3], [1], [2]]


def test_issue_columns_are_the_mapping_they_were_built_from():
    g = TaskGraph(3)
    g.compute(2, "a", 1.0)
    g.collective("all_reduce", (1, 0), 1.0, "ar")
    g.compute(0, "b", 1.0)
    table = {(0, 2): (1.0, 2.0), (1, 0): (3.0, 4.0), (1, 1): (5.0, 6.0)}
    issue = IssueTimes.of(table, g)
    assert dict(issue) == table and issue == table and len(issue) == 3
    assert issue.get((2, 0)) is None and (0, 1) not in issue and issue[(1, 1)] == (5.0, 6.0)
    assert issue.at(issue.position((1, 1))) == (5.0, 6.0)
    assert IssueTimes.of({}, g) == {}
    with pytest.raises(KeyError, match="not a simulated member"):
        IssueTimes.of({(0, 1): (1.0, 1.0)}, g)

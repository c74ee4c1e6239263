"""Streams and collectives driven by callbacks: a stall past a chain's end, prepared runs."""

from __future__ import annotations

import pytest

from simtrain.engine.sim import Executor, SimulationDeadlock, execute
from simtrain.engine.streams import collectives_only
from simtrain.engine.taskgraph import TaskGraph


def _stalled_graph() -> TaskGraph:
    # Rank 0 computes a (2 s) then b, which needs the all-reduce with rank 1; rank 1 hangs
    # at t=0, so the all-reduce never runs and b never starts.
    g = TaskGraph(2)
    a = g.compute(0, "a", 2.0)
    ar = g.collective("all_reduce", (0, 1), 1e6, "ar", stream="dp")
    g.compute(0, "b", 1.0, deps=[a, ar])
    g.compute(1, "w", 1.0)
    return g


@pytest.mark.parametrize("interference", [0.0, 0.25])
def test_a_stall_while_a_stream_waits_past_its_chain_is_at_the_chains_end(
        interference, star_fabric):
    # Rank 0's compute stream waits for the all-reduce instead of waking at a's end (t=2):
    # the stall is still reported at t=2 (a's end, the last thing that happened) and a's
    # span is in the partial timeline, as when the stream woke at t=2 to find b pending.
    with pytest.raises(SimulationDeadlock) as err:
        execute(_stalled_graph(), star_fabric(2, 1e9, 0.0), hangs={1: 0.0},
                interference=interference)
    assert err.value.at == 2.0
    assert "deadlocked at t=2s" in str(err.value)
    assert "rank 1 stopped issuing work" in str(err.value)
    spans = {s.name: s for s in err.value.timeline}  # type: ignore[union-attr]
    assert (spans["a"].start, spans["a"].end) == (0.0, 2.0)
    assert "b" not in spans


def test_a_collective_is_prepared_once_per_spec_and_group(star_fabric):
    # Four microbatches of the same all-reduce over (0, 1) and one over (1, 2): two
    # prepared runs; every member's span shares its run's meta.
    g = TaskGraph(3)
    for mb in range(4):
        g.collective("all_reduce", (0, 1), 1e6, f"ar{mb}", stream="dp")
    g.collective("all_reduce", (1, 2), 1e6, "other", stream="dp")
    ex = Executor(g, star_fabric(3, 1e9, 1e-6))
    timeline = ex.run()
    assert len(ex.programs) == 2
    metas = {id(s.meta) for s in timeline if s.name.startswith("ar")}
    assert len(metas) == 1
    # each all-reduce of 2 x 1e6 B over 1e9 B/s links: 2(P-1)/P x 1e6 / 1e9 = 1 ms of
    # flows plus 1 us per hop: they run back to back on the dp stream.
    ends = sorted(s.end for s in timeline if s.rank == 0)
    assert ends[0] == pytest.approx(1e-3, rel=1e-2)
    assert ends[-1] == pytest.approx(4e-3, rel=1e-2)


def test_a_stream_of_collectives_only_keeps_no_chain(star_fabric):
    # Under interference the compute stream's chain is re-timed when a collective starts
    # or ends on its rank; the dp stream holds only the collective and keeps none.
    ex = Executor(_stalled_graph(), star_fabric(2, 1e9, 0.0), interference=0.25)
    ex.run()
    assert [len(ex._chains.get(r, [])) for r in (0, 1)] == [1, 1]


def test_a_stream_of_collectives_only_walks_as_a_comm_stream(star_fabric):
    # The dp stream holds the all-reduce only (CommStream); the compute streams hold
    # compute (Stream, with its chain states).
    ex = Executor(_stalled_graph(), star_fabric(2, 1e9, 0.0))
    tasks = {key: ts for key, (ts, _) in ex.graph.stream_members().items()}
    assert collectives_only(ex, tasks[(0, "dp")]) and collectives_only(ex, tasks[(1, "dp")])
    assert not collectives_only(ex, tasks[(0, "compute")])
    assert not collectives_only(ex, [])


@pytest.mark.parametrize("interference", [0.0, 0.25])
def test_a_comm_stream_waits_for_its_dependency_then_the_host(interference, star_fabric):
    # Rank 0 computes a (1 s); the all-reduce over (0, 1) needs a, and rank 0's host issues
    # its kernel at t=3 s (rank 1's: no issue time). Rank 0's dp stream reaches the
    # all-reduce at a's end (1 s), waits for the host [1, 3) (a "host" span), arrives at
    # 3; rank 1 arrived at 0 and waited 3 s. The all-reduce of 2 x 1e6 B over 1e9 B/s
    # links: 2(P-1)/P x 1e6 / 1e9 = 1 ms of flows, so it runs [3, 3.001) on both ranks.
    g = TaskGraph(2)
    a = g.compute(0, "a", 1.0)
    ar = g.collective("all_reduce", (0, 1), 1e6, "ar", deps=[a], stream="dp")
    timeline = execute(g, star_fabric(2, 1e9, 0.0), issue={(ar, 0): (3.0, 3.0)},
                       interference=interference)
    host = [(s.rank, s.start, s.end) for s in timeline if s.kind == "host"]
    assert host == [(0, 1.0, 3.0)]
    spans = sorted((s.rank, s.start, s.end, s.meta.get("waited_s", 0.0))
                   for s in timeline if s.name == "ar")
    assert [(r, start, waited) for r, start, _, waited in spans] == [(0, 3.0, 0.0),
                                                                      (1, 3.0, 3.0)]
    assert spans[0][2] == pytest.approx(3.001, rel=1e-9)


def test_the_loop_runs_without_the_cycle_collector_and_makes_no_unit_cycles(star_fabric):
    # The collector is off while the loop runs and on again after (also after a
    # deadlock); the flow units the all-reduces ran as leave no member <-> unit cycle.
    import gc

    from simtrain.engine.units import Member, Unit

    g = TaskGraph(2)
    for mb in range(3):
        g.collective("all_reduce", (0, 1), 1e6, f"ar{mb}", stream="dp")
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        execute(g, star_fabric(2, 1e9, 1e-6))
        gc.collect()
        assert not [o for o in gc.garbage if isinstance(o, Member | Unit)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert gc.isenabled()
    with pytest.raises(SimulationDeadlock):
        execute(_stalled_graph(), star_fabric(2, 1e9, 0.0), hangs={1: 0.0})
    assert gc.isenabled()


def _layers_graph(layers: int) -> TaskGraph:
    """Two ranks, a tensor-parallel step's shape: per layer each rank computes, then the
    pair all-gathers on its "tp" stream, and the next compute needs the all-gather."""
    g = TaskGraph(2)
    last = {0: [], 1: []}  # type: dict[int, list[int]]
    for layer in range(layers):
        mine = [g.compute(r, f"f{layer}", 0.5 + 0.25 * r, deps=last[r], flops=1e12)
                for r in (0, 1)]
        ag = g.collective("all_gather", (0, 1), 1e8, f"ag{layer}", deps=mine, stream="tp")
        last = {0: [ag], 1: [ag]}
    return g


@pytest.mark.parametrize("interference", [0.0, 0.25])
def test_a_ready_compute_task_runs_in_the_chain_without_a_wait_for_its_deps(
        interference, star_fabric, monkeypatch):
    # Each compute task after an all-gather is reached when the all-gather ends: its
    # dependencies have ended, so the stream runs it in its chain at once, without first
    # asking for its pending dependencies (Stream._wait_deps is asked only at the
    # all-gathers, by the tp streams). The spans equal those of running every task as its
    # own process (a far hang time switches the chains off).
    from simtrain.engine import streams

    asked: list[bool] = []
    inner = streams.Stream._wait_deps

    def counted(self, tid):  # type: ignore[no-untyped-def]
        asked.append(self.graph_columns[0][tid] < 0)  # whether a compute task
        return inner(self, tid)

    monkeypatch.setattr(streams.Stream, "_wait_deps", counted)
    fabric = star_fabric(2, 1e9, 1e-6)
    ahead = execute(_layers_graph(6), fabric, interference=interference)
    assert asked and not any(asked)
    per_task = execute(_layers_graph(6), fabric, interference=interference,
                       hangs=dict.fromkeys(range(2), 1e9))
    assert sorted(ahead.signature()) == sorted(per_task.signature())
    assert len(ahead.spans) == 6 * 2 * 2

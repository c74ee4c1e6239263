"""The SimPy executor on hand-written task graphs."""

from __future__ import annotations

import pytest

from simtrain.engine.sim import SimulationDeadlock, execute
from simtrain.engine.taskgraph import TaskGraph, TaskGraphError


def test_tasks_on_one_stream_run_in_order(star_fabric):
    g = TaskGraph(1)
    g.compute(0, "a", 1.0)
    g.compute(0, "b", 2.0)
    tl = execute(g, star_fabric(1, 1.0, 0.0))
    spans = {s.name: s for s in tl}
    assert (spans["a"].start, spans["a"].end) == (0.0, 1.0)
    assert (spans["b"].start, spans["b"].end) == (1.0, 3.0)


def test_streams_overlap_and_deps_order_them(star_fabric):
    # compute: a [0,1), c [1,4); comm stream: b depends on a, so [1, 1 + 2) runs beside c.
    g = TaskGraph(1)
    a = g.compute(0, "a", 1.0)
    g.compute(0, "b", 2.0, stream="comm", deps=[a])
    g.compute(0, "c", 3.0)
    spans = {s.name: s for s in execute(g, star_fabric(1, 1.0, 0.0))}
    assert spans["b"].start == 1.0 and spans["b"].end == 3.0
    assert spans["c"].start == 1.0 and spans["c"].end == 4.0


def test_collective_waits_for_the_last_rank(star_fabric):
    # Rank 1 computes 5 s before the all-reduce; rank 0 only 1 s. The collective starts at
    # t = 5 for both (the straggler delays the group), 1e8 B over 2 ranks at 1e9 B/s:
    # 2(P-1)/P * n / B = 1 * 0.1 s -> ends at 5.1 s. Rank 0 waited 4 s.
    g = TaskGraph(2)
    a0 = g.compute(0, "fwd0", 1.0)
    a1 = g.compute(1, "fwd1", 5.0)
    g.collective("all_reduce", [0, 1], 1e8, "ar", deps=[a0, a1])
    tl = execute(g, star_fabric(2, 1e9, 0.0))
    ar = [s for s in tl if s.name == "ar"]
    assert len(ar) == 2
    assert all(s.start == pytest.approx(5.0) and s.end == pytest.approx(5.1) for s in ar)
    assert next(s for s in ar if s.rank == 0).meta["waited_s"] == pytest.approx(4.0)


def test_hang_is_diagnosed_not_silent(star_fabric):
    # Rank 2 hangs at t = 0.5 s, after its first 1 s compute has started: it never posts the
    # all-reduce, so ranks 0 and 1 wait in it forever. The engine must say so.
    g = TaskGraph(3)
    deps = [g.compute(r, "fwd", 1.0) for r in range(3)]
    g.collective("all_reduce", range(3), 1e6, "grads", deps=deps)
    with pytest.raises(SimulationDeadlock) as err:
        execute(g, star_fabric(3, 1e9, 0.0), hangs={2: 0.5})
    msg = str(err.value)
    # the hung rank first, then who waits for it and where
    assert msg.index("rank 2 stopped issuing work") < msg.index("rank 0")
    assert "hung from t=0.5s" in msg
    assert "2 ranks wait on it" in msg
    assert "rank 0 waits since t=1s in all_reduce 'grads'" in msg
    assert err.value.blocked[2][2].startswith("stopped")
    assert err.value.blocked[0][0] == pytest.approx(1.0)  # idle since its compute ended


def test_without_the_hang_the_same_graph_completes(star_fabric):
    g = TaskGraph(3)
    deps = [g.compute(r, "fwd", 1.0) for r in range(3)]
    g.collective("all_reduce", range(3), 1e6, "grads", deps=deps)
    assert execute(g, star_fabric(3, 1e9, 0.0)).end > 1.0


def test_same_graph_twice_gives_identical_timelines(star_fabric):
    def build():
        g = TaskGraph(4)
        for r in range(4):
            g.compute(r, "f", 1.0 + r * 0.1)
        g.collective("all_reduce", range(4), 3e7, "ar", deps=[0, 1, 2, 3])
        g.collective("all_gather", range(4), 1e7, "ag")
        return g

    fabric = star_fabric(4, 1e9, 1e-6)
    assert execute(build(), fabric).signature() == execute(build(), fabric).signature()


def test_graph_rejects_bad_input():
    g = TaskGraph(2)
    with pytest.raises(TaskGraphError, match="rank 2"):
        g.compute(2, "x", 1.0)
    with pytest.raises(TaskGraphError, match="not added before"):
        g.compute(0, "x", 1.0, deps=[5])
    with pytest.raises(TaskGraphError, match="unknown communication op"):
        g.collective("allreduce", [0, 1], 1.0, "x")


def test_compute_slows_while_a_collective_runs_on_the_rank(star_fabric):
    # Rank 0 computes 10 s; an all-reduce of 2 ranks over 1e9 B/s links moving
    # 2(P-1)/P x 4e9 = 4e9 B runs on its comm stream from t=0 to t=4 s. With interference
    # 0.25, compute runs at 1/1.25 = 0.8 speed for those 4 s (3.2 s of work done), then
    # at full speed for the remaining 6.8 s: it ends at 10.8 s.
    def build():
        g = TaskGraph(2)
        g.compute(0, "gemm", 10.0)
        g.collective("all_reduce", [0, 1], 4e9, "ar", stream="dp")
        return g

    fabric = star_fabric(2, 1e9, 0.0)
    plain = {s.name: s for s in execute(build(), fabric) if s.rank == 0}
    slowed = {s.name: s for s in execute(build(), fabric, interference=0.25) if s.rank == 0}
    assert plain["gemm"].end == pytest.approx(10.0)
    assert slowed["ar"].end == pytest.approx(4.0)
    assert slowed["gemm"].end == pytest.approx(10.8)
    with pytest.raises(ValueError, match="interference must be >= 0"):
        execute(build(), fabric, interference=-0.1)


def test_collective_waits_for_a_dependency_on_a_rank_outside_its_group(star_fabric):
    # The all-reduce over ranks 1 and 2 depends on a 3 s compute on rank 0, which is not
    # in the group. It used to start at t = 0 (the dependency silently dropped); it must
    # start when the compute ends, t = 3 s, on both members.
    g = TaskGraph(3)
    c = g.compute(0, "outside", 3.0)
    g.collective("all_reduce", (1, 2), 1e6, "ar", deps=[c])
    spans = [s for s in execute(g, star_fabric(3, 1e9, 0.0)) if s.name == "ar"]
    assert sorted(s.rank for s in spans) == [1, 2]
    assert all(s.start == pytest.approx(3.0) for s in spans)


def test_chain_of_waits_names_the_hung_rank_first(star_fabric):
    # A three-stage pipeline 0 -> 1 -> 2 plus an all-reduce of ranks 0 and 2. Rank 1 hangs
    # at t = 0: rank 2 waits for its activation; rank 0 waits in the all-reduce for rank 2.
    # The first blocked collective (the all-reduce) names rank 2, who is only a victim:
    # the diagnosis must name rank 1 first and show the chain 0 -> 2 -> 1.
    g = TaskGraph(3)
    f0 = g.compute(0, "f0", 1.0)
    s01 = g.send_recv(0, 1, 1e3, "act 0>1", deps=[f0], stream="p01")
    f1 = g.compute(1, "f1", 1.0, deps=[s01])
    s12 = g.send_recv(1, 2, 1e3, "act 1>2", deps=[f1], stream="p12")
    f2 = g.compute(2, "f2", 1.0, deps=[s12])
    g.collective("all_reduce", (0, 2), 1e3, "grads", deps=[f0, f2], stream="dp")
    with pytest.raises(SimulationDeadlock) as err:
        execute(g, star_fabric(3, 1e9, 0.0), hangs={1: 0.0})
    msg = str(err.value)
    assert msg.index("rank 1 stopped issuing work") < msg.index("rank 0")
    assert "rank 0 waits since t=1s in all_reduce 'grads' (stream 'dp') for rank 2" in msg
    assert "rank 2 needs send_recv 'act 1>2' from rank 1" in msg
    assert set(err.value.blocked) == {0, 1, 2}


def test_non_finite_fault_times_are_errors(star_fabric):
    g = TaskGraph(2)
    g.compute(0, "a", 1.0)
    for kwargs in ({"hangs": {0: float("nan")}}, {"delays": {1: float("inf")}},
                   {"slowdowns": {0: float("nan")}}, {"collective_latency": float("inf")}):
        with pytest.raises(ValueError, match="finite"):
            execute(g, star_fabric(2, 1e9, 0.0), **kwargs)


@pytest.mark.parametrize("duration", [float("inf"), float("nan"), -1.0])
def test_non_finite_durations_and_sizes_are_graph_errors(duration):
    g = TaskGraph(2)
    with pytest.raises(TaskGraphError, match="finite"):
        g.compute(0, "a", duration)
    with pytest.raises(TaskGraphError, match="finite"):
        g.collective("all_reduce", (0, 1), duration, "ar")


def test_interference_terminates_when_the_residue_is_below_the_clock_resolution(star_fabric):
    # A rank that starts 10 s late (a straggler) computes while its all-reduce runs. At
    # t ~ 10 s a double resolves ~2e-15 s, so a float residue of the remaining compute
    # below that made timeout(residue) a no-op and the loop spun forever.
    g = TaskGraph(2)
    a = [g.compute(r, "a", 1e-3) for r in range(2)]
    g.collective("all_reduce", (0, 1), 1e8, "ar", deps=a)
    for r in range(2):
        g.compute(r, "b", 0.3e-3, deps=[a[r]])
    tl = execute(g, star_fabric(2, 1e9, 0.0), delays={1: 10.0}, interference=0.3)
    assert tl.end > 10.0


def test_a_graph_beyond_the_task_limit_is_refused(monkeypatch):
    import simtrain.engine.taskgraph as taskgraph

    monkeypatch.setattr(taskgraph, "MAX_TASKS", 3)
    g = TaskGraph(1)
    for i in range(3):
        g.compute(0, f"t{i}", 1.0)
    with pytest.raises(TaskGraphError, match="exceeds 3 tasks"):
        g.compute(0, "one too many", 1.0)


def test_emptying_the_program_cache_changes_no_span(monkeypatch):
    # A prepared program is a pure function of (spec, group): rebuilding it after the cache
    # is emptied (here before every collective: a bound of one flow) gives the same step,
    # span for span, as keeping every program (pp_1f1b, explicit: p2p, TP and DP groups).
    from pathlib import Path

    from simtrain import load_scenario, simulate
    from simtrain.engine import collective

    path = Path(__file__).resolve().parents[2] / "scenarios" / "pp_1f1b.yaml"

    def spans():
        s = load_scenario(path, ["sim.fidelity=explicit"])
        return [(sp.rank, sp.name, sp.start, sp.end) for sp in simulate(s).timeline.spans]

    kept = spans()
    monkeypatch.setattr(collective, "_PROGRAM_FLOWS", 1)
    monkeypatch.setattr(collective, "_METAS", 1)
    assert spans() == kept

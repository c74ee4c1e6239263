"""Streams and collectives driven by callbacks: a stall past a chain's end, prepared runs."""

from __future__ import annotations

import pytest

from simtrain.engine.sim import Executor, SimulationDeadlock, execute
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

"""ComputeSharing: a collective's load on its members and the re-timing it triggers."""

from __future__ import annotations

from simtrain.engine.contention import ComputeSharing
from simtrain.engine.loop import Loop


def test_a_load_change_re_times_every_simulated_member_in_group_order() -> None:
    # No countdown runs: one call names every simulated member (rank 2 is a mirror) in
    # order. Once one runs (rank 0), each member is re-timed right after its own change.
    calls: list[tuple[int, ...]] = []
    sharing = ComputeSharing(Loop(), lambda work, flops, load: 1.0, on_change=calls.append,
                             virtual=frozenset({2}))
    sharing.change((1, 2, 0), +1, (0.25, 0.5))
    assert calls == [(1, 0)]
    assert sharing.load == {1: [1.0, 0.25, 0.5], 0: [1.0, 0.25, 0.5]}
    sharing.run(0, 1.0, 0.0)
    sharing.change((1, 2, 0), -1, (0.25, 0.5))
    assert calls[1:] == [(1,), (0,)]
    assert sharing.load == {1: [0.0, 0.0, 0.0], 0: [0.0, 0.0, 0.0]}

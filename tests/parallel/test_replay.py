"""Replayed pipeline steps: the task graph is the one lowering every step gives, row for row."""

from __future__ import annotations

from typing import Any

import pytest

from simtrain import load_scenario
from simtrain.engine.taskgraph import TaskGraph
from simtrain.hardware.topology import build_cluster
from simtrain.parallel.lower import Lowering
from simtrain.parallel.replay import Entry, Replay, _moved_meta
from simtrain.simulate import build_graph

_COLUMNS = ("kind", "name", "stream", "group", "duration", "flops", "nbytes", "comm", "meta",
            "dep_start", "dep_ids")

_CASES: list[dict[str, Any]] = [
    {"cluster": {"preset": "dgx-a100", "nodes": 2}, "model": {"preset": "tiny-gpt"},
     "training": {"global_batch_size": 32, "micro_batch_size": 2, "seq_len": 256},
     "parallelism": {"tp": 2, "sp": True, "pp": 4}, "sim": {"granularity": "layer"}},
    {"cluster": {"preset": "dgx-a100", "nodes": 2}, "model": {"preset": "tiny-gpt"},
     "training": {"global_batch_size": 32, "micro_batch_size": 2, "seq_len": 256},
     "parallelism": {"tp": 2, "pp": 2, "vpp": 2, "schedule": "interleaved", "zero": 1},
     "sim": {"granularity": "op"}},
    {"cluster": {"preset": "dgx-a100", "nodes": 1}, "model": {"preset": "tiny-gpt"},
     "training": {"global_batch_size": 16, "micro_batch_size": 2, "seq_len": 256},
     "parallelism": {"tp": 2, "pp": 4, "schedule": "zb-h1"}},
]


def _graph(spec: dict[str, Any]) -> TaskGraph:
    s = load_scenario({**spec, "sim": {**spec.get("sim", {}), "fidelity": "explicit",
                                       "ignore_memory": True}})
    return build_graph(s, build_cluster(s.cluster))


@pytest.mark.parametrize("spec", _CASES)
def test_replayed_graph_is_the_lowered_one(spec: dict[str, Any],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[bool] = []  # each replay's map: order-keeping or not
    copy = Replay._copy

    def counted(self: Replay, *args: Any, monotone: bool) -> None:
        used.append(monotone)
        copy(self, *args, monotone=monotone)

    monkeypatch.setattr(Replay, "_copy", counted)
    fast = _graph(spec)
    monkeypatch.setattr(Lowering, "_replayable", lambda self, step, templates: False)
    slow = _graph(spec)
    assert used, "no step was replayed"
    for column in _COLUMNS:
        assert bytes(getattr(fast, column)) == bytes(getattr(slow, column)), column
    assert list(fast.metas) == list(slow.metas) and list(fast.names) == list(slow.names)


def test_some_case_replays_with_a_map_that_does_not_keep_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 1F1B on 4 stages: a step's incoming transfer is made before or after the previous
    # step's last kernels depending on the microbatch, so collectives' sorted
    # dependencies must be sorted again.
    used: list[bool] = []
    copy = Replay._copy

    def counted(self: Replay, *args: Any, monotone: bool) -> None:
        used.append(monotone)
        copy(self, *args, monotone=monotone)

    monkeypatch.setattr(Replay, "_copy", counted)
    _graph(_CASES[0])
    assert True in used and False in used


def test_a_different_entry_shape_is_not_replayed() -> None:
    g = TaskGraph(num_ranks=2)
    a = g.compute(0, "a", 1.0)
    b = g.compute(1, "b", 1.0)
    r = Replay(g)
    first = len(g)
    x = g.compute(0, "x", 2.0, deps=[a], meta={"microbatch": 0})
    y = g.compute(1, "y", 2.0, deps=[b], meta={"microbatch": 0})
    frontier = {0: [x], 1: [y]}
    ranks = [0, 1]
    r.record("k", first, ranks, Entry([a, b], [1, 1]), frontier, {"microbatch": 0})
    n = len(g)
    wide = Entry([x, y, y], [2, 1])  # rank 0 enters with 2 tasks, not 1
    assert not r.replay("k", ranks, wide, {"microbatch": 1}, frontier)
    assert len(g) == n and frontier == {0: [x], 1: [y]}
    assert r.replay("k", ranks, Entry.of(frontier, ranks), {"microbatch": 1}, frontier)
    assert len(g) == n + 2 and frontier == {0: [n], 1: [n + 1]}
    assert g.task(n).deps == (x,) and g.task(n + 1).deps == (y,)
    assert g.task(n).meta == {"microbatch": 1} and g.task(n).duration == 2.0


def test_rows_reading_tasks_from_outside_the_entry_are_not_recorded() -> None:
    g = TaskGraph(num_ranks=1)
    a = g.compute(0, "a", 1.0)
    first = len(g)
    g.compute(0, "x", 1.0, deps=[a])
    r = Replay(g)
    ranks = [0]
    r.record("k", first, ranks, Entry([], [0]), {0: [first]}, {})  # x reads a: not in the entry
    assert not r.replay("k", ranks, Entry([], [0]), {}, {0: [first]})


def test_moved_meta_replaces_the_step_fields_in_their_order() -> None:
    was, now = {"microbatch": 0, "chunk": 1, "stage": 2}, {"microbatch": 5, "chunk": 1,
                                                          "stage": 2}
    got = _moved_meta({**was, "kernels": 3}, was, now)
    assert got == {"microbatch": 5, "chunk": 1, "stage": 2, "kernels": 3}
    assert list(got) == ["microbatch", "chunk", "stage", "kernels"]
    assert Entry.of({0: [1, 2]}, [0, 1]) == Entry([1, 2], [2, 0])

"""Symmetric fidelity in the engine: one simulated group plus weighted copies equals all groups."""

from __future__ import annotations

import pytest

from simtrain.comm.model import CommModel
from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph, TaskGraphError
from simtrain.hardware.topology import ClusterConfig, build_cluster


def _cluster(**kw):
    # 4 H100 servers, 2 per leaf, leaf uplinks oversubscribed 4:1: the 8 data-parallel rings
    # (one per local GPU index) all cross the same leaf-spine links.
    return build_cluster(ClusterConfig(preset="dgx-h100", nodes=4, fabric="fat-tree",
                                       nodes_per_leaf=2, **kw))


def _groups(c):
    return [tuple(t + 8 * k for k in range(c.num_servers)) for t in range(8)]


def _step(c, simulated, copies_of=None):
    """Each rank computes 1 ms, then its data-parallel group all-reduces 256 MiB."""
    g = TaskGraph(c.num_gpus)
    groups = _groups(c)
    for group in simulated:
        deps = [g.compute(r, "fwd", 1e-3) for r in group]
        copies = copies_of(group) if copies_of else ()
        g.collective("all_reduce", group, 256 << 20, "dp", deps=deps, copies=copies)
    simulated_ranks = {r for group in simulated for r in group}
    g.virtual = {r for group in groups for r in group} - simulated_ranks
    return execute(g, c, comm=CommModel(c, "nccl", arch="hopper"))


@pytest.mark.parametrize("oversubscription", [1.0, 4.0])
def test_one_group_with_copies_matches_all_groups(oversubscription):
    c = _cluster(oversubscription=oversubscription)
    groups = _groups(c)
    explicit = _step(c, groups)
    symmetric = _step(c, groups[:1], copies_of=lambda group: groups[1:])
    end = max(s.end for s in explicit if s.rank == 0)
    assert max(s.end for s in symmetric if s.rank == 0) == pytest.approx(end, rel=1e-9)
    # Only the simulated group's ranks appear in the symmetric timeline.
    assert {s.rank for s in symmetric} == set(groups[0])


def test_oversubscription_is_felt_only_through_the_copies():
    c = _cluster(oversubscription=4.0)
    groups = _groups(c)
    alone = _step(c, groups[:1])  # no copies: the group has the fabric to itself
    shared = _step(c, groups[:1], copies_of=lambda group: groups[1:])
    assert shared.end > 1.5 * alone.end


def test_copies_must_match_the_group():
    g = TaskGraph(4)
    with pytest.raises(TaskGraphError, match="does not match the group size 2"):
        g.collective("all_reduce", [0, 1], 1.0, "x", copies=[(2,)])

"""Large-message bus bandwidth within 10% of every published NCCL point simtrain can represent."""

from __future__ import annotations

import pytest

from simtrain.comm.reference import POINTS, predict

REPRESENTABLE = [p for p in POINTS if not p.not_representable and not p.known_miss]
KNOWN_MISSES = [p for p in POINTS if p.known_miss]


@pytest.mark.parametrize("point", REPRESENTABLE, ids=lambda p: p.system)
def test_busbw_within_10_percent_of_published(point):
    row = predict(point)
    assert abs(row["error"]) <= 0.10, row


@pytest.mark.parametrize("point", KNOWN_MISSES, ids=lambda p: p.system)
def test_known_misses_stay_explained_and_bounded(point):
    # Outside 10% for a stated reason; pinned so that they cannot silently get worse.
    row = predict(point)
    assert 0.10 < abs(row["error"]) <= 0.25, row


def test_unrepresentable_points_say_why():
    skipped = [p for p in POINTS if p.not_representable]
    assert skipped and all(len(p.not_representable) > 20 for p in skipped)


def test_two_node_tree_busbw_can_exceed_the_nic():
    # nccl#812 (maintainer): "2-node Tree BusBW can exceed NIC theoretical limit due to how
    # busbw is computed". One 24 GB/s NIC per node: the ring is NIC-bound at ~24 GB/s, the
    # tree crosses the NIC with half the bytes in each direction per phase.
    point = next(p for p in POINTS if "1x HDR" in p.system)
    tree = predict(type(point)(**{**point.__dict__, "algorithm": "tree"}))
    assert tree["predicted_gbps"] > 1.5 * point.published_gbps

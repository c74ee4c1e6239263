"""NCCL 2.26.2's channel search in closed form: values derived by hand from its rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.comm.nccl_search import (
    SPEEDS_INTER,
    SearchResult,
    channels_at,
    dup_channels,
    ring_search,
)

GB200_NVLINK = 18 * 40.1   # 721.8 GB/s: 18 NVLink 5 links x topo.h SM100_NVLINK_BW
H100_NVLINK = 18 * 20.6    # 370.8 GB/s: SM90_NVLINK_BW
PCIE_GEN5_X16 = 16 * 240 / 80  # 48 GB/s: NCCL's PCI bw = width x kvDictPciGen("32.0 GT/s") / 80


def test_gb200_twenty_racks_by_hand():
    # One fused NVL72 rack: 72 NICs at 400 Gb/s (50 GB/s), path min(PCIe 48, 50) = 48.
    # Start at 48 (<= 48): min(32, floor(721.8/48) = 15, 72 x floor(48/48) = 72) = 15
    # channels, 720 < 721.8 so not optimal. Lower while next/48 > 0.49: 45 -> 16 (720),
    # 42 -> 17 (714), 40 -> 18 (720), 30 -> 24 (720), 24 -> 30 (720): none strictly
    # larger; 22/48 = 0.458 stops. 15 x 48, and no duplication (48 < 50, 15 > 4, SM100).
    graph = ring_search(GB200_NVLINK, nics=72, nic_path_bw=min(PCIE_GEN5_X16, 50.0),
                        max_channels=32)
    assert graph == SearchResult(15, 48.0)
    assert graph.total == pytest.approx(720.0)
    assert dup_channels(graph, compute_capability=100, max_channels=32) == graph


def test_dgx_h100_multi_node_by_hand():
    # 8 NICs at 50 GB/s behind PCIe Gen5 x16 (48): 48 -> min(7, 8) = 7 (336);
    # 45 -> min(floor(370.8/45) = 8, 8 x 1) = 8 (360, better); 42 -> 8 (336); 40 -> 8
    # (320); 30 -> 8 (240); 24 (24/45 = 0.53) -> min(15, 8 x 2 = 16) = 15 (360, not
    # larger); 22/45 = 0.489 stops. 8 x 45; 45 < 50 with 8 > 4 channels: no duplication.
    graph = ring_search(H100_NVLINK, nics=8, nic_path_bw=48.0, max_channels=32)
    assert graph == SearchResult(8, 45.0)
    assert dup_channels(graph, compute_capability=90, max_channels=32) == graph


def test_optimal_search_stops_at_the_first_speed():
    # NVLink total 96 = 2 x 48 reached at once: stop, no lower speed tried.
    assert ring_search(96.0, nics=4, nic_path_bw=50.0, max_channels=32) == SearchResult(2, 48.0)


def test_channels_at_by_hand():
    assert channels_at(24.0, 721.8, nics=72, nic_path_bw=48.0, max_channels=32) == 30
    assert channels_at(24.0, 721.8, nics=4, nic_path_bw=48.0, max_channels=32) == 8
    assert channels_at(48.0, 721.8, nics=72, nic_path_bw=45.0, max_channels=32) == 0
    with pytest.raises(ValueError, match="speed"):
        channels_at(0.0, 721.8, nics=1, nic_path_bw=1.0, max_channels=1)


def test_dup_channels_rules_by_hand():
    # SM80, 8 x 40: cc 80 is not > 80 -> 16 x 20.
    assert dup_channels(SearchResult(8, 40.0), 80, 32) == SearchResult(16, 20.0)
    # SM100, 4 x 48: only 4 channels -> 8 x 24.
    assert dup_channels(SearchResult(4, 48.0), 100, 32) == SearchResult(8, 24.0)
    # Below 25 GB/s never; the cap at maxChannels: 20 -> min(40, 32) = 32, bw / ceil(32/20).
    assert dup_channels(SearchResult(2, 20.0), 70, 32) == SearchResult(2, 20.0)
    assert dup_channels(SearchResult(20, 60.0), 100, 32) == SearchResult(32, 30.0)


@settings(max_examples=60, deadline=None)
@given(nvlink=st.floats(1.0, 2000.0), nics=st.integers(1, 128),
       path=st.floats(0.5, 120.0), cap=st.integers(1, 64))
def test_search_never_exceeds_its_links(nvlink, nics, path, cap):
    graph = ring_search(nvlink, nics, path, cap)
    assert 0 <= graph.channels <= cap
    assert graph.total <= nvlink + 1e-6
    assert graph.total <= nics * path + 1e-6
    assert graph.bw in SPEEDS_INTER or graph.channels == 0

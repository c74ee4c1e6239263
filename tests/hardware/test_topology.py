"""Cluster topology: shapes, link counts, routes, latencies, custom graphs, errors, speed."""

from __future__ import annotations

import time
from typing import Any

import pytest

from simtrain.hardware.topology import (
    CLUSTER_PRESETS,
    Cluster,
    ClusterConfig,
    build_cluster,
)


def cluster(**fields: Any) -> Cluster:
    return build_cluster(ClusterConfig(**fields))


def kinds(c: Cluster, src: int, dst: int) -> list[str]:
    return [c.links[i].kind for i in c.route(src, dst)]


def test_presets_all_build() -> None:
    assert set(CLUSTER_PRESETS) == {"dgx-a100", "dgx-h100", "hgx-h100", "dgx-h200", "dgx-b200",
                                    "dgx-b300", "gb200-nvl72", "gb300-nvl72", "dgx-2",
                                    "pcie-a100", "pcie-h100"}
    for name in CLUSTER_PRESETS:
        c = cluster(preset=name, nodes=2)
        assert c.num_servers == 2
        assert c.num_gpus == 2 * c.gpus_per_server
        assert c.route(0, c.num_gpus - 1)


def test_preset_merge_and_user_override() -> None:
    cfg = ClusterConfig.model_validate(
        {"preset": "DGX-H100", "nodes": 4, "nic_bandwidth": "200Gbps"}
    )
    assert cfg.gpu == "h100-sxm" and cfg.preset == "dgx-h100"
    assert cfg.nic_bandwidth == pytest.approx(25e9)  # 200 Gb/s / 8
    # A merged dict (as the scenario loader produces) validates to the same config.
    merged = {**CLUSTER_PRESETS["dgx-h100"], "nodes": 4, "nic_bandwidth": "200Gbps"}
    assert ClusterConfig(**merged).layout() == cfg.layout()


def test_dgx_a100_two_nodes_link_counts() -> None:
    c = cluster(preset="dgx-a100", nodes=2)
    # Per server: 8 GPU-NVSwitch + 8 GPU-NIC + 8 NIC-leaf undirected links = 24, x2 directions
    # = 48; two servers = 96. Leaves: 8 rails x 1 unit; each leaf has 2 NIC ports down, so
    # ceil(2 / 1.0) = 2 spines, 8 x 2 leaf-spine links x 2 directions = 32. Total 128.
    assert len(c.links) == 128
    assert [lk.id for lk in c.links] == list(range(128))
    # Nodes: 2 x (8 GPUs + 1 NVSwitch + 8 NICs) + 8 leaves + 2 spines = 44.
    assert c.graph.number_of_nodes() == 44
    rows = {r["between"]: r for r in c.describe()}
    assert rows["gpu-nvswitch"]["count"] == 16 and rows["gpu-nvswitch"]["directed"] == 32
    assert rows["leaf-spine"]["count"] == 16
    assert rows["leaf-nic"]["bandwidth"] == pytest.approx(25e9)  # HDR 200 Gb/s
    # Every edge carries the four attributes, and edge ids index the link list.
    for u, v, data in c.graph.edges(data=True):
        lk = c.links[data["id"]]
        assert (lk.src, lk.dst, lk.kind, lk.bandwidth) == (u, v, data["kind"], data["bandwidth"])
    gpu = c.graph.nodes[c.gpus[9]]
    assert (gpu["kind"], gpu["rank"], gpu["server"]) == ("gpu", 9, 1)


def test_intra_server_route_on_dgx_h100_is_two_nvlinks() -> None:
    c = cluster(preset="dgx-h100", nodes=2)
    route = c.route(0, 5)
    assert kinds(c, 0, 5) == ["nvlink", "nvlink"]
    assert c.graph.nodes[c.links[route[0]].dst]["kind"] == "nvswitch"
    assert c.route_bandwidth(route) == pytest.approx(450e9)
    # 2 links x 0.3 us default NVLink latency = 0.6 us.
    assert c.route_latency(route) == pytest.approx(0.6e-6)
    assert c.route(3, 3) == ()
    assert c.route_latency(()) == 0.0


def test_inter_server_same_rail_stays_under_one_leaf() -> None:
    c = cluster(preset="dgx-h100", nodes=2)
    # Rank 0 (server 0, GPU 0) -> rank 8 (server 1, GPU 0): both on rail 0.
    assert kinds(c, 0, 8) == ["pcie", "ib", "ib", "pcie"]
    node_kinds = [c.graph.nodes[n]["kind"] for n in c.path(0, 8)]
    assert node_kinds == ["gpu", "nic", "leaf", "nic", "gpu"]
    # Latency: pcie 0.5 + nic 1.0 + nic 1.0 + pcie 0.5 = 3.0 us; bottleneck NDR 50 GB/s.
    route = c.route(0, 8)
    assert c.route_latency(route) == pytest.approx(3.0e-6)
    assert c.route_bandwidth(route) == pytest.approx(50e9)


def test_cross_rail_send_relays_over_nvlink_to_the_destination_rail() -> None:
    c = cluster(preset="dgx-h100", nodes=2)
    # PXN: rank 0 (rail 0) -> rank 9 (server 1, GPU 1, rail 1) goes over NVLink to server 0's
    # GPU 1, out of its NIC (rail 1) and stays under the rail-1 leaf: no spine.
    assert kinds(c, 0, 9) == ["nvlink", "nvlink", "pcie", "ib", "ib", "pcie"]
    assert c.path(0, 9) == ["n0.gpu0", "n0.nvswitch", "n0.gpu1", "n0.nic1", "leaf0.rail1",
                            "n1.nic1", "n1.gpu1"]
    # 2 NVLink hops x 0.3 us + the same-rail 3.0 us = 3.6 us; bottleneck NDR 50 GB/s.
    assert c.route_latency(c.route(0, 9)) == pytest.approx(3.6e-6)
    assert c.route_bandwidth(c.route(0, 9)) == pytest.approx(50e9)
    # The way back relays through server 1's GPU 0 (rail 0).
    assert c.path(9, 0)[:3] == ["n1.gpu1", "n1.nvswitch", "n1.gpu0"]


def test_cross_rail_sends_of_symmetric_copies_do_not_share_a_link() -> None:
    c = cluster(preset="dgx-b200", nodes=4)
    # Rank 14 -> 0 and its copy 30 -> 16 (servers 1 -> 0 and 3 -> 2, GPU 6 -> GPU 0): with
    # PXN each leaves through its own server's rail-0 NIC, so no link carries both (they
    # used to meet on the rail-6 leaf's uplink to spine (14 + 0) % 4 = (30 + 16) % 4 = 2).
    assert not set(c.route(14, 0)) & set(c.route(30, 16))


def test_fat_tree_needs_no_relay() -> None:
    # Under a fat tree every NIC of a server shares one leaf: no rail to change, no relay.
    c = cluster(preset="dgx-h100", nodes=2, fabric="fat-tree")
    assert c.path(0, 9) == ["n0.gpu0", "n0.nic0", "leaf0", "n1.nic1", "n1.gpu1"]


def test_cp_ring_cross_rail_hops_do_not_share_network_links() -> None:
    # The CP rings of tp 4, cp 4 over two DGX H100 (Megatron order tp-cp-dp): ring t is
    # ranks t, 4+t, 8+t, 12+t; its server-crossing hops 4+t -> 8+t and 12+t -> t go from
    # GPU 4+t to GPU t of the other server. With PXN each leaves through NIC t (rail t) and
    # no IB link carries two of the 8 hops, so each runs at one NIC's 50 GB/s; without it
    # (the old routing) the spine rule (src + dst) % 2 put all 8 on spine 0.
    c = cluster(preset="dgx-h100", nodes=2)
    hops = [(4 + t, 8 + t) for t in range(4)] + [(12 + t, t) for t in range(4)]
    ib = [{i for i in c.route(a, b) if c.links[i].kind == "ib"} for a, b in hops]
    assert all(len(links) == 2 for links in ib)  # NIC -> leaf -> NIC: no spine
    assert len(set().union(*ib)) == 2 * len(hops)
    assert all(c.route_bandwidth(c.route(a, b)) == pytest.approx(50e9) for a, b in hops)


def test_cross_unit_spine_is_chosen_by_the_destination() -> None:
    c = cluster(preset="dgx-h100", nodes=4, nodes_per_leaf=2)
    # 2 servers per rail leaf -> 2 spines. Rank 0 (unit 0) -> rank 17 (server 2, unit 1,
    # rail 1): relayed onto rail 1, then leaf0.rail1 -> spine -> leaf1.rail1; the spine is
    # the destination's port on its leaf, server 2 % 2 = 0, mod 2 spines = spine0.
    assert c.path(0, 17)[4:7] == ["leaf0.rail1", "spine0", "leaf1.rail1"]
    # Back to server 0 (port 0): spine0; to server 3 (port 1) from either server: spine1.
    assert c.path(17, 0)[5] == "spine0"
    assert c.path(0, 25)[5] == c.path(8, 25)[5] == "spine1"
    # Fat tree: a leaf's ports are its servers' NICs, server 3 NIC 1 is port 1*8 + 1 = 9 of
    # 16 under 1:1, so spine 9.
    f = cluster(preset="dgx-h100", nodes=4, nodes_per_leaf=2, fabric="fat-tree")
    assert f.path(0, 25)[3] == "spine9"


def test_pipeline_sends_between_units_never_share_an_uplink() -> None:
    # pp 2 over 64 DGX H100 (two 32-server units): server s sends GPU k -> GPU k of server
    # s + 32, 256 flows. Destination routing gives each destination port its own spine, so
    # each flow has its own leaf -> spine and spine -> leaf link: 256 uplinks, one flow each.
    # (The old (src + dst) mod 32 rule put a rail's 32 sends on 2 spines, 16 per uplink.)
    c = cluster(preset="dgx-h100", nodes=64)
    use: dict[int, int] = {}
    for s in range(32):
        for k in range(8):
            for i in c.route(8 * s + k, 8 * (s + 32) + k):
                use[i] = use.get(i, 0) + 1
    ups = [i for i in use if c.links[i].dst.startswith("spine")]
    assert len(ups) == 256 and max(use.values()) == 1


def test_rail_units_beyond_nodes_per_leaf_use_a_spine() -> None:
    c = cluster(preset="dgx-h100", nodes=4, nodes_per_leaf=2)
    # Servers 0 and 1 share unit 0; server 2 is in unit 1, so same rail still crosses a spine.
    assert kinds(c, 0, 8) == ["pcie", "ib", "ib", "pcie"]
    assert "spine" in {c.graph.nodes[n]["kind"] for n in c.path(0, 16)}


def test_dgx2_two_gpus_share_a_nic() -> None:
    c = cluster(preset="dgx-2", nodes=2)
    assert c.gpus_per_server == 16 and c.gpu_spec.name == "v100-32gb"
    # GPUs 2 and 3 of server 0 both go out through NIC 1 (k = g * 8 // 16).
    assert c.path(2, 18)[1] == c.path(3, 18)[1] == "n0.nic1"  # to server 1 GPU 2 (NIC 1)
    assert c.route_bandwidth(c.route(2, 18)) == pytest.approx(12.5e9)  # EDR 100 Gb/s


def test_pcie_box_routes() -> None:
    c = cluster(preset="pcie-a100", nodes=2)
    # 8 GPUs over 4 switches (2 each), switches 0-1 on socket 0, 2-3 on socket 1.
    assert kinds(c, 0, 1) == ["pcie", "pcie"]  # same switch
    assert kinds(c, 0, 2) == ["pcie"] * 4  # via CPU socket 0
    assert kinds(c, 0, 7) == ["pcie", "pcie", "qpi", "pcie", "pcie"]  # crosses sockets
    qpi = c.links[c.route(0, 7)[2]]
    assert qpi.bandwidth == pytest.approx(16e9)
    assert c.route_bandwidth(c.route(0, 7)) == pytest.approx(16e9)
    # The single NIC hangs off switch 0: GPU 7 must cross the socket link to reach it.
    assert kinds(c, 7, 15).count("qpi") == 2
    assert kinds(c, 0, 8) == ["pcie", "pcie", "ib", "ib", "pcie", "pcie"]
    assert c.route_bandwidth(c.route(0, 8)) == pytest.approx(25e9)  # shared 200G NIC


def test_single_server_has_no_network() -> None:
    c = cluster(preset="dgx-h100", nodes=1)
    node_kinds = {data["kind"] for _, data in c.graph.nodes(data=True)}
    assert node_kinds == {"gpu", "nvswitch"}
    assert len(c.links) == 16


def test_oversubscription_halves_leaf_uplink_capacity() -> None:
    def uplink(oversub: float) -> float:
        c = cluster(preset="dgx-h100", nodes=4, oversubscription=oversub)
        return sum(lk.bandwidth for lk in c.links if lk.src == "leaf0.rail0")
    # Total leaf0.rail0 links out = 4 NIC downlinks x 50 GB/s + uplinks. Uplinks: 200 GB/s
    # at 1:1, 100 GB/s at 2:1.
    assert uplink(1.0) == pytest.approx(200e9 + 200e9)
    assert uplink(2.0) == pytest.approx(200e9 + 100e9)


def test_fat_tree_groups_servers_per_leaf() -> None:
    c = cluster(preset="dgx-a100", nodes=4, fabric="fat-tree", nodes_per_leaf=2,
                oversubscription=2.0)
    # Same leaf (servers 0, 1): any NIC pair stays under leaf0, even cross "rail" (no PXN
    # relay under a fat tree: every NIC of a server shares the leaf).
    assert kinds(c, 0, 9) == ["pcie", "ib", "ib", "pcie"]
    assert kinds(c, 1, 9) == ["pcie", "ib", "ib", "pcie"]
    assert "spine" in {c.graph.nodes[n]["kind"] for n in c.path(0, 16)}
    # Leaf has 2 servers x 8 NICs = 16 x 25 GB/s = 400 GB/s down -> 200 GB/s up over
    # ceil(16 / 2) = 8 spines of 25 GB/s each.
    ups = [lk for lk in c.links if lk.src == "leaf0" and lk.dst.startswith("spine")]
    assert len(ups) == 8
    assert sum(lk.bandwidth for lk in ups) == pytest.approx(200e9)


def test_custom_topology_builds_and_routes() -> None:
    custom = {
        "gpu": "H100-SXM",
        "gpus": ["a0", "a1", "b0", "b1"],
        "nodes_of": {"b0": 1, "b1": 1},
        "switches": ["swa", "swb", "tor"],
        "links": [
            {"a": "a0", "b": "swa", "kind": "nvlink", "bandwidth": "450GB/s", "latency": "0.3us"},
            {"a": "a1", "b": "swa", "kind": "nvlink", "bandwidth": "450GB/s", "latency": "0.3us"},
            {"a": "b0", "b": "swb", "kind": "nvlink", "bandwidth": "450GB/s", "latency": "0.3us"},
            {"a": "b1", "b": "swb", "kind": "nvlink", "bandwidth": "450GB/s", "latency": "0.3us"},
            {"a": "a0", "b": "tor", "kind": "ethernet", "bandwidth": "400Gbps", "latency": "2us"},
            {"a": "b0", "b": "tor", "kind": "ethernet", "bandwidth": "400Gbps", "latency": "2us"},
        ],
    }
    c = cluster(custom=custom)
    assert c.config.gpu == "h100-sxm" and c.num_gpus == 4 and c.num_servers == 2
    assert [c.server_of(r) for r in range(4)] == [0, 0, 1, 1]
    assert c.graph.nodes["swa"]["kind"] == "nvswitch"
    assert c.graph.nodes["tor"]["kind"] == "leaf"
    assert kinds(c, 0, 1) == ["nvlink", "nvlink"]
    # a1 -> swa -> a0 -> tor -> b0 -> swb -> b1: 0.3+0.3+2+2+0.3+0.3 = 5.2 us, 50 GB/s.
    route = c.route(1, 3)
    assert kinds(c, 1, 3) == ["nvlink", "nvlink", "ethernet", "ethernet", "nvlink", "nvlink"]
    assert c.route_latency(route) == pytest.approx(5.2e-6)
    assert c.route_bandwidth(route) == pytest.approx(50e9)


def test_custom_errors() -> None:
    base = {"gpu": "a100-80gb", "gpus": ["g0", "g1"], "switches": ["s"]}
    link = {"kind": "pcie", "bandwidth": "32GB/s"}
    bad_end = [{"a": "g0", "b": "nope", **link}]
    with pytest.raises(ValueError, match="unknown node 'nope'"):
        ClusterConfig.model_validate({"custom": {**base, "links": bad_end}})
    with pytest.raises(ValueError, match="no path 'g0' -> 'g1'"):
        ClusterConfig.model_validate({"custom": {**base, "links": [{"a": "g0", "b": "s", **link}]}})
    one_way = [{"a": "g0", "b": "s", **link}, {"a": "s", "b": "g1", **link,
                                               "bidirectional": False}]
    with pytest.raises(ValueError, match="no path 'g1' -> 'g0'"):
        ClusterConfig.model_validate({"custom": {**base, "links": one_way}})
    with pytest.raises(ValueError, match="'h1000'"):
        ClusterConfig.model_validate({"custom": {**base, "gpu": "h1000", "links": []}})


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"gpu": "h100-sxm", "nodes": 0}, "nodes must be >= 1, got 0"),
        ({"gpu": "tpu-v5"}, "unknown GPU 'tpu-v5'"),
        ({"preset": "dgx-h100", "oversubscription": 0.5}, "oversubscription must be >= 1"),
        ({"preset": "dgx-9000"}, "unknown cluster preset 'dgx-9000'"),
        ({"nodes": 2}, "cluster has no gpu"),
        ({"gpu": "h100-pcie"}, "has no NVLink"),
        ({"preset": "dgx-h100", "nic_bandwidth": "fast"}, "'fast'"),
        ({"preset": "dgx-h100", "nodes": 2, "nics_per_node": 0}, "at least one NIC"),
        ({"preset": "dgx-h100", "nvswitches": 4}, "nvswitches"),
    ],
)
def test_bad_config_raises_value_error(fields: dict[str, Any], text: str) -> None:
    with pytest.raises(ValueError, match=text):
        ClusterConfig(**fields)


def test_bad_rank_raises() -> None:
    c = cluster(preset="dgx-h100", nodes=1)
    with pytest.raises(ValueError, match=r"rank 8 .*0\.\.7"):
        c.route(0, 8)
    with pytest.raises(ValueError, match="rank -1"):
        c.server_of(-1)


def test_builds_are_deterministic() -> None:
    a = cluster(preset="dgx-h100", nodes=8, nodes_per_leaf=2)
    b = cluster(preset="dgx-h100", nodes=8, nodes_per_leaf=2)
    assert a.links == b.links
    pairs = [(0, 63), (5, 40), (17, 9), (62, 1)]
    assert [a.route(*p) for p in pairs] == [b.route(*p) for p in pairs]


def test_gpu_override_keeps_derived_bandwidths_consistent() -> None:
    c = cluster(preset="dgx-h100", gpu="b200")
    assert c.route_bandwidth(c.route(0, 1)) == pytest.approx(900e9)  # NVLink5 per direction
    c = cluster(preset="dgx-h100", nvlink_bandwidth="370GB/s")
    assert c.route_bandwidth(c.route(0, 1)) == pytest.approx(370e9)


def test_16k_gpu_cluster_builds_fast() -> None:
    # CPU seconds, not wall: the limit is about the code, not the machine's other load
    start = time.process_time()
    c = cluster(preset="dgx-h100", nodes=2048)
    assert time.process_time() - start < 5.0
    assert c.num_gpus == 16384
    # Rank 0 (unit 0, rail 0) to rank 16383 (server 2047 = unit 63, rail 7): NVLink to GPU 7
    # (PXN), then rail 7 across units via a spine: 2 + 6 links.
    assert len(c.route(0, 16383)) == 8
    start = time.process_time()
    for r in range(0, 16384, 16):
        c.route(r, 16383 - r)
    assert time.process_time() - start < 1.0


def test_gb200_nvl72_is_one_nvlink_domain_of_72() -> None:
    # 72 GPUs on one NVSwitch with NVLink SHARP, 900 GB/s per direction each (1.8 TB/s),
    # 18 trays of 4 GPUs, 36 Grace CPUs (2 GPUs each, NVLink-C2C 450 GB/s per direction),
    # one 400G NIC per GPU when racks are joined.
    c = cluster(preset="gb200-nvl72", nodes=2)
    assert (c.num_gpus, c.num_servers, c.gpus_per_server) == (144, 2, 72)
    nodes = c.graph.nodes
    assert nodes["n0.nvswitch"]["reduce"] is True
    assert nodes["n0.gpu71"]["tray"] == 17
    assert sum(1 for _n, d in nodes(data=True) if d.get("model") == "grace") == 72
    route = c.route(0, 71)  # GPU -> NVSwitch -> GPU, the whole rack one hop apart
    assert [c.links[i].bandwidth for i in route] == [900e9, 900e9]
    assert c.links[c.route(0, 72)[1]].bandwidth == pytest.approx(50e9)  # NIC: 400 Gb/s
    assert c.reducing_switch(5, "nvswitch") == "n0.nvswitch"
    assert cluster(preset="dgx-a100").reducing_switch(0, "nvswitch") is None
    assert cluster(preset="gb200-nvl72", nvlink_sharp=False).reducing_switch(0, "nvswitch") \
        is None


def test_rack_fields_reject_negatives() -> None:
    with pytest.raises(ValueError, match="gpus_per_tray must be >= 0"):
        ClusterConfig(preset="gb200-nvl72", gpus_per_tray=-1)

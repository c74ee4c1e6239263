"""Topology view: link classes, totals and a partial drawing for big clusters."""

from __future__ import annotations

from simtrain.hardware.topology import ClusterConfig, build_cluster
from simtrain.report.topology import (
    topology_figure,
    topology_rows,
    topology_table_html,
    topology_totals,
)


def test_rows_and_totals_of_a_preset() -> None:
    cluster = build_cluster(ClusterConfig(preset="dgx-h100", nodes=2))
    rows = topology_rows(cluster)
    kinds = {r["kind"] for r in rows}
    assert {"nvlink", "pcie", "ib"} <= kinds
    nv = next(r for r in rows if r["kind"] == "nvlink")
    assert nv["links"] == 16 and nv["between"] == "gpu-nvswitch"
    totals = topology_totals(cluster)
    assert totals["gpus"] == 16 and totals["servers"] == 2
    assert totals["nodes_by_kind"]["gpu"] == 16
    assert totals["directed_links"] == len(cluster.links)
    assert "topology-table" in topology_table_html(cluster)


def test_big_cluster_is_drawn_in_part() -> None:
    cluster = build_cluster(ClusterConfig(preset="dgx-h100", nodes=64))
    fig = topology_figure(cluster, max_servers=3)
    gpu = next(tr for tr in fig.data if tr.name == "gpu")
    assert len(gpu.x) == 24  # 3 servers x 8 GPUs
    assert "showing 3 of 64 servers" in fig.layout.title.text

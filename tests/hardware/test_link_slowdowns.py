"""Slow cables (``sim.link_slowdowns``): bandwidth divided on both directions, by hand."""

from __future__ import annotations

from typing import Any

import pytest

from simtrain.errors import ScenarioError
from simtrain.hardware.topology import ClusterConfig, build_cluster
from simtrain.scenario import load_scenario
from simtrain.simulate import simulate

BASE: dict[str, Any] = {
    "cluster": {"preset": "dgx-a100", "nodes": 2}, "model": {"preset": "tiny-gpt"},
    "training": {"global_batch_size": 16, "micro_batch_size": 1, "seq_len": 512},
    "sim": {"granularity": "layer"},
}


def test_a_slow_cable_has_its_bandwidth_divided_both_ways_and_factors_multiply() -> None:
    cluster = build_cluster(ClusterConfig(preset="dgx-a100", nodes=2))
    ib = next(lk for lk in cluster.links if lk.kind == "ib")
    slow = cluster.with_link_slowdowns([((ib.src, ib.dst), 2.0), ((ib.dst, ib.src), 1.5)])
    back = cluster._edge_ids[(ib.dst, ib.src)]
    # 2 x 1.5 = 3: the rated 25 GB/s per direction of an HDR port becomes 25/3 GB/s
    assert slow.links[ib.id].bandwidth == pytest.approx(ib.bandwidth / 3)
    assert slow.links[back].bandwidth == pytest.approx(cluster.links[back].bandwidth / 3)
    changed = [i for i, (a, b) in enumerate(zip(cluster.links, slow.links, strict=True))
               if a != b]
    assert changed == sorted([ib.id, back])
    assert cluster.links[ib.id].bandwidth == ib.bandwidth  # the cached cluster is untouched
    assert slow.route(0, 8) == cluster.route(0, 8) and not slow.uniform
    assert cluster.with_link_slowdowns([]) is cluster


def _nic_cables(node: int) -> list[dict[str, Any]]:
    cluster = build_cluster(ClusterConfig(preset="dgx-a100", nodes=2))
    return [{"between": [lk.src, lk.dst], "slowdown": 4.0} for lk in cluster.links
            if lk.kind == "ib" and lk.src.startswith(f"n{node}.nic")]


def test_slow_nics_slow_the_gradient_all_reduce_and_force_explicit() -> None:
    fast = simulate(load_scenario(BASE)).summary
    data = {**BASE, "sim": {**BASE["sim"], "link_slowdowns": _nic_cables(0)}}
    slow = simulate(load_scenario(data)).summary
    assert slow["fidelity"] == "explicit"
    assert slow["comm_s"] > fast["comm_s"] and slow["step_time_s"] >= fast["step_time_s"]
    sym = {**data, "sim": {**data["sim"], "fidelity": "symmetric"}}
    with pytest.raises(ScenarioError, match="slow links"):
        simulate(load_scenario(sym))


@pytest.mark.parametrize("entry, message", [
    ({"between": ["n0.gpu0", "leaf9.rail0"], "slowdown": 2}, "no link between 'n0.gpu0'"),
    ({"between": ["n0.nic0", "leaf0.rail0"], "slowdown": 0.5}, "1 = rated speed"),
    ({"between": ["n0.nic0"], "slowdown": 2}, "sim.link_slowdowns.0.between"),
])
def test_bad_link_slowdowns_name_the_field(entry: dict[str, Any], message: str) -> None:
    data = {**BASE, "sim": {**BASE["sim"], "link_slowdowns": [entry]}}
    with pytest.raises(ScenarioError, match=message) as info:
        load_scenario(data)
    assert "sim.link_slowdowns.0" in str(info.value)

"""NVLS pipeline model: chunk rule, pipeline terms and wire factor by hand; invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.comm.nvls_pipeline import (
    nvls_chunk,
    nvls_overheads,
    pipeline_terms,
    wire_factor,
)

KIB = 1024


@pytest.mark.parametrize(("nbytes", "chunk"), [
    # 8 heads x 16 channels = 128 concurrent chunks:
    (1 << 30, 128 * KIB),          # 1 GiB = 64 x 128 x 128 KiB: not below -> 128 KiB
    ((1 << 30) - 1, 64 * KIB),     # below 64 rounds of 128 KiB; 8 x 128 x 64 KiB = 64 MiB
    (64 << 20, 64 * KIB),          # 64 MiB: not below 8 rounds of 64 KiB
    ((64 << 20) - 1, 32 * KIB),    # below; 2 x 128 x 32 KiB = 8 MiB
    (8 << 20, 32 * KIB),
    (1 << 20, 16 * KIB),           # below 8 MiB -> 16 KiB, the floor
    (8, 16 * KIB),
])
def test_chunk_rule_by_hand(nbytes, chunk):
    assert nvls_chunk(nbytes, heads=8, channels=16) == chunk


def test_pipeline_terms_by_hand():
    # Round of 4 MB at 1 ns/B = 4 ms, sync 1 ms, depth 2: fill 2 x (4 + 1) = 10 ms,
    # efficiency 1 / (1 + 1/4) = 0.8.
    fill, eff = pipeline_terms(1e9, 4e6, 1e-9, 1e-3)
    assert fill == pytest.approx(10e-3) and eff == pytest.approx(0.8)
    assert pipeline_terms(1e9, 4e6, 0.0, 1e-3) == (2e-3, 1.0)


def test_wire_factor_by_hand():
    # Hopper g = 1.428: P = 8 -> 2*7/(9*1.428) = 1.08932; P = 72 -> 2*71/(73*1.428)
    # = 1.362189 (the switch's share of the work grows with P, busbw stays g x B).
    assert wire_factor(8, "hopper") == pytest.approx(1.089325, rel=1e-6)
    assert wire_factor(72, "hopper") == pytest.approx(1.362189, rel=1e-6)


def test_overheads_by_hand():
    # 64 MB over 8 Hopper GPUs at 3.30499e-12 s/B: round 4,194,304 B -> 13.862 us, sync
    # 8 x 0.635 = 5.08 us: latency 8.2 + 2 x 18.942 = 46.084 us, efficiency 0.73183.
    latency, eff = nvls_overheads(64e6, 8, "hopper", 3.30499e-12)
    assert latency == pytest.approx(46.084e-6, rel=1e-4)
    assert eff == pytest.approx(0.73183, rel=1e-4)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=10, max_value=34), st.sampled_from([8, 16, 72]),
       st.sampled_from(["hopper", "blackwell"]))
def test_time_grows_with_size_and_efficiency_is_a_share(log2n, ranks, arch):
    def time(n: float) -> float:
        latency, eff = nvls_overheads(n, ranks, arch, 2e-12)
        assert 0.0 < eff <= 1.0
        return latency + n * 2e-12 / eff

    n = float(1 << log2n)
    assert time(2 * n) > time(n)


def test_8x_h100_sweep_from_2_mib_within_10_percent_of_voltage_park():
    # The sweep the Hopper parameters were fitted on (tests/ingest/data, from
    # ../shared/reference/nccl_modern.yaml): auto choice, 2 MiB to 8 GiB, busbw within 10%.
    from pathlib import Path

    from ruamel.yaml import YAML

    from simtrain.comm.model import CommModel
    from simtrain.comm.sweep import run_sweep
    from simtrain.hardware.topology import ClusterConfig, build_cluster

    data = Path(__file__).parents[1] / "ingest" / "data" / "voltagepark_h100_allreduce.yaml"
    rows = YAML(typ="safe").load(data.read_text())["sweeps"]["single_node_8_gpus"]["rows"]
    points = [(int(b), t) for b, t, _ in rows if b >= 2 << 20]
    cluster = build_cluster(ClusterConfig(preset="dgx-h100"))
    comm = CommModel(cluster, "nccl", arch="hopper")
    swept = run_sweep(cluster, comm, "all_reduce", tuple(range(8)), [b for b, _ in points])
    for (nbytes, time_us), row in zip(points, swept, strict=True):
        assert row.time_s == pytest.approx(time_us * 1e-6, rel=0.10), nbytes

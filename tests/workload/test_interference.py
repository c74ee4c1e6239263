"""Compute/communication interference from the SMs and HBM a collective holds."""

from __future__ import annotations

import pytest

from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph
from simtrain.hardware.topology import build_cluster
from simtrain.scenario import load_scenario
from simtrain.simulate import interference_model
from simtrain.workload.interference import (
    Interference,
    collective_channels,
    slowed_time,
)

H100 = Interference(num_sms=132, channels=32, sms_per_channel=1.0,
                    hbm_bandwidth=3.35e12 * 0.85, gemm_rate=989.4e12 * 0.8)


def test_channels_follow_nccls_thread_threshold() -> None:
    # Ring Simple over 8 ranks: 512 threads x 64 B x 8 ranks = 262,144 B per channel, so a
    # 1 MiB all-reduce runs on 1,048,576 / 262,144 = 4 channels, 64 MiB on all 32.
    assert collective_channels("all_reduce", 2**20, 8, "Simple", "ring", 32) == 4
    assert collective_channels("all_reduce", 64 * 2**20, 8, "Simple", "ring", 32) == 32
    # LL: 512 x 8 B x 8 = 32,768 B per channel: 1 MiB fills 32.
    assert collective_channels("all_reduce", 2**20, 8, "LL", "ring", 32) == 32
    # Tiny messages keep one channel; point-to-point 2; all-to-all 2 per peer.
    assert collective_channels("all_reduce", 8, 8, "LL", "tree", 32) == 1
    assert collective_channels("send_recv", 2**30, 2, "Simple", "direct", 32) == 2
    assert collective_channels("all_to_all", 2**30, 8, "Simple", "direct", 32) == 14


def test_one_slowdown_by_hand() -> None:
    # H100, a 256 MiB ring all-reduce over 8 ranks in 1 ms: 32 channels = 32 of 132 SMs
    # (s = 0.2424); bus bytes 256 MiB · 2·7/8 / 1 ms = 469.8 GB/s, HBM 3 x that = 1.409
    # TB/s of 3.35·0.85 = 2.8475 TB/s (u = 0.4949).
    s, u = H100.load("all_reduce", 256 * 2**20, 8, "Simple", "ring", 1e-3)
    assert s == pytest.approx(32 / 132)
    assert u == pytest.approx(3 * 256 * 2**20 * 1.75 / 1e-3 / 2.8475e12)
    # A GEMM (sigma = 1) of 1 ms under it: 1 / (1 - 0.2424) = 1.32 ms; a memory-bound
    # kernel (sigma = 0): 1 / (1 - 0.4949) = 1.98 ms; half and half: 1.65 ms.
    assert slowed_time(1e-3, 1.0, s, u) == pytest.approx(1.32e-3, rel=1e-3)
    assert slowed_time(1e-3, 0.0, s, u) == pytest.approx(1.9798e-3, rel=1e-3)
    assert slowed_time(1e-3, 0.5, s, u) == pytest.approx(1.65e-3, rel=2e-3)
    # sigma of a task: its FLOPs at the large-GEMM rate (791.5 TFLOP/s) over its duration.
    assert H100.sm_bound(791.52e9, 1e-3) == pytest.approx(1.0)
    assert H100.sm_bound(0.0, 1e-3) == 0.0


class _Fixed:
    """An interference model holding a fixed share of SMs while any collective runs."""

    def load(self, op, nbytes, nranks, protocol, algorithm, seconds, sms=0):
        return 0.25, 0.0

    def rate(self, flops, duration, sm_share, hbm_share):
        return 1.0 - sm_share


def test_engine_slows_compute_only_while_the_collective_runs(star_fabric) -> None:
    # The all-reduce of 1e8 B over 2 ranks at 1e9 B/s runs [0, 0.1 s]. A 0.2 s compute
    # task beside it progresses at 0.75 for 0.1 s (0.075 s of work), then at full rate:
    # 0.1 + 0.125 = 0.225 s.
    g = TaskGraph(2)
    g.collective("all_reduce", [0, 1], 1e8, "ar", stream="comm")
    g.compute(0, "gemm", 0.2)
    tl = execute(g, star_fabric(2, 1e9, 0.0), interference=_Fixed())
    gemm = next(s for s in tl if s.name == "gemm")
    assert gemm.end == pytest.approx(0.225)


def test_none_selects_the_physical_model_and_zero_switches_it_off() -> None:
    body = {"name": "i", "cluster": {"preset": "dgx-h100"}, "model": {"preset": "tiny-gpt"},
            "training": {"global_batch_size": 8}}
    scenario = load_scenario({**body, "compute": {"comm_interference": None}})
    model = interference_model(scenario, build_cluster(scenario.cluster))
    assert isinstance(model, Interference) and model.num_sms == 132 and model.channels == 32
    off = load_scenario({**body, "compute": {"comm_interference": 0}})
    assert interference_model(off, build_cluster(off.cluster)) == 0.0
    # No compute section: the physical model is the default.
    plain = load_scenario(body)
    assert isinstance(interference_model(plain, build_cluster(plain.cluster)), Interference)


def test_default_interference_slows_a_gemm_beside_an_all_reduce_by_hand(star_fabric) -> None:
    # H100 (132 SMs, 32 channels): a 1 GB ring all-reduce over 2 ranks on 1e10 B/s links
    # moves 2 x 1/2 x 1e9 = 1e9 B per rank: 0.1 s, with 32 channels (1e9 B >> 32 x 512 x
    # 64 x 2 B) = 32/132 = 0.2424 of the SMs; bus bytes 1e9 / 0.1 s = 10 GB/s, x3 = 30 GB/s
    # of 2.8475 TB/s HBM (u = 0.01054). A 0.2 s GEMM at the large-GEMM rate (sigma = 1)
    # beside it: 0.1 s at 1 - 0.2424 = 0.7576 does 0.07576 s of work, the other 0.12424 s
    # at full rate: it ends at 0.22424 s (+12.1%). Switched off it ends at 0.2 s.
    g = TaskGraph(2)
    g.collective("all_reduce", [0, 1], 1e9, "ar", stream="comm", algorithm="ring")
    g.compute(0, "gemm", 0.2, flops=0.2 * H100.gemm_rate)
    fabric = star_fabric(2, 1e10, 0.0)
    slowed = next(s for s in execute(g, fabric, interference=H100) if s.name == "gemm")
    ar = next(s for s in execute(g, fabric, interference=H100) if s.name == "ar")
    assert ar.end == pytest.approx(0.1)
    assert slowed.end == pytest.approx(0.1 + 0.2 - 0.1 * (1 - 32 / 132), rel=1e-9)
    plain = next(s for s in execute(g, fabric, interference=0.0) if s.name == "gemm")
    assert plain.end == pytest.approx(0.2)

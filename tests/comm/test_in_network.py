"""In-network reduction (NVLS, InfiniBand SHARP): hand values, NCCL's published busbw,
bad input, and invariants (more bandwidth is never slower; bytes conserved)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.comm import costs
from simtrain.comm.algorithms import AlgorithmError, Call
from simtrain.comm.in_network import nvls_flows
from simtrain.comm.model import CommModel, busbw_factor
from simtrain.engine.network import SwitchPort, switch_bytes
from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph
from simtrain.hardware.topology import ClusterConfig, build_cluster

N = 64e6  # bytes


def cluster(preset="dgx-h100", **kw):
    return build_cluster(ClusterConfig(preset=preset, **kw))


def timed(c, op, algorithm, n=N, backend="ideal", ranks=None, copies=()):
    g = TaskGraph(c.num_gpus)
    g.collective(op, list(ranks or range(c.num_gpus)), n, op, algorithm=algorithm,
                 copies=copies)
    tl = execute(g, c, comm=CommModel(c, backend, arch=c.gpu_spec.arch))
    return tl.end, tl


def test_nvls_all_reduce_matches_its_closed_form():
    # Ideal backend, 8 H100 at 450 GB/s each to the NVSwitch, no latency:
    # (n + n/8)/B = 72e6 / 450e9 = 160 us.
    assert costs.nvls_all_reduce_time(N, 8, 0.0, 450e9) == pytest.approx(160e-6)
    t, tl = timed(cluster(), "all_reduce", "nvls")
    assert t == pytest.approx(160e-6, rel=1e-9)
    assert tl.spans[0].meta["algorithm"] == "nvls"


@pytest.mark.parametrize("op", ["reduce_scatter", "all_gather"])
def test_nvls_reduce_scatter_and_all_gather(op):
    # n/B = 64e6 / 450e9 = 142.2 us: the heavier direction carries n.
    assert costs.nvls_reduce_scatter_time(N, 8, 0.0, 450e9) == pytest.approx(142.222e-6,
                                                                             rel=1e-5)
    assert timed(cluster(), op, "nvls")[0] == pytest.approx(142.222e-6, rel=1e-5)


def test_nccl_nvls_time_by_hand():
    # NCCL's NVLS pipeline on DGX H100 (simtrain.comm.nvls_pipeline), 64 MB over 8 GPUs:
    # link 450 GB/s x 20.6/25 = 370.8 GB/s; wire factor 2*7/(9*1.428) = 1.089325; a GPU's
    # link carries 64e6 x 9/8 = 72e6 B -> 1.125 x 1.089325 / 370.8e9 = 3.30499e-12 s/B.
    # Chunk: 64e6 < 64 x 128 x 128 KiB and < 8 x 128 x 64 KiB, >= 2 x 128 x 32 KiB -> 32 KiB;
    # a round R = 32 KiB x 16 channels x 8 heads = 4,194,304 B takes T(R) = 13.862 us;
    # flag exchange 8 x 0.635 = 5.08 us. Fill 2 x (13.862 + 5.08) = 37.884 us; efficiency
    # 1 / (1 + 5.08/13.862) = 0.73183; transfer 64e6 x 3.30499e-12 / 0.73183 = 289.03 us.
    # Total 8.2 + 37.884 + 289.03 = 335.11 us.
    t, _ = timed(cluster(), "all_reduce", "nvls", backend="nccl")
    assert t == pytest.approx(335.11e-6, rel=1e-4)


@pytest.mark.parametrize(("nbytes", "busbw"), [
    # CoreWeave, GB200 NVL72 single rack, 72 GPUs (../shared/reference/nccl_modern.yaml)
    (536870912, 586.06), (1073741824, 681.17), (2147483648, 757.78),
    (4294967296, 839.16), (8589934592, 834.57)])
def test_nvl72_72_gpu_all_reduce_within_10_percent(nbytes, busbw):
    c = cluster("gb200-nvl72", nodes=1)
    g = TaskGraph(c.num_gpus)
    g.collective("all_reduce", list(range(72)), nbytes, "ar")
    tl = execute(g, c, comm=CommModel(c, "nccl", arch=c.gpu_spec.arch), network="analytic")
    assert tl.spans[0].meta["algorithm"] == "nvls"
    assert nbytes / tl.end * busbw_factor("all_reduce", 72) / 1e9 == pytest.approx(
        busbw, rel=0.10)


@pytest.mark.parametrize("gib", [1, 2, 4, 8])
def test_8x_h100_nvls_busbw_within_10_percent_of_480(gib):
    # reference/nccl.yaml: 8x H100 NVLS all-reduce ~480 GB/s busbw (nccl-tests#212).
    n = gib << 30
    t, tl = timed(cluster(), "all_reduce", "auto", n=n, backend="nccl")
    busbw = n / t * busbw_factor("all_reduce", 8) / 1e9
    assert tl.spans[0].meta["algorithm"] == "nvls"
    assert busbw == pytest.approx(480, rel=0.10)


def test_auto_uses_nvls_only_where_the_switch_reduces():
    n = 8 << 30
    assert timed(cluster(), "all_reduce", "auto", n, "nccl")[1].spans[0].meta[
        "algorithm"] == "nvls"
    for c in (cluster(nvlink_sharp=False), cluster("dgx-a100")):
        assert timed(c, "all_reduce", "auto", n, "nccl")[1].spans[0].meta[
            "algorithm"] == "ring"


def test_nvls_on_hardware_without_nvswitch_sharp_is_a_clear_error():
    with pytest.raises(AlgorithmError, match="NVLS needs NVSwitch SHARP"):
        timed(cluster("dgx-a100"), "all_reduce", "nvls", backend="nccl")
    with pytest.raises(ValueError, match="nvlink_sharp is true but a100-80gb"):
        ClusterConfig(preset="dgx-a100", nvlink_sharp=True)
    with pytest.raises(AlgorithmError, match="under one nvswitch"):
        timed(cluster(nodes=2), "all_reduce", "nvls")


def test_nvls_runs_only_simple():
    model = CommModel(cluster(), "nccl", arch="hopper", protocol="LL")
    with pytest.raises(AlgorithmError, match="only the Simple protocol"):
        model.plan(Call("all_reduce", tuple(range(8)), N), "nvls")


def test_collnet_is_nic_bound_by_hand():
    # 2 servers x 8 H100, SHARP leaves, NICs at 100 Gb/s = 12.5 GB/s. Ideal backend:
    # intra ring 2 x 7/8 x 64e6 / 450e9 = 248.9 us; each GPU's shard n/8 = 8e6 B up and
    # down its NIC: 8e6 / 12.5e9 = 640 us, the slower stage.
    c = cluster(nodes=2, ib_sharp=True, nic_bandwidth="100Gbps")
    assert costs.collnet_all_reduce_time(N, 8, 0.0, 450e9, 12.5e9) == pytest.approx(640e-6)
    assert timed(c, "all_reduce", "collnet")[0] == pytest.approx(640e-6, rel=1e-6)


def test_collnet_needs_sharp_switches():
    with pytest.raises(AlgorithmError, match="ib_sharp"):
        timed(cluster(nodes=2), "all_reduce", "collnet")


def test_64x_h100_sharp_within_10_percent_of_coreweave():
    # reference/nccl_modern.yaml coreweave_h100_64gpu_example: 386.56 GB/s at 8 GiB.
    n = 8 << 30
    t, _ = timed(cluster(nodes=8, ib_sharp=True), "all_reduce", "collnet", n, "nccl")
    assert n / t * busbw_factor("all_reduce", 64) / 1e9 == pytest.approx(386.56, rel=0.10)


def test_symmetric_copies_reach_their_own_switch():
    # A copy on the second server reduces in that server's NVSwitch: no shared link,
    # so the time is the same as alone (160 us, as above).
    c = cluster(nodes=2)
    t, _ = timed(c, "all_reduce", "nvls", ranks=range(8), copies=[list(range(8, 16))])
    assert t == pytest.approx(160e-6, rel=1e-9)


def test_switch_routes():
    c = cluster(nodes=2, ib_sharp=True)
    up = c.route(9, SwitchPort(9, "nvswitch"))
    assert [c.links[i].dst for i in up] == ["n1.nvswitch"]
    leaf = c.route(SwitchPort(9, "leaf"), 9)
    assert [c.links[i].src for i in leaf] == ["leaf0.rail1", "n1.nic1"]
    # 8 rail leaves need spines; rail k aggregates at spine k mod spines (2 servers x 1
    # NIC per leaf -> 2 spines): GPU 9 is on rail 1 -> spine1.
    spine = c.route(9, SwitchPort(9, "spine"))
    assert [c.links[i].dst for i in spine] == ["n1.nic1", "leaf0.rail1", "spine1"]
    with pytest.raises(ValueError, match="no leaf that reduces"):
        cluster(nodes=2).route(0, SwitchPort(0, "leaf"))


@settings(max_examples=30, deadline=None)
@given(p=st.integers(2, 72), n=st.floats(1.0, 1e10),
       op=st.sampled_from(["all_reduce", "reduce_scatter", "all_gather"]))
def test_nvls_flows_conserve_bytes(p, n, op):
    flows = nvls_flows(op, tuple(range(p)), n)
    into, out = switch_bytes(flows)
    # reduce-scatter: P contributions of n in, P shards of n/P out; all-gather the reverse;
    # all-reduce both; every rank receives what the op defines (n/P, n or n + n/P).
    expected = {"reduce_scatter": (p * n, n), "all_gather": (n, p * n),
                "all_reduce": (p * n + n, n + p * n)}[op]
    assert into == pytest.approx(expected[0]) and out == pytest.approx(expected[1])
    received = {r: sum(nb for s, d, nb in flows if d == r) for r in range(p)}
    per_rank = {"reduce_scatter": n / p, "all_gather": n, "all_reduce": n + n / p}[op]
    assert all(v == pytest.approx(per_rank) for v in received.values())


@settings(max_examples=15, deadline=None)
@given(slow=st.floats(50e9, 900e9), factor=st.floats(1.0, 4.0),
       n=st.sampled_from([1 << 10, 1 << 20, 1 << 26, 1 << 30]))
def test_more_nvlink_bandwidth_is_never_slower(slow, factor, n):
    def t(bw: float) -> float:
        c = cluster(nvlink_bandwidth=bw)
        model = CommModel(c, "nccl", arch="hopper")
        call = Call("all_reduce", tuple(range(8)), float(n))
        return min(model.predict(call, "nvls", "Simple"), model.choose(call)[2])
    assert t(slow * factor) <= t(slow) * (1 + 1e-12)


@settings(max_examples=10, deadline=None)
@given(slow=st.floats(10e9, 100e9), factor=st.floats(1.0, 4.0))
def test_more_nic_bandwidth_never_slows_sharp(slow, factor):
    def t(bw: float) -> float:
        c = cluster(nodes=2, ib_sharp=True, nic_bandwidth=bw)
        return CommModel(c, "nccl", arch="hopper").predict(
            Call("all_reduce", tuple(range(16)), 1e8), "collnet", "Simple")
    assert t(slow * factor) <= t(slow) * (1 + 1e-12)


def test_cli_nvls_on_a100_is_one_line_exit_2():
    from typer.testing import CliRunner

    from simtrain.cli import app

    result = CliRunner().invoke(app, ["collective", "all_reduce", "--cluster", "dgx-a100",
                                      "--nvls", "-b", "8G"])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0
    assert "no NVSwitch with NVLink SHARP" in result.output
    forced = CliRunner().invoke(app, ["collective", "all_reduce", "--cluster", "dgx-a100",
                                      "--algorithm", "nvls", "-b", "8G"])
    assert forced.exit_code == 2 and "NVLS needs NVSwitch SHARP" in forced.output


def test_expert_all_to_all_spans_an_nvl72_rack_on_nvlink():
    # EP over a whole GB200 NVL72 rack: 72 ranks, each GPU 900 GB/s to the NVSwitch, ideal
    # backend. Direct all-to-all of n = 72 MB per rank: alpha + (P-1)/P n/B = 0.6 us (two
    # 0.3 us NVLink hops) + 71/72 x 72e6 / 900e9 = 0.6 + 78.89 = 79.49 us, and no flow
    # leaves the rack's NVLink.
    c = cluster("gb200-nvl72")
    model = CommModel(c, "ideal", arch=c.gpu_spec.arch)
    call = Call("all_to_all", tuple(range(72)), 72e6)
    assert model.predict(call, "direct", "Simple") == pytest.approx(79.489e-6, rel=1e-4)
    kinds = {c.links[i].kind for a in (0, 35) for b in (1, 71) for i in c.route(a, b)}
    assert kinds == {"nvlink"}


@pytest.mark.parametrize(("comm", "field"), [
    ({"algorithm": "nvls"}, "comm.algorithm: nvls needs NVSwitch SHARP"),
    ({"algorithms": {"all_reduce": "collnet"}},
     "comm.algorithms.all_reduce: collnet needs InfiniBand SHARP"),
])
def test_forced_in_network_algorithm_on_plain_hardware_is_bad_input(comm, field):
    from simtrain.comm.config import CommConfig
    from simtrain.errors import ScenarioError

    c = cluster("dgx-a100")
    with pytest.raises(ScenarioError, match=field):
        CommConfig(**comm).build(c, c.gpu_spec.arch)
    CommConfig(**comm).build(cluster(nodes=2, ib_sharp=True), "hopper")  # has both

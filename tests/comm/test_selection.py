"""NCCL-style choice of algorithm and protocol, backends, contention, stragglers."""

from __future__ import annotations

from typing import get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.comm.algorithms import AlgorithmError, Call
from simtrain.comm.backends import _LL_ROW_BY_CPU, NCCL
from simtrain.comm.model import CommModel
from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph
from simtrain.hardware.topology import ClusterConfig, build_cluster


def cluster(preset="dgx-a100", nodes=1, **kw):
    return build_cluster(ClusterConfig(preset=preset, nodes=nodes, **kw))


def plan(c, n, op="all_reduce", backend="nccl", ranks=None, **kw):
    model = CommModel(c, backend, arch=c.gpu_spec.arch, **kw)
    return model.plan(Call(op, tuple(ranks or range(c.num_gpus)), n))


def test_small_messages_are_latency_bound_and_use_low_latency_protocols():
    c = cluster(nodes=16)
    small = plan(c, 8)
    # 8 bytes: NCCL tree/LL. Latency model: base 6.8 us + 2 x (7 x 1.0 us intra (the LL
    # NVLink hop 0.6 us raised to netOverhead 1.0 us as the call spans nodes) +
    # log2(16) = 4 x 5.0 us net) = 6.8 + 54.0 = 60.8 us; bytes are negligible.
    assert (small.algorithm, small.protocol) == ("tree", "LL")
    assert small.predicted_s == pytest.approx(60.8e-6, rel=0.01)
    large = plan(c, 8 << 30)
    assert (large.algorithm, large.protocol) == ("ring", "Simple")


def test_tree_ring_crossover_on_a_multi_node_cluster():
    # The tree's latency grows with log2(nodes), the ring's with 2(P-1) steps, while the
    # ring has twice the tree's bandwidth here: tree wins mid sizes, ring large ones.
    c = cluster(nodes=16)
    choices = [plan(c, 1 << e).algorithm for e in range(10, 34, 2)]
    first_ring = choices.index("ring")
    assert set(choices[:first_ring]) == {"tree"} and set(choices[first_ring:]) == {"ring"}
    assert (1 << (10 + 2 * first_ring)) >= 32 << 20  # the crossover lies above 32 MiB


def test_choice_is_the_fastest_prediction():
    c = cluster(nodes=4)
    model = CommModel(c, "nccl", arch="ampere")
    call = Call("all_reduce", tuple(range(32)), 4 << 20)
    chosen = model.plan(call)
    for algorithm in ("ring", "tree"):
        for protocol in NCCL.protocols:
            assert chosen.predicted_s <= model.predict(call, algorithm, protocol) + 1e-15


def test_simulated_time_on_idle_cluster_equals_prediction():
    c = cluster(nodes=2)
    model = CommModel(c, "nccl", arch="ampere")
    for n in (1 << 12, 1 << 22, 1 << 30):
        g = TaskGraph(c.num_gpus)
        g.collective("all_reduce", range(c.num_gpus), n, "ar")
        tl = execute(g, c, comm=model)
        assert tl.end == pytest.approx(model.plan(Call("all_reduce", tuple(range(16)), n))
                                       .predicted_s, rel=1e-6)
        assert {"algorithm", "protocol"} <= tl.spans[0].meta.keys()


def test_user_can_force_algorithm_and_protocol():
    c = cluster(nodes=2)
    forced = plan(c, 8, algorithms={"all_reduce": "ring"}, protocol="Simple")
    assert (forced.algorithm, forced.protocol) == ("ring", "Simple")
    with pytest.raises(AlgorithmError, match="not available for all_reduce on gloo"):
        plan(c, 8, backend="gloo", algorithms={"all_reduce": "tree"})
    with pytest.raises(ValueError, match="protocol 'LL' is not offered by mpi"):
        plan(c, 8, backend="mpi", protocol="LL")


def test_backends_differ_as_documented():
    c = cluster(nodes=2)
    n = 1 << 30
    nccl, gloo = plan(c, n), plan(c, n, backend="gloo")
    assert gloo.predicted_s > 2 * nccl.predicted_s  # host staging and TCP
    assert plan(c, 1024, backend="mpi").algorithm == "recursive_doubling"  # MPICH short
    assert plan(c, n, backend="mpi").algorithm == "halving_doubling"  # Rabenseifner long
    # ... and the ring when the group is not a power of two (halving-doubling cannot run)
    assert plan(c, n, backend="mpi", ranks=range(12)).algorithm == "ring"
    assert plan(c, n, backend="gloo").algorithm == "ring"


def _two_collectives(c, first, second, n):
    g = TaskGraph(c.num_gpus)
    g.collective("all_reduce", first, n, "a", stream="a", algorithm="ring")
    g.collective("all_reduce", second, n, "b", stream="b", algorithm="ring")
    tl = execute(g, c, comm=CommModel(c, "ideal"))
    return max(s.end for s in tl if s.name == "a")


def test_contention_on_shared_links_and_none_on_disjoint_links():
    # Two 2-GPU all-reduces inside one DGX A100. On disjoint GPU pairs they use disjoint
    # NVLink ports and take as long as one alone. Two on the SAME pair share both ports:
    # each flow gets half the bandwidth, so the bandwidth term doubles.
    c = cluster()
    n = 1 << 30
    alone = _two_collectives(c, [0, 1], [2, 3], n)
    g = TaskGraph(c.num_gpus)
    g.collective("all_reduce", [0, 1], n, "a", algorithm="ring")
    single = execute(g, c, comm=CommModel(c, "ideal")).end
    assert alone == pytest.approx(single, rel=1e-9)
    shared = _two_collectives(c, [0, 1], [1, 0], n)
    latency = 2 * 0.6e-6  # 2(P-1) = 2 steps of the 0.6 us NVSwitch route
    assert shared - latency == pytest.approx(2 * (single - latency), rel=1e-6)


def test_dp_all_reduce_and_ep_all_to_all_on_the_same_nics_slow_each_other():
    c = cluster(nodes=2)
    n = 1 << 30

    def run(*ops):
        g = TaskGraph(c.num_gpus)
        for op in ops:
            g.collective(op, range(16), n, op, stream=op)
        tl = execute(g, c, comm=CommModel(c, "nccl", arch="ampere"))
        return {op: max(s.end for s in tl if s.name == op) for op in ops}

    alone = {**run("all_to_all"), **run("all_reduce")}
    both = run("all_to_all", "all_reduce")
    # Both cross the same 16 NICs. Max-min fairness shares each NIC per flow: the
    # all-to-all has 8 inter-node flows per NIC against the ring's 1, so the all-reduce
    # suffers most, but both are slower than alone.
    assert both["all_to_all"] > 1.05 * alone["all_to_all"]
    assert both["all_reduce"] > 1.5 * alone["all_reduce"]


def test_a_late_rank_delays_the_whole_group_by_its_lateness():
    c = cluster()
    model = CommModel(c, "nccl", arch="ampere")

    def step(delays):
        g = TaskGraph(8)
        deps = [g.compute(r, "f", 1e-3) for r in range(8)]
        g.collective("all_reduce", range(8), 1 << 26, "ar", deps=deps)
        return execute(g, c, comm=model, delays=delays)

    on_time = step({})
    late = step({5: 2e-3})
    assert late.end - on_time.end == pytest.approx(2e-3, rel=1e-9)
    waited = {s.rank: s.meta.get("waited_s", 0.0) for s in late if s.name == "ar"}
    assert waited[5] == 0.0 and waited[0] == pytest.approx(2e-3)
    slowed = execute_slowdown(c, model)
    assert slowed == pytest.approx(on_time.end + 0.5e-3, rel=1e-9)


def execute_slowdown(c, model):
    """Rank 3 computes 1.5x slower: its 1 ms becomes 1.5 ms and the group waits 0.5 ms."""
    g = TaskGraph(8)
    deps = [g.compute(r, "f", 1e-3) for r in range(8)]
    g.collective("all_reduce", range(8), 1 << 26, "ar", deps=deps)
    return execute(g, c, comm=model, slowdowns={3: 1.5}).end


def test_tree_correction_by_message_size():
    # tuning.cc treeCorrectionFactor[proto][log2(n/64)] (NCCL 2.30.7, float[3][24]):
    # 256 KiB -> log2(4096) = 12 -> LL 0.4; 4 MiB -> 16 -> LL128 0.8; 1 MiB -> 14 -> LL128
    # 0.6; 512 MiB -> 23, the last entry -> Simple 0.9; 1 GiB -> 24, past the table -> 1.0;
    # rings: 1.0.
    assert NCCL.size_efficiency("all_reduce", "tree", "LL", 256 << 10) == 0.4
    assert NCCL.size_efficiency("all_reduce", "tree", "LL128", 4 << 20) == 0.8
    assert NCCL.size_efficiency("all_reduce", "tree", "LL128", 1 << 20) == 0.6
    assert NCCL.size_efficiency("all_reduce", "tree", "Simple", 512 << 20) == 0.9
    assert NCCL.size_efficiency("all_reduce", "tree", "Simple", 1 << 30) == 1.0
    assert NCCL.size_efficiency("all_reduce", "ring", "LL", 256 << 10) == 1.0
    # The transfer part of a tree all-reduce stretches by 1/0.8 at 4 MiB/LL128, in the
    # prediction and in the simulated flows alike.
    c = cluster(nodes=4)
    model = CommModel(c, "nccl", arch=c.gpu_spec.arch)
    call = Call("all_reduce", tuple(range(32)), float(4 << 20))
    fixed, per_byte = model._unit_cost(call.op, call.ranks, "tree", "LL128")
    assert model.predict(call, "tree", "LL128") == pytest.approx(
        fixed + per_byte * (4 << 20) / 0.8)
    g = TaskGraph(c.num_gpus)
    g.collective("all_reduce", list(range(32)), 4 << 20, "ar", algorithm="tree")
    simulated = execute(g, c, comm=CommModel(c, "nccl", arch=c.gpu_spec.arch,
                                             protocol="LL128")).end
    assert simulated == pytest.approx(fixed + per_byte * (4 << 20) / 0.8, rel=1e-6)


def test_multi_node_ring_simple_pays_the_plateau_latency():
    # tuning.cc: multi-node ring all-reduce on Simple, latency x 1.4 on SM80+. 2 DGX A100,
    # 16 ranks, one ring per channel: 14 of its 16 hops intra-node at max(3.4 us, 3 x 1.0
    # us netOverhead) = 3.4 us, 2 over the network at max(route 3.6 us, 14 us) = 14 us;
    # mean hop (47.6 + 28) / 16 = 4.725 us x 2(P-1) = 30 steps = 141.75 us, x 1.4 =
    # 198.45 us.
    c = cluster(nodes=2)
    model = CommModel(c, "nccl", arch="ampere")
    phases = model._phases(Call("all_reduce", tuple(range(16)), 1e9), "ring", "Simple")
    assert sum(ph.latency for ph in phases) == pytest.approx(198.45e-6, rel=1e-6)
    one = model._phases(Call("all_reduce", tuple(range(8)), 1e9), "ring", "Simple")
    assert sum(ph.latency for ph in one) == pytest.approx(14 * 3.4e-6)  # one node: no factor


_MONOTONE_CLUSTERS = {"dgx-h100": cluster("dgx-h100"), "dgx-b200": cluster("dgx-b200"),
                      "dgx-h100x4": cluster("dgx-h100", nodes=4)}


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(_MONOTONE_CLUSTERS)), log2n=st.floats(3.0, 33.0),
       grow=st.floats(1.0, 4.0))
def test_a_bigger_message_never_takes_less_time(name, log2n, grow):
    # NCCL's choice is the fastest candidate; each candidate's time grows with n (latency
    # fixed, transfer linear, the tree correction never doubling between size buckets), so
    # the chosen time does too.
    c = _MONOTONE_CLUSTERS[name]
    model = CommModel(c, "nccl", arch=c.gpu_spec.arch)
    ranks = tuple(range(c.num_gpus))
    n = 2.0 ** log2n
    small = model.choose(Call("all_reduce", ranks, n))[2]
    big = model.choose(Call("all_reduce", ranks, n * grow))[2]
    assert big >= small * (1 - 1e-12)


@settings(max_examples=10, deadline=None)
@given(slow=st.floats(10e9, 100e9), factor=st.floats(1.0, 4.0),
       n=st.sampled_from([1 << 12, 1 << 20, 1 << 28, 1 << 33]))
def test_more_nic_bandwidth_never_slows_the_chosen_all_reduce(slow, factor, n):
    def t(bw: float) -> float:
        c = cluster("dgx-h100", nodes=2, nic_bandwidth=bw)
        return CommModel(c, "nccl", arch="hopper").choose(
            Call("all_reduce", tuple(range(16)), float(n)))[2]
    assert t(slow * factor) <= t(slow) * (1 + 1e-12)


def test_ll_cap_by_gpu_on_one_node_and_by_host_cpu_across_nodes():
    # tuning.cc llMaxBws[index1][index2] (reference/nccl.yaml): one node: the GPU's row
    # (Hopper 141 GB/s); across nodes the CPU vendor's: row 0 for Intel and every non-AMD
    # CPU (39, 39, 20.4), row 1 for AMD (87.7, 22.5, 19.0), index2 = 1, 2, 4+ nodes.
    assert NCCL.bandwidth_cap("LL", "hopper", 1) == pytest.approx(141e9)
    assert NCCL.bandwidth_cap("LL", "hopper", 4, "intel") == pytest.approx(20.4e9)
    assert NCCL.bandwidth_cap("LL", "hopper", 2, "amd") == pytest.approx(22.5e9)
    assert NCCL.bandwidth_cap("LL", "blackwell", 2, "arm") == pytest.approx(39e9)
    assert NCCL.bandwidth_cap("LL", "ampere", 16, "amd") == pytest.approx(19e9)
    assert NCCL.bandwidth_cap("Simple", "hopper", 4, "intel") == float("inf")
    # The presets carry the host: DGX A100 runs AMD EPYC, DGX H100 Intel Xeon, NVL72 Grace.
    hosts = {p: CommModel(cluster(p), "nccl").cpu for p in ("dgx-a100", "dgx-h100",
                                                              "gb200-nvl72")}
    assert hosts == {"dgx-a100": "amd", "dgx-h100": "intel", "gb200-nvl72": "arm"}
    # every vendor the cluster field accepts has its llMaxBws row, and no other
    accepted = get_args(ClusterConfig.model_fields["host_cpu"].annotation)
    assert set(accepted) == set(_LL_ROW_BY_CPU)

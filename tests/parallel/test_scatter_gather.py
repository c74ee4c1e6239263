"""Megatron's scatter-gather between pipeline stages without SP: p2p bytes / tp, then a TP
all-gather on the receiving stage."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph
from simtrain.hardware.topology import build_cluster
from simtrain.parallel.lower import Lowering, LowerOptions
from simtrain.parallel.plan import ParallelDims
from simtrain.parallel.schedule import make_schedule
from simtrain.parallel.shard import Compute, Unit
from simtrain.scenario import ScenarioError, load_scenario
from simtrain.simulate import build_graph, build_plan
from simtrain.workload.model import Op

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


@dataclass(frozen=True)
class _Link:
    bandwidth: float
    latency: float
    kind: str


class TwoServers:
    """Two servers of two GPUs: NVLink (``fast`` B/s) inside a server, one NIC per GPU
    (``slow`` B/s) between them; no latency. Links: 4 per GPU (nvlink up/down, nic up/down)."""

    def __init__(self, fast: float, slow: float):
        self.num_gpus = 4
        self.links = [_Link(fast if k % 4 < 2 else slow, 0.0, "nvlink" if k % 4 < 2 else "ib")
                      for k in range(16)]

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        if src == dst:
            return ()
        if self.server_of(src) == self.server_of(dst):
            return (4 * src, 4 * dst + 1)
        return (4 * src + 2, 4 * dst + 3)

    def route_latency(self, route: tuple[int, ...]) -> float:
        return 0.0

    def server_of(self, rank: int) -> int:
        return rank // 2


def _step(gather: bool) -> tuple[float, TaskGraph]:
    """tp 2 x pp 2, one microbatch: forward 1 s and backward 2 s per stage, an activation of
    8 bytes, each stage on its own server (NVLink 100 B/s, NIC 1 B/s)."""
    dims = ParallelDims(tp=2, pp=2)
    units = [[[Unit("layers.0", (Compute(Op(f"s{s}", "elementwise", 0.0, 1.0, None, (), 0.0)),),
                    layer=0)]] for s in range(2)]
    options = LowerOptions(dims=dims, micro_batches=1, dtype_bytes=2, grad_bytes_per_element=4,
                           first_bucket_bytes=1, bucket_cap_bytes=1, overlap=True,
                           optimizer_bytes_per_param=0, p2p_bytes=4.0 if gather else 8.0,
                           pp_gather=gather)
    graph = TaskGraph(4)
    Lowering(graph, units, make_schedule("1f1b", 2, 1), options,
             lambda op: 0.0 if op.name == "optimizer.step" else op.bytes).run()
    return execute(graph, TwoServers(100.0, 1.0)).end, graph


def test_scatter_gather_sends_1_over_tp_across_servers_and_gathers_inside():
    # Without: F 1 s, 8 B over the NIC 8 s, F 1 s, B 2 s, gradient 8 s, B 2 s = 22 s.
    # Scatter-gather: each TP rank sends its 4 B (4 s), then the receiving pair all-gathers
    # the 8 B over NVLink (each GPU gets the other's 4 B: 0.04 s): 1 + 4 + 0.04 + 1 + 2 +
    # 4 + 0.04 + 2 = 14.08 s.
    plain, _ = _step(False)
    end, graph = _step(True)
    assert plain == pytest.approx(22.0)
    assert end == pytest.approx(14.08, abs=1e-3)
    gathers = [t for t in graph.tasks if t.comm and t.comm.op == "all_gather"]
    assert [(t.ranks, t.comm.nbytes, t.stream, t.kind) for t in gathers] == [
        ((2, 3), 8.0, "tp", "pp_comm"), ((0, 1), 8.0, "tp", "pp_comm")]


def test_the_scenario_option_halves_p2p_bytes_and_adds_a_gather_per_transfer():
    # pp_1f1b: tp 2, no SP, activations 1 x 2048 x 2560 x 2 B = 10 MiB; scatter-gather sends
    # 5 MiB per rank pair and all-gathers 10 MiB on the receiver: 6 directed stage links x 8
    # microbatches = 48 transfers per DP replica, each one TP gather.
    scenario = load_scenario(SCENARIOS / "pp_1f1b.yaml",
                             overrides=["parallelism.pp_scatter_gather=true"])
    cluster = build_cluster(scenario.cluster)
    plan = build_plan(scenario, cluster)
    assert plan.p2p_bytes == 2048 * 2560 * 2 / 2
    tasks = [t for t in build_graph(scenario, cluster, plan).tasks if t.kind == "pp_comm"]
    ops = Counter((t.comm.op, t.comm.nbytes) for t in tasks)
    assert ops[("all_gather", 2048 * 2560 * 2)] == 48
    assert ops[("send_recv", 2048 * 2560)] == 48


def test_scatter_gather_with_sp_is_refused():
    with pytest.raises(ScenarioError, match="sequence parallelism already sends 1/tp"):
        load_scenario(SCENARIOS / "pp_1f1b.yaml",
                      overrides=["parallelism.pp_scatter_gather=true", "parallelism.sp=true"])

"""Chrome trace: valid JSON, a process per GPU, a thread per stream, NCCL-like names, flows."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from simtrain.engine.taskgraph import TaskGraph
from simtrain.engine.timeline import Span, Timeline
from simtrain.report.trace import chrome_trace, nccl_kernel_name, write_trace

ROOT = Path(__file__).resolve().parents[2]


def _pipeline() -> tuple[TaskGraph, Timeline]:
    """Two stages: rank 0 forward then sends to rank 1, which receives and runs forward."""
    g = TaskGraph(num_ranks=2)
    f0 = g.compute(0, "fwd s0", 1e-3, kind="forward", flops=1e12)
    p2p = g.send_recv(0, 1, 4 * 2**20, "send act mb0", kind="pp_comm", stream="pp", deps=[f0])
    f1 = g.compute(1, "fwd s1", 1e-3, kind="forward", deps=[p2p])
    ar = g.collective("all_reduce", (0, 1), 2**20, "grad ar", kind="dp_comm", stream="dp",
                      deps=[f1])
    tl = Timeline(num_ranks=2)
    tl.add(Span(0, "compute", "forward", "fwd s0", 0.0, 1e-3, flops=1e12, task=f0))
    meta = {"op": "send_recv", "algorithm": "direct", "group_size": 2}
    tl.add(Span(0, "pp", "pp_comm", "send act mb0", 1e-3, 1.2e-3, 4 * 2**20, meta=meta, task=p2p))
    tl.add(Span(1, "pp", "pp_comm", "send act mb0", 1e-3, 1.2e-3, 4 * 2**20, meta=meta, task=p2p))
    tl.add(Span(1, "compute", "forward", "fwd s1", 1.2e-3, 2.2e-3, task=f1))
    ar_meta = {"op": "all_reduce", "algorithm": "ring", "group_size": 2}
    for r in (0, 1):
        tl.add(Span(r, "dp", "dp_comm", "grad ar", 2.2e-3, 2.5e-3, 2**20, meta=ar_meta, task=ar))
    return g, tl


def test_processes_threads_and_complete_events() -> None:
    g, tl = _pipeline()
    trace = chrome_trace(tl, graph=g)
    assert trace["displayTimeUnit"] == "ms"
    events = trace["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert procs == {0: "node0/gpu0", 1: "node0/gpu1"}
    threads = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
    assert threads == {(0, "stream compute"), (0, "stream pp"), (0, "stream dp"),
                       (1, "stream compute"), (1, "stream pp"), (1, "stream dp")}
    xs = [e for e in events if e["ph"] == "X"]
    assert len(xs) == len(tl)
    fwd = next(e for e in xs if e["name"] == "fwd s0")
    assert fwd["ts"] == 0.0 and fwd["dur"] == pytest.approx(1000.0)  # microseconds
    assert fwd["args"]["flops"] == 1e12


def test_collectives_follow_pytorch_profiler_conventions() -> None:
    g, tl = _pipeline()
    xs = [e for e in chrome_trace(tl, graph=g)["traceEvents"] if e["ph"] == "X"]
    ar = next(e for e in xs if e["args"].get("name") == "grad ar")
    assert ar["name"] == "ncclDevKernel_AllReduce_Sum_bf16_RING_LL128"
    assert ar["args"]["Collective name"] == "allreduce"
    assert ar["args"]["In msg nelems"] == 2**19  # 1 MiB of bf16
    assert ar["args"]["Group size"] == 2
    assert ar["args"]["Process Group Ranks"] == "[0, 1]"
    assert ar["args"]["algorithm"] == "ring"
    p2p = [e for e in xs if e["name"] == "ncclDevKernel_SendRecv"]
    assert len(p2p) == 2


def test_flow_arrow_from_send_to_recv() -> None:
    g, tl = _pipeline()
    events = chrome_trace(tl, graph=g)["traceEvents"]
    starts = [e for e in events if e["ph"] == "s"]
    ends = [e for e in events if e["ph"] == "f"]
    assert len(starts) == len(ends) == 1
    s, f = starts[0], ends[0]
    assert s["id"] == f["id"] and f["bp"] == "e"
    assert (s["pid"], f["pid"]) == (0, 1)
    assert s["ts"] <= f["ts"]
    # Each end sits inside a complete event on its thread, so viewers bind the arrow.
    for flow in (s, f):
        assert any(e["ph"] == "X" and e["pid"] == flow["pid"] and e["tid"] == flow["tid"]
                   and e["ts"] <= flow["ts"] <= e["ts"] + e["dur"] for e in events)


def test_kernel_names() -> None:
    assert nccl_kernel_name("all_reduce", "ring", "bf16", 1024) == (
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
    # NCCL spells element types f16, f32, bf16 in its kernel names (src/device/generate.py).
    assert nccl_kernel_name("all_gather", "ring", "fp16", 2**30) == (
        "ncclDevKernel_AllGather_f16_RING_SIMPLE")
    assert nccl_kernel_name("reduce_scatter", "ring", "fp32", 2**30) == (
        "ncclDevKernel_ReduceScatter_Sum_f32_RING_SIMPLE")
    assert nccl_kernel_name("all_to_all", "direct") == "ncclDevKernel_SendRecv"


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_write_is_valid_json_and_deterministic(tmp_path: Path, name: str) -> None:
    g, tl = _pipeline()
    a = write_trace(tmp_path / "a" / name, chrome_trace(tl, graph=g)).read_bytes()
    b = write_trace(tmp_path / "b" / name, chrome_trace(tl, graph=g)).read_bytes()
    assert a == b
    raw = gzip.decompress(a) if name.endswith(".gz") else a
    loaded = json.loads(raw)
    assert isinstance(loaded["traceEvents"], list)
    for e in loaded["traceEvents"]:
        assert {"ph", "pid", "tid", "name"} <= e.keys()


def test_simulated_scenario_trace() -> None:
    import simtrain

    # Every rank simulated (explicit fidelity): one trace process per GPU.
    scenario = simtrain.load_scenario(ROOT / "scenarios/quickstart.yaml",
                                      ["sim.fidelity=explicit"])
    result = simtrain.simulate(scenario)
    trace = chrome_trace(result.timeline, graph=result.graph, server_of=result.cluster.server_of,
                         dtype="bf16", grad_dtype="fp32")
    events = trace["traceEvents"]
    assert sum(e["name"] == "process_name" for e in events) == 8
    per_proc = Counter(e["pid"] for e in events if e["name"] == "thread_name")
    assert set(per_proc.values()) == {2}  # compute and dp streams
    xs = [e for e in events if e["ph"] == "X"]
    assert len(xs) == len(result.timeline)
    # DDP buckets hold fp32 gradients (grad_dtype): NCCL's f32 kernels, 4 bytes an element.
    buckets = [e for e in xs if e["args"].get("Collective name") == "allreduce"]
    assert buckets and all(e["name"].startswith("ncclDevKernel_AllReduce_Sum_f32_RING")
                           for e in buckets)
    assert all(e["args"]["dtype"] == "Float" for e in buckets)
    assert all(e["args"]["In msg nelems"] * 4 == e["args"]["Input size"] for e in buckets)
    json.dumps(trace)  # serialisable


def test_span_dtype_gradient_reductions_vs_gathers_and_activations() -> None:
    from simtrain.report.trace import span_dtype

    def span(kind: str, op: str, **meta: str) -> Span:
        return Span(0, "s", kind, "x", 0.0, 1.0, bytes=8.0, meta={"op": op, **meta})

    assert span_dtype(span("dp_comm", "all_reduce"), "bf16", "fp32") == "fp32"
    assert span_dtype(span("dp_comm", "reduce_scatter"), "bf16", "fp32") == "fp32"
    assert span_dtype(span("dp_comm", "all_gather"), "bf16", "fp32") == "bf16"  # parameters
    assert span_dtype(span("tp_comm", "all_reduce"), "bf16", "fp32") == "bf16"  # activations
    assert span_dtype(span("dp_comm", "all_reduce", dtype="fp16"), "bf16", "fp32") == "fp16"
    assert span_dtype(span("dp_comm", "all_reduce"), "bf16") == "bf16"


def test_engine_send_recv_gets_one_flow_pair_per_transfer() -> None:
    from simtrain.engine.sim import execute
    from simtrain.hardware.topology import ClusterConfig, build_cluster

    cluster = build_cluster(ClusterConfig(preset="dgx-a100", nodes=1))
    g = TaskGraph(num_ranks=cluster.num_gpus)
    prev = None
    for mb in range(3):
        f = g.compute(0, f"fwd s0 mb{mb}", 1e-3, kind="forward", deps=[prev] if prev else [])
        p2p = g.send_recv(0, 4, 8 * 2**20, f"act mb{mb}", kind="pp_comm", stream="pp",
                          deps=[f])
        prev = g.compute(4, f"fwd s1 mb{mb}", 1e-3, kind="forward", deps=[p2p])
    tl = execute(g, cluster)
    events = chrome_trace(tl, graph=g, server_of=cluster.server_of)["traceEvents"]
    starts = sorted((e for e in events if e["ph"] == "s"), key=lambda e: e["id"])
    ends = sorted((e for e in events if e["ph"] == "f"), key=lambda e: e["id"])
    assert [e["id"] for e in starts] == [e["id"] for e in ends] == [1, 2, 3]
    assert {e["pid"] for e in starts} == {0} and {e["pid"] for e in ends} == {4}
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert procs == {0: "node0/gpu0", 4: "node0/gpu4"}

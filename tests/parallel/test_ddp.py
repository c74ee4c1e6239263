"""DDP bucketing and its overlap with backward, on small scenarios."""

from __future__ import annotations

import pytest

from simtrain import SimulationDeadlock, load_scenario, simulate
from simtrain.engine.timeline import COMPUTE_KINDS, merge_intervals
from simtrain.parallel.ddp import assign_buckets
from simtrain.workload.model import Param


def _scenario(compute=None, **ddp):
    return load_scenario({
        "name": "ddp-test",
        "cluster": {"preset": "dgx-a100", "nodes": 2},
        "model": {"preset": "gpt2-small"},
        "training": {"global_batch_size": 32, "micro_batch_size": 2, "seq_len": 1024},
        "parallelism": {"ddp": ddp},
        "compute": compute or {},
    })


def test_buckets_follow_pytorch_reducer_by_hand():
    # numel a=100, b=200, c=300, d=400 at 4 B: 400, 800, 1200, 1600 bytes. Reverse order
    # d, c, b, a. First cap 1000: d (1600 >= 1000) closes bucket 0. Cap 2000: c (1200) + b
    # (800) = 2000 >= 2000 closes bucket 1. a (400) is left in bucket 2.
    params = [Param(n, k) for n, k in (("a", 100), ("b", 200), ("c", 300), ("d", 400))]
    buckets = assign_buckets(params, 4, first_cap=1000, cap=2000)
    assert [[p.name for p in b.params] for b in buckets] == [["d"], ["c", "b"], ["a"]]
    assert [b.nbytes for b in buckets] == [1600, 2000, 400]


def test_bucket_bytes_conserved():
    result = simulate(_scenario())
    params = result.summary["parameters"]
    ar = [s for s in result.timeline.for_rank(0) if s.kind == "dp_comm"]
    assert sum(s.bytes for s in ar) == params * 4  # fp32 gradients, every parameter once


def _rank0(result):
    spans = result.timeline.for_rank(0)
    compute = sum(e - s for s, e in merge_intervals(
        (sp.start, sp.end) for sp in spans if sp.kind in COMPUTE_KINDS))
    comm = [sp for sp in spans if sp.kind == "dp_comm"]
    return compute, comm


def test_without_overlap_step_is_compute_plus_all_reduces():
    result = simulate(_scenario(overlap=False))
    compute, comm = _rank0(result)
    comm_total = sum(s.duration for s in comm)
    # ... plus the time the GPU waits for the host to issue the first kernels (host spans).
    host = result.summary["host_s"]
    assert result.summary["step_time_s"] == pytest.approx(compute + comm_total + host,
                                                          rel=0.01)
    assert result.summary["exposed_comm_s"] == pytest.approx(result.summary["comm_s"], rel=1e-9)


def test_overlap_hides_communication_and_is_faster():
    # Interference off: with it, the overlapped all-reduces slow the backward beside them.
    quiet = {"comm_interference": 0}
    on = simulate(_scenario(quiet, overlap=True)).summary
    off = simulate(_scenario(quiet, overlap=False)).summary
    assert on["exposed_comm_s"] < on["comm_s"]
    assert on["step_time_s"] < off["step_time_s"]
    # Same work either way: compute and bytes moved do not depend on overlap.
    assert on["compute_s"] == pytest.approx(off["compute_s"], rel=1e-9)
    assert on["comm_bytes_per_gpu"] == off["comm_bytes_per_gpu"]


def test_all_reduces_run_in_bucket_order_during_backward():
    result = simulate(_scenario())
    spans = result.timeline.for_rank(0)
    ar = sorted((s for s in spans if s.kind == "dp_comm"), key=lambda s: s.start)
    assert [s.meta["bucket"] for s in ar] == list(range(len(ar)))
    last_backward_end = max(s.end for s in spans if s.kind == "backward")
    assert ar[0].start < last_backward_end  # overlaps backward
    optimizer = next(s for s in spans if s.kind == "optimizer")
    assert optimizer.start >= ar[-1].end


def test_gradient_accumulation_all_reduces_only_on_the_last_microbatch():
    # 32 sequences / (16 GPUs x 1 per microbatch) = 2 microbatches: no_sync on the first.
    scenario = load_scenario({
        "cluster": {"preset": "dgx-a100", "nodes": 2},
        "model": {"preset": "gpt2-small"},
        "training": {"global_batch_size": 32, "micro_batch_size": 1, "seq_len": 512},
    })
    result = simulate(scenario)
    spans = result.timeline.for_rank(0)
    assert result.summary["micro_batches"] == 2
    first_mb_end = max(s.end for s in spans if s.kind == "backward" and s.meta["microbatch"] == 0)
    ar = [s for s in spans if s.kind == "dp_comm"]
    assert ar and all(s.start >= first_mb_end for s in ar)


def test_larger_buckets_mean_fewer_all_reduces():
    small = simulate(_scenario(bucket_cap_mb=1)).graph.tasks
    large = simulate(_scenario(bucket_cap_mb=1000)).graph.tasks
    count = lambda tasks: sum(1 for t in tasks if t.kind == "dp_comm")  # noqa: E731
    assert count(large) == 2  # the 1 MiB first bucket, then everything else
    assert count(small) > count(large)


def test_same_scenario_twice_gives_identical_timelines():
    assert simulate(_scenario()).timeline.signature() == simulate(_scenario()).timeline.signature()


def test_hung_rank_blocks_the_first_bucket_and_is_named():
    scenario = load_scenario({
        "cluster": {"preset": "dgx-a100", "nodes": 1},
        "model": {"preset": "tiny-gpt"},
        "training": {"global_batch_size": 8},
        "sim": {"hangs": {3: "0us"}},
    })
    with pytest.raises(SimulationDeadlock, match="ddp bucket 0.*rank 3"):
        simulate(scenario)

"""Host issue cost: the flow shop of a host issuing kernels and a GPU running them."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph
from simtrain.simulate import simulate
from simtrain.workload.host import (
    LAUNCH_BOUND_SHARE,
    host_summary,
    issue_bound_makespan,
    issue_times,
)


def test_issue_bound_makespan_by_hand() -> None:
    # Long kernels (10 s each, issued every 1 s): the first waits 1 s, then back to back.
    assert issue_bound_makespan([10.0, 10.0, 10.0], 1.0) == 31.0
    # Short kernels (1 s, issued every 10 s): the host sets the pace, 3·10 + 1.
    assert issue_bound_makespan([1.0, 1.0, 1.0], 10.0) == 31.0
    # Mixed, c = 3: k1 3 + 5 = 8; k2 max(6, 8) + 1 = 9; k3 max(9, 9) + 1 = 10.
    assert issue_bound_makespan([5.0, 1.0, 1.0], 3.0) == 10.0
    assert issue_bound_makespan([], 3.0) == 0.0


def test_issue_times_by_hand() -> None:
    # c = 10 us per kernel, 100 us per microbatch step. a (mb 0, 2 kernels): h = 100 us,
    # first 110 us, last 120 us; b (same step): 130 us; c (mb 1): +100 us -> 240 us;
    # the optimizer follows a host-GPU sync: no issue time for it or after it.
    g = TaskGraph(1)
    a = g.compute(0, "a", 1e-3, kind="forward", meta={"microbatch": 0, "chunk": 0,
                                                      "kernels": 2})
    b = g.compute(0, "b", 1e-3, kind="forward", meta={"microbatch": 0, "chunk": 0})
    c = g.compute(0, "c", 1e-3, kind="forward", meta={"microbatch": 1, "chunk": 0})
    d = g.compute(0, "opt", 1e-3, kind="optimizer")
    e = g.compute(0, "after", 1e-3, kind="compute")
    times = issue_times(g, 10e-6, 100e-6)
    assert times[(a, 0)] == pytest.approx((110e-6, 120e-6))
    assert times[(b, 0)] == pytest.approx((130e-6, 130e-6))
    assert times[(c, 0)] == pytest.approx((240e-6, 240e-6))
    assert (d, 0) not in times and (e, 0) not in times
    assert issue_times(g, 0.0, 0.0) == {}
    with pytest.raises(ValueError, match=">= 0"):
        issue_times(g, -1.0, 0.0)


def test_engine_waits_for_the_host(star_fabric) -> None:
    # A 2-kernel task of 10 us whose kernels are issued at 100 us and 200 us: it starts at
    # 100 us, its work ends at 110 us, and its last kernel (5 us) cannot end before
    # 200 + 5 us. The GPU waited 100 us (before) + 95 us (inside) for the host.
    g = TaskGraph(1)
    t = g.compute(0, "k", 10e-6, meta={"kernels": 2})
    tl = execute(g, star_fabric(1, 1.0, 0.0), issue={(t, 0): (100e-6, 200e-6)})
    assert tl.end == pytest.approx(205e-6)
    host = sum(s.end - s.start for s in tl if s.kind == "host")
    assert host == pytest.approx(195e-6)


def test_host_summary_flags_launch_bound_steps() -> None:
    assert host_summary(0.01, 1.0) == {"host_s": 0.01, "host_share": 0.01,
                                       "launch_bound": False}
    flagged = host_summary(0.5, 1.0)
    assert flagged["launch_bound"] and "launch-bound" in flagged["notes"][0]


def _gpt2(preset: str, mb: int, seq: int, batch: int) -> dict:
    return {"name": "host", "cluster": {"preset": preset, "nodes": 1},
            "model": {"preset": "gpt2-small"},
            "training": {"global_batch_size": batch, "micro_batch_size": mb, "seq_len": seq},
            "parallelism": {"ddp": {"bucket_cap_mb": 25, "overlap": True}}}


def test_quickstart_is_faster_on_h100_than_a100() -> None:
    # Issue #12: with the fitted 0.141 s per-step host span, the quickstart (GPT-2 small,
    # 64 x 1024 tokens, DDP on 8 GPUs) took 160 ms on dgx-h100 against 44.8 ms on A100.
    a100 = simulate(_gpt2("dgx-a100", 8, 1024, 64)).summary
    h100 = simulate(_gpt2("dgx-h100", 8, 1024, 64)).summary
    assert h100["step_time_s"] < 0.6 * a100["step_time_s"]
    # Kernels of 8k-token GEMMs are long: the host stays ahead of the GPU.
    for s in (a100, h100):
        assert s["host_share"] < LAUNCH_BOUND_SHARE and not s["launch_bound"]


def test_tiny_kernels_are_launch_bound_and_the_summary_says_so() -> None:
    # One 128-token sequence per GPU: every kernel runs a few microseconds, less than the
    # 8 us the host needs to issue it.
    s = simulate(_gpt2("dgx-h100", 1, 128, 8)).summary
    assert s["launch_bound"] and s["host_share"] > LAUNCH_BOUND_SHARE
    assert any("launch-bound" in n for n in s["notes"])


_PRESETS = ("dgx-a100", "dgx-h100", "dgx-b200")


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mb=st.sampled_from([1, 2, 4]), seq=st.sampled_from([128, 256, 512]),
       tp=st.sampled_from([1, 2]), micro=st.sampled_from([1, 2]))
def test_newer_gpus_run_the_same_job_faster(mb: int, seq: int, tp: int, micro: int) -> None:
    # All else equal (model, batch, plan, 8 GPUs of one server), A100 > H100 > B200 in step
    # time: every host cost is the same and every GPU rate is higher.
    steps = []
    for preset in _PRESETS:
        body = {"name": "order", "cluster": {"preset": preset, "nodes": 1},
                "model": {"preset": "tiny-gpt"},
                "training": {"global_batch_size": 8 // tp * mb * micro,
                             "micro_batch_size": mb, "seq_len": seq},
                "parallelism": {"tp": tp, "sp": tp > 1}}
        steps.append(simulate(body).summary["step_time_s"])
    assert steps[0] > steps[1] > steps[2]


def _loop_issue_times(g: TaskGraph, c: float, mb_s: float) -> dict[tuple[int, int], tuple]:
    """The docstring's rules as a plain loop per rank: the reference for the columns."""
    out: dict[tuple[int, int], tuple] = {}
    for r in range(g.num_ranks):
        h, last_key = 0.0, None
        for t in range(len(g)):
            if r not in g.ranks(t):
                continue
            kind, meta = g.kinds[g.kind[t]], g.meta_of(t)
            if kind == "optimizer":
                break
            mb = meta.get("microbatch")
            key = None if mb is None else (mb, meta.get("chunk"), kind == "forward")
            h += mb_s if key is not None and key != last_key else 0.0
            last_key = key if key is not None else last_key
            first = h + c
            h += int(meta.get("kernels", 1)) * c
            out[(t, r)] = (first, h)
    return out


_tasks = st.lists(st.tuples(st.sampled_from(["forward", "backward", "optimizer", "comm"]),
                            st.integers(0, 2), st.sampled_from([None, 0, 1, 2]),
                            st.integers(1, 3), st.integers(0, 1)), max_size=25)


@settings(max_examples=40, deadline=None)
@given(_tasks, st.sampled_from([1, 2, 1 << 18]))
def test_issue_times_equal_a_loop_per_rank(tasks: list[tuple], block: int) -> None:
    # Random programs on 3 ranks (collectives over two of them), cut into blocks of ranks
    # as small as one member: the same floats as the loop, NaN where it gives none.
    import simtrain.workload.host as host

    g = TaskGraph(3)
    for kind, rank, mb, kernels, chunk in tasks:
        meta = {"kernels": kernels} if mb is None else {"microbatch": mb, "chunk": chunk,
                                                        "kernels": kernels}
        if kind == "comm":
            g.collective("all_reduce", (rank, (rank + 1) % 3), 8.0, "ar", kind="dp_comm",
                         meta=meta)
        else:
            g.compute(rank, kind, 1e-3, kind=kind, meta=meta)
    old = host.ISSUE_BLOCK
    host.ISSUE_BLOCK = block
    try:
        got = issue_times(g, 7e-6, 130e-6)
    finally:
        host.ISSUE_BLOCK = old
    want = _loop_issue_times(g, 7e-6, 130e-6)
    assert dict(got.items()) == want and len(got) == len(want)

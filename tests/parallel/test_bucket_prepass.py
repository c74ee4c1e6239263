"""Megatron-Core's per-bucket NaN check and 1/dp scaling before each DP collective."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simtrain import load_scenario, simulate
from simtrain.hardware.gpus import get_gpu
from simtrain.parallel.bucket_prepass import prepass_timer
from simtrain.parallel.ddp import DDPConfig, prepass_bytes
from simtrain.workload.compute import ComputeConfig


def test_prepass_bytes_by_hand():
    # A 40M-gradient fp32 bucket (Megatron-Core's default bucket size): the norm reads
    # 40e6 x 4 = 160 MB, the scaling reads and writes it, 320 MB.
    assert prepass_bytes(40_000_000, 4, nan_check=True, prescale=True) == (160e6, 320e6)
    assert prepass_bytes(40_000_000, 4, nan_check=False, prescale=True) == (320e6,)
    assert prepass_bytes(40_000_000, 4, nan_check=False, prescale=False) == ()
    with pytest.raises(ValueError, match="grad_bytes > 0"):
        prepass_bytes(10, 0, nan_check=True, prescale=True)


def test_prepass_seconds_on_h100_by_hand():
    # H100 SXM: 3.35 TB/s x 0.85 = 2.8475 TB/s. Norm 160 MB: 56.19 us + 3 us launch;
    # scaling 320 MB: 112.38 us + 3 us; the NaN test's host sync: one 8 us kernel issue.
    # 56.19 + 3 + 112.38 + 3 + 8 = 182.57 us.
    ddp = DDPConfig(check_for_nan_in_grad=True, prescale=True)
    seconds = prepass_timer(ddp, ComputeConfig(), get_gpu("h100-sxm"))
    assert seconds is not None
    assert seconds(40_000_000) == pytest.approx(182.57e-6, rel=1e-4)
    assert prepass_timer(DDPConfig(), ComputeConfig(), get_gpu("h100-sxm")) is None


def _scenario(tp: int = 1, **ddp: object):
    return load_scenario({
        "name": "prepass-test",
        "cluster": {"preset": "dgx-h100", "nodes": 1},
        "model": {"preset": "gpt2-small"},
        "training": {"global_batch_size": 16, "micro_batch_size": 2, "seq_len": 1024},
        "parallelism": {"tp": tp, "sp": tp > 1, "tp_comm_overlap": tp > 1, "zero": 1,
                        "ddp": {"bucket_cap_mb": 40, **ddp}},
        "sim": {"granularity": "layer"},
        # the bound below (the step grows by at most the passes) holds without interference:
        # a pass that moves a TP reduce-scatter against compute changes what it slows
        "compute": {"comm_interference": 0},
    })


@pytest.mark.parametrize("tp", [1, 2])
def test_every_bucket_runs_its_passes_before_its_reduce_scatter(tp: int):
    on = simulate(_scenario(tp, check_for_nan_in_grad=True, prescale=True))
    off = simulate(_scenario(tp))
    spans = on.timeline.for_rank(0)
    passes = sorted((s for s in spans if s.name.endswith("prepass")), key=lambda s: s.start)
    scatters = sorted((s for s in spans if s.name.startswith("zero rs")),
                      key=lambda s: s.start)
    assert passes and len(passes) == len(scatters)
    # bucket i's reduce-scatter starts after its passes end (the DP stream is FIFO)
    by_bucket = {s.name.split()[2]: s for s in passes}
    for rs in scatters:
        assert rs.start >= by_bucket[rs.name.split()[2]].end - 1e-12
    # compute-stream time: the step grows by at most the passes' time (the collectives
    # were already hidden) and at least part of it
    added = sum(s.duration for s in passes)
    grown = on.summary["step_time_s"] - off.summary["step_time_s"]
    assert 0.0 < grown <= added * (1 + 1e-6)


@given(numel=st.integers(0, 10**10), grad_bytes=st.sampled_from([2, 4]),
       nan_check=st.booleans(), prescale=st.booleans())
def test_prepass_moves_the_bucket_once_per_read_and_write(numel, grad_bytes, nan_check,
                                                          prescale):
    # the norm reads the bucket once, the scaling reads and writes it: 1 and 2 passes
    total = sum(prepass_bytes(numel, grad_bytes, nan_check=nan_check, prescale=prescale))
    assert total == numel * grad_bytes * (int(nan_check) + 2 * int(prescale))

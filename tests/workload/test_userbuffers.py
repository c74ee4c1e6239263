"""TE userbuffers' SM counts: what a pipelined TP collective takes from the GEMMs beside it."""

from __future__ import annotations

import pytest

from simtrain import load_scenario, simulate
from simtrain.workload.interference import Interference
from simtrain.workload.userbuffers import UB_COMM_SMS, userbuffers_sms

H100 = Interference(num_sms=132, channels=32, sms_per_channel=1.0,
                    hbm_bandwidth=3.35e12 * 0.85, gemm_rate=989.4e12 * 0.8)


def test_te_defaults_ring_exchange_one_sm_pipeline_and_bulk_sixteen() -> None:
    # TE 1.9 initialize_ub get_default_config: ring_exchange num_sm 1 (copy engine),
    # pipeline / bulk num_sm 16.
    assert userbuffers_sms("all_gather") == 1
    assert userbuffers_sms("reduce_scatter") == 16
    assert set(UB_COMM_SMS) == {"all_gather", "reduce_scatter"}
    with pytest.raises(ValueError, match="all_reduce"):
        userbuffers_sms("all_reduce")


def test_own_sm_count_replaces_nccl_channels_and_keeps_hbm_by_hand() -> None:
    # A 64 MiB ring reduce-scatter over 8 ranks in 0.1 ms: NCCL would run it on all 32
    # channels (64 MiB >= 32 x 512 x 64 B x 8), s = 32/132; userbuffers' 16 SMs: 16/132 =
    # 0.121212; the copy engine's ring exchange 1/132 = 0.007576. HBM: bus bytes 64 MiB x
    # 7/8 / 0.1 ms = 587.2 GB/s, x 3 (reducing) / 2.8475 TB/s = 0.6187, the same either way.
    nccl = H100.load("reduce_scatter", 64 * 2**20, 8, "Simple", "ring", 1e-4)
    ub = H100.load("reduce_scatter", 64 * 2**20, 8, "Simple", "ring", 1e-4, sms=16)
    ring = H100.load("all_gather", 64 * 2**20, 8, "Simple", "ring", 1e-4, sms=1)
    assert nccl[0] == pytest.approx(32 / 132)
    assert ub[0] == pytest.approx(0.121212, rel=1e-5)
    assert ring[0] == pytest.approx(0.007576, rel=1e-3)
    assert ub[1] == nccl[1] == pytest.approx(3 * 64 * 2**20 * 7 / 8 / 1e-4 / 2.8475e12)
    # more SMs than the GPU has: all of them (the rate's MAX_SHARE cap applies later)
    assert H100.load("all_gather", 2**20, 8, "Simple", "ring", 1e-4, sms=500)[0] == 1.0


def _tp_overlap(impl: str):
    return load_scenario({
        "cluster": {"preset": "dgx-h100", "nodes": 1},
        "model": {"preset": "tiny-gpt"},
        "training": {"global_batch_size": 8, "micro_batch_size": 2, "seq_len": 256},
        "parallelism": {"tp": 2, "sp": True, "tp_comm_overlap": True,
                        "tp_comm_overlap_impl": impl},
        "sim": {"granularity": "layer"},
    })


@pytest.mark.parametrize(("impl", "ag", "rs"), [("userbuffers", 1, 16), ("symm_mem", 0, 0)])
def test_pipelined_pieces_carry_the_implementations_sms(impl: str, ag: int, rs: int) -> None:
    graph = simulate(_tp_overlap(impl)).graph
    pieces = [i for i, t in enumerate(graph.tasks) if t.meta.get("tp_overlap_chunks")
              and t.kind == "tp_comm"]
    assert pieces
    specs = {graph.comm_spec(i).op: set() for i in pieces}  # type: ignore[union-attr]
    for i in pieces:
        spec = graph.comm_spec(i)
        assert spec is not None
        specs[spec.op].add(spec.sms)
    # every userbuffers all-gather piece is a ring exchange, every reduce-scatter 16 SMs;
    # PyTorch's symmetric-memory pieces keep NCCL's channels (0)
    assert specs == {"all_gather": {ag}, "reduce_scatter": {rs}}

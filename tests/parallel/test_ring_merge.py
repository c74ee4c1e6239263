"""PyTorch ring attention's merge and accumulation kernels (ring_merge.py)."""

from __future__ import annotations

import pytest

from simtrain import load_scenario, simulate
from simtrain.parallel.ring_merge import backward_merge_bytes, forward_merge_bytes
from simtrain.parallel.shard import Ring, ShardSpec, block_unit
from simtrain.workload.model import ModelConfig


def test_merge_bytes_by_hand():
    # E = 100 output elements, E_kv = 50, 4 ring steps.
    # Forward: 100·(6 + 32.5·3 + 6) + 50·4·3 = 100·109.5 + 600 = 11,550.
    assert forward_merge_bytes(100, 50, 4) == pytest.approx(11_550)
    # Backward: 100·(4 + 11.5·4 + 6) + 50·(4 + 19.5·4 + 4·3 + 6) = 5,600 + 5,000 = 10,600.
    assert backward_merge_bytes(100, 50, 4) == pytest.approx(10_600)
    # One step (no ring): the casts and accumulators only.
    assert forward_merge_bytes(100, 50, 1) == pytest.approx(1_200)


CFG = ModelConfig(name="t", family="llama", num_layers=1, hidden_size=256, num_heads=4,
                  num_kv_heads=2, ffn_hidden_size=512, vocab_size=1000, max_seq_len=256,
                  activation="swiglu")


def test_only_pytorchs_ring_carries_merges():
    # b = 2, s = 256, cp = 4: 128 tokens per rank; output 128·256 = 32,768 elements (bf16
    # 65,536 B), K,V 2·128·(2·64) = 32,768 elements. Forward: 32,768·(12 + 32.5·3) +
    # 32,768·4·3 = 3,981,312 B.
    def ring(torch_ring: bool) -> Ring:
        unit = block_unit(CFG, 0, 2, 256, 2, ShardSpec(cp=4, torch_ring=torch_ring))
        return next(s for s in unit.steps if isinstance(s, Ring))

    assert ring(False).merge_bytes == (0.0, 0.0)
    fwd, bwd = ring(True).merge_bytes
    assert fwd == pytest.approx(3_981_312)
    assert bwd == pytest.approx(backward_merge_bytes(32_768, 32_768, 4))


def test_fa2_rings_take_longer():
    def step(impl: str) -> float:
        return simulate(load_scenario({
            "cluster": {"preset": "dgx-a100", "nodes": 1}, "model": {"preset": "tiny-gpt"},
            "training": {"global_batch_size": 4, "micro_batch_size": 2, "seq_len": 512},
            "parallelism": {"cp": 4},
            "compute": {"attention_impl": impl, "attention_efficiency": 0.6,
                        "host_kernel_issue": 0, "host_microbatch": 0}})
        ).summary["step_time_s"]

    assert step("fa2") > step("default")

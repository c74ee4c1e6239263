"""torchtitan's per-op checkpointing (``recompute: op``): what is recomputed and saved."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.parallel.op_checkpoint import linears, recomputed_steps
from simtrain.parallel.shard import Comm, Compute, ShardSpec, block_unit
from simtrain.workload.memory import layer_activation_bytes, op_checkpoint_widths
from simtrain.workload.model import ModelConfig
from simtrain.workload.ops import gemm

LLAMA = {"family": "llama", "activation": "swiglu", "norm": "rmsnorm", "bias": False,
         "position_embedding": "rope", "dropout_masks": False, "vocab_size": 100,
         "max_seq_len": 64}


def _cfg(h=64, heads=4, kv=2, ffn=128, **extra) -> ModelConfig:
    return ModelConfig(num_layers=1, hidden_size=h, num_heads=heads, num_kv_heads=kv,
                       ffn_hidden_size=ffn, **{**LLAMA, **extra})


def test_linears_split_a_fused_gemm_by_its_parts():
    op = gemm("qkv", 4, 12, 8, 2, False, 0.0)
    from dataclasses import replace
    q, k, v = linears(replace(op, parts=(8, 2, 2)))
    # q: 2·m·w·k = 2·4·8·8 = 512 FLOPs, 2·(m·k + w·k + m·w) = 2·(32 + 64 + 32) = 256 B;
    # k and v: 2·4·2·8 = 128 FLOPs, 2·(32 + 16 + 8) = 112 B.
    assert (q.flops, q.bytes, q.gemm_shape) == (512.0, 256.0, (4, 8, 8))
    assert (k.flops, k.bytes, v.gemm_shape) == (128.0, 112.0, (4, 2, 8))
    assert linears(op) == [op]  # no parts: one linear
    with pytest.raises(ValueError, match="do not sum"):
        linears(replace(op, parts=(8, 2)))


def test_llama_block_recomputes_wk_wo_w3_and_every_memory_bound_kernel():
    cfg = _cfg()  # h 64, 4 heads of 16, 2 KV heads: q 64, kv 32, f 128
    unit = block_unit(cfg, 0, 1, 16, 2, ShardSpec())
    redo = recomputed_steps(unit.steps)
    mm = [s.op for s in redo if isinstance(s, Compute) and s.op.kind == "gemm"]
    # m = 16 tokens: wk 2·16·32·64 = 65536, wo 2·16·64·64 = 131072, w3 2·16·128·64 = 262144.
    assert [op.flops for op in mm] == [65536.0, 131072.0, 262144.0]
    names = {s.op.name for s in redo if isinstance(s, Compute)}
    assert not any(n.endswith(".attn.core") for n in names)  # SDPA saved
    for kernel in ("input_norm", "attn.rope", "attn.residual", "post_attn_norm", "mlp.act",
                   "mlp.residual"):
        assert f"layers.0.{kernel}" in names
    assert all(s.op.params == () for s in redo if isinstance(s, Compute))


def test_sequence_parallel_reruns_the_all_gathers_not_the_reduce_scatters():
    unit = block_unit(_cfg(), 0, 1, 16, 2, ShardSpec(tp=2, sp=True))
    comms = [s for s in recomputed_steps(unit.steps) if isinstance(s, Comm)]
    assert [c.fwd for c in comms] == ["all_gather", "all_gather"]


def test_moe_experts_recompute_whole_and_the_router_counts_as_an_mm():
    cfg = _cfg(num_experts=4, experts_per_token=2, moe_ffn_hidden_size=32)
    unit = block_unit(cfg, 0, 1, 16, 2, ShardSpec())
    redo = [s.op for s in recomputed_steps(unit.steps) if isinstance(s, Compute)]
    # mm order: wq 1, wk 2, wv 3, wo 4, router 5 (saved); grouped experts are not aten.mm.
    assert [op.name for op in redo if op.kind == "gemm" and op.role is None] == [
        "layers.0.attn.qkv.part1", "layers.0.attn.proj"]
    assert {op.name for op in redo if op.role == "expert"} >= {
        "layers.0.mlp.fc1", "layers.0.mlp.fc2"}


def test_saved_widths_and_bytes_of_llama3_8b_by_hand():
    # wq 4096 + wv 1024 + w1 14336 + SDPA out 4096 = 23552 (1/t); w2's partial sum 4096.
    assert op_checkpoint_widths(4096, 1024, 4096, 14336, True) == (23552, 4096)
    cfg = ModelConfig.from_preset("llama3-8b")
    # 2 B·8192·(23552 + 4096 + 4096 block input) + 4 B·32 heads·8192 (logsumexp)
    # = 520,093,696 + 1,048,576.
    got = layer_activation_bytes(cfg, 1, 8192, recompute="op")
    assert got == pytest.approx(521_142_272)
    # TP 8 + SP: 2·8192·(23552/8 + 4096 + 3·4096/8) + 4·4·8192 = 2·8192·8576 + 131072.
    assert layer_activation_bytes(cfg, 1, 8192, tp=8, sp=True, recompute="op") == (
        pytest.approx(2 * 8192 * 8576 + 131072))


@settings(max_examples=40, deadline=None)
@given(kv=st.sampled_from([1, 2, 4]), ffn=st.integers(1, 8).map(lambda x: 32 * x),
       tp=st.sampled_from([1, 2]), swiglu=st.booleans())
def test_op_sits_between_no_recompute_and_full(kv, ffn, tp, swiglu):
    cfg = _cfg(kv=kv, ffn=ffn, activation="swiglu" if swiglu else "gelu")
    kw = {"tp": tp, "sp": tp > 1}
    full, op, none = (layer_activation_bytes(cfg, 2, 64, recompute=r, **kw)
                      for r in ("full", "op", "none"))
    assert full <= op <= none
    unit = block_unit(cfg, 0, 2, 64, 2, ShardSpec(tp=tp, sp=tp > 1))
    fwd = sum(s.op.flops for s in unit.steps if isinstance(s, Compute)
              and s.op.kind == "gemm")
    redo = sum(s.op.flops for s in recomputed_steps(unit.steps) if isinstance(s, Compute)
               and s.op.kind == "gemm")
    assert 0 < redo < fwd  # some mm's recomputed, never the whole forward


def test_simulated_step_orders_none_op_full():
    from simtrain import load_scenario, simulate

    def step(recompute: str) -> float:
        s = load_scenario({
            "cluster": {"preset": "dgx-a100", "nodes": 1},
            "model": {"preset": "tiny-moe"},
            "training": {"global_batch_size": 8, "micro_batch_size": 2, "seq_len": 256},
            "parallelism": {"tp": 2, "sp": True, "recompute": recompute},
            "compute": {"comm_interference": 0}})
        return simulate(s).summary["step_time_s"]

    none, op, full = step("none"), step("op"), step("full")
    assert none < op < full


def test_cudnn_attention_is_recomputed_once_and_its_output_not_saved():
    # torchtitan's save list names the flash and efficient SDPA ops, not the cuDNN one.
    unit = block_unit(_cfg(), 0, 1, 16, 2, ShardSpec())
    saved = recomputed_steps(unit.steps)
    redo = recomputed_steps(unit.steps, attention_saved=False)
    extra = [s.op for s in redo if s not in saved]
    assert [op.kind for op in extra] == ["attention"] and extra[0].params == ()
    assert len(redo) == len(saved) + 1
    cfg = ModelConfig.from_preset("llama3-8b")
    # Not kept: the SDPA output 2 B·8192·4096 = 67,108,864 and its fp32 logsumexp
    # 4 B·32 heads·8192 = 1,048,576: 521,142,272 - 68,157,440 = 452,984,832.
    assert layer_activation_bytes(cfg, 1, 8192, recompute="op", attention_saved=False) == (
        pytest.approx(452_984_832))
    # Only per-op checkpointing reads the flag.
    assert layer_activation_bytes(cfg, 1, 8192, attention_saved=False) == (
        layer_activation_bytes(cfg, 1, 8192))


def test_cudnn_attention_costs_time_only_under_per_op_checkpointing():
    from simtrain import load_scenario, simulate

    def step(recompute: str, impl: str) -> float:
        s = load_scenario({
            "cluster": {"preset": "dgx-b200", "nodes": 1, "gpus_per_node": 1},
            "model": {"preset": "tiny-moe"},
            "training": {"global_batch_size": 2, "micro_batch_size": 2, "seq_len": 256},
            "parallelism": {"recompute": recompute},
            "compute": {"attention_impl": impl}})
        return simulate(s).summary["step_time_s"]

    assert step("none", "cudnn") == step("none", "default")  # same kernel rate
    assert step("op", "cudnn") > step("op", "default")  # its forward re-run

"""Tests for separate linears (compute.linears) and GQA's repeated K/V (model.gqa)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from simtrain.workload.compute import ComputeConfig, op_time
from simtrain.workload.fp8 import fp8_op_time
from simtrain.workload.layers import Shard, block
from simtrain.workload.linears import separate_gemms, separate_kernels, summed_gradient
from simtrain.workload.model import ModelConfig, Op, backward_ops
from simtrain.workload.ops import gemm, repeat_kv


@dataclass(frozen=True)
class FakeGPU:
    """Round numbers: 1 PFLOP/s at every dtype, 1 TB/s, 100 SMs."""

    hbm_bandwidth: float = 1e12
    num_sms: int = 100
    arch: str = "hopper"

    def flops(self, dtype: str) -> float:
        return 1e15


# No ceiling and no fill latency: a GEMM's efficiency is its tile x wave quantisation.
CFG = ComputeConfig(gemm_efficiency=1.0, fp8_gemm_efficiency=1.0, tile_fill_latency=0.0,
                    memory_efficiency=1.0, launch_overhead=1e-6)
SEPARATE = CFG.model_copy(update={"linears": "separate"})


def qkv(m: int = 8192, q: int = 4096, kv: int = 1024, h: int = 4096) -> Op:
    """Llama 3 8B's fused QKV on one rank: (m, q + 2kv, h) with parts (q, kv, kv)."""
    return replace(gemm("layers.0.attn.qkv", m, q + 2 * kv, h, 2, False, 2.0 * m * h),
                   parts=(q, kv, kv))


def test_forward_splits_output_features() -> None:
    pieces = separate_gemms(qkv())
    assert [p.gemm_shape for p in pieces] == [(8192, 4096, 4096), (8192, 1024, 4096),
                                             (8192, 1024, 4096)]
    # wq: 2·8192·4096·4096 = 274,877,906,944 FLOPs; 2·(8192·4096 + 4096·4096 + 8192·4096)
    # = 2·(33,554,432 + 16,777,216 + 33,554,432) = 167,772,160 bytes.
    assert pieces[0].flops == 274_877_906_944
    assert pieces[0].bytes == 167_772_160
    assert sum(p.flops for p in pieces) == qkv().flops  # the same FLOPs, split
    assert all(p.params == () for p in pieces)


def test_backward_splits_reduction_and_rows() -> None:
    dgrad, wgrad = backward_ops(qkv())
    assert dgrad.parts == wgrad.parts == (4096, 1024, 1024)
    assert [p.gemm_shape for p in separate_gemms(dgrad)] == [
        (8192, 4096, 4096), (8192, 4096, 1024), (8192, 4096, 1024)]
    assert [p.gemm_shape for p in separate_gemms(wgrad)] == [
        (4096, 4096, 8192), (1024, 4096, 8192), (1024, 4096, 8192)]
    # Three m x k = 8192 x 4096 gradients of 2 B summed: read 3, write 1:
    # 2 · 4 · 33,554,432 = 268,435,456 bytes; the wgrad has no sum.
    total = summed_gradient(dgrad)
    assert total is not None and total.bytes == 268_435_456
    assert summed_gradient(wgrad) is None and summed_gradient(qkv()) is None
    assert len(separate_kernels(dgrad)) == 4


def test_op_without_parts_is_itself() -> None:
    op = gemm("layers.0.attn.proj", 8192, 4096, 4096, 2, False, 0.0)
    assert separate_kernels(op) == [op]
    assert op_time(op, FakeGPU(), SEPARATE) == op_time(op, FakeGPU(), CFG)


def test_parts_must_cover_the_split_axis() -> None:
    with pytest.raises(ValueError, match="do not sum"):
        separate_gemms(replace(qkv(), parts=(4096, 1024)))


def test_separate_linears_pay_waves_and_launches() -> None:
    # (m, n, k) = (256, 384, 1024) with parts (256, 128) on 100 SMs, 128 x 128 tiles.
    # Fused: 2 x 3 = 6 tiles, wave efficiency 6/100; 2·256·384·1024 = 201,326,592 FLOPs
    # at 1e15 · 0.06 = 3.3554 us (bytes 2·(262,144 + 393,216 + 98,304) = 1.51 MB: 1.51
    # us), + 1 us launch = 4.3554 us. Separate: (256, 256, 1024), 4 tiles: 134,217,728 /
    # (1e15 · 0.04) = 3.3554 us; (256, 128, 1024), 2 tiles: 67,108,864 / (1e15 · 0.02) =
    # 3.3554 us; + 2 launches = 8.7109 us.
    op = replace(gemm("x.attn.qkv", 256, 384, 1024, 2, False, 0.0), parts=(256, 128))
    assert op_time(op, FakeGPU(), CFG) == pytest.approx(4.3554e-6, rel=1e-4)
    assert op_time(op, FakeGPU(), SEPARATE) == pytest.approx(8.7109e-6, rel=1e-4)


def test_fp8_gemm_separate_keeps_the_casts() -> None:
    # FP8 halves the operand bytes only; the GEMMs are compute-bound here, so each
    # separate piece costs what its BF16 twin does at the same (fp8 = bf16) fake peak, and
    # the casts are the fused op's in both modes.
    op = replace(gemm("layers.0.attn.qkv", 256, 384, 1024, 2, False, 0.0), parts=(256, 128))
    gpu = FakeGPU()
    fused, separate = fp8_op_time(op, gpu, CFG, "delayed", 1), fp8_op_time(
        op, gpu, SEPARATE, "delayed", 1)
    assert separate - fused == pytest.approx(8.7109e-6 - 4.3554e-6, rel=1e-4)


LLAMA = dict(family="llama", num_layers=1, hidden_size=4096, num_heads=32, num_kv_heads=8,
             ffn_hidden_size=14336, vocab_size=128256, max_seq_len=8192)


def test_repeat_kv_bytes() -> None:
    # 8,192 tokens, K and V from 1,024 to 4,096 features, 2 B: 2 · 2 · 8192 · 5120 =
    # 167,772,160 bytes forward, the same backward (the sum over each group).
    op = repeat_kv("r", 8192, 1024, 4096, 2)
    assert op.bytes == op.backward_bytes == 167_772_160
    assert op.activation_bytes == 0.0


def test_gqa_repeat_feeds_the_kernel_every_head() -> None:
    def core(gqa: str) -> tuple[list[str], Op]:
        items = block(ModelConfig(**LLAMA, gqa=gqa), 0, 1, 8192, 2, Shard()).ops
        return [o.name for o in items], next(o for o in items if o.kind == "attention")

    names, native = core("native")
    assert "layers.0.attn.repeat_kv" not in names
    names, repeated = core("repeat")
    assert names.index("layers.0.attn.repeat_kv") == names.index("layers.0.attn.rope") + 1
    # Saved q, k, v: 2 B · 8192 · (4096 + 2·1024) natively, · (4096 + 2·4096) repeated:
    # 2 B · 8192 · 2 · (4096 - 1024) = 100,663,296 bytes more.
    assert repeated.activation_bytes - native.activation_bytes == 2 * 8192 * 2 * 3072
    assert repeated.flops == native.flops


def test_gqa_repeat_is_a_no_op_for_mha_and_refused_for_mla() -> None:
    mha = ModelConfig(**{**LLAMA, "num_kv_heads": 32}, gqa="repeat")
    assert all(o.name != "layers.0.attn.repeat_kv" for o in block(mha, 0, 1, 512, 2,
                                                                   Shard()).ops)
    with pytest.raises(ValueError, match="MLA"):
        ModelConfig(**LLAMA, attention="mla", q_lora_rank=1536, kv_lora_rank=512,
                    qk_head_dim=128, qk_rope_dim=64, v_head_dim=128, gqa="repeat")


def test_gqa_repeat_saves_query_wide_kv_without_checkpointing() -> None:
    from simtrain.workload.memory import layer_activation_bytes

    # No recompute: SDPA saves the repeated K and V, 2 B · b·s · 2·(q - kv) more:
    # 2 · 8192 · 2 · (4096 - 1024) = 100,663,296 bytes. Per-op AC recomputes them: equal.
    def saved(gqa: str, recompute: str) -> float:
        cfg = ModelConfig(**LLAMA, gqa=gqa)
        return layer_activation_bytes(cfg, 1, 8192, recompute=recompute)  # type: ignore[arg-type]

    assert saved("repeat", "none") - saved("native", "none") == 100_663_296
    assert saved("repeat", "op") == saved("native", "op")

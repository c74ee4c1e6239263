"""FP8 training: which GEMMs run in FP8, their casts, the recipe checks, and the speedup."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from typer.testing import CliRunner

from simtrain.cli import app
from simtrain.errors import ScenarioError
from simtrain.simulate import simulate
from simtrain.workload.compute import ComputeConfig
from simtrain.workload.fp8 import (
    cast_bytes_per_element,
    cast_kernels,
    check_fp8,
    fp8_op_time,
    gathers_fp8,
    runs_in_fp8,
    time_key,
)
from simtrain.workload.model import Op


@dataclass(frozen=True)
class FakeGPU:
    hbm_bandwidth: float = 2e12
    num_sms: int = 100
    arch: str = "hopper"

    def flops(self, dtype: str) -> float:
        return 2e15 if dtype == "fp8" else 1e15


CFG = ComputeConfig(gemm_efficiency=0.8, fp8_gemm_efficiency=0.7, memory_efficiency=1.0,
                    launch_overhead=0.0)


def _gemm(name: str, m: int, n: int, k: int) -> Op:
    return Op(name, "gemm", 2.0 * m * n * k, 2.0 * (m * k + n * k + m * n), (m, n, k), (), 0.0)


def test_which_gemms_run_in_fp8() -> None:
    assert runs_in_fp8(_gemm("layers.0.attn.qkv", 8, 8, 8))
    assert runs_in_fp8(_gemm("layers.0.mlp.fc2.dgrad", 8, 8, 8))
    assert not runs_in_fp8(_gemm("lm_head", 8, 8, 8))
    assert not runs_in_fp8(_gemm("layers.0.mlp.router.wgrad", 8, 8, 8))
    assert not runs_in_fp8(Op("layers.0.attn.core", "attention", 1.0, 1.0, None, (), 0.0))


def test_cast_bytes_by_hand() -> None:
    # proj (m, n, k) = (8, 4, 2), 2 microbatches, delayed: X 8·2 = 16 elements x 4 B, W
    # 4·2 / 2 = 4 elements x 4 B per microbatch -> [64, 16].
    proj = _gemm("layers.0.attn.proj", 8, 4, 2)
    assert cast_kernels(proj, "delayed", 2) == [64.0, 16.0]
    # current scaling: +2 B per element for the amax pass and one amax launch per cast.
    assert cast_kernels(proj, "current", 2) == [96.0, 24.0, 0.0, 0.0]
    assert cast_bytes_per_element("mxfp8") == 4.0 + 2.0 / 32.0
    # QKV's input is written in FP8 by the fused norm: its transpose for wgrad (TE 1.9
    # fp8_transpose, read 1 B + write 1 B: 8·2 x 2 B = 32) and the weight's cast.
    assert cast_kernels(_gemm("layers.0.attn.qkv", 8, 4, 2), "delayed", 2) == [32.0, 16.0]
    # MXFP8: TE 2.x norms quantise UNFUSED (BF16 norm, then a quantize writing both
    # copies): X 16 x 4.0625 B = 65 and W 4 x 4.0625 = 16.25; the activation before fc2
    # is FULLY_FUSED, so fc2 casts only its weight.
    assert cast_kernels(_gemm("layers.0.attn.qkv", 8, 4, 2), "mxfp8", 2) == [65.0, 16.25]
    assert cast_kernels(_gemm("layers.0.mlp.fc2", 8, 4, 2), "mxfp8", 2) == [16.25]
    # current scaling: the norm computes QKV's input amax (FUSED_NORM_AMAX_FP8), so X is
    # quantised without the amax pass, 16 x 4 B = 64, and only W's cast has an amax
    # kernel: W 4 x 6 B = 24, one launch.
    assert cast_kernels(_gemm("layers.0.attn.qkv", 8, 4, 2), "current", 2) == [64.0, 24.0, 0.0]
    # dgrad (m, k, n) = (8, 2, 4): dY is 8 x 4 -> 32 x 4 B; wgrad casts nothing.
    assert cast_kernels(_gemm("layers.0.attn.proj.dgrad", 8, 2, 4), "delayed", 2) == [128.0]
    assert cast_kernels(_gemm("layers.0.attn.proj.wgrad", 4, 2, 8), "delayed", 2) == []


def test_fp8_op_time_by_hand() -> None:
    # proj (1280, 1280, 4096): 100 tiles = one wave on 100 SMs. FP8 per SM 2e13 FLOP/s:
    # k0 = 0.5 us · 2e13 / 32768 = 305.18 -> k-share 4096 / 4401.18 = 0.93066.
    # GEMM: 1.3422e10 FLOP / (2e15 · 0.7 · 0.93066) = 10.301 us; its FP8 operand bytes
    # (1280·4096 + 1280·4096 + 2·1280²) = 13.763 MB / 2e12 = 6.88 us: compute bound.
    # Casts, 1 microbatch: X and W, 1280·4096 x 4 B = 20.97 MB each / 2e12 = 10.486 us.
    op = _gemm("layers.0.attn.proj", 1280, 1280, 4096)
    gemm = 1.34217728e10 / (2e15 * 0.7 * (4096 / (4096 + 0.5e-6 * 2e13 / 32768)))
    assert fp8_op_time(op, FakeGPU(), CFG, "delayed", 1) == pytest.approx(
        gemm + 2 * 1280 * 4096 * 4 / 2e12, rel=1e-4)


def test_time_key_tells_a_forward_gemm_from_a_dgrad_of_its_shape() -> None:
    # proj forward (1280, 1280, 4096) and a dgrad of the same (m, n, k) have equal kind,
    # FLOPs, bytes and shape, but the forward casts X and W (2 x 20.97 MB, 20.97 us at
    # 2e12 B/s) and the dgrad only dY (1280·4096 x 4 B = 10.49 us): a cache keyed without
    # the pass would give the dgrad the forward's seconds.
    fwd = _gemm("layers.0.attn.proj", 1280, 1280, 4096)
    dgrad = replace(_gemm("layers.0.attn.proj.dgrad", 1280, 1280, 4096), grad="input")
    fwd_s = fp8_op_time(fwd, FakeGPU(), CFG, "delayed", 1)
    dgrad_s = fp8_op_time(dgrad, FakeGPU(), CFG, "delayed", 1)
    assert fwd_s - dgrad_s == pytest.approx(1280 * 4096 * 4 / 2e12, rel=1e-6)
    assert time_key(fwd) != time_key(dgrad)
    # The same GEMM in another layer, or a wgrad's "weight" in another layer, costs the same.
    assert time_key(fwd) == time_key(replace(fwd, name="layers.7.attn.proj"))
    wgrad = replace(_gemm("layers.0.attn.qkv.wgrad", 8, 8, 8), grad="weight")
    assert time_key(wgrad) == time_key(replace(wgrad, name="layers.3.attn.qkv.wgrad"))
    # qkv (its input written in FP8 by the norm) and proj of one shape cast differently.
    assert time_key(fwd) != time_key(replace(fwd, name="layers.0.attn.qkv"))


def test_fp8_needs_fp8_tensor_cores() -> None:
    with pytest.raises(ValueError, match="no"):
        check_fp8("ampere", "a100-80gb", "delayed")
    with pytest.raises(ValueError, match="Blackwell"):
        check_fp8("hopper", "h100-sxm", "mxfp8")
    check_fp8("blackwell", "b200", "mxfp8")


def test_fp8_on_a100_is_one_line_exit_2(tmp_path) -> None:
    path = tmp_path / "fp8.yaml"
    path.write_text("cluster: {preset: dgx-a100}\nmodel: {preset: tiny-gpt}\n"
                    "training: {global_batch_size: 8, dtype: fp8}\n")
    result = CliRunner().invoke(app, ["run", str(path), "--no-report"])
    assert result.exit_code == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "FP8 tensor cores" in lines[0] and "Traceback" not in lines[0]
    with pytest.raises(ScenarioError, match="fp8"):
        simulate({"cluster": {"preset": "dgx-h100"}, "model": {"preset": "tiny-gpt"},
                  "training": {"global_batch_size": 8, "dtype": "bf16",
                               "fp8": {"recipe": "delayed"}}})


def _layer_seconds(dtype: str, recipe: str | None = None) -> tuple[float, dict]:
    training = {"global_batch_size": 1, "micro_batch_size": 1, "seq_len": 8192,
                "dtype": dtype}
    if recipe:
        training["fp8"] = {"recipe": recipe}
    result = simulate({"name": "l70", "cluster": {"preset": "dgx-h100"},
                       "model": {"preset": "llama3-70b", "num_layers": 1},
                       "training": training, "parallelism": {"tp": 8, "sp": True},
                       "sim": {"ignore_memory": True}})
    layer = sum(s.end - s.start for s in result.timeline
                if s.rank == 0 and s.stream == "compute" and s.name.startswith("layers.0."))
    return layer, result.summary


def test_fp8_speedup_of_a_llama3_70b_layer_is_in_the_measured_range() -> None:
    # Measured FP8/BF16 pairs on H100 (shared/reference/measured_runs.yaml):
    # torchtitan_async_tp_h100_2025_06, Llama3 70B, 256 GPUs, TP 8: float8 tensorwise /
    # bfloat16 = 809.8 / 597.3 = 1.356 (vanilla TP), 942.4 / 652.4 = 1.445 (async TP);
    # Llama3 8B, TP 8: 5078.1 / 4378 = 1.160, 5570.1 / 4809.4 = 1.158;
    # torchtitan_llama31_h100_2024_12, Llama 3.1 8B FSDP + compile: 8532 / 6667 = 1.280.
    # So 1.16-1.45 (the float8 rowwise rows, ~1.0, are a known-low baseline, torchtitan#1207).
    bf16, _ = _layer_seconds("bf16")
    delayed, summary = _layer_seconds("fp8", "delayed")
    current, _ = _layer_seconds("fp8", "current")
    assert 1.16 <= bf16 / delayed <= 1.45
    assert 1.16 <= bf16 / current <= 1.45
    assert current > delayed  # the amax pass costs
    # FP8 weight copies (2 B per GEMM weight) join the memory breakdown.
    assert summary["memory_breakdown"]["fp8_weights"] > 0


def _b200_layer_seconds(dtype: str, recipe: str | None = None) -> float:
    training = {"global_batch_size": 1, "micro_batch_size": 1, "seq_len": 8192,
                "dtype": dtype, **({"fp8": {"recipe": recipe}} if recipe else {})}
    result = simulate({"name": "l8", "cluster": {"preset": "dgx-b200", "nodes": 1,
                                                 "gpus_per_node": 1},
                       "model": {"preset": "llama3-8b", "num_layers": 1},
                       "training": training, "sim": {"ignore_memory": True}})
    return sum(s.end - s.start for s in result.timeline
               if s.rank == 0 and s.stream == "compute" and s.name.startswith("layers.0."))


def test_blackwell_fp8_speedup_of_a_llama3_8b_layer_is_in_the_measured_range() -> None:
    # Measured MXFP8/BF16 pairs on Blackwell (shared/reference/measured_runs.yaml,
    # torchtitan_mxfp8_blackwell): Llama3-8B on 8 B200, mxfp8_cublas / bfloat16 =
    # 9969 / 8307.5 = 1.200, mxfp8_cublas_rceil 9642 / 8307.5 = 1.161; Llama4 Scout on 256
    # GB200, 7401 / 6169 = 1.200; float8 tensorwise on the same B200s 10417 / 8307.5 =
    # 1.254. So 1.16-1.25; the fitted Blackwell FP8 ceiling (0.5496) gives 1.198, the
    # uncalibrated 0.70 gave 1.374.
    bf16 = _b200_layer_seconds("bf16")
    assert 1.16 <= bf16 / _b200_layer_seconds("fp8", "mxfp8") <= 1.25


def test_expert_gemms_cast_their_own_inputs() -> None:
    # TE's GroupedLinear quantises the routed BF16 tokens itself: an expert fc1 of 16
    # groups of (m, n, k) = (8, 4, 2), 2 microbatches, MXFP8 (4 + 2/32 B per element):
    # X 16·8·2 = 256 elements -> 1040 B, W 16·4·2 / 2 = 64 elements -> 260 B. The dense
    # fc1 of the same name is quantised after the BF16 norm (TE 2.x normalization.cpp
    # UNFUSED for MXFP8): X 8·2 = 16 elements -> 65 B, W 4 x 4.0625 = 16.25 B.
    dense = _gemm("layers.0.mlp.fc1", 8, 4, 2)
    expert = Op(dense.name, "gemm", dense.flops * 16, dense.bytes * 16, (8, 4, 2), (), 0.0,
                role="expert", groups=16)
    assert cast_kernels(expert, "mxfp8", 2) == [1040.0, 260.0]
    assert cast_kernels(dense, "mxfp8", 2) == [65.0, 16.25]


def test_gathered_operands_are_cast_on_the_shard() -> None:
    # SP over 4 ranks, current scaling: QKV (m, n, k) = (8, 4, 2) gathers its input in FP8,
    # so X (8·2 = 16 elements) is quantised on the rank's quarter, 4 elements x (2 read +
    # 1 write) = 12 B (the norm computed the amax), and the gathered copy transposed,
    # 16 x 2 B = 32 B; W 4·2 / 1 = 8 elements x 6 B = 48 B; one amax launch (W).
    qkv = _gemm("layers.0.attn.qkv", 8, 4, 2)
    assert cast_kernels(qkv, "current", 1, sp_gather=4) == [12.0, 32.0, 48.0, 0.0]
    # Delayed: the proj dgrad's dY (8 x 4 = 32 elements) is cast on the shard (8 x 3 B)
    # and transposed after the gather (32 x 2 B); without SP it is one cast_transpose.
    dgrad = _gemm("layers.0.attn.proj.dgrad", 8, 4, 4)
    assert cast_kernels(dgrad, "delayed", 1, sp_gather=4) == [24.0, 64.0]
    assert cast_kernels(dgrad, "delayed", 1) == [128.0]
    # fc1's dgrad (its dY is not gathered) and MXFP8 are cast as before.
    assert cast_kernels(_gemm("layers.0.mlp.fc1.dgrad", 8, 4, 4), "delayed", 1, 4) == [128.0]
    assert cast_kernels(dgrad, "mxfp8", 1, sp_gather=4) == [4.0625 * 32]


def test_which_sp_gathers_move_fp8() -> None:
    assert gathers_fp8("f", _gemm("layers.0.attn.qkv", 8, 8, 8))
    assert gathers_fp8("f", _gemm("layers.0.mlp.fc1", 8, 8, 8))
    assert gathers_fp8("g", _gemm("layers.0.attn.proj", 8, 8, 8))
    assert gathers_fp8("g", _gemm("layers.0.mlp.fc2", 8, 8, 8))
    assert not gathers_fp8("f", _gemm("layers.0.mlp.router", 8, 8, 8))  # BF16 GEMM
    assert not gathers_fp8("f", _gemm("lm_head", 8, 8, 8))
    assert not gathers_fp8("g", _gemm("layers.0.mlp.shared.fc2", 8, 8, 8))  # MoE's g
    assert not gathers_fp8("f", _gemm("layers.0.attn.proj", 8, 8, 8))  # input not gathered
    expert = Op("layers.0.mlp.fc1", "gemm", 1.0, 1.0, (8, 8, 8), (), 0.0, role="expert")
    assert not gathers_fp8("f", expert)


def test_fp8_sp_gathers_halve_forward_f_and_backward_g() -> None:
    # Llama-style layer, b = 1, s = 16, h = 8, tp 2 with SP, dt 2: every site moves
    # 2·16·8 = 256 B. Under FP8 gathers the f all-gathers (before QKV and fc1) carry
    # 128 B forward and their reduce-scatters 256 B backward; the g reduce-scatters stay
    # 256 B forward and their backward all-gathers carry 128 B.
    from simtrain.parallel.shard import Comm, ShardSpec, block_unit
    from simtrain.workload.model import ModelConfig
    cfg = ModelConfig(name="t", family="llama", num_layers=1, hidden_size=8, num_heads=2,
                      vocab_size=64, max_seq_len=16, activation="swiglu", num_kv_heads=2,
                      ffn_hidden_size=16)
    comms = [s for s in block_unit(cfg, 0, 1, 16, 2, ShardSpec(tp=2, sp=True,
                                                               fp8_gathers=True)).steps
             if isinstance(s, Comm)]
    assert [(c.fwd, c.nbytes, c.bwd, c.backward_nbytes) for c in comms] == [
        ("all_gather", 128.0, "reduce_scatter", 256.0),
        ("reduce_scatter", 256.0, "all_gather", 128.0)] * 2
    plain = [s for s in block_unit(cfg, 0, 1, 16, 2, ShardSpec(tp=2, sp=True)).steps
             if isinstance(s, Comm)]
    assert {(c.nbytes, c.backward_nbytes) for c in plain} == {(256.0, 256.0)}
def test_blockwise_casts_by_hand() -> None:
    # DeepSeek-V3's 1x128 / 128x128 recipe: 4 B (read BF16, write FP8 rowwise and
    # columnwise) + one FP32 scale per 128 elements of each copy, 2·4/128 = 0.0625 B.
    assert cast_bytes_per_element("blockwise") == 4.0625
    # QKV (8, 4, 2), 2 microbatches: the norm writes BF16, so X (16 elements) is cast too,
    # 16 x 4.0625 = 65 B, and W (4·2 / 2 = 4 elements) 16.25 B; no amax launches.
    assert cast_kernels(_gemm("layers.0.attn.qkv", 8, 4, 2), "blockwise", 2) == [65.0, 16.25]


def test_blockwise_is_hopper_only() -> None:
    check_fp8("hopper", "h800", "blockwise")
    with pytest.raises(ValueError, match="Hopper only"):
        check_fp8("blackwell", "b200", "blockwise")

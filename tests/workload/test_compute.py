"""Tests for the roofline compute model, with hand-derived values on a stand-in GPU."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simtrain.hardware.gpus import get_gpu
from simtrain.workload.compute import (
    ComputeConfig,
    gemm_efficiency,
    kloop_efficiency,
    kloop_k0,
    op_time,
    tile_efficiency,
    wave_efficiency,
)
from simtrain.workload.model import ModelConfig, Op, backward_ops, lower_model


@dataclass(frozen=True)
class FakeGPU:
    """Stand-in for simtrain.hardware.gpus: round numbers for hand derivations."""

    peak: float = 1e15
    hbm_bandwidth: float = 2e12
    num_sms: int = 100
    arch: str = "ampere"

    def flops(self, dtype: str) -> float:
        return self.peak


GPU = FakeGPU()
# Round parameters so the expected values below are easy to derive by hand.
CFG = ComputeConfig(gemm_efficiency=0.8, attention_efficiency=0.5, memory_efficiency=1.0,
                    launch_overhead=0.0)
# The tile's fixed latency in units of k on FakeGPU (128x128 tile, 0.5 us fill): per SM
# 1e15/100 = 1e13 FLOP/s; k0 = 0.5 us · 1e13 / (2·128·128) = 152.59.
K0 = 0.5e-6 * 1e13 / 32768


def kf(k: int) -> float:
    return k / (k + K0)


def test_perfect_tiles_and_full_waves_give_max_efficiency() -> None:
    # 1280 x 1280 with 128x128 tiles = 10·10 = 100 tiles = one full wave on 100 SMs: only
    # the main-loop share k/(k + k0) is lost.
    assert gemm_efficiency(1280, 1280, 4096, GPU, CFG) == pytest.approx(0.8 * kf(4096))


def test_one_extra_tile_opens_a_second_wave() -> None:
    # 101 tiles on 100 SMs run as 2 waves: wave efficiency 101/200.
    assert gemm_efficiency(128 * 101, 128, 4096, GPU, CFG) == pytest.approx(
        0.8 * 101 / 200 * kf(4096))


def test_tile_quantization() -> None:
    # m = 129 pads to 256 rows: 129·128 / (256·128) = 129/256.
    assert tile_efficiency(129, 128, 128, 128) == pytest.approx(129 / 256)
    # On a 1-SM GPU the 2 tiles run as 2 full waves (2 / (2·1) = 1): only the tile loss.
    # (One SM with FakeGPU's per-SM rate, so k0 stays 152.59.)
    one_sm = replace(GPU, num_sms=1, peak=1e13, hbm_bandwidth=2e10)
    assert gemm_efficiency(129, 128, 4096, one_sm, CFG) == pytest.approx(
        0.8 * 129 / 256 * kf(4096))


def test_kloop_k0_by_hand() -> None:
    assert kloop_k0(128, 128, 1e13, 0.5e-6) == pytest.approx(152.59, rel=1e-4)
    # H100 SXM bf16 (989.4 TFLOP/s, 132 SMs): 0.5 us · 7.4955e12 / 32768 = 114.37.
    assert kloop_k0(128, 128, 989.4e12 / 132, 0.5e-6) == pytest.approx(114.37, rel=1e-3)
    # A100 (312 TFLOP/s, 108 SMs): 0.5 us · 2.8889e12 / 32768 = 44.08: the same shape
    # loses less of peak on A100.
    assert kloop_k0(128, 128, 312e12 / 108, 0.5e-6) == pytest.approx(44.08, rel=1e-3)


def test_output_store_is_the_rooflines_not_the_kloops() -> None:
    # Standard attention's scores on FakeGPU: (m, n, k) = (12800, 1280, 128), 100 x 10 =
    # 1000 tiles = 10 full waves. FLOPs 2·12800·1280·128 = 4.194e9 at 1e15 · 0.8 ·
    # 128/(128 + 152.59) = 3.6493e14 FLOP/s: 11.49 us. Bytes 2·(12800·128 + 1280·128 +
    # 12800·1280) = 3.6372e7 at 2e12 B/s: 18.19 us. Memory-bound: the output's store is
    # paid once, in the memory term, not again per tile.
    op = Op("scores", "gemm", 2.0 * 12800 * 1280 * 128,
            2.0 * (12800 * 128 + 1280 * 128 + 12800 * 1280), (12800, 1280, 128), (), 0.0)
    assert op_time(op, GPU, CFG) == pytest.approx(3.6372e7 / 2e12, rel=1e-4)


def test_small_k_penalty() -> None:
    # k = k0: half the tile's time is fixed cost.
    assert kloop_efficiency(100, 100.0) == 0.5
    assert gemm_efficiency(1280, 1280, 64, GPU, CFG) == pytest.approx(0.8 * 64 / (64 + K0))


def test_more_full_waves_amortise_the_tail() -> None:
    # q full waves plus one tile: (q·100 + 1) / ((q + 1)·100) increases with q.
    effs = [wave_efficiency(q * 100 + 1, 100) for q in range(1, 20)]
    assert effs == sorted(effs) and effs[-1] < 1.0


@given(st.integers(1, 20000), st.integers(1, 20000), st.integers(1, 20000))
def test_gemm_efficiency_bounded(m: int, n: int, k: int) -> None:
    assert 0.0 < gemm_efficiency(m, n, k, GPU, CFG) <= 0.8 + 1e-12


def test_gemm_efficiency_monotone_in_k() -> None:
    effs = [gemm_efficiency(1280, 1280, k, GPU, CFG) for k in (8, 16, 32, 64, 128, 4096)]
    assert effs == sorted(effs)


def test_op_time_memory_bound() -> None:
    # A norm moving 1 GB at 2 TB/s takes 0.5 ms (its FLOPs are ignored); with memory
    # efficiency 0.85 and 3 us launch: 1e9 / (2e12·0.85) + 3e-6 = 588.235 us + 3 us.
    op = Op("n", "norm", 1e9, 1e9, None, (), 0.0)
    assert op_time(op, GPU, CFG) == pytest.approx(5e-4)
    cfg = ComputeConfig.model_validate({"memory_efficiency": 0.85, "launch_overhead": "3us"})
    assert op_time(op, GPU, cfg) == pytest.approx(1e9 / 1.7e12 + 3e-6)


def test_op_time_compute_bound_gemm() -> None:
    # (1280, 1280, 8192): 2·1280·1280·8192 = 26.84e9 FLOP at 0.8·1e15 -> 33.55 us;
    # bytes 2·(1280·8192·2 + 1280²) = 45.22e6 at 2e12 -> 22.61 us: compute bound.
    flops = 2.0 * 1280 * 1280 * 8192
    op = Op("g", "gemm", flops, 2.0 * (2 * 1280 * 8192 + 1280**2), (1280, 1280, 8192), (), 0.0)
    # With the main-loop share 8192 / (8192 + 652.59): 36.43 us, still compute bound.
    assert op_time(op, GPU, CFG) == pytest.approx(flops / (0.8e15 * kf(8192)))


def test_op_time_memory_bound_gemm() -> None:
    # A skinny GEMM (m=1): 2·1·8192·8192 = 134 MFLOP but it reads a 128 MiB weight:
    # bytes dominate: 2·(8192 + 8192² + 8192) / 2e12.
    nbytes = 2.0 * (8192 + 8192**2 + 8192)
    op = Op("g", "gemm", 2.0 * 8192 * 8192, nbytes, (1, 8192, 8192), (), 0.0)
    assert op_time(op, GPU, CFG) == pytest.approx(nbytes / 2e12)


def test_op_time_attention_causal_halves_the_work() -> None:
    # 1e12 non-causal FLOP, causal executes half: 0.5e12 / (1e15·0.5) = 1 ms.
    op = Op("a", "attention", 1e12, 1.0, None, (), 0.0)
    assert op_time(op, GPU, CFG) == pytest.approx(1e-3)
    full = CFG.model_copy(update={"causal_attention": False})
    assert op_time(op, GPU, full) == pytest.approx(2e-3)


def test_h100_attention_runs_at_flashattention2s_h100_rate() -> None:
    # Hopper's default is FA2's published H100 rate, 335 TFLOP/s forward+backward (Dao
    # 2023, Sec. 4.1): 0.339 of 989.4. One ring-attention block of NeMo's 1M-token Llama 2
    # 7B row (tp 8: 4 heads; cp 32: 32768 queries over a 32768-key block): 4·32768·32768·
    # 128·4 = 2.199e12 FLOP non-causal, 1.100e12 executed causal; forward 1.100e12 /
    # (989.4e12·0.339) = 3.279 ms, backward 2.5x = 8.197 ms, plus 3 us launch each.
    h100, cfg = get_gpu("h100-sxm"), ComputeConfig()
    assert cfg.max_attention_efficiency("hopper") == 0.339
    fwd = Op("a", "attention", 4.0 * 32768 * 32768 * 128 * 4, 0.0, None, (), 0.0)
    (bwd,) = backward_ops(fwd)
    assert op_time(fwd, h100, cfg) == pytest.approx(3.279e-3 + 3e-6, rel=1e-3)
    assert op_time(bwd, h100, cfg) == pytest.approx(8.197e-3 + 3e-6, rel=1e-3)


def test_arch_defaults_and_errors() -> None:
    default = ComputeConfig()
    assert default.max_gemm_efficiency("ampere") == 0.6971
    # Hopper's defaults are the fitted ones (simtrain calibrate, docs/validation.md).
    assert default.max_gemm_efficiency("hopper") == 0.8156
    assert default.hbm_efficiency("hopper") == 0.85
    assert default.host_kernel_issue == 8e-6 and default.host_microbatch == 200e-6
    assert default.comm_interference is None  # the physical model (workload.interference)
    with pytest.raises(ValueError, match="Extra inputs"):
        ComputeConfig.model_validate({"step_overhead": 0.1})  # the fitted fudge is gone
    assert default.max_attention_efficiency("ampere") == 0.60
    with pytest.raises(ValueError, match="set compute.gemm_efficiency"):
        gemm_efficiency(128, 128, 128, replace(GPU, arch="tpu"), default)
    with pytest.raises(ValueError, match="fraction"):
        ComputeConfig(gemm_efficiency=1.5)
    with pytest.raises(ValueError, match="positive"):
        ComputeConfig(tile_m=0)
    with pytest.raises(ValueError, match="Extra inputs"):
        ComputeConfig.model_validate({"gemm_eff": 0.8})
    with pytest.raises(ValueError, match="unknown kind"):
        op_time(Op("x", "conv", 1.0, 1.0, None, (), 0.0), GPU, CFG)
    with pytest.raises(ValueError, match="gemm_shape"):
        op_time(Op("x", "gemm", 1.0, 1.0, None, (), 0.0), GPU, CFG)


def test_every_lowered_op_has_a_positive_time() -> None:
    cfg = ModelConfig.from_preset("tiny-gpt")
    for layer in lower_model(cfg, 2, 128):
        for op in layer.ops:
            for o in (op, *backward_ops(op)):
                assert op_time(o, GPU, ComputeConfig()) > 0.0


_KINDS = st.sampled_from(["gemm", "attention", "elementwise", "norm", "embedding", "loss"])
_AMOUNT = st.floats(0.0, 1e15, allow_nan=False)


@given(_KINDS, _AMOUNT, _AMOUNT, _AMOUNT, _AMOUNT)
def test_op_time_never_decreases_with_more_work(kind: str, flops: float, nbytes: float,
                                                 more_flops: float, more_bytes: float) -> None:
    shape = (4096, 4096, 4096) if kind == "gemm" else None
    base = Op("x", kind, flops, nbytes, shape, (), 0.0)
    t = op_time(base, GPU, ComputeConfig())
    assert op_time(replace(base, flops=flops + more_flops), GPU, ComputeConfig()) >= t
    assert op_time(replace(base, bytes=nbytes + more_bytes), GPU, ComputeConfig()) >= t


def test_grouped_gemm_efficiency_from_the_per_expert_tokens() -> None:
    # 16 experts of 64 tokens each, n = 1280, k = 4096: every expert pads its 64 rows to
    # one 128-row tile (tile efficiency 64/128) and has 10 column tiles; 16·10 = 160 tiles
    # run as 2 waves on 100 SMs (160/200). One GEMM over all 1024 rows would fill its
    # tiles (8·10 = 80 tiles, one wave of 80/100).
    grouped = gemm_efficiency(64, 1280, 4096, GPU, CFG, groups=16)
    assert grouped == pytest.approx(0.8 * 0.5 * 160 / 200 * kf(4096))
    assert gemm_efficiency(1024, 1280, 4096, GPU, CFG) == pytest.approx(0.8 * 80 / 100 * kf(4096))
    # The weight gradient (n, k, m) = (1280, 4096, 64) reduces over the expert's 64 tokens:
    # full tiles, 16·10·32 = 5120 tiles in 52 waves (5120/5200), k-loop 64/(64 + k0).
    wgrad = gemm_efficiency(1280, 4096, 64, GPU, CFG, groups=16)
    assert wgrad == pytest.approx(0.8 * 5120 / 5200 * kf(64))
    with pytest.raises(ValueError, match="groups >= 1"):
        gemm_efficiency(64, 1280, 4096, GPU, CFG, groups=0)

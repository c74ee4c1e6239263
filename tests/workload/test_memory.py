"""Memory model: ZeRO per-parameter bytes and Korthikanti et al.'s activation formulas."""

from __future__ import annotations

import pytest

from simtrain.workload.memory import (
    korthikanti_activation_bytes,
    layer_activation_bytes,
    model_state_bytes,
)
from simtrain.workload.model import ModelConfig

GB = 1e9


@pytest.mark.parametrize(("zero", "expected_gb"), [
    # ZeRO paper Fig. 1: Ψ = 7.5B, N = 64, K = 12.
    (0, 120.0),                            # (2 + 2 + 12)·7.5 = 120
    (1, 31.40625),                         # 4·7.5 + 12·7.5/64 = 30 + 1.40625
    (2, 16.640625),                        # 2·7.5 + 14·7.5/64 = 15 + 1.640625
    (3, 1.875),                            # 16·7.5/64
])
def test_zero_stages_match_the_paper(zero, expected_gb):
    states = model_state_bytes(7.5e9, zero=zero, dp=64)
    assert sum(states.values()) / GB == pytest.approx(expected_gb)


def test_megatron_18_bytes_and_distributed_optimizer():
    # fp32 gradients: 2 + 4 + 12 = 18 B/param; distributed optimizer (ZeRO-1) over d = 8:
    # 6 + 12/8 = 7.5 B/param.
    assert sum(model_state_bytes(1.0, zero=0, dp=8, grad_bytes=4).values()) == 18.0
    assert sum(model_state_bytes(1.0, zero=1, dp=8, grad_bytes=4).values()) == 7.5
    with pytest.raises(ValueError, match="zero stage"):
        model_state_bytes(1.0, zero=4, dp=8)


# GPT-3 175B layer: s = 2048, b = 1, h = 12288, a = 96; sbh = 25,165,824 elements,
# 5·a·s/h = 5·96·2048/12288 = 80.
SBH = 2048 * 1 * 12288


@pytest.mark.parametrize(("kwargs", "per_sbh"), [
    (dict(), 34 + 80),                                    # 114·sbh = 2.869 GB
    (dict(t=8), 10 + 24 / 8 + 80 / 8),                    # TP only: 23
    (dict(t=8, sp=True), (34 + 80) / 8),                  # TP + SP: 14.25
    (dict(t=8, sp=True, recompute="selective"), 34 / 8),  # 4.25
    (dict(t=8, recompute="selective"), 10 + 24 / 8),      # 13
    (dict(t=8, sp=True, recompute="full"), 2 / 8),
    (dict(recompute="full"), 2),
    (dict(flash=True), 34),                               # no s² term with flash attention
])
def test_korthikanti_formula_by_hand(kwargs, per_sbh):
    got = korthikanti_activation_bytes(2048, 1, 12288, 96, **kwargs)
    assert got == pytest.approx(SBH * per_sbh)


def test_korthikanti_headline_number():
    # 114·sbh = 114 x 25,165,824 = 2,868,903,936 bytes per layer without parallelism.
    assert korthikanti_activation_bytes(2048, 1, 12288, 96) == 2_868_903_936


@pytest.mark.parametrize(("t", "sp", "recompute"), [
    (1, False, "none"), (8, False, "none"), (8, True, "none"), (8, True, "selective"),
    (8, False, "selective"), (8, True, "full"),
])
def test_general_count_reduces_to_korthikanti_for_gpt(t, sp, recompute):
    cfg = ModelConfig.from_preset("gpt3-175b", attention_kernel="standard")
    assert layer_activation_bytes(cfg, 1, 2048, tp=t, sp=sp, recompute=recompute) == \
        pytest.approx(korthikanti_activation_bytes(2048, 1, 12288, 96, t=t, sp=sp,
                                                   recompute=recompute))


def test_flash_kernel_and_context_parallelism():
    cfg = ModelConfig.from_preset("gpt3-175b")  # flash attention by default
    assert layer_activation_bytes(cfg, 1, 2048) == pytest.approx(SBH * 34)
    # CP = 2 halves the tokens each rank holds: every term is per local token.
    assert layer_activation_bytes(cfg, 1, 2048, cp=2) == pytest.approx(SBH * 34 / 2)


def test_llama_without_dropout_uses_gqa_and_swiglu_widths():
    cfg = ModelConfig.from_preset("llama3-8b")
    s, h, kv, f = 8192, 4096, 8 * 128, 14336
    # replicated: norms 4 + qkv in 2 + fc1 in 2 = 8 sbh; attention: Q,K,V 2(h + 2kv) +
    # proj in 2h; MLP: act in 2·2f + fc2 in 2f.
    expected = s * (8 * h + 2 * (h + 2 * kv) + 2 * h + 4 * f + 2 * f)
    assert layer_activation_bytes(cfg, 1, s) == pytest.approx(expected)

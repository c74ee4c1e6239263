"""Blackwell's fused-attention efficiency, derived from NeMo's B200 long-sequence table.

The rows (scenarios/validation/nemo-long-sequence-cp.yaml, transcribed from NVIDIA/NeMo
19fadb67 docs/source/performance/performance_long_sequence.md) publish TFLOP/s per GPU
under NeMo's count, 6·N_matmul + 12·l·s·h FLOPs per token (non-causal attention), for
Llama 3 8B at 8K-1M tokens. Time per token splits into core attention (the causal half of
12·l·s·h at rate R_a) and the rest (6·N at rate R_g); two unknowns, eight rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ruamel.yaml import YAML

from simtrain.hardware.gpus import get_gpu
from simtrain.workload.compute import ATTENTION_EFFICIENCY

SUITE = Path(__file__).resolve().parents[2] / "scenarios" / "validation" / \
    "nemo-long-sequence-cp.yaml"
B200_BF16 = 2250e12  # hardware.yaml "B200 (HGX, 1000 W)" dense BF16
# Op.flops counts a flash kernel's forward as 4·s·h per token and layer and its backward
# as 2.5x that (5 matmuls against 2): 14·l·s·h, 7 executed under a causal mask, against
# NeMo's 12 (6 executed).
EXECUTED_OVER_NEMO = 7.0 / 6.0


def n_matmul(model: dict) -> float:
    """Weights the GEMMs multiply per token (NeMo's N_matmul): QKV, projection, gated MLP
    per layer, plus the output layer."""
    h, layers, ffn, v = (model["hidden_size"], model["num_layers"], model["ffn_hidden_size"],
                         model["vocab_size"])
    kv_width = model["num_kv_heads"] * h // model["num_heads"]
    return layers * (h * (h + 2 * kv_width) + h * h + 3 * h * ffn) + h * v


def b200_rows() -> list[tuple[float, float, float]]:
    """(causal attention FLOPs, other FLOPs, seconds) per token of each B200 row."""
    doc = YAML(typ="safe").load(SUITE.read_text())
    out = []
    for row in doc["rows"]:
        if not row["id"].startswith("b200-") or row["id"].endswith("-without-cp"):
            continue
        model, seq = row["scenario"]["model"], row["scenario"]["training"]["seq_len"]
        attention = 12.0 * model["num_layers"] * seq * model["hidden_size"]
        other = 6.0 * n_matmul(model)
        seconds = (attention + other) / (row["published"]["tflops_per_gpu"] * 1e12)
        out.append((attention / 2.0, other, seconds))
    return out


def fit(rows: list[tuple[float, float, float]]) -> tuple[float, float, np.ndarray]:
    """Least squares of seconds = a / R_a + g / R_g: (R_a, R_g, relative residuals)."""
    a = np.array([[r[0], r[1]] for r in rows])
    t = np.array([r[2] for r in rows])
    x = np.linalg.lstsq(a, t, rcond=None)[0]
    return 1.0 / x[0], 1.0 / x[1], a @ x / t - 1.0


def test_llama3_8b_flops_per_token_match_nemo() -> None:
    # measured_runs.yaml: NeMo's LLAMA3-8B count is 57.9e9 FLOP/token at 8192 tokens.
    # By hand: N = 32·(4096·6144 + 4096² + 3·4096·14336) + 4096·128256 = 7,504,658,432;
    # 6N = 45.028e9; 12·32·8192·4096 = 12.885e9; sum 57.913e9.
    model = {"hidden_size": 4096, "num_layers": 32, "ffn_hidden_size": 14336,
             "vocab_size": 128256, "num_kv_heads": 8, "num_heads": 32}
    assert n_matmul(model) == 7_504_658_432
    assert 6 * n_matmul(model) + 12 * 32 * 8192 * 4096 == pytest.approx(57.913e9, rel=1e-4)


def test_two_rows_by_hand() -> None:
    # 8K: 57.913e9 FLOP / 1671e12 = 34.658 us per token, 6.442e9 causal attention FLOPs;
    # 1M: (45.028e9 + 1649.27e9) / 1608e12 = 1053.67 us, 824.63e9 attention FLOPs.
    # The rest is the same 6N in both: R_a = (824.63e9 - 6.442e9) / (1053.67 - 34.658) us
    # = 818.19e9 / 1019.01e-6 = 802.9 TFLOP/s.
    rows = {round(r[0]): r for r in b200_rows()}
    short, long = rows[round(6.442450944e9)], rows[round(824.633720832e9)]
    rate = (long[0] - short[0]) / (long[2] - short[2])
    assert rate == pytest.approx(802.9e12, rel=1e-3)


def test_shipped_blackwell_efficiency_is_the_fit() -> None:
    rows = b200_rows()
    assert len(rows) == 8
    r_a, r_g, residual = fit(rows)
    assert np.max(np.abs(residual)) < 0.07  # two rates explain every row within 7%
    # 7/6 · 804 / 2250 = 0.417
    efficiency = EXECUTED_OVER_NEMO * r_a / B200_BF16
    assert efficiency == pytest.approx(0.417, abs=0.002)
    assert ATTENTION_EFFICIENCY["blackwell"] == round(efficiency, 2)
    assert r_g == pytest.approx(1626e12, rel=0.01)


def test_b200_attention_still_outruns_h100() -> None:
    # 0.42 · 2250 = 945 against 0.55 · 989.4 = 544 TFLOP/s of executed attention FLOPs.
    b200, h100 = get_gpu("b200"), get_gpu("h100-sxm")
    assert (ATTENTION_EFFICIENCY["blackwell"] * b200.flops("bf16")
            > ATTENTION_EFFICIENCY["hopper"] * h100.flops("bf16"))

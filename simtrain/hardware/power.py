"""Tensor-core peak of a GPU die run under a power limit its datasheets do not list.

NVIDIA quotes a die's tensor peaks at the tensor clock the product sustains within its
board power: the same GH100 die with 132 SMs is rated 989.4 dense BF16 TFLOP/s as H100
SXM5 at 700 W and 835 as H100 NVL at 400 W (``shared/reference/hardware.yaml``: "H100
SXM5 80GB" bf16 989.4, tdp 700 W, 132 SMs; "H100 NVL" bf16 835; NVIDIA's H100 NVL
datasheet gives its 350-400 W configurable TDP and the SXM's 132 SMs, general knowledge).
Every tensor dtype of the NVL is the SXM's times the same 0.844 (FP8 1,670.5 of 1,978.9,
TF32 417.5 of 494.7, NVIDIA datasheets), so the ratio is a clock, not a dtype effect;
the non-tensor FP32 figures are quoted at the boost clock instead and are not scaled.

A part with the same die at a power limit P between two rated products takes the peak
interpolated between them on a log-log line, ``peak(P) = peak_lo · (P / P_lo)^k`` with
``k = ln(peak_hi / peak_lo) / ln(P_hi / P_lo)``. The exponent is the two datasheets' own
(0.303 for H100); dynamic power ~ C·V²·f with voltage tracking clock gives the textbook
f ~ P^(1/3), k = 0.333, which the H100 pair nearly matches. Range at 500 W on GH100:
0.894 (cube law anchored at the 700 W SXM) to 0.921 (NVL rated at 350 W) of the SXM peak;
the interpolation between the rated points gives 0.903.

Used for Meta's Grand Teton H100 ("default 500W power limit", torchtitan's benchmark
pages; measured_runs.yaml), whose peak torchtitan itself calls unknown and overstated by
the SXM figure. HBM bandwidth is the part's own and does not scale.
"""

from __future__ import annotations

import math

# (board power W, dense BF16 tensor peak TFLOP/s) of two rated GH100 products, 132 SMs.
H100_NVL_RATED = (400.0, 835.0)
H100_SXM_RATED = (700.0, 989.4)


def power_limited_peak(power_w: float, low: tuple[float, float],
                       high: tuple[float, float]) -> float:
    """Tensor peak (units of the rated peaks) of the die at ``power_w`` watts, on the
    log-log line through two rated (watts, peak) products of that die (module docstring).

    ``power_w`` must lie between the two rated powers: outside them the line is an
    extrapolation no datasheet supports.
    """
    (p_lo, f_lo), (p_hi, f_hi) = low, high
    if not (0 < p_lo < p_hi and 0 < f_lo <= f_hi):
        raise ValueError(f"rated points must have rising power and peak, got {low}, {high}")
    if not p_lo <= power_w <= p_hi:
        raise ValueError(f"power limit {power_w} W lies outside the rated products' "
                         f"{p_lo}-{p_hi} W; no datasheet supports extrapolating")
    k = math.log(f_hi / f_lo) / math.log(p_hi / p_lo)
    return f_lo * (power_w / p_lo) ** k


def h100_peak_ratio(power_w: float) -> float:
    """Share of H100 SXM5's 700 W tensor peaks a 132-SM GH100 keeps at ``power_w`` watts."""
    return power_limited_peak(power_w, H100_NVL_RATED, H100_SXM_RATED) / H100_SXM_RATED[1]

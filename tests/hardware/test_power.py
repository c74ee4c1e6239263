"""The power-limited tensor peak: log-log interpolation between two rated products."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.hardware.gpus import get_gpu
from simtrain.hardware.power import (
    H100_NVL_RATED,
    H100_SXM_RATED,
    h100_peak_ratio,
    power_limited_peak,
)


def test_h100_at_500w_by_hand() -> None:
    # k = ln(989.4 / 835) / ln(700 / 400) = 0.16967 / 0.55962 = 0.30318
    # peak(500) = 835 * 1.25^0.30318 = 835 * exp(0.30318 * 0.22314) = 835 * 1.06999 = 893.45
    assert power_limited_peak(500.0, H100_NVL_RATED, H100_SXM_RATED) == pytest.approx(
        893.45, abs=0.01)
    # 893.45 / 989.4 = 0.90302
    assert h100_peak_ratio(500.0) == pytest.approx(0.90302, abs=1e-5)


def test_rated_points_are_returned_exactly() -> None:
    assert power_limited_peak(400.0, H100_NVL_RATED, H100_SXM_RATED) == pytest.approx(835.0)
    assert h100_peak_ratio(700.0) == pytest.approx(1.0)


def test_within_the_documented_range() -> None:
    # Range at 500 W (module docstring): cube law from the SXM, (5/7)^(1/3) = 0.8939, to
    # the NVL rated at 350 W, 835 * (500/350)^(ln(989.4/835)/ln 2) / 989.4 = 0.9209.
    assert 0.8939 <= h100_peak_ratio(500.0) <= 0.9209


def test_extrapolation_is_refused() -> None:
    with pytest.raises(ValueError, match="outside the rated"):
        h100_peak_ratio(300.0)
    with pytest.raises(ValueError, match="rising power"):
        power_limited_peak(500.0, (700.0, 989.4), (400.0, 835.0))


@settings(max_examples=40)
@given(st.floats(400.0, 700.0), st.floats(400.0, 700.0))
def test_peak_rises_with_power_and_stays_between_ratings(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    f_lo, f_hi = h100_peak_ratio(lo), h100_peak_ratio(hi)
    assert f_lo <= f_hi + 1e-12
    assert 835.0 / 989.4 - 1e-12 <= f_lo <= 1.0 + 1e-12
    assert not math.isnan(f_lo)


def test_grand_teton_part_uses_it() -> None:
    teton, sxm = get_gpu("h100-96gb-hbm2e-500w"), get_gpu("h100-sxm")
    for dtype in ("bf16", "fp16", "fp8", "tf32"):
        assert teton.flops(dtype) == pytest.approx(0.90302 * sxm.flops(dtype), rel=1e-5)
    assert teton.flops("fp32") == sxm.flops("fp32")

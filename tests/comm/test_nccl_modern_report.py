"""benchmarks/nccl_modern_report.py: each series' share of the suite's MAPE and mean."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from nccl_modern_report import contributions  # noqa: E402  (benchmarks/ is a script folder)


def test_shares_by_hand_add_up_to_the_suite():
    # Four points: a at +10% and -30%, b at +20% and +20%. Suite MAPE (10+30+20+20)/4 = 20%,
    # mean (10-30+20+20)/4 = +5%. a: |.|-share (10+30)/4 = 10%, signed (10-30)/4 = -5%;
    # b: 40/4 = 10% and +10%. Equal MAPE shares keep input order (stable sort).
    rows = contributions({"a": [(1, 0.1), (2, -0.3)], "b": [(1, 0.2), (2, 0.2)]})
    assert [(sid, n) for sid, n, _, _ in rows] == [("a", 2), ("b", 2)]
    assert rows[0][2:] == pytest.approx((0.10, -0.05))
    assert rows[1][2:] == pytest.approx((0.10, 0.10))
    assert sum(r[2] for r in rows) == pytest.approx(0.20)
    assert sum(r[3] for r in rows) == pytest.approx(0.05)


def test_largest_share_first():
    rows = contributions({"small": [(1, 0.01)], "big": [(1, -0.5), (2, 0.4)]})
    assert [r[0] for r in rows] == ["big", "small"]

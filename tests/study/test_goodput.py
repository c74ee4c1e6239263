"""Goodput under failures and checkpoints: Young/Daly interval, goodput and cost by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simtrain.study.goodput import (
    DEFAULT_RATES_PER_HOUR,
    LLAMA3_INTERRUPTIONS,
    GoodputConfig,
    checkpoint_bytes,
    daly_interval,
    failure_rate,
    goodput,
    goodput_config,
    goodput_fraction,
    young_interval,
)


def test_young_interval_by_hand() -> None:
    # delta = 60 s, M = 3 h = 10,800 s: sqrt(2 * 60 * 10,800) = sqrt(1,296,000) = 1,138.42 s
    assert young_interval(60.0, 10800.0) == pytest.approx(1138.4200, rel=1e-6)


def test_daly_interval_by_hand() -> None:
    # x = delta / 2M = 60 / 21,600 = 1/360; sqrt(x) = 0.0527046
    # 1 + 0.0527046/3 + (1/360)/9 = 1 + 0.0175682 + 0.0003086 = 1.0178768
    # 1,138.4200 * 1.0178768 - 60 = 1,158.7714 - 60 = 1,098.7714 s
    assert daly_interval(60.0, 10800.0) == pytest.approx(1098.771, rel=1e-5)
    # a checkpoint longer than 2M: checkpoint every M
    assert daly_interval(500.0, 200.0) == 200.0


def test_goodput_fraction_by_hand() -> None:
    # tau = 1,000 s, delta = 60 s, R = 900 s, M = 10,800 s (Daly's exact expected wall time):
    # e^(R/M) = e^0.0833333 = 1.0869040; e^((tau + delta)/M) - 1 = e^0.0981481 - 1 = 0.1031262
    # wall per 1,000 s of work = 10,800 x 1.0869040 x 0.1031262 = 1,210.5535 s
    # G = 1,000 / 1,210.5535 = 0.8260684
    assert goodput_fraction(1000.0, 60.0, 900.0, 10800.0) == pytest.approx(0.8260684,
                                                                           rel=1e-6)
    # nothing fails: only the checkpoint writes cost, 1,000 / (1,000 + 60)
    assert goodput_fraction(1000.0, 60.0, 900.0, math.inf) == pytest.approx(1000 / 1060)
    # restarts longer than the MTBF: most of the time goes to failing
    assert goodput_fraction(1000.0, 60.0, 20000.0, 10800.0) < 0.15


def test_llama3_defaults_reproduce_419_interruptions_in_54_days() -> None:
    # 16,384 GPUs and NICs, 2,048 hosts, 544 switches (the 2,048-node dgx-h100 fabric):
    # every component's count times its rate gives its Table 5 count per 1,296 h, 419 in all
    counts = {"gpu": 16384, "host": 2048, "nic": 16384, "switch": 544, "software": 16384}
    per_s = failure_rate(DEFAULT_RATES_PER_HOUR, counts)
    assert per_s * 54 * 86400 == pytest.approx(419.0)
    assert sum(LLAMA3_INTERRUPTIONS.values()) == 419
    # one interruption every 1,296 h / 419 = 3.093 h
    assert 1 / per_s / 3600 == pytest.approx(3.0931, rel=1e-4)


def test_checkpoint_is_weights_and_optimizer_states() -> None:
    # bf16 weights 2 B + fp32 master, Adam m and v 12 B = 14 B per parameter
    assert checkpoint_bytes(1e9, 2.0) == 14e9


def test_goodput_time_to_train_gpu_hours_and_cost_by_hand() -> None:
    # 1,000 GPUs at 1/3,000 failures per GPU-hour: 1/3 per hour, M = 10,800 s
    cfg = GoodputConfig(rates_per_hour={"gpu": 1 / 3000}, write_bandwidth=2e12,
                        read_bandwidth=1e12, restart_s=600.0, rewarm_s=180.0,
                        interval_s=1000.0, price_per_gpu_hour=2.0)
    # checkpoint 1.2e14 B: write 60 s, read 120 s, R = 600 + 120 + 180 = 900 s
    g = goodput(cfg, counts={"gpu": 1000}, ckpt_bytes=1.2e14, step_s=10.0, ideal_s=86400.0)
    assert g.mtbf_s == pytest.approx(10800.0)
    assert g.write_s == pytest.approx(60.0) and g.restart_s == pytest.approx(900.0)
    assert g.goodput == pytest.approx(0.8260684, rel=1e-6)  # as in the test above
    # 86,400 / 0.8260684 = 104,591.82 s; x 1,000 GPUs / 3,600 = 29,053.28 GPU-hours; x 2
    assert g.time_to_train_s == pytest.approx(104591.82, rel=1e-6)
    assert g.gpu_hours == pytest.approx(29053.28, rel=1e-6)
    assert g.cost == pytest.approx(58106.57, rel=1e-6)
    # by default the interval is Daly's optimum (1,098.77 s, above) and no worse than 1,000
    daly = goodput(GoodputConfig(rates_per_hour={"gpu": 1 / 3000}, write_bandwidth=2e12,
                                 read_bandwidth=1e12, restart_s=600.0, rewarm_s=180.0),
                   counts={"gpu": 1000}, ckpt_bytes=1.2e14, step_s=10.0, ideal_s=86400.0)
    assert daly.interval_s == pytest.approx(1098.771, rel=1e-5)
    assert daly.goodput >= g.goodput and daly.cost is None


def test_interval_shorter_than_a_step_is_an_error() -> None:
    cfg = GoodputConfig(interval_s=5.0)
    with pytest.raises(ValueError, match="shorter than one step"):
        goodput(cfg, counts={"gpu": 8}, ckpt_bytes=1e9, step_s=10.0, ideal_s=100.0)


@given(st.floats(1.0, 1e3), st.floats(1e4, 1e7), st.floats(0.0, 1e3))
def test_daly_interval_is_near_optimal(write: float, mtbf: float, restart: float) -> None:
    # Daly's interval beats (or ties) half and twice itself whenever the model holds
    tau = daly_interval(write, mtbf)
    g = goodput_fraction(tau, write, restart, mtbf)
    for other in (tau / 2, tau * 2):
        assert g >= goodput_fraction(other, write, restart, mtbf) - 1e-9


@pytest.mark.parametrize("data, message", [
    ({"failures_per_hour": {"gpu": -1e-5}}, "failures_per_hour.gpu must be a finite number"),
    ({"failures_per_hour": {"tpu": 1e-5}}, "unknown component"),
    ({"price_per_gpu_hour": -2}, "price_per_gpu_hour must be a finite number >= 0"),
    ({"checkpoint_write_bandwidth": "0GB/s"}, "checkpoint_write_bandwidth"),
    ({"checkpoint_interval": "0s"}, "checkpoint_interval"),
    ({"restart": "soon"}, "goodput.restart"),
    ({"mtbf": 3}, "unknown key"),
])
def test_bad_goodput_input(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        goodput_config(data)


def test_goodput_config_parses_units() -> None:
    cfg = goodput_config({"checkpoint_write_bandwidth": "1TB/s", "restart": "5min",
                          "checkpoint_interval": "30min", "price_per_gpu_hour": 2.5,
                          "failures_per_hour": {"switch": 0}})
    assert cfg.write_bandwidth == 1e12 and cfg.restart_s == 300.0
    assert cfg.interval_s == 1800.0 and cfg.price_per_gpu_hour == 2.5
    assert cfg.rates_per_hour["switch"] == 0.0
    assert cfg.rates_per_hour["gpu"] == DEFAULT_RATES_PER_HOUR["gpu"]

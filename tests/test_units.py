"""Unit parsing at the edges: every accepted spelling, converted by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simtrain.units import (
    fmt_bytes,
    fmt_seconds,
    parse_bandwidth,
    parse_bytes,
    parse_flop_rate,
    parse_mebibytes,
    parse_seconds,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("25MB", 25e6), ("25MiB", 25 * 2**20), ("80GiB", 80 * 2**30), ("8G", 8e9),
    ("1.5KB", 1500.0), ("512", 512.0), (1024, 1024.0), ("100 B", 100.0), ("8Mb", 1e6),
])
def test_bytes(text, expected):
    assert parse_bytes(text) == pytest.approx(expected)


@pytest.mark.parametrize(("text", "expected"), [
    ("400Gbps", 50e9), ("200Gb/s", 25e9), ("50GB/s", 50e9), ("25 GBps", 25e9),
    ("1.6Tbps", 200e9), (3e11, 3e11),
])
def test_bandwidth(text, expected):
    assert parse_bandwidth(text) == pytest.approx(expected)


@pytest.mark.parametrize(("text", "expected"), [
    ("2us", 2e-6), ("1.5 ms", 1.5e-3), ("10ns", 1e-8), ("3s", 3.0), (0.25, 0.25), ("2µs", 2e-6),
])
def test_seconds(text, expected):
    assert parse_seconds(text) == pytest.approx(expected)


def test_flop_rate_and_mebibytes():
    assert parse_flop_rate("989TFLOPS") == pytest.approx(989e12)
    assert parse_flop_rate("312 TFLOP/s") == pytest.approx(312e12)
    assert parse_mebibytes(25) == 25 * 2**20  # PyTorch's bucket_cap_mb is MiB
    assert parse_mebibytes("25MB") == 25e6


@pytest.mark.parametrize("bad", ["25XB", "fast", "", "1e", "-3MB"])
def test_bad_sizes_say_what_is_expected(bad):
    with pytest.raises(ValueError, match="(expected a size|must not be negative)"):
        parse_bytes(bad)


def test_bad_bandwidth_and_time():
    with pytest.raises(ValueError, match="expected a bandwidth such as 400Gbps"):
        parse_bandwidth("200Gbs")
    with pytest.raises(ValueError, match="must be positive"):
        parse_bandwidth(0)
    with pytest.raises(ValueError, match="expected a duration"):
        parse_seconds("2 fortnights")


def test_human_formatting():
    assert fmt_bytes(25 * 2**20) == "25.0 MiB"
    assert fmt_seconds(0.0012) == "1.20 ms"
    assert fmt_seconds(2.5e-6) == "2.50 us"


@given(st.floats(0, 1e15, allow_nan=False))
def test_bytes_roundtrip_through_mib(x):
    assert parse_bytes(f"{x / 2**20!r}MiB") == pytest.approx(x, rel=1e-9, abs=1e-6)


@pytest.mark.parametrize(("text", "expected"), [
    ("1EiB", 2.0**60), ("2kiB", 2048.0), ("1EB", 1e18),  # EiB used to be a KeyError
    # bucket_cap_mb: a bare number means MiB, as a number or a string; 25 MiB = 26214400 B
    ("25", 26214400.0), (25, 26214400.0), ("25MiB", 26214400.0), ("25MB", 25e6),
])
def test_binary_prefixes_and_mebibyte_counts(text, expected):
    parse = parse_bytes if "B" in str(text) and "Mi" not in str(text) else parse_mebibytes
    assert parse(text) == expected


@pytest.mark.parametrize("parse", [parse_bytes, parse_bandwidth, parse_seconds,
                                   parse_flop_rate, parse_mebibytes])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), "1e400", "inf", "nan"])
def test_non_finite_values_are_rejected(parse, value):
    with pytest.raises(ValueError):
        parse(value)


def test_durations_are_bounded_by_a_day():
    assert parse_seconds("24h") == 86400.0  # 24 x 3600 s: the largest accepted
    with pytest.raises(ValueError, match="at most 86,400 s"):
        parse_seconds("25h")
    with pytest.raises(ValueError, match="at most 86,400 s"):
        parse_seconds(1e300)


def test_bandwidth_has_a_floor_of_one_byte_per_second():
    assert parse_bandwidth("8bps") == 1.0  # 8 bit/s = 1 B/s, the slowest accepted
    with pytest.raises(ValueError, match="at least 1 B/s"):
        parse_bandwidth(5e-324)  # 1 / 5e-324 overflows: it was a ZeroDivisionError

"""The nccl-modern validation suite: file format, published busbw from times, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from simtrain.comm.validation import (
    DEFAULT_PATH,
    Point,
    _rows_of,
    count_points,
    load_series,
    published_busbw,
    transient_points,
)
from simtrain.errors import ScenarioError


def test_published_busbw_from_time_by_hand():
    # 8 ranks, 8 GiB in 31335.8 us (Voltage Park, 8x H100): algbw 8589934592 / 31335.8e-6
    # = 274.13 GB/s; x 2*7/8 = 479.72 GB/s, the printed busbw.
    assert published_busbw("all_reduce", 8, 8589934592, 31335.8) == pytest.approx(479.72,
                                                                                   abs=0.01)


def test_the_bundled_suite_loads_with_sources_and_reasons():
    series = load_series()
    assert count_points() == sum(len(s.points) for s in series) > 200
    assert all(s.source for s in series)
    skipped = [s for s in series if s.not_expressible]
    assert all("not modelled" in s.not_expressible for s in skipped)
    ids = {s.id for s in series}
    assert {"voltagepark-8xh100", "voltagepark-4x8xh100-ib", "coreweave-gb200-nvl72-72",
            "coreweave-gb200-nvl72-1440", "coreweave-64xh100-ib-sharp",
            "azure-nd-h100-v5-nvls", "mlengineering-p6-b200-4x8-efa"} <= ids


def test_a_series_predicts_each_point(tmp_path: Path):
    # issue-8xh100-nvls: 476 GB/s at 8 GiB; simtrain's NVLS gives ~490 (+3%).
    series = next(s for s in load_series() if s.id == "issue-8xh100-nvls")
    (row,) = _rows_of(series)
    assert row.extra["algorithm"] == "nvls"
    assert row.error == pytest.approx(0.03, abs=0.02)
    path = tmp_path / "nccl-modern.yaml"
    path.write_text("series: [{id: a, cluster: {preset: dgx-h100}, not_expressible: X is "
                    "not modelled, points: [{bytes: 8, busbw: 1}, {bytes: 16, busbw: 2}]}]")
    (skipped,) = load_series(path)
    rows = _rows_of(skipped)
    assert len(rows) == 2 and all(r.skipped == "not expressible: X is not modelled"
                                  for r in rows)


@pytest.mark.parametrize(("body", "message"), [
    ("series: [{id: a, cluster: {preset: dgx-h100}, points: [{busbw: 1}]}]",
     "series a point 1: needs bytes"),
    ("series: [{id: a, cluster: {preset: dgx-h100}, points: [{bytes: -4, busbw: 1}]}]",
     "bytes must be a positive integer"),
    ("series: [{id: a, cluster: {preset: nope}, points: [{bytes: 8, busbw: 1}]}]",
     "series a: cluster: "),
    ("series: [{id: a, cluster: {preset: dgx-h100}, colour: red, points: []}]",
     "unknown field(s) colour"),
    ("series: [{id: a}]", "series 1 needs id, cluster and points"),
    ("rows: []", "expected a mapping with suite and series"),
])
def test_bad_suite_files_name_the_file_and_series(tmp_path: Path, body: str, message: str):
    path = tmp_path / "nccl-modern.yaml"
    path.write_text(body)
    with pytest.raises(ScenarioError) as err:
        load_series(path)
    assert message in str(err.value) and "nccl-modern.yaml" in str(err.value)


def test_default_path_is_in_the_repository():
    assert DEFAULT_PATH.is_file() and DEFAULT_PATH.parent.name == "validation"


def test_unknown_harness_names_the_series(tmp_path: Path):
    path = tmp_path / "nccl-modern.yaml"
    path.write_text("series: [{id: a, cluster: {preset: dgx-h100}, harness: mpi, "
                    "points: [{bytes: 8, busbw: 1}]}]")
    with pytest.raises(ScenarioError, match="series a: harness 'mpi' is not one of"):
        load_series(path)


def test_voltage_park_single_node_floor_is_eight_launches():
    # nccl-tests -g 8: 8 x 4.24 us = 33.9 us per call while the device needs 15 us
    # (ring/LL: 6.6 + 14 x 0.6 us); published 33.18 us at 8 B.
    series = next(s for s in load_series() if s.id == "voltagepark-8xh100")
    assert series.harness == "nccl-tests-threads"
    one = type(series)(**{**series.__dict__, "points": series.points[:1]})
    (row,) = _rows_of(one)
    assert row.extra["time_us"] == pytest.approx(15.0, abs=0.1)
    assert row.extra["measured_us"] == pytest.approx(8 * 4.24, abs=0.01)


def test_a_point_slower_than_a_larger_message_is_not_compared():
    # Times are bytes / busbw (the series' busbw factor cancels): 32 KiB at 0.001 GB/s is
    # 32768 / 1e6 = 32.8 ms; the fastest larger message is 64 KiB at 0.5 GB/s, 65536 / 5e8
    # = 0.131 ms -> 250x, over the 2x limit; 64 KiB is faster than 2 MiB at 10 GB/s
    # (2097152 / 1e10 = 0.21 ms), so it stays.
    pts = (Point(32768, 0.001, False), Point(65536, 0.5, False), Point(2097152, 10.0, False))
    flagged = transient_points(pts)
    assert set(flagged) == {32768}
    assert flagged[32768].startswith("published time is 250.0x that of the 65,536-byte")
    # the bundled EFA series: its 32 and 64 KiB points, and no other point of the suite
    assert {s.id: sorted(transient_points(s.points)) for s in load_series()
            if transient_points(s.points)} == {"mlengineering-p6-b200-4x8-efa": [32768, 65536]}

"""Results table: index order, fixed columns, mixed types, atomic files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from simtrain.study.spec import Point
from simtrain.study.table import build_rows, write_tables


def _points() -> list[Point]:
    return [Point(i, f"p{i}", (("cluster.nic_bandwidth", v), ("step_time_s", i)))
            for i, v in enumerate(["200Gbps", 400e9, "800Gbps"])]


def test_rows_follow_point_order_and_skip_unfinished_points(tmp_path: Path) -> None:
    records: dict[str, dict[str, Any]] = {
        "p2": {"status": "ok", "error": None,
               "summary": {"step_time_s": 0.5, "parallelism": {"tp": 2}}},
        "p0": {"status": "invalid", "error": "out of memory", "summary": None},
        "p1": {"status": "failed", "error": "Boom: x"},
    }
    columns, rows = build_rows(_points(), records)
    assert [r["index"] for r in rows] == [0, 1, 2]
    columns, rows = build_rows(_points(), {k: v for k, v in records.items() if k != "p1"})
    assert [r["index"] for r in rows] == [0, 2]
    columns, rows = build_rows(_points(), records)
    # an axis named like a summary key keeps its name; the summary's gets a prefix
    assert columns == ["index", "point_id", "status", "error", "cluster.nic_bandwidth",
                       "step_time_s", "summary.step_time_s", "parallelism.tp"]
    assert rows[2]["summary.step_time_s"] == 0.5 and rows[2]["parallelism.tp"] == 2
    assert rows[0]["error"] == "out of memory" and rows[0]["parallelism.tp"] is None

    parquet, csv = write_tables(columns, rows, tmp_path)
    table = pq.read_table(parquet)
    assert table.column_names == columns
    # mixed "200Gbps" / 4e11 in one axis column become strings, not an error
    assert table.column("cluster.nic_bandwidth").to_pylist() == [
        "200Gbps", "400000000000.0", "800Gbps"]
    assert table.column("parallelism.tp").to_pylist() == [None, None, 2]
    lines = csv.read_text().splitlines()
    assert lines[1] == "0,p0,invalid,out of memory,200Gbps,0,,"
    assert lines[2] == "1,p1,failed,Boom: x,400000000000.0,1,,"
    assert lines[3] == "2,p2,ok,,800Gbps,2,0.5,2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv", "results.parquet"]

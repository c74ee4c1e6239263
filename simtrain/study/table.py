"""The results table: one row per finished point, rebuilt from the journal.

Columns: ``index``, ``point_id``, ``status``, ``error``, one column per axis (its dotted
key), then the flattened summary (nested keys dotted, e.g. ``parallelism.tp``; a summary
key equal to an axis key is prefixed ``summary.``). Rows are sorted by point index and
columns appear in a fixed order, so the same finished points give byte-identical CSV and
equal Parquet whichever executor ran them. Files are replaced atomically (temp + rename):
a reader never sees half a table.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from simtrain.study.spec import Point

FIXED = ("index", "point_id", "status", "error")


def build_rows(points: Sequence[Point], records: Mapping[str, Mapping[str, Any]]
               ) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, rows) for the points that have a record, in point-index order.

    Every row has every column (None where a point has no such value).
    """
    axes = [key for key, _ in points[0].values] if points else []
    columns: dict[str, None] = dict.fromkeys([*FIXED, *axes])
    rows: list[dict[str, Any]] = []
    for point in points:
        record = records.get(point.point_id)
        if record is None:
            continue
        row: dict[str, Any] = {"index": point.index, "point_id": point.point_id,
                               "status": record["status"], "error": record.get("error")}
        row.update(point.values)
        for key, value in _flatten(record.get("summary") or {}):
            column = f"summary.{key}" if key in FIXED or key in axes else key
            columns.setdefault(column, None)
            row[column] = value
        rows.append(row)
    return list(columns), [{c: row.get(c) for c in columns} for row in rows]


def write_tables(columns: Sequence[str], rows: Sequence[Mapping[str, Any]], folder: Path,
                 stem: str = "results") -> tuple[Path, Path]:
    """Write ``stem.parquet`` and ``stem.csv`` in ``folder`` atomically; return their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    arrays = [_arrow_column([row.get(c) for row in rows]) for c in columns]
    table = pa.table(arrays, names=list(columns))
    parquet = folder / f"{stem}.parquet"
    tmp = parquet.with_name(f".{parquet.name}.tmp")
    pq.write_table(table, tmp)
    _sync_replace(tmp, parquet)
    out_csv = folder / f"{stem}.csv"
    tmp = out_csv.with_name(f".{out_csv.name}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_csv_cell(row.get(c)) for c in columns])
    _sync_replace(tmp, out_csv)
    return parquet, out_csv


def _arrow_column(values: list[Any]) -> Any:
    """A pyarrow array; a column of mixed types (e.g. 25 and "25MB") becomes strings."""
    import pyarrow as pa

    values = [json.dumps(v) if isinstance(v, list | dict) else v for v in values]
    kinds = {type(v) for v in values if v is not None}
    if kinds <= {int, float} or len(kinds) <= 1:
        try:
            return pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass
    return pa.array([None if v is None else v if isinstance(v, str) else json.dumps(v)
                     for v in values], type=pa.string())


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def _flatten(summary: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in summary.items():
        if isinstance(value, Mapping):
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _sync_replace(tmp: Path, final: Path) -> None:
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)

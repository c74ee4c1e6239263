"""Per-op efficiency tables: measured kernel times the compute model consults first.

A table is YAML (``rows:`` of mappings, optional top-level ``gpu`` and ``dtype`` defaults)
or CSV (a header naming the same fields). One row is one measured kernel shape:

- ``op``: an op kind of simtrain.workload.model (gemm, attention, elementwise, norm, ...);
- its size: ``m, n, k`` (and ``batch``, default 1) for gemm, ``flops`` for attention (as
  ``Op.flops`` counts them: non-causal, backward 2.5x forward), ``bytes`` for memory-bound
  kinds;
- ``dtype`` (bf16, fp16, fp8, fp32...) and ``gpu`` (a catalogue name, e.g. h100-sxm);
- ``time_s`` (measured kernel time, launch excluded) or ``efficiency`` (fraction of the
  GPU's dense peak for gemm/attention, of HBM bandwidth for memory-bound kinds).

Lookup (``measured_time``): an exact shape returns its measured time. Otherwise the
efficiency is interpolated linearly in log(size) between the two nearest measured sizes
that bracket the query: for gemm along one dimension while the two others match (m first,
then k, then n: m is the token count, which varies most); for the others along bytes or
flops. A query outside the measured range, or with no row for its GPU and dtype, returns
None and the caller falls back to the roofline. Interpolating efficiency rather than
time keeps the time proportional to work between two measured points.
"""

from __future__ import annotations

import bisect
import csv
import io
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from simtrain.errors import ScenarioError
from simtrain.hardware.gpus import GPUS
from simtrain.units import parse_bytes, parse_seconds
from simtrain.workload.model import OP_KINDS, Op

MEMORY_KINDS = tuple(k for k in OP_KINDS if k not in ("gemm", "attention"))
FIELDS = ("op", "m", "n", "k", "batch", "bytes", "flops", "dtype", "gpu", "time_s",
          "efficiency", "count", "name")
_GEMM_DIMS = ("m", "k", "n")  # interpolation order (see module docstring)
_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "tf32": 4, "fp8": 1}


class GPUPeaks(Protocol):
    """What a lookup needs from a GPU (simtrain.hardware.gpus.GPUSpec); rows are matched
    to the GPU's ``name`` attribute when it has one."""

    @property
    def hbm_bandwidth(self) -> float: ...

    def flops(self, dtype: str) -> float: ...


@dataclass(frozen=True, slots=True)
class Row:
    """One measured shape: ``size`` is (m, n, k, batch), (flops,) or (bytes,)."""

    op: str
    size: tuple[float, ...]
    dtype: str
    gpu: str
    time_s: float | None
    efficiency: float | None
    count: int = 1
    name: str = ""

    def work(self) -> float:
        """FLOPs (gemm, attention) or bytes (memory-bound) of this row."""
        if self.op == "gemm":
            m, n, k, b = self.size
            return 2.0 * m * n * k * b
        return self.size[0]


@dataclass
class Table:
    """Rows of one or more files, indexed by (op, gpu, dtype) for lookup."""

    sources: tuple[str, ...]
    rows: list[Row]
    _index: dict[tuple[str, str, str], list[Row]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for row in self.rows:
            self._index.setdefault((row.op, row.gpu, row.dtype), []).append(row)
        for rows in self._index.values():
            rows.sort(key=lambda r: r.size)

    def candidates(self, op: str, gpu: str, dtype: str) -> list[Row]:
        return self._index.get((op, gpu, dtype), [])


def _canon_dtype(value: object) -> str:
    text = str(value).strip().lower()
    return {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32",
            "float": "fp32", "float8": "fp8"}.get(text, text)


def parse_row(raw: Mapping[str, Any], defaults: Mapping[str, Any]) -> Row:
    """One validated Row from a mapping; ValueError naming the field otherwise."""
    data = {**defaults, **{k: v for k, v in raw.items() if v not in (None, "")}}
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}; expected: {', '.join(FIELDS)}")
    op = str(data.get("op", "")).strip()
    if op not in OP_KINDS:
        raise ValueError(f"op: {op!r} is not an op kind; expected one of {', '.join(OP_KINDS)}")
    gpu = str(data.get("gpu", "")).strip().lower()
    if gpu not in GPUS:
        raise ValueError(f"gpu: {gpu!r} is not in the catalogue; expected one of "
                         f"{', '.join(GPUS)}")
    dtype = _canon_dtype(data.get("dtype", "bf16"))
    if dtype not in _DTYPE_BYTES:
        raise ValueError(f"dtype: {dtype!r}; expected one of {', '.join(_DTYPE_BYTES)}")
    if op == "gemm":
        size = tuple(_positive(data, d, int) for d in ("m", "n", "k")) + (
            _positive({"batch": data.get("batch", 1)}, "batch", int),)
    elif op == "attention":
        size = (_positive(data, "flops", float),)
    else:
        if "bytes" not in data:
            raise ValueError(f"bytes: required for {op} rows")
        size = (parse_bytes(data["bytes"]),)
        if size[0] <= 0:
            raise ValueError(f"bytes: must be positive, got {data['bytes']!r}")
    time_s = parse_seconds(data["time_s"]) if "time_s" in data else None
    eff = float(data["efficiency"]) if "efficiency" in data else None
    if (time_s is None) == (eff is None):
        raise ValueError("give exactly one of time_s (measured seconds) or efficiency")
    if time_s is not None and time_s <= 0:
        raise ValueError(f"time_s: must be positive, got {data['time_s']!r}")
    if eff is not None and not 0.0 < eff <= 1.0:
        raise ValueError(f"efficiency: must be a fraction in (0, 1], got {eff}")
    count = _positive({"count": data.get("count", 1)}, "count", int)
    return Row(op, size, dtype, gpu, time_s, eff, count, str(data.get("name", "")))


def _positive(data: Mapping[str, Any], key: str, kind: type) -> Any:
    if key not in data:
        raise ValueError(f"{key}: required")
    try:
        value = kind(float(data[key])) if kind is int else kind(data[key])
    except (TypeError, ValueError):
        raise ValueError(f"{key}: expected a number, got {data[key]!r}") from None
    if value <= 0:
        raise ValueError(f"{key}: must be positive, got {data[key]!r}")
    return value


def _records(path: Path) -> Iterable[tuple[int, Mapping[str, Any], Mapping[str, Any]]]:
    """(line, row mapping, defaults) of a YAML or CSV table file."""
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(io.StringIO(text))
        for row in reader:
            yield reader.line_num, {k.strip(): v for k, v in row.items() if k}, {}
        return
    doc = YAML(typ="rt").load(io.StringIO(text))
    if not isinstance(doc, CommentedMap) or not isinstance(doc.get("rows"), CommentedSeq):
        raise ScenarioError("expected a mapping with a 'rows:' list (and optional gpu, "
                            "dtype defaults)", source=str(path), line=1)
    defaults = {k: doc[k] for k in ("gpu", "dtype") if k in doc}
    extra = sorted(set(doc) - {"rows", "gpu", "dtype", "source"})
    if extra:
        raise ScenarioError(f"unknown top-level key {extra[0]!r}; expected rows, gpu, dtype, "
                            "source", source=str(path), line=doc.lc.key(extra[0])[0] + 1)
    rows = doc["rows"]
    for i, row in enumerate(rows):
        line = rows.lc.item(i)[0] + 1
        if not isinstance(row, Mapping):
            raise ScenarioError("each row must be a mapping such as {op: gemm, m: 4096, ...}",
                                source=str(path), line=line)
        yield line, dict(row), defaults


@lru_cache(maxsize=64)
def _load_file(path: str, _mtime: float, _size: int) -> tuple[Row, ...]:
    rows = []
    try:
        for line, raw, defaults in _records(Path(path)):
            try:
                rows.append(parse_row(raw, defaults))
            except ValueError as exc:
                raise ScenarioError(str(exc), source=path, line=line,
                                    field=f"row {len(rows) + 1}") from None
    except OSError as exc:
        raise ScenarioError(f"cannot read efficiency table: {exc.strerror}",
                            source=path) from None
    except (YAMLError, csv.Error, UnicodeDecodeError) as exc:
        raise ScenarioError(f"not a YAML or CSV efficiency table: {exc}".splitlines()[0],
                            source=path) from None
    return tuple(rows)


def load_table(paths: Sequence[str | Path]) -> Table:
    """All rows of ``paths`` (YAML or CSV); ScenarioError naming file and row if bad.

    Tables are parsed and indexed once per file version (path, mtime, size)."""
    keys = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError as exc:
            raise ScenarioError(f"cannot read efficiency table: {exc.strerror}",
                                source=str(p)) from None
        keys.append((str(p), st.st_mtime, st.st_size))
    return _indexed(tuple(keys))


@lru_cache(maxsize=16)
def _indexed(keys: tuple[tuple[str, float, int], ...]) -> Table:
    rows = [row for key in keys for row in _load_file(*key)]
    return Table(tuple(k[0] for k in keys), rows)


def resolve_tables(paths: Sequence[str], base: Path) -> list[str]:
    """Absolute paths of ``paths`` (relative ones against ``base``), each loaded once to
    report a bad table at scenario load time."""
    out = [str((base / p).resolve()) if not Path(p).is_absolute() else p for p in paths]
    load_table(out)
    return out


def _efficiency(row: Row, gpu: GPUPeaks) -> float:
    if row.efficiency is not None:
        return row.efficiency
    assert row.time_s is not None
    peak = gpu.hbm_bandwidth if row.op in MEMORY_KINDS else gpu.flops(row.dtype)
    return row.work() / (row.time_s * peak)


def _interpolate(x: float, points: Sequence[tuple[float, float]]) -> float | None:
    """Linear interpolation of y in log(x) over sorted (x, y); None outside the range."""
    xs = [p[0] for p in points]
    i = bisect.bisect_left(xs, x)
    if i < len(xs) and xs[i] == x:
        return points[i][1]
    if i == 0 or i == len(xs):
        return None
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    w = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return y0 + w * (y1 - y0)


def _averaged(rows: Sequence[Row], key: Any, gpu: GPUPeaks) -> list[tuple[float, float]]:
    """(size, efficiency) per distinct size, repeated rows averaged by their counts."""
    acc: dict[float, list[float]] = {}
    for r in rows:
        a = acc.setdefault(key(r), [0.0, 0.0])
        a[0] += _efficiency(r, gpu) * r.count
        a[1] += r.count
    return sorted((x, e / c) for x, (e, c) in acc.items())


def table_efficiency(table: Table, op: Op, gpu: GPUPeaks, dtype: str) -> float | None:
    """The measured or interpolated efficiency of ``op``, None if the table cannot say."""
    rows = table.candidates(op.kind, getattr(gpu, "name", ""), _canon_dtype(dtype))
    if not rows:
        return None
    if op.kind == "gemm":
        if op.gemm_shape is None or op.groups > 1:  # tables hold single GEMMs
            return None
        q = dict(zip(("m", "n", "k"), op.gemm_shape, strict=True))
        for free in _GEMM_DIMS:
            fixed = [d for d in ("m", "n", "k") if d != free]
            pos = {"m": 0, "n": 1, "k": 2}
            line = [r for r in rows if r.size[3] == 1
                    and all(r.size[pos[d]] == q[d] for d in fixed)]
            if line:
                eff = _interpolate(q[free], _averaged(line, lambda r, i=pos[free]: r.size[i],
                                                      gpu))
                if eff is not None:
                    return eff
        return None
    size = op.flops if op.kind == "attention" else op.bytes
    if size <= 0:
        return None
    return _interpolate(size, _averaged(rows, lambda r: r.size[0], gpu))


def measured_time(op: Op, gpu: GPUPeaks, paths: Sequence[str], dtype: str) -> float | None:
    """Kernel seconds of ``op`` from the tables at ``paths`` (launch excluded), or None."""
    eff = table_efficiency(load_table(paths), op, gpu, dtype)
    if eff is None:
        return None
    if op.kind in MEMORY_KINDS:
        return op.bytes / (gpu.hbm_bandwidth * eff)
    return op.flops / (gpu.flops(dtype) * eff)


def write_table(path: Path, rows: Sequence[Row], source: str = "") -> None:
    """Write ``rows`` as YAML (or CSV for a .csv path) atomically: temp file, then rename."""
    records = [_record(r) for r in rows]
    if path.suffix.lower() == ".csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(FIELDS), lineterminator="\n")
        writer.writeheader()
        writer.writerows(records)
        text = buf.getvalue()
    else:
        buf = io.StringIO()
        yaml = YAML(typ="safe")
        yaml.default_flow_style = None
        yaml.width = 4096
        yaml.dump({"source": source, "rows": records}, buf)
        text = buf.getvalue()
    atomic_write(path, text)


def _record(row: Row) -> dict[str, Any]:
    rec: dict[str, Any] = {"op": row.op}
    if row.op == "gemm":
        rec.update(zip(("m", "n", "k", "batch"), (int(v) for v in row.size), strict=True))
    elif row.op == "attention":
        rec["flops"] = row.size[0]
    else:
        rec["bytes"] = row.size[0]
    rec.update(dtype=row.dtype, gpu=row.gpu)
    if row.time_s is not None:
        rec["time_s"] = row.time_s
    else:
        rec["efficiency"] = row.efficiency
    rec.update(count=row.count, name=row.name)
    return rec


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def measured_share(units: Iterable[Any], gpu: GPUPeaks, paths: Sequence[str], dtype: str,
                   time_of: Any) -> dict[str, Any]:
    """How much of one microbatch's compute (forward + backward kernels of ``units``, the
    plan's per-stage units) the tables supplied: the summary's ``measured_compute`` note.

    ``time_of(op)`` is the compute model's time of an op; an op counts as measured when
    the tables give it a time.
    """
    from simtrain.parallel.shard import Compute
    from simtrain.workload.model import backward_ops

    measured = modelled = 0.0
    n_measured = n_modelled = 0
    for unit in units:
        for step in unit.steps:
            if not isinstance(step, Compute):
                continue
            for op in (step.op, *backward_ops(step.op)):
                t = time_of(op)
                if measured_time(op, gpu, paths, dtype) is not None:
                    measured, n_measured = measured + t, n_measured + 1
                else:
                    modelled, n_modelled = modelled + t, n_modelled + 1
    total = measured + modelled
    return {"measured_fraction": measured / total if total > 0 else 0.0,
            "measured_ops": n_measured, "modelled_ops": n_modelled,
            "tables": [Path(p).name for p in paths]}

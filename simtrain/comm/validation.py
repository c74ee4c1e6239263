"""The ``nccl-modern`` validation suite: simulated bus bandwidth against modern NCCL runs.

``scenarios/validation/nccl-modern.yaml`` holds one series per published table (copied
from ../shared/reference/nccl_modern.yaml with its source): a cluster (preset plus
overrides), an op, an algorithm (``auto`` unless the source names one), optionally the
ranks, and points of message size and published busbw. Where a source prints the time,
the published busbw is recomputed from it (``busbw = factor · bytes / time``), which keeps
small sizes whose printed busbw rounds to 0.00. A series simtrain cannot express carries
``not_expressible: <why>`` and is listed, never dropped. Every point becomes one row of
``simtrain validate`` with its signed busbw error, except a point whose published time is
more than ``TRANSIENT_RATIO`` times a larger message's in the same series: in steady state
a larger collective never takes less time, so such a point carries a one-time cost (first
calls' connection setup the benchmark's warm-up did not absorb) that a per-call model does
not express; it is listed as not comparable, with both times.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from simtrain.comm.harness import HARNESSES, measured_time
from simtrain.comm.model import busbw_factor
from simtrain.errors import ScenarioError

if TYPE_CHECKING:
    from simtrain.validation import Row

SUITE = "nccl-modern"
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "scenarios" / "validation" / f"{SUITE}.yaml"
_SERIES_FIELDS = {"id", "source", "cluster", "op", "algorithm", "protocol", "ranks", "note",
                  "not_expressible", "points", "harness"}
# Above this many GPUs a point runs on the engine's analytic backend (idle-network time,
# what the flow backend gives for one collective alone) to keep the suite fast.
ANALYTIC_ABOVE = 256
# A point slower than a larger message of its series by more than this is a transient
# (module docstring). Steady-state noise between neighbouring sizes in the suite's
# sources stays under 1.12x (P6-B200 1x8 at 64 KiB); the AWS P6-B200 4x8 EFA series' 32
# and 64 KiB points take 17.8x and 8.9x its 2 MiB time.
TRANSIENT_RATIO = 2.0


@dataclass(frozen=True)
class Point:
    """One published size: its bytes and busbw (GB/s), and how the busbw was obtained."""

    nbytes: int
    busbw_gbps: float
    from_time: bool


@dataclass(frozen=True)
class Series:
    """One published table and the simulated setup that represents it."""

    id: str
    source: str
    cluster: dict[str, Any]
    op: str
    algorithm: str
    protocol: str
    ranks: tuple[int, ...] | None
    note: str
    not_expressible: str
    points: tuple[Point, ...]
    harness: str = "nccl-tests"  # what timed it (simtrain.comm.harness)


def published_busbw(op: str, group: int, nbytes: int, time_us: float) -> float:
    """busbw (GB/s) from a printed time: factor(op, P) · bytes / time (nccl-tests)."""
    return busbw_factor(op, group) * nbytes / (time_us * 1e-6) / 1e9


def _fail(path: Path, message: str, field: str | None = None) -> ScenarioError:
    return ScenarioError(message, source=str(path), field=field)


def _point(path: Path, sid: str, k: int, raw: Any, op: str, group: int | None) -> Point:
    where = f"series {sid} point {k + 1}"
    if not isinstance(raw, dict) or "bytes" not in raw or ("busbw" not in raw
                                                             and "time_us" not in raw):
        raise _fail(path, f"{where}: needs bytes and busbw or time_us, got {raw!r}", "points")
    nbytes = raw["bytes"]
    if not isinstance(nbytes, int) or nbytes <= 0:
        raise _fail(path, f"{where}: bytes must be a positive integer, got {nbytes!r}",
                    "points")
    time_us = raw.get("time_us")
    if time_us is not None and group is not None:
        if not isinstance(time_us, int | float) or time_us <= 0:
            raise _fail(path, f"{where}: time_us must be > 0, got {time_us!r}", "points")
        return Point(nbytes, published_busbw(op, group, nbytes, float(time_us)), True)
    busbw = raw.get("busbw")
    if not isinstance(busbw, int | float) or busbw < 0:
        raise _fail(path, f"{where}: busbw must be a number >= 0, got {busbw!r}", "points")
    return Point(nbytes, float(busbw), False)


def load_series(path: Path = DEFAULT_PATH) -> list[Series]:
    """Every series of the suite file; a clear ScenarioError naming the series and field."""
    try:
        data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _fail(path, f"cannot read validation suite: {exc.strerror}") from None
    except YAMLError as exc:
        raise _fail(path, f"not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("series"), list):
        raise _fail(path, "expected a mapping with suite and series")
    out = []
    for k, raw in enumerate(data["series"]):
        if not isinstance(raw, dict) or not {"id", "cluster", "points"} <= set(raw):
            raise _fail(path, f"series {k + 1} needs id, cluster and points", "series")
        sid = str(raw["id"])
        unknown = sorted(set(raw) - _SERIES_FIELDS)
        if unknown:
            raise _fail(path, f"series {sid}: unknown field(s) {', '.join(unknown)}; "
                        f"expected: {', '.join(sorted(_SERIES_FIELDS))}", "series")
        op = str(raw.get("op", "all_reduce"))
        ranks = tuple(raw["ranks"]) if raw.get("ranks") else None
        group = len(ranks) if ranks else _cluster_gpus(path, sid, raw["cluster"])
        points = tuple(_point(path, sid, i, p, op, group) for i, p in enumerate(raw["points"]))
        harness = str(raw.get("harness", "nccl-tests"))
        if harness not in HARNESSES:
            raise _fail(path, f"series {sid}: harness {harness!r} is not one of: "
                        f"{', '.join(HARNESSES)}", "harness")
        out.append(Series(sid, str(raw.get("source", "")), dict(raw["cluster"]), op,
                          str(raw.get("algorithm", "auto")), str(raw.get("protocol", "auto")),
                          ranks, str(raw.get("note", "")),
                          str(raw.get("not_expressible", "")), points, harness))
    return out


def _cluster_gpus(path: Path, sid: str, cluster: Any) -> int | None:
    from simtrain.hardware.topology import ClusterConfig

    try:
        cfg = ClusterConfig(**cluster)
    except (TypeError, ValueError) as exc:
        message = " ".join(str(exc).split("\n"))
        raise _fail(path, f"series {sid}: cluster: {message}", "cluster") from None
    return cfg.nodes * cfg.gpus_per_node if cfg.custom is None else len(cfg.custom.gpus)


def _rows_of(series: Series) -> list[Row]:
    from simtrain.comm.model import CommModel
    from simtrain.comm.phases import servers
    from simtrain.comm.sweep import run_sweep
    from simtrain.hardware.topology import ClusterConfig, build_cluster
    from simtrain.validation import Row, signed_error

    def row(p: Point, predicted: float | None, extra: dict[str, Any], skipped: str = "") -> Row:
        error = None if predicted is None or p.busbw_gbps <= 0 else signed_error(
            predicted, p.busbw_gbps)
        return Row(SUITE, f"{series.id}@{p.nbytes}", "busbw_gbps", p.busbw_gbps, predicted,
                   error, "GB/s", note=series.note,
                   skipped=skipped or ("" if error is not None else "published busbw is 0"),
                   extra={"source": series.source, "busbw_from_time": p.from_time, **extra})

    if series.not_expressible:
        return [row(p, None, {}, f"not expressible: {series.not_expressible}")
                for p in series.points]
    transient = transient_points(series.points)
    cluster = build_cluster(ClusterConfig(**series.cluster))
    comm = CommModel(cluster, "nccl", arch=cluster.gpu_spec.arch, protocol=series.protocol)
    ranks = series.ranks or tuple(range(cluster.num_gpus))
    sizes = [p.nbytes for p in series.points]
    network = "analytic" if len(ranks) > ANALYTIC_ABOVE else "flow"
    swept = run_sweep(cluster, comm, series.op, ranks, sizes, series.algorithm, network)
    per_process = max(len(g) for g in servers(ranks, cluster))
    factor = busbw_factor(series.op, len(ranks))
    out = []
    for p, r in zip(series.points, swept, strict=True):
        shown = measured_time(series.harness, r.time_s, per_process)
        busbw = factor * p.nbytes / shown / 1e9 if shown > 0 else r.busbw_gbps
        extra = {"algorithm": r.algorithm, "protocol": r.protocol,
                 "time_us": r.time_s * 1e6, "measured_us": shown * 1e6,
                 "harness": series.harness}
        if p.nbytes in transient:
            out.append(row(p, None, {**extra, "simulated_busbw_gbps": busbw},
                           f"not comparable: {transient[p.nbytes]}"))
        else:
            out.append(row(p, busbw, extra))
    return out


def transient_points(points: tuple[Point, ...]) -> dict[int, str]:
    """Bytes -> why, for points whose published time (bytes / busbw; the busbw factor is
    the series' own) exceeds ``TRANSIENT_RATIO`` times a larger message's."""
    out: dict[int, str] = {}
    times = [(p.nbytes, p.nbytes / p.busbw_gbps) for p in points if p.busbw_gbps > 0]
    for nbytes, t in times:
        later = [(t2, b2) for b2, t2 in times if b2 > nbytes]
        if not later:
            continue
        fastest, at = min(later)
        if t > TRANSIENT_RATIO * fastest:
            out[nbytes] = (f"published time is {t / fastest:.1f}x that of the {at:,}-byte "
                           f"message in the same series; a larger collective does not take "
                           f"less time in steady state (a one-time setup cost, not modelled)")
    return out


def count_points(path: Path = DEFAULT_PATH) -> int:
    """Rows the suite will produce (for a progress bar)."""
    return sum(len(s.points) for s in load_series(path))


def suite_rows(path: Path = DEFAULT_PATH,
               progress: Callable[[str], None] | None = None) -> list[Row]:
    """Predict every point of every series; ``progress(row_id)`` after each row."""
    out: list[Row] = []
    for series in load_series(path):
        rows = _rows_of(series)
        out.extend(rows)
        if progress:
            for r in rows:
                progress(r.id)
    return out

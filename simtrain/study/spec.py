"""Sweep files: a base scenario plus axes, expanded into points with stable ids.

A sweep file::

    name: layers-x-buckets          # optional; default: the file's stem
    base: ../quickstart.yaml        # a scenario path relative to this file, or inline mapping
    axes:                           # the grid: every combination, first dimension slowest
      model.num_layers: [2, 4, 8]
      parallelism.ddp.bucket_cap_mb: {start: 1, stop: 64, mul: 2}   # 1, 2, 4, ..., 64
    zip:                            # optional: groups of axes that advance together,
      - cluster.nodes: [1, 2]       # each group one grid dimension
        training.global_batch_size: [64, 128]
    objective: {metric: step_time_s, goal: min}   # optional: how to rank best/worst

Grid dimensions follow the file's order of ``axes`` and ``zip``; the first varies slowest.
Axis keys are the scenario's dotted keys (as ``--set``); values are any YAML value
("400Gbps", 25, true). Ranges are ``{start, stop, step}`` or ``{start, stop, mul}``, with
``stop`` inclusive. A point's id is a hash of the base scenario's content and the point's
axis values, so a resumed sweep recognises exactly the points it has already run.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from simtrain.errors import ScenarioError
from simtrain.report.schema import METRICS
from simtrain.yamlfile import read_file

MAX_POINTS = 1_000_000  # a range or grid larger than this is surely a typo
# Numeric summary keys a sweep can rank by: the schema's always-present numbers
# (simtrain.report.schema, the one list of summary metrics), and the flattened groups such
# as exposed_comm_by_kind.dp_comm.
OBJECTIVE_METRICS = tuple(m.key for m in METRICS if not m.optional)
OBJECTIVE_PREFIXES = ("exposed_comm_by_kind.", "memory_breakdown.", "parallelism.", "jobs.",
                      "variability.")
_TOP_KEYS = ("name", "description", "base", "axes", "zip", "objective")


@dataclass(frozen=True)
class Point:
    """One scenario of the sweep: its grid index, stable id and axis values (file order)."""

    index: int
    point_id: str
    values: tuple[tuple[str, Any], ...]

    @property
    def overrides(self) -> list[str]:
        """The values as ``load_scenario`` overrides (``key=<value as JSON, which is YAML>``)."""
        return [f"{key}={json.dumps(value)}" for key, value in self.values]

    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)


@dataclass(frozen=True)
class Objective:
    """The summary metric that ranks points for the report (best = lowest when goal=min)."""

    metric: str = "step_time_s"
    goal: Literal["min", "max"] = "min"


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep: the base scenario as plain data and the grid dimensions.

    ``dims`` is a list of dimensions; a dimension is one axis or a zipped group, given as
    ``{axis key: values}`` whose value lists have equal lengths. ``base_path`` is the base
    scenario file (None when inline); ``base`` is its content, with ``name`` filled in.
    """

    name: str
    base: dict[str, Any]
    dims: list[dict[str, list[Any]]]
    base_path: Path | None = None
    source: str = "<sweep>"
    objective: Objective = field(default_factory=Objective)
    lines: dict[str, int] = field(default_factory=dict)  # axis key -> line in the sweep file

    @property
    def axes(self) -> list[str]:
        """Every axis key, in grid order."""
        return [key for dim in self.dims for key in dim]

    @property
    def base_label(self) -> str:
        return str(self.base_path) if self.base_path is not None else f"{self.source} (base)"

    @property
    def base_digest(self) -> str:
        return hashlib.sha256(_canonical(self.base).encode()).hexdigest()

    def __len__(self) -> int:
        return math.prod(len(next(iter(dim.values()))) for dim in self.dims)

    def points(self) -> list[Point]:
        """Every point in grid order (first dimension slowest); ids are unique.

        Raises ScenarioError when two points have the same values (a value listed twice).
        """
        digest = self.base_digest
        sizes = [range(len(next(iter(dim.values())))) for dim in self.dims]
        out: list[Point] = []
        seen: dict[str, int] = {}
        for index, combo in enumerate(itertools.product(*sizes)):
            values = tuple((key, vals[i]) for dim, i in zip(self.dims, combo, strict=True)
                           for key, vals in dim.items())
            pid = point_id(digest, values)
            if pid in seen:
                raise self.error(None, f"points {seen[pid]} and {index} are the same "
                                 f"({_fmt_values(values)}); remove the repeated axis value")
            seen[pid] = index
            out.append(Point(index, pid, values))
        return out

    def error(self, axis: str | None, message: str) -> ScenarioError:
        """A ScenarioError pointing at ``axis`` in the sweep file (or at the file)."""
        return ScenarioError(message, source=self.source,
                             line=self.lines.get(axis) if axis else None,
                             field=f"axis {axis}" if axis else None)


def point_id(base_digest: str, values: Sequence[tuple[str, Any]]) -> str:
    """Stable 16-hex-digit id of a point: sha256 of the base digest and the axis values."""
    text = _canonical({"base": base_digest, "values": [list(kv) for kv in values]})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def expand_range(spec: Mapping[str, Any]) -> list[Any]:
    """``{start, stop, step}`` or ``{start, stop, mul}`` -> values, ``stop`` inclusive.

    Integers stay integers when start and step (or mul) are integers. Raises ValueError with
    the fix when the range is empty, infinite or has unknown keys.
    """
    unknown = sorted(set(spec) - {"start", "stop", "step", "mul"})
    if unknown:
        raise ValueError(f"unknown range key(s) {', '.join(unknown)}; a range is "
                         "{start, stop, step} or {start, stop, mul}")
    if "start" not in spec or "stop" not in spec or ("step" in spec) == ("mul" in spec):
        raise ValueError("a range needs start, stop and exactly one of step or mul, "
                         "e.g. {start: 1, stop: 64, mul: 2}")
    start, stop = spec["start"], spec["stop"]
    by = spec.get("step", spec.get("mul"))
    for name, v in (("start", start), ("stop", stop), ("step" if "step" in spec else "mul", by)):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"range {name} must be a finite number, got {v!r}")
    exact = all(isinstance(v, int) for v in (start, by))
    tol = 1e-9 * max(abs(start), abs(stop), 1)
    values: list[Any] = []
    if "step" in spec:
        if by == 0 or (stop - start) * by < 0:
            raise ValueError(f"step {by} never goes from {start} to {stop}; "
                             "use a step with the sign of stop - start")
        n = int(math.floor((stop - start) / by + 1e-9)) + 1
        _check_count(n)
        values = [start + i * by for i in range(n)]
    else:
        if start <= 0 or stop < start or by <= 1:
            raise ValueError(f"mul range needs 0 < start <= stop and mul > 1, got start="
                             f"{start}, stop={stop}, mul={by}")
        v = start
        while v <= stop + tol:
            values.append(v)
            _check_count(len(values))
            v = v * by
    return [v if exact else float(round(v, 12)) for v in values]


def load_sweep(source: str | Path | Mapping[str, Any], base_dir: Path | None = None
               ) -> SweepSpec:
    """Read and check a sweep file (or mapping); raise ScenarioError naming the bad part.

    ``base_dir`` resolves a relative ``base`` path when ``source`` is a mapping (default:
    the working directory); for a file it is the file's folder.
    """
    lines: dict[str, int] = {}
    if isinstance(source, Mapping):
        data, name, label = dict(source), "sweep", "<sweep>"
        folder = base_dir or Path.cwd()
    else:
        path = Path(source)
        label, name, folder = str(path), path.stem, path.parent
        data = _read_yaml(path, lines)
    def err(message: str, key: str | None = None) -> ScenarioError:
        return ScenarioError(message, source=label, line=lines.get(f"/{key}") if key else None,
                             field=key)

    unknown = sorted(str(k) for k in set(data) - set(_TOP_KEYS))
    if unknown:
        raise err(f"unknown key(s) {', '.join(unknown)}; a sweep file has: "
                  f"{', '.join(_TOP_KEYS)}", unknown[0])
    if "base" not in data:
        raise err("missing 'base': give a scenario path (relative to the sweep file) or an "
                  "inline scenario mapping")
    try:
        base, base_path = _read_base(data["base"], folder, label)
    except ScenarioError as exc:
        if exc.source != label:
            raise  # an error inside the base scenario file names that file
        raise err(exc.message, "base") from None
    try:
        objective = _objective(data.get("objective"), label)
    except ScenarioError as exc:
        raise err(exc.message, "objective") from None
    dims: list[dict[str, list[Any]]] = []
    spec = SweepSpec(str(data.get("name") or name), base, dims, base_path, label,
                     objective, lines)
    for section in (k for k in data if k in ("axes", "zip")):  # file order = grid order
        dims.extend(_section_dims(spec, section, data[section]))
    if not dims:
        raise err("no axes: add 'axes' (a grid) or 'zip' groups, e.g. axes: "
                  "{model.num_layers: [2, 4]}", "axes" if "axes" in data else None)
    seen: set[str] = set()
    for key in spec.axes:
        if key in seen:
            raise spec.error(key, "axis given twice; keep one")
        seen.add(key)
        if not all(key.split(".")):
            raise spec.error(key, "an axis key is a dotted scenario key such as "
                             "parallelism.ddp.bucket_cap_mb")
    if len(spec) > MAX_POINTS:
        raise err(f"{len(spec):,} points exceed {MAX_POINTS:,}; shrink the axes", "axes")
    return spec


def _section_dims(spec: SweepSpec, section: str, raw: Any) -> list[dict[str, list[Any]]]:
    """Dimensions of an ``axes`` mapping (one per axis) or a ``zip`` list (one per group)."""
    def err(message: str) -> ScenarioError:
        return ScenarioError(message, source=spec.source, line=spec.lines.get(f"/{section}"),
                             field=section)

    if raw is None:
        return []
    if section == "axes":
        if not isinstance(raw, Mapping):
            raise err("'axes' must map dotted scenario keys to lists or ranges, e.g. "
                      "cluster.nodes: [1, 2, 4]")
        return [{str(key): _values(spec, str(key), values)} for key, values in raw.items()]
    groups = [raw] if isinstance(raw, Mapping) else raw
    if not isinstance(groups, list):
        raise err("'zip' must be a list of groups, each mapping axes to equal-length lists")
    dims = []
    for group in groups:
        if not isinstance(group, Mapping) or not group:
            raise err("each 'zip' group must map axis keys to lists of equal length")
        dim = {str(k): _values(spec, str(k), v) for k, v in group.items()}
        lengths = {k: len(v) for k, v in dim.items()}
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{k} has {n}" for k, n in lengths.items())
            raise spec.error(next(iter(dim)), f"zipped axes must have equal lengths ({shown}); "
                             "give each the same number of values or move one to 'axes' "
                             "(grid)")
        dims.append(dim)
    return dims


def _values(spec: SweepSpec, key: str, values: Any) -> list[Any]:
    if isinstance(values, Mapping):
        try:
            values = expand_range(values)
        except ValueError as exc:
            raise spec.error(key, str(exc)) from None
    if not isinstance(values, list) or not values:
        raise spec.error(key, f"expected a non-empty list or a range, got {values!r}; "
                         "write e.g. [1, 2, 4] or {start: 1, stop: 8, mul: 2}")
    return [_plain(v) for v in values]


def _objective(raw: Any, label: str) -> Objective:
    if raw is None:
        return Objective()
    if isinstance(raw, str):
        raw = {"metric": raw}
    if not isinstance(raw, Mapping) or set(raw) - {"metric", "goal"} \
            or raw.get("goal", "min") not in ("min", "max"):
        raise ScenarioError("objective must be {metric: SUMMARY_KEY, goal: min|max}, e.g. "
                            "{metric: tokens_per_s, goal: max}", source=label)
    metric = str(raw.get("metric", "step_time_s"))
    if not is_objective_metric(metric):
        close = difflib.get_close_matches(metric, OBJECTIVE_METRICS, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ScenarioError(f"objective.metric: unknown summary metric {metric!r}; {hint}"
                            f"expected one of: {', '.join(OBJECTIVE_METRICS)}, or "
                            f"{', '.join(p + '<key>' for p in OBJECTIVE_PREFIXES)}",
                            source=label)
    return Objective(metric, raw.get("goal", "min"))


def is_objective_metric(metric: str) -> bool:
    """Whether ``metric`` names a numeric column of the results table."""
    if metric in OBJECTIVE_METRICS:
        return True
    return any(metric.startswith(p) and len(metric) > len(p) for p in OBJECTIVE_PREFIXES)


def _read_base(raw: Any, folder: Path, label: str) -> tuple[dict[str, Any], Path | None]:
    if isinstance(raw, Mapping):
        base = _plain(raw)
        base.setdefault("name", "base")
        return base, None
    if not isinstance(raw, str):
        raise ScenarioError(f"'base' must be a scenario path or mapping, got {raw!r}",
                            source=label)
    path = Path(os.path.normpath(folder / raw))
    base = _read_yaml(path, {}, "file")
    base.setdefault("name", path.stem)
    return base, path


def _read_yaml(path: Path, lines: dict[str, int], what: str = "sweep file"
               ) -> dict[str, Any]:
    """Plain data of a YAML mapping; records the line of each top-level key and of each
    ``axes``/``zip`` axis key (by the axis key) in ``lines``."""
    doc = read_file(path, what)
    if not isinstance(doc.data, dict):
        raise ScenarioError("expected a mapping at the top level", source=str(path), line=1)
    for key, line in doc.lines.items():
        if len(key) == 1:
            lines[f"/{key[0]}"] = line  # top-level keys, "/" so they never clash with axes
        elif key[0] == "axes" and len(key) == 2:
            lines[str(key[1])] = line
        elif key[0] == "zip" and (len(key) == 2 and isinstance(key[1], str)
                                  or len(key) == 3 and isinstance(key[1], int)):
            lines[str(key[-1])] = line
    return doc.data


def _plain(node: Any) -> Any:
    """ruamel nodes -> plain JSON-able Python (string keys)."""
    if isinstance(node, Mapping):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [_plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    return str(node)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _check_count(n: int) -> None:
    if n > MAX_POINTS:
        raise ValueError(f"the range has more than {MAX_POINTS:,} values; check stop and step")


def _fmt_values(values: Sequence[tuple[str, Any]]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in values)

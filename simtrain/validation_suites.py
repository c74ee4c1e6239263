"""Validation suite files: read, check and expand ``scenarios/validation/<suite>.yaml``.

A suite file holds ``suite`` (its name), ``flops`` (the source's FLOP formula, needed when a
row publishes TFLOP/s), a ``base`` scenario and ``rows``. Each row has a unique ``id``, a
``published`` mapping of metric -> positive number (:data:`PUBLISHED_METRICS`), an optional
``scenario`` overlay deep-merged onto the base and an optional ``needs`` list (features of
the real run simtrain may lack). Problems are ScenarioErrors naming the file and the row.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simtrain.errors import ScenarioError
from simtrain.validation_flops import FORMULAS
from simtrain.yamlfile import read_file

VALIDATION_DIR = Path(__file__).resolve().parent.parent / "scenarios" / "validation"
# What a row may publish: a step time, tokens/s per GPU, or TFLOP/s per GPU under the
# suite's FLOP formula.
PUBLISHED_METRICS = ("iteration_time_ms", "tokens_per_s_per_gpu", "tflops_per_gpu")


def merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """``overlay`` deep-merged onto ``base`` (mappings merge, everything else replaces)."""
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in base.items()}
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def suite_path(suite: str, directory: Path | None = None) -> Path:
    return (directory or VALIDATION_DIR) / f"{suite}.yaml"


def _read(path: Path) -> Any:
    """The parsed file; parsed once per process while it is unchanged (the large suites
    take a second to parse), a fresh copy per call."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise ScenarioError(f"cannot read validation suite: {exc.strerror}",
                            source=str(path)) from None
    return copy.deepcopy(_parse(str(path), stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=64)
def _parse(path: str, mtime_ns: int, size: int) -> Any:
    # The project's bounded reader (size, depth, aliases, UTF-8, tags), as for scenarios;
    # the safe parser, since suite rows carry their own ids for errors.
    return read_file(path, "validation suite", roundtrip=False).data


def check_row(entry: Any, k: int, flops: str, source: str, seen: set[str]) -> None:
    """ScenarioError naming ``source`` and the row unless ``entry`` is a well-formed row."""
    if (not isinstance(entry, dict) or "id" not in entry
            or not isinstance(entry.get("published"), dict)):
        raise ScenarioError(f"row {k + 1} needs an id and a published mapping (e.g. "
                            f"published: {{iteration_time_ms: 1076}})", source=source,
                            field="rows")
    rid = str(entry["id"])
    if rid in seen:
        raise ScenarioError(f"row {rid}: id used twice; ids must be unique", source=source,
                            field="rows")
    seen.add(rid)
    published = entry["published"]
    unknown = [m for m in published if m not in PUBLISHED_METRICS]
    if unknown or not published:
        raise ScenarioError(f"row {rid}: published needs {' or '.join(PUBLISHED_METRICS)}, "
                            f"got {unknown or 'nothing'}", source=source, field="rows")
    for metric, value in published.items():
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not math.isfinite(value) or value <= 0):
            raise ScenarioError(f"row {rid}: published.{metric} must be a positive number, "
                                f"got {value!r}", source=source, field="rows")
    if "tflops_per_gpu" in published and flops not in FORMULAS:
        raise ScenarioError(f"row {rid} publishes tflops_per_gpu but the suite's flops is "
                            f"{flops or 'missing'!r}; set flops: to one of "
                            f"{', '.join(FORMULAS)}", source=source, field="flops")
    needs = entry.get("needs", [])
    if not isinstance(needs, list) or not all(isinstance(n, str) and n for n in needs):
        raise ScenarioError(f"row {rid}: needs must be a list of feature names, got "
                            f"{needs!r}", source=source, field="rows")
    if not isinstance(entry.get("scenario") or {}, dict):
        raise ScenarioError(f"row {rid}: scenario must be a mapping (an overlay on base)",
                            source=source, field="rows")


def load_suite(suite: str, directory: Path | None = None) -> dict[str, Any]:
    """The suite file as a dict: suite, flops, base, rows (ScenarioError if malformed)."""
    path = suite_path(suite, directory)
    data = _read(path)
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ScenarioError("expected a mapping with suite, flops, base and rows",
                            source=str(path))
    if not isinstance(data.get("base") or {}, dict):
        raise ScenarioError("base must be a scenario mapping", source=str(path), field="base")
    flops = str(data.get("flops") or "")
    seen: set[str] = set()
    for k, entry in enumerate(data["rows"]):
        check_row(entry, k, flops, str(path), seen)
    return data


def row_bodies(suite: str, directory: Path | None = None
               ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(row entry, scenario as a plain dict: base deep-merged with the row's overlay)."""
    data = load_suite(suite, directory)
    out = []
    for entry in data["rows"]:
        body = merge(data.get("base") or {}, entry.get("scenario") or {})
        body["name"] = f"{suite}/{entry['id']}"
        body.setdefault("description", f"validation row {entry['id']} of {suite}")
        out.append((entry, body))
    return out

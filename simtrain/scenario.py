"""Scenario files: YAML -> validated pydantic models, with presets, overrides and line numbers.

A scenario is cluster + model + training + parallelism (+ compute, comm, sim options).
Every section forbids unknown keys, so a typo is an error, not a silent default. Errors name
the file, the line and the dotted field, say what was given and what was expected, and are
raised as :class:`ScenarioError` (the CLI prints them in one line and exits with 2).
"""

from __future__ import annotations

import difflib
import math
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from simtrain.comm.config import CommConfig
from simtrain.errors import ScenarioError
from simtrain.hardware.topology import CLUSTER_PRESETS, ClusterConfig
from simtrain.limits import MAX_SLOWDOWN, size_problems
from simtrain.parallel.plan import ParallelismConfig
from simtrain.study.variability import Jitter
from simtrain.training import TrainingConfig
from simtrain.units import Seconds
from simtrain.workload.compute import ComputeConfig
from simtrain.workload.model import MODEL_PRESETS, ModelConfig
from simtrain.yamlfile import Document, parse_text, parse_value, read_file

Path_ = tuple[str | int, ...]


class Straggler(BaseModel):
    """A slow or late rank: it starts its step ``delay`` late and computes ``slowdown`` x
    slower; its groups wait for it."""

    model_config = ConfigDict(extra="forbid")

    delay: Seconds = 0.0  # 0 .. MAX_SECONDS (one day)
    slowdown: float = 1.0

    @field_validator("slowdown")
    @classmethod
    def _slowdown(cls, value: float) -> float:
        if not 1.0 <= value <= MAX_SLOWDOWN:  # also rejects NaN
            raise ValueError(f"slowdown is a compute-time multiplier in 1..{MAX_SLOWDOWN:g} "
                             f"(1 = normal speed; slower than that is a hang: use sim.hangs), "
                             f"got {value!r}")
        return value


class LinkSlowdown(BaseModel):
    """A cable (both directions) that carries ``slowdown`` x less than its rated bandwidth:
    a link retrained at a lower rate, a congested or flapping port. ``between`` names its
    two ends as the topology does (``simtrain topology --report`` shows them on hover)."""

    model_config = ConfigDict(extra="forbid")

    between: tuple[str, str]
    slowdown: float

    @field_validator("slowdown")
    @classmethod
    def _slowdown(cls, value: float) -> float:
        if not 1.0 <= value <= MAX_SLOWDOWN:  # also rejects NaN
            raise ValueError(f"slowdown divides the link's bandwidth: 1..{MAX_SLOWDOWN:g} "
                             f"(1 = rated speed), got {value!r}")
        return value


class SimConfig(BaseModel):
    """The scenario's ``sim:`` section: how to simulate, not what."""

    model_config = ConfigDict(extra="forbid")

    seed: int = 0
    # rank -> time (s or "2ms", 0 .. one day) at which that rank hangs: it issues no
    # further work. Ranks must exist in the cluster (checked with the cluster built).
    hangs: dict[int, Seconds] = Field(default_factory=dict)
    # Task granularity: "op" (one task per kernel), "layer" (kernels between collectives
    # fused), "stage" (one task per pipeline step, collectives aggregated; for 10k+ GPUs).
    granularity: Literal["op", "layer", "stage"] = "op"
    # Simulate even when the plan does not fit in GPU memory (otherwise an error).
    ignore_memory: bool = False
    # "flow": collectives run as flows sharing link bandwidth (contention). "analytic":
    # each collective/transfer takes the comm model's idle-network time (no contention);
    # much cheaper, for clusters too large for the flow network.
    network: Literal["flow", "analytic"] = "flow"
    # rank -> {delay, slowdown}: stragglers (the whole group waits for them).
    stragglers: dict[int, Straggler] = Field(default_factory=dict)
    # Slow cables: [{between: [n0.nic0, leaf0.rail0], slowdown: 2}] (names as the topology).
    link_slowdowns: list[LinkSlowdown] = Field(default_factory=list)
    # Jitter over N steps (per-rank compute and start, per-cable bandwidth): the summary
    # gains "variability" with p50/p99 step times (simtrain.study.variability).
    variability: Jitter | None = None
    # "explicit": every rank. "symmetric": one data-parallel replica simulated, the others
    # mirrored, their traffic as link weights. "auto": symmetric when replicas are
    # identical (no faults, no MoE imbalance, a preset cluster), else "hybrid": the
    # differing ranks' replicas explicit, one replica standing for the rest.
    fidelity: Literal["auto", "explicit", "symmetric", "hybrid"] = "auto"


class Scenario(BaseModel):
    """One simulation: what runs (model, training), where (cluster) and how (parallelism)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "scenario"
    description: str = ""
    cluster: ClusterConfig
    model: ModelConfig
    training: TrainingConfig
    parallelism: ParallelismConfig = Field(default_factory=ParallelismConfig)
    compute: ComputeConfig = Field(default_factory=ComputeConfig)
    comm: CommConfig = Field(default_factory=CommConfig)
    sim: SimConfig = Field(default_factory=SimConfig)
    _source: _Source | None = PrivateAttr(None)  # the file it was loaded from, for errors

    @property
    def seq_len(self) -> int:
        return self.training.seq_len or self.model.max_seq_len


PRESETS: dict[str, Mapping[str, Mapping[str, Any]]] = {
    "cluster": CLUSTER_PRESETS,
    "model": MODEL_PRESETS,
}


class _Source:
    """The raw document and where each of its keys was written."""

    def __init__(self, name: str, data: dict[str, Any], lines: dict[Path_, int]) -> None:
        self.name = name
        self.data = data
        self.lines = lines
        self.overrides: dict[Path_, str] = {}  # path -> the --set assignment that wrote it

    def line_of(self, path: Path_) -> int | None:
        """Line of ``path`` or of its closest written ancestor."""
        for end in range(len(path), -1, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return None

    def error(self, path: Path_, message: str) -> ScenarioError:
        for end in range(len(path), 0, -1):
            if path[:end] in self.overrides:
                field = _dotted(path) if end < len(path) else None
                return ScenarioError(message, source=f"--set {self.overrides[path[:end]]}",
                                     field=field)
        return ScenarioError(message, source=self.name, line=self.line_of(path),
                             field=_dotted(path) or None)


def _dotted(path: Sequence[str | int]) -> str:
    return ".".join(str(p) for p in path)


def _read(source: str | Path | Mapping[str, Any]) -> _Source:
    if isinstance(source, Mapping):
        try:
            return _Source("<dict>", _deep_copy(source), {})
        except RecursionError:  # a dict that contains itself
            raise ScenarioError("the scenario mapping contains itself (or nests too deep)",
                                source="<dict>") from None
    doc = read_file(source, "scenario file")
    return _to_source(doc)


def _parse_text(text: str, name: str) -> _Source:
    return _to_source(parse_text(text, name))


def _to_source(doc: Document) -> _Source:
    if doc.data is None:
        raise ScenarioError("the file is empty; expected a mapping with cluster, model and "
                            "training sections", source=doc.name)
    if not isinstance(doc.data, dict):
        raise ScenarioError(f"expected a mapping at the top level, got "
                            f"{type(doc.data).__name__}", source=doc.name, line=1)
    return _Source(doc.name, doc.data, doc.lines)


def _deep_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_deep_copy(v) for v in value]
    return value


def apply_override(src: _Source, assignment: str) -> None:
    """Apply one ``--set dotted.key=value``; the value is read as YAML ("4", "true", "25MB")."""
    key, sep, raw = assignment.partition("=")
    label = f"--set {assignment.strip()}"
    if not sep or not key.strip():
        raise ScenarioError(f"expected KEY=VALUE such as cluster.nodes=4, got {assignment!r}",
                            source="--set")
    path = tuple(part.strip() for part in key.strip().split("."))
    if not all(path):
        raise ScenarioError(f"{key.strip()!r} is not a dotted key: every part between dots "
                            "must be a field name, as in parallelism.ddp.bucket_cap_mb",
                            source=label)
    value = parse_value(raw, label) if raw.strip() else ""
    node = src.data
    for i, part in enumerate(path[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ScenarioError(f"{_dotted(path[: i + 1])} is a value, not a section",
                                source=f"--set {key}")
        node = child
    node[path[-1]] = value
    src.overrides[path] = assignment.strip()


def _merge_presets(src: _Source) -> None:
    """Expand ``preset: NAME`` in cluster/model sections: preset fields, then the user's."""
    for section, presets in PRESETS.items():
        body = src.data.get(section)
        if not isinstance(body, dict) or "preset" not in body:
            continue
        name = body["preset"]
        key = str(name).lower()
        if name is None or key not in presets:
            raise src.error((section, "preset"),
                            f"unknown {section} preset {name!r}; expected one of: "
                            f"{', '.join(sorted(presets))}")
        src.data[section] = {**_deep_copy(presets[key]), **body, "preset": key}


def _expected_fields(path: Path_) -> list[str] | None:
    """Allowed keys of the pydantic model that holds ``path`` (for unknown-key errors)."""
    model: Any = Scenario
    for part in path[:-1]:
        if typing.get_origin(model) in (dict, list):  # a key or index into a dict or list
            model = typing.get_args(model)[-1]
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        model = field.annotation
        args = getattr(model, "__args__", None)
        if args and typing.get_origin(model) not in (dict, list):  # Optional[X]
            model = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)),
                         model)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return sorted(model.model_fields)
    return None


def _describe(src: _Source, exc: ValidationError) -> ScenarioError:
    # A typo shows up twice (an unknown key and a missing one); the unknown key is the cause.
    err = min(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    loc = tuple(p for p in err["loc"] if not str(p).startswith("function-"))
    got = err.get("input")
    if err["type"] == "extra_forbidden":
        allowed = _expected_fields(loc) or []
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        if allowed:
            hint += f" Expected one of: {', '.join(allowed)}" if close else \
                f"; expected one of: {', '.join(allowed)}"
        return src.error(loc, f"unknown field {str(loc[-1])!r}{hint}")
    if err["type"] == "missing":
        return src.error(loc, "required field is missing")
    message = err["msg"].removeprefix("Value error, ")
    shown = "" if isinstance(got, dict | list) or repr(got) in message else f" (got {got!r})"
    return src.error(loc, f"{message}{shown}")


def load_scenario(source: str | Path | Mapping[str, Any],
                  overrides: Sequence[str] = (), *, open_parallelism: bool = False
                  ) -> Scenario:
    """Read, override, expand presets, validate and check a scenario; raise ScenarioError.

    ``open_parallelism`` skips the checks of the parallel degrees against the cluster and
    the batch (the planner's base scenario, whose degrees the search fills in).
    """
    src = _read(source)
    for assignment in overrides:
        apply_override(src, assignment)
    if "jobs" in src.data:  # several jobs on one cluster: simtrain.jobs.load_jobs
        raise src.error(("jobs",), "a scenario with jobs runs with simtrain run or simtrain "
                                   "placements (docs/jobs.md); this takes a single-job one")
    if "name" not in src.data and not isinstance(source, Mapping):
        src.data["name"] = Path(source).stem
    base = Path.cwd() if isinstance(source, Mapping) else Path(source).parent
    return validate_source(src, base, open_parallelism=open_parallelism)


def validate_source(src: _Source, base: Path, *, open_parallelism: bool = False) -> Scenario:
    """Expand presets, validate and check the document of ``src`` (its errors name its file,
    lines and fields); ``base`` is the folder relative table paths start from."""
    _merge_presets(src)
    try:
        scenario = Scenario.model_validate(src.data)
    except ValidationError as exc:
        raise _describe(src, exc) from None
    except (RecursionError, OverflowError, MemoryError) as exc:  # a value far too large
        raise ScenarioError(f"cannot validate: {type(exc).__name__}", source=src.name) from None
    _audit(src, scenario, src.data, ())
    if scenario.compute.tables:  # paths relative to the scenario file, checked now
        from simtrain.workload.tables import resolve_tables
        scenario.compute.tables = resolve_tables(scenario.compute.tables, base)
    _check(src, scenario, parallelism=not open_parallelism)
    scenario._source = src
    return scenario


def _audit(src: _Source, model: BaseModel, raw: Any, path: Path_) -> None:
    """What pydantic's lax mode lets through but a user never means.

    ``nodes: true`` (a bool where a number is expected, read as 1), ``overlap: 1`` (a
    number where a bool is expected) and non-finite numbers (``.nan``, ``.inf``,
    ``"inf"``) anywhere: no field of a scenario is meaningful at infinity.
    """
    raw_map = raw if isinstance(raw, dict) else {}
    for name in type(model).model_fields:
        _audit_value(src, getattr(model, name), raw_map.get(name), (*path, name))


def _audit_value(src: _Source, value: Any, raw: Any, path: Path_) -> None:
    if isinstance(value, BaseModel):
        _audit(src, value, raw, path)
    elif isinstance(value, dict):
        raw_map = raw if isinstance(raw, dict) else {}
        by_text = {str(k): v for k, v in raw_map.items()}
        for key, item in value.items():
            _audit_value(src, item, by_text.get(str(key)), (*path, str(key)))
    elif isinstance(value, list | tuple):
        raw_list = raw if isinstance(raw, list) and len(raw) == len(value) else [None] * len(
            value)
        for i, (item, given) in enumerate(zip(value, raw_list, strict=True)):
            _audit_value(src, item, given, (*path, i))
    elif isinstance(raw, bool) and not isinstance(value, bool):
        raise src.error(path, f"expected a number, got {str(raw).lower()}")
    elif isinstance(value, bool) and raw is not None and not isinstance(raw, bool):
        raise src.error(path, f"expected true or false, got {raw!r}")
    elif isinstance(value, float) and not math.isfinite(value):
        raise src.error(path, f"must be a finite number, got {raw if raw is not None else value!r}")


def scenario_error(scenario: Scenario, field: str, message: str) -> ScenarioError:
    """A ScenarioError about ``field`` (dotted) of a loaded scenario, naming its file and the
    line of the field (or the ``--set`` that wrote it); the scenario's name if built in code."""
    src = scenario._source
    if src is None:
        return ScenarioError(message, source=scenario.name, field=field)
    return src.error(tuple(field.split(".")), message)


def _check(src: _Source, scenario: Scenario, *, parallelism: bool = True) -> None:
    """Cross-section checks: sizes first (before anything is built), then the ones that
    need the built cluster: world size, batch, sequence, fault ranks."""
    from simtrain.hardware.topology import build_cluster
    from simtrain.parallel.plan import check_parallelism

    sizes = size_problems(scenario)
    if sizes:
        field, message = sizes[0]
        raise src.error(tuple(field.split(".")), message)
    try:
        cluster = build_cluster(scenario.cluster)
    except ValueError as exc:
        raise src.error(("cluster",), str(exc)) from None
    per_node = sum(1 for r in range(cluster.num_gpus) if cluster.server_of(r) == 0)
    problems = check_parallelism(
        scenario.parallelism, scenario.model, num_gpus=cluster.num_gpus,
        gpus_per_node=per_node, global_batch=scenario.training.global_batch_size,
        micro_batch=scenario.training.micro_batch_size,
        seq_len=scenario.seq_len) if parallelism else []
    if scenario.seq_len > scenario.model.max_seq_len:
        problems.append(("training.seq_len",
                         f"seq_len={scenario.seq_len} exceeds the model's max_seq_len="
                         f"{scenario.model.max_seq_len}; lower it or raise model.max_seq_len"))
    for section in ("hangs", "stragglers"):
        for rank in getattr(scenario.sim, section):
            if not 0 <= rank < cluster.num_gpus:
                problems.append((f"sim.{section}.{rank}",
                                 f"rank {rank} is not in the cluster; accepted: ranks 0.."
                                 f"{cluster.num_gpus - 1} ({cluster.num_gpus} GPUs)"))
    cables = {(lk.src, lk.dst) for lk in cluster.links}
    for i, slow in enumerate(scenario.sim.link_slowdowns):
        a, b = slow.between
        if (a, b) not in cables and (b, a) not in cables:
            problems.append((f"sim.link_slowdowns.{i}.between",
                             f"no link between {a!r} and {b!r} in this cluster; name two "
                             f"adjacent nodes as `simtrain topology` shows them, e.g. "
                             f"{cluster.links[0].src!r} and {cluster.links[0].dst!r}"))
    if problems:
        field, message = problems[0]
        raise src.error(tuple(field.split(".")), message)

"""Scenario files with several jobs on one cluster: YAML -> validated jobs with their GPUs.

A jobs scenario has the single-job scenario's shared sections (``cluster``, ``compute``,
``comm``, ``sim``) and, instead of ``model`` / ``training`` / ``parallelism``, a mapping
``jobs:`` from job name to ``{model, training, parallelism, gpus, placement}``::

    cluster: {preset: dgx-h100, nodes: 4, fabric: fat-tree, nodes_per_leaf: 2}
    placement: pack              # default placement of the jobs that name none
    jobs:
      a: {gpus: 16, placement: spread, model: {preset: gpt2-small}, training: {...}}
      b: {placement: "16-31", model: ..., training: ...}

Each job is validated as a single-job :class:`~simtrain.scenario.Scenario` on a cluster
of its own size (the lowering's view: GPU count and type; the fabric it shares is the
whole cluster's), so its errors name ``jobs.NAME.<field>`` at the line of the file, and
``--set jobs.a.placement=spread`` works like any other override.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simtrain.comm.config import CommConfig
from simtrain.errors import ScenarioError
from simtrain.hardware.topology import ClusterConfig, build_cluster
from simtrain.jobs.placement import POLICIES, Request, parse_request, resolve
from simtrain.limits import MAX_GPUS_PER_NODE, cluster_problems
from simtrain.parallel.plan import check_parallelism
from simtrain.scenario import (
    Path_,
    Scenario,
    SimConfig,
    _audit,
    _describe,
    _merge_presets,
    _read,
    _Source,
    apply_override,
    validate_source,
)
from simtrain.workload.compute import ComputeConfig
from simtrain.yamlfile import MAX_FILE_BYTES

# The sections of a jobs scenario (the one list of its top-level keys) and of one job.
SHARED_KEYS: tuple[str, ...] = ("cluster", "compute", "comm", "sim")
TOP_KEYS: tuple[str, ...] = ("name", "description", *SHARED_KEYS, "placement", "jobs")
JOB_KEYS: tuple[str, ...] = ("gpus", "placement", "model", "training", "parallelism")
# What a job's own document holds; errors on these fields point into jobs.NAME.
_JOB_FIELDS = ("name", "model", "training", "parallelism")
# The sim options a shared run honours; any other set away from its default is refused
# (faults, jitter and the like need their per-rank maps translated per job: not done).
SIM_SUPPORTED: tuple[str, ...] = ("seed", "granularity", "ignore_memory", "network",
                                  "fidelity")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class _Shared(BaseModel):
    """The sections every job shares, validated once at their own paths."""

    model_config = ConfigDict(extra="ignore")

    cluster: ClusterConfig
    compute: ComputeConfig = Field(default_factory=ComputeConfig)
    comm: CommConfig = Field(default_factory=CommConfig)
    sim: SimConfig = Field(default_factory=SimConfig)


@dataclass(frozen=True)
class Job:
    """One job: its validated scenario (on a cluster of its size) and the GPUs it runs on,
    ``gpus[i]`` being the cluster GPU of the job's rank ``i``."""

    name: str
    scenario: Scenario
    gpus: tuple[int, ...]
    policy: str | None  # "pack" / "spread", or None when the GPUs were listed


@dataclass(frozen=True)
class JobsScenario:
    """A validated jobs scenario: the shared sections and the placed jobs, in file order."""

    name: str
    description: str
    cluster: ClusterConfig
    compute: ComputeConfig
    comm: CommConfig
    sim: SimConfig
    jobs: tuple[Job, ...]
    source: str  # the file (or "<dict>") it was read from, for messages


class _JobSource(_Source):
    """One job's document; its errors name the job's fields (``jobs.a.model...``) or the
    shared sections in the scenario file, at their lines there."""

    def __init__(self, parent: _Source, job: str, data: dict[str, Any]) -> None:
        super().__init__(parent.name, data, {})
        self.parent = parent
        self.prefix: Path_ = ("jobs", job)

    def error(self, path: Path_, message: str) -> ScenarioError:
        if path and path[0] in _JOB_FIELDS:
            return self.parent.error((*self.prefix, *path) if path[0] != "name"
                                     else self.prefix, message)
        return self.parent.error(path, message)


def is_jobs_file(path: str | Path) -> bool:
    """True if ``path`` reads as a YAML mapping with a ``jobs`` key (False on any error:
    the single-job loader then reports it). Files without a line starting ``jobs:`` are
    not parsed."""
    try:
        with Path(path).open("rb") as f:
            head = f.read(MAX_FILE_BYTES)
        if not re.search(rb"^jobs\s*:", head, re.MULTILINE):
            return False
        data = _read(path).data
    except (ScenarioError, OSError):
        return False
    return isinstance(data, dict) and "jobs" in data


def load_jobs(source: str | Path | Mapping[str, Any],
              overrides: Sequence[str] = ()) -> JobsScenario:
    """Read, override, validate and place a jobs scenario; ScenarioError (one line naming
    file, line and field) on any problem, including overlapping or oversized placements."""
    src = _read(source)
    for assignment in overrides:
        apply_override(src, assignment)
    data = src.data
    if "name" not in data and not isinstance(source, Mapping):
        data["name"] = Path(source).stem
    _check_keys(src, data, (), TOP_KEYS, "a scenario with jobs")
    if "cluster" not in data:
        raise src.error(("cluster",), "required field is missing")
    _merge_presets(src)
    shared = _validate_shared(src, data)
    _check_sim(src, shared.sim)
    jobs_raw = data.get("jobs")
    if not isinstance(jobs_raw, dict) or not jobs_raw:
        raise src.error(("jobs",), f"expected a mapping of job name -> job ({', '.join(JOB_KEYS)}"
                                   f"), got {_given(jobs_raw)}")
    cluster = build_cluster(shared.cluster)
    servers = [cluster.server_of(r) for r in range(cluster.num_gpus)]
    default = data.get("placement", "pack")
    if not (isinstance(default, str) and default.strip().lower() in POLICIES):
        raise src.error(("placement",), f"expected one of {', '.join(POLICIES)} (the "
                                        f"placement of jobs that name none), got {default!r}")
    requests = [_request(src, str(name), body, default) for name, body in jobs_raw.items()]
    try:
        placed = resolve(requests, servers)
    except ValueError as exc:
        job, _, message = str(exc).partition(": ")
        raise src.error(("jobs", job, "placement"), message) from None
    base = Path.cwd() if isinstance(source, Mapping) else Path(source).parent
    jobs = tuple(_job(src, base, data, req, placed[req.job], servers, shared.cluster)
                 for req in requests)
    return JobsScenario(str(data.get("name", "jobs")), str(data.get("description", "")),
                        shared.cluster, shared.compute, shared.comm, shared.sim, jobs, src.name)


def _given(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"[:120]


def _check_keys(src: _Source, body: Mapping[str, Any], path: Path_, allowed: Sequence[str],
                what: str) -> None:
    for key in body:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise src.error((*path, str(key)), f"unknown field {str(key)!r}; {hint}{what} "
                                               f"has: {', '.join(allowed)}")


def _validate_shared(src: _Source, data: Mapping[str, Any]) -> _Shared:
    try:
        shared = _Shared.model_validate({k: data[k] for k in SHARED_KEYS if k in data})
    except ValidationError as exc:
        raise _describe(src, exc) from None
    _audit(src, shared, data, ())
    problems = cluster_problems(shared.cluster)
    if problems:
        field, message = problems[0]
        raise src.error(tuple(field.split(".")), message)
    return shared


def _check_sim(src: _Source, sim: SimConfig) -> None:
    """What the shared run cannot do yet, said at the field (never silently ignored)."""
    if sim.fidelity == "symmetric":
        raise src.error(("sim", "fidelity"), (
            "symmetric is not available with jobs: a mirrored replica's traffic is counted "
            "only on its representative's links, so other jobs would not see it on theirs; "
            "use explicit (or auto, which is explicit here)"))
    for name, field in SimConfig.model_fields.items():
        if name not in SIM_SUPPORTED and getattr(sim, name) != field.get_default(
                call_default_factory=True):
            raise src.error(("sim", name), f"sim.{name} is not supported with jobs yet "
                                           f"(jobs take sim.{', sim.'.join(SIM_SUPPORTED)}); "
                                           f"simulate the job alone to study it")


def _request(src: _Source, name: str, body: Any, default: str) -> Request:
    path: Path_ = ("jobs", name)
    if not _NAME.fullmatch(name):  # --set jobs.NAME.field and report labels need it plain
        raise src.error(path, f"job name {name!r}: use letters, digits, _ and - only "
                              f"(e.g. train_a)")
    if not isinstance(body, dict):
        raise src.error(path, f"expected a mapping with {', '.join(JOB_KEYS)}, got "
                              f"{_given(body)}")
    _check_keys(src, body, path, JOB_KEYS, "a job")
    for key in ("model", "training"):
        if key not in body:
            raise src.error((*path, key), "required field is missing")
    count = body.get("gpus")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                              or count < 1):
        raise src.error((*path, "gpus"), f"expected a whole number of GPUs >= 1, got "
                                         f"{count!r}")
    try:
        return parse_request(name, body.get("placement", default), count)
    except ValueError as exc:
        raise src.error((*path, "placement"), str(exc)) from None


def _view(cluster: ClusterConfig, n: int) -> dict[str, Any]:
    """The job's own cluster for lowering and checks: ``n`` GPUs of the cluster's type
    (the fabric they share is the whole cluster's; the executor routes on it)."""
    per_node = max(d for d in range(1, min(n, MAX_GPUS_PER_NODE) + 1) if n % d == 0)
    return {"gpu": cluster.gpu_spec.name, "nodes": n // per_node, "gpus_per_node": per_node,
            "intra_node": "pcie", "pcie_switches_per_node": 1}


def _job(src: _Source, base: Path, data: Mapping[str, Any], req: Request,
         gpus: tuple[int, ...], servers: Sequence[int], cluster: ClusterConfig) -> Job:
    body = data["jobs"][req.job]
    doc: dict[str, Any] = {"name": req.job, "description": data.get("description", ""),
                           "cluster": _view(cluster, len(gpus)), "model": body["model"],
                           "training": body["training"]}
    if "parallelism" in body:
        doc["parallelism"] = body["parallelism"]
    for key in ("compute", "comm", "sim"):
        if key in data:
            doc[key] = data[key]
    doc["sim"] = {**(doc.get("sim") or {}), "fidelity": "explicit"}
    job_src = _JobSource(src, req.job, doc)
    scenario = validate_source(job_src, base, open_parallelism=True)
    first = servers[gpus[0]]
    per_node = sum(1 for g in gpus if servers[g] == first)
    problems = check_parallelism(
        scenario.parallelism, scenario.model, num_gpus=len(gpus), gpus_per_node=per_node,
        global_batch=scenario.training.global_batch_size,
        micro_batch=scenario.training.micro_batch_size, seq_len=scenario.seq_len)
    if problems:
        field, message = problems[0]
        if "cluster" in message:  # the job's share of it, not the whole cluster
            message += f" (the cluster of job {req.job!r} is its {len(gpus)} GPUs)"
        raise job_src.error(tuple(field.split(".")), message)
    return Job(req.job, scenario, gpus, req.policy)

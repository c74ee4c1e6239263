"""Validation against published training runs: how far is simtrain, row by row?

Suites:

- scenario suites, one YAML file per source in ``scenarios/validation/<suite>.yaml``: a
  ``base`` scenario and ``rows``, each with its ``published`` numbers and a ``scenario``
  overlay (deep-merged onto the base). ``megatron-2020`` and ``mcore-2024-h100`` (the
  Megatron READMEs), and one file per source of shared/reference/measured_runs.yaml
  (NeMo, Megatron Bridge, NeMo AutoModel, torchtitan, SimuMax, DeepSeek-V3);
- ``nccl``: published all-reduce / point-to-point bus bandwidths
  (:func:`simtrain.comm.reference.calibration_table`).

A row may list ``needs``: the features its real configuration uses that simtrain may lack
(FP8, MLA, an NVL72 preset, ...). Such a row is written as it would be expressed; when its
scenario does not validate it is reported as "not expressible: <needs> (<the validation
error>)", and once the feature exists it validates and is compared, with no edit. A row
without ``needs`` whose scenario does not validate is a bad suite file (ScenarioError).

Errors are signed, ``predicted / published - 1``; a suite's MAPE is the mean of ``|error|``
over its compared rows (skipped rows are listed, not averaged). Published TFLOP/s are
compared with each source's own FLOP formula applied to the *simulated step time*
(:mod:`simtrain.validation_flops`); tokens/s per GPU is ``global batch · seq / step / GPUs``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from simtrain.errors import ScenarioError
from simtrain.scenario import Scenario, load_scenario
from simtrain.validation_cost import row_cost  # noqa: F401  (re-exported)
from simtrain.validation_flops import (  # noqa: F401  (re-exported for callers and tests)
    FORMULAS,
    formula_flops,
    mcore_2024_model_flops,
    megatron_2020_hardware_flops,
    nemo_full_attention_flops,
)
from simtrain.validation_suites import (  # noqa: F401
    PUBLISHED_METRICS,
    VALIDATION_DIR,
    load_suite,
    row_bodies,
    suite_path,
)

# The original suites (calibrated defaults were fitted on them).
SCENARIO_SUITES = ("megatron-2020", "mcore-2024-h100")
# Megatron-Core's README divides by this H100 bf16 dense peak for its MFU column.
MCORE_PEAK_TFLOPS = 989.0


@dataclass
class Row:
    """One published number and its prediction."""

    suite: str
    id: str
    metric: str
    published: float
    predicted: float | None
    error: float | None  # predicted / published - 1; None when skipped
    unit: str = ""
    note: str = ""
    skipped: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def signed_error(predicted: float, published: float) -> float:
    """``predicted / published - 1``: +10% means simtrain predicts 10% more."""
    return predicted / published - 1.0


def mape(errors: Iterable[float]) -> float:
    """Mean absolute percentage error, as a fraction (0.1 = 10%)."""
    values = [abs(e) for e in errors]
    if not values:
        raise ValueError("MAPE of no rows")
    return sum(values) / len(values)


def summarize(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """Per (suite, metric): rows compared, skipped, MAPE, mean signed error, worst row."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.suite, row.metric), []).append(row)
    out = []
    for (suite, metric), members in groups.items():
        compared = [r for r in members if r.error is not None]
        summary: dict[str, Any] = {"suite": suite, "metric": metric, "total": len(members),
                                   "rows": len(compared),
                                   "skipped": len(members) - len(compared), "mape": None,
                                   "mean_error": None, "worst": None, "worst_error": None}
        if compared:
            errors = [r.error for r in compared if r.error is not None]
            worst = max(compared, key=lambda r: abs(r.error or 0.0))
            summary.update(mape=mape(errors), mean_error=sum(errors) / len(errors),
                           worst=worst.id, worst_error=worst.error)
        out.append(summary)
    return out


# --- suites ------------------------------------------------------------------------------

def nccl_rows() -> list[Row]:
    """The NCCL bus-bandwidth points of :mod:`simtrain.comm.reference`."""
    from simtrain.comm.reference import calibration_table

    rows = []
    for r in calibration_table():
        skipped = str(r.get("skipped") or "")
        rows.append(Row("nccl", str(r["system"]), "busbw_gbps", float(r["published_gbps"]),
                        r["predicted_gbps"], r["error"], "GB/s",
                        note=str(r.get("known_miss") or ""), skipped=skipped,
                        extra={k: r[k] for k in ("algorithm", "protocol", "source") if k in r}))
    return rows


# Suites computed in code rather than read from scenario files: name -> rows.
SPECIAL_SUITES: dict[str, Callable[[], list[Row]]] = {"nccl": nccl_rows}
# Suite files of another format in the same folder: name -> (module, rows function taking
# (path, progress), count function taking path). Offered only where the file exists.
FILE_SUITES: dict[str, tuple[str, str, str]] = {
    "nccl-modern": ("simtrain.comm.validation", "suite_rows", "count_points"),
}


def scenario_suites(directory: Path | None = None) -> list[str]:
    """The scenario suites in ``directory``: every ``*.yaml`` not named after another kind."""
    folder = directory or VALIDATION_DIR
    return sorted(p.stem for p in folder.glob("*.yaml")
                  if p.stem not in SPECIAL_SUITES and p.stem not in FILE_SUITES)


def all_suites(directory: Path | None = None) -> list[str]:
    """Every suite: the scenario files of ``directory``, the other suite files present
    there, and the special suites."""
    files = [n for n in FILE_SUITES if suite_path(n, directory).is_file()]
    return [*scenario_suites(directory), *files, *SPECIAL_SUITES]


def _file_suite(name: str, which: int) -> Callable[..., Any]:
    import importlib

    module, *functions = FILE_SUITES[name]
    return getattr(importlib.import_module(module), functions[which])


def file_suite_rows(name: str, directory: Path | None = None) -> list[Row]:
    """Every row of the file suite ``name`` (worker-process entry point: a file suite runs
    in a worker beside the scenario rows, its progress reported when it ends)."""
    return list(_file_suite(name, 0)(suite_path(name, directory), None))


def row_scenarios(suite: str, directory: Path | None = None
                  ) -> list[tuple[dict[str, Any], Scenario]]:
    """(row entry, validated scenario) for every expressible row of a scenario suite."""
    out = []
    for entry, body in row_bodies(suite, directory):
        scenario, _ = expressible(suite, entry, body, directory)
        if scenario is not None:
            out.append((entry, scenario))
    return out


def load_row(suite: str, entry: dict[str, Any], body: dict[str, Any],
             directory: Path | None = None) -> Scenario:
    """The validated scenario of one row; errors name the suite file, the row and the field."""
    try:
        return load_scenario(body)
    except ScenarioError as exc:
        where = f"{exc.field}: " if exc.field else ""
        raise ScenarioError(f"row {entry['id']}: {where}{exc.message}",
                            source=str(suite_path(suite, directory))) from None


def expressible(suite: str, entry: dict[str, Any], body: dict[str, Any],
                directory: Path | None = None) -> tuple[Scenario | None, str]:
    """(scenario, "") when the row validates; (None, "not expressible: ...") when it does
    not and lists ``needs``; ScenarioError (naming file and row) otherwise."""
    try:
        return load_scenario(body), ""
    except ScenarioError as exc:
        needs = entry.get("needs") or []
        if not needs:
            where = f"{exc.field}: " if exc.field else ""
            raise ScenarioError(f"row {entry['id']}: {where}{exc.message} (a row simtrain "
                                f"cannot express must list what it needs: needs: [...])",
                                source=str(suite_path(suite, directory))) from None
        where = f"{exc.field}: " if exc.field else ""
        return None, f"not expressible: {', '.join(needs)} ({where}{exc.message})"


@dataclass(frozen=True)
class RowJob:
    """One row to predict: picklable, so rows can run in worker processes."""

    suite: str
    entry: dict[str, Any]
    body: dict[str, Any]
    flops_kind: str
    skipped: str = ""
    # Rows of the same suite with the same scenario (e.g. one config published twice):
    # simulated once, compared each against its own published numbers.
    twins: tuple[dict[str, Any], ...] = ()
    cost: float = 0.0  # row_cost of its scenario: rows are started most costly first
    steady: bool = True  # long steps by steady-state extrapolation (simtrain.steady_state)


def _skipped_rows(job: RowJob, reason: str) -> list[Row]:
    return [Row(job.suite, str(entry["id"]), metric, float(value), None, None,
                skipped=reason, extra={"needs": list(entry.get("needs") or [])})
            for entry in (job.entry, *job.twins) for metric, value in entry["published"].items()]


def predict_row(job: RowJob) -> list[Row]:
    """Simulate one row and compare each published metric (worker-process entry point)."""
    from simtrain.hardware.topology import build_cluster
    from simtrain.simulate import build_plan, memory_report, simulate
    from simtrain.steady_state import steady_step

    if job.skipped:
        return _skipped_rows(job, job.skipped)
    started, cpu = time.perf_counter(), time.process_time()
    scenario = load_scenario(job.body)
    cluster = build_cluster(scenario.cluster)
    memory = memory_report(scenario, cluster, build_plan(scenario, cluster))
    notes = []
    if scenario.sim.ignore_memory:
        notes.append("memory check ignored")
    elif not memory.fits():  # the run did fit; say so and compare the time anyway
        notes.append(f"over memory in simtrain's model ({memory.total / 2**30:.0f} of "
                     f"{memory.capacity / 2**30:.0f} GiB; simulated anyway)")
        scenario = scenario.model_copy(update={"sim": scenario.sim.model_copy(
            update={"ignore_memory": True})})
    try:
        if job.steady:
            run = steady_step(scenario, cluster)
            summary = run.summary
        else:
            summary = simulate(scenario).summary
    except (ScenarioError, ValueError) as exc:
        return _skipped_rows(job, f"simulation failed: {exc}")
    step = float(summary["step_time_s"])
    gpus = int(summary["num_gpus"])
    tokens = scenario.training.global_batch_size * scenario.seq_len
    predicted: dict[str, tuple[float, str]] = {
        "iteration_time_ms": (step * 1e3, "ms"),
        "tokens_per_s_per_gpu": (tokens / step / gpus, "tokens/s"),
    }
    extra = {"step_time_s": step, "num_gpus": gpus, "fidelity": summary.get("fidelity"),
             "simtrain_mfu": summary.get("mfu"), "simtrain_hfu": summary.get("hfu"),
             "peak_memory_gib": summary.get("peak_memory_gib"),
             "ignore_memory": scenario.sim.ignore_memory,
             "wall_s": round(time.perf_counter() - started, 3),
             "cpu_s": round(time.process_time() - cpu, 3)}  # the row's own, on a shared machine
    if job.steady and run.points:
        extra["steady_state"] = {"micro_batches": list(run.points), "step_s": list(run.times),
                                 "extrapolated": not run.why_full}
    rows = []
    for entry in (job.entry, *job.twins):
        needs = entry.get("needs") or []  # written for a missing feature; accepted now
        listed = [f"listed needs ({', '.join(needs)}) but validates"] if needs else []
        note = "; ".join(listed + notes)
        for metric, published in entry["published"].items():
            if metric == "tflops_per_gpu" and metric not in predicted:
                predicted[metric] = (formula_flops(job.flops_kind, scenario) / step / gpus
                                     / 1e12, "TFLOP/s")
            value, unit = predicted[metric]
            rows.append(Row(job.suite, str(entry["id"]), metric, float(published), value,
                            signed_error(value, float(published)), unit, note,
                            extra=extra))
    return rows


def _same_scenario(job: RowJob) -> str:
    body = {k: v for k, v in job.body.items() if k not in ("name", "description")}
    return json.dumps([job.suite, body], sort_keys=True, default=str)


def _with_twins(work: list[tuple[tuple[str, int], RowJob]]
                ) -> list[tuple[list[tuple[str, int]], RowJob]]:
    """Group expressible jobs with identical scenarios: (keys, job carrying the twins)."""
    groups: dict[str, list[tuple[tuple[str, int], RowJob]]] = {}
    out: list[tuple[list[tuple[str, int]], RowJob]] = []
    for key, job in work:
        if job.skipped:
            out.append(([key], job))
        else:
            groups.setdefault(_same_scenario(job), []).append((key, job))
    for members in groups.values():
        (first_key, first), rest = members[0], members[1:]
        job = replace(first, twins=tuple(j.entry for _, j in rest))
        out.append(([first_key, *(k for k, _ in rest)], job))
    return out


def suite_jobs(suite: str, directory: Path | None = None,
               granularity: str | None = None, steady: bool = True,
               only: Sequence[str] | None = None) -> list[RowJob]:
    """A job per row of a scenario suite that ``only`` selects; unexpressible rows carry
    their reason.

    ``granularity`` overrides every row's ``sim.granularity`` (op, layer, stage);
    ``steady``: extrapolate long steps from short runs (``simtrain.steady_state``)."""
    data = load_suite(suite, directory)
    flops_kind = str(data.get("flops") or "")
    jobs = []
    for entry, body in row_bodies(suite, directory):
        if not row_selected(str(entry["id"]), only):
            continue
        if granularity is not None:
            body["sim"] = {**(body.get("sim") or {}), "granularity": granularity}
        scenario, reason = expressible(suite, entry, body, directory)
        cost = row_cost(scenario, steady) if scenario is not None else 0.0
        jobs.append(RowJob(suite, entry, body, flops_kind, reason, cost=cost, steady=steady))
    return jobs


def count_rows(suite: str, directory: Path | None = None,
               only: Sequence[str] | None = None) -> int:
    """How many progress steps ``suite`` takes (scenario suites: the rows ``only`` selects)."""
    if suite in FILE_SUITES:
        return int(_file_suite(suite, 1)(suite_path(suite, directory)))
    if suite == "nccl":
        from simtrain.comm.reference import POINTS

        return len(POINTS)
    if suite in SPECIAL_SUITES:
        return len(SPECIAL_SUITES[suite]())
    return sum(row_selected(str(entry.get("id")), only)
               for entry in load_suite(suite, directory)["rows"])


def row_selected(row_id: str, patterns: Sequence[str] | None) -> bool:
    """Whether ``row_id`` matches one of the shell-style ``patterns`` (all rows when None)."""
    return patterns is None or any(fnmatchcase(row_id, p) for p in patterns)


def run_suites(suites: Iterable[str], directory: Path | None = None, *, jobs: int = 1,
               granularity: str | None = None,
               progress: Callable[[str, str], None] | None = None,
               only: Sequence[str] | None = None, steady: bool = True) -> list[Row]:
    """Predict every row of ``suites`` (in that order), ``jobs`` rows at a time in worker
    processes; ``progress(suite, row_id)`` after each row. ``only``: shell-style patterns
    of the row ids to run (every row when None); ``steady``: see ``suite_jobs``."""
    names = list(suites)
    known = all_suites(directory)
    for name in names:
        if name not in known and not (name not in SPECIAL_SUITES and name not in FILE_SUITES
                                      and suite_path(name, directory).is_file()):
            raise ValueError(f"unknown suite {name!r}; expected one of: {', '.join(known)}")
    results: dict[tuple[str, int], list[Row]] = {}
    work: list[tuple[tuple[str, int], RowJob]] = []
    deferred: list[str] = []  # file suites run in a worker beside the rows (a pool exists)
    for name in names:
        if name in FILE_SUITES and jobs > 1:
            deferred.append(name)
            continue
        if name in FILE_SUITES:
            rows = _file_suite(name, 0)(suite_path(name, directory),
                                        (lambda rid, n=name: progress(n, rid))
                                        if progress else None)
            for k, row in enumerate(rows):
                if row_selected(row.id, only):
                    results[(name, k)] = [row]
            continue
        if name in SPECIAL_SUITES:
            rows = SPECIAL_SUITES[name]()
            for k, row in enumerate(rows):
                if row_selected(row.id, only):
                    results[(name, k)] = [row]
                if progress:
                    progress(name, row.id)
            continue
        work += [((name, k), job) for k, job in
                 enumerate(suite_jobs(name, directory, granularity, steady, only))]
    todo = sorted(_with_twins(work), key=lambda item: -item[1].cost)

    def done(keys: list[tuple[str, int]], job: RowJob, rows: list[Row]) -> None:
        for key, entry in zip(keys, (job.entry, *job.twins), strict=True):
            results[key] = [r for r in rows if r.id == str(entry["id"])]
            if progress:
                progress(job.suite, str(entry["id"]))

    def file_done(name: str, rows: list[Row]) -> None:
        for k, row in enumerate(rows):
            if row_selected(row.id, only):
                results[(name, k)] = [row]
            if progress:
                progress(name, row.id)

    if jobs > 1 and len(todo) + len(deferred) > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            files = {pool.submit(file_suite_rows, name, directory): name for name in deferred}
            futures = {pool.submit(predict_row, job): (keys, job) for keys, job in todo}
            for future in as_completed([*files, *futures]):
                if future in files:
                    file_done(files[future], future.result())
                else:
                    done(*futures[future], future.result())
    else:
        for name in deferred:
            file_done(name, file_suite_rows(name, directory))
        for keys, job in todo:
            done(keys, job, predict_row(job))
    order = {name: i for i, name in enumerate(names)}
    return [row for key in sorted(results, key=lambda k: (order[k[0]], k[1]))
            for row in results[key]]


def run_suite(suite: str, directory: Path | None = None,
              progress: Callable[[str], None] | None = None, *, jobs: int = 1,
              granularity: str | None = None) -> list[Row]:
    """Predict every row of one suite; ``progress(row_id)`` after each row."""
    return run_suites([suite], directory, jobs=jobs, granularity=granularity,
                      progress=(lambda _s, row_id: progress(row_id)) if progress else None)


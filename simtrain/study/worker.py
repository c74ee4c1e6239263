"""Run a batch of sweep points; the function executors ship to worker processes.

Only plain data crosses process boundaries: the base scenario as a dict, the points'
overrides in, JSON-able records out. Timelines never leave the worker (the parent
recomputes the few it draws).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simtrain.errors import ScenarioError

# (index, point id, axis values, overrides) of one point, as shipped to a worker.
Task = tuple[int, str, dict[str, Any], list[str]]


def run_batch(base: dict[str, Any], base_label: str, tasks: Sequence[Task]
              ) -> list[dict[str, Any]]:
    """Simulate each task's point; return one journal record per task, in task order.

    A point the scenario rejects (ScenarioError: out of memory, impossible plan, bad value)
    or whose step never ends (SimulationDeadlock: an injected hang) is recorded as
    ``invalid`` with the one-line reason; any other exception as ``failed`` with its type.
    Never raises for a point.
    """
    return [run_point(base, base_label, task) for task in tasks]


def is_jobs(source: Path | Mapping[str, Any]) -> bool:
    """Whether a sweep's base (a file or its content) is a scenario with ``jobs``."""
    if isinstance(source, Mapping):
        return "jobs" in source
    from simtrain.jobs.spec import is_jobs_file

    return is_jobs_file(source)


def load_point(source: Path | Mapping[str, Any], overrides: Sequence[str]) -> Any:
    """The scenario of one point: a ``JobsScenario`` for a base with ``jobs``, else a
    ``Scenario`` (ScenarioError on bad input)."""
    if is_jobs(source):
        from simtrain.jobs.spec import load_jobs

        return load_jobs(source, overrides)
    from simtrain.scenario import load_scenario

    return load_scenario(source, overrides)


def simulate_point(source: Path | Mapping[str, Any], overrides: Sequence[str]) -> Any:
    """Simulate one point: ``simulate`` of its scenario, or for several jobs on one cluster
    ``simulate_jobs`` (each job also alone, so its summary has ``slowdown``). Either result
    has ``summary``, ``timeline`` and ``cluster``."""
    from simtrain.jobs.spec import JobsScenario

    scenario = load_point(source, overrides)
    if isinstance(scenario, JobsScenario):
        from simtrain.jobs.run import simulate_jobs

        return simulate_jobs(scenario)
    from simtrain.simulate import simulate

    return simulate(scenario)


def run_point(base: dict[str, Any], base_label: str, task: Task) -> dict[str, Any]:
    """One task -> its journal record (see :mod:`simtrain.study.journal`)."""
    from simtrain.engine.sim import SimulationDeadlock

    index, pid, values, overrides = task
    record: dict[str, Any] = {"id": pid, "index": index, "values": values, "status": "ok",
                              "error": None, "summary": None}
    start = time.perf_counter()
    try:
        result = simulate_point(base, overrides)
        record["summary"] = json.loads(json.dumps(result.summary, default=str))
    except ScenarioError as exc:
        record["status"] = "invalid"
        record["error"] = str(relabel(exc, base_label))
    except SimulationDeadlock as exc:
        record["status"] = "invalid"
        record["error"] = f"deadlock: {exc}".replace("\n", " ")
    except Exception as exc:  # noqa: BLE001 - a point must never crash the sweep
        record["status"] = "failed"
        record["error"] = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    record["elapsed_s"] = round(time.perf_counter() - start, 6)
    return record


def relabel(exc: ScenarioError, base_label: str) -> ScenarioError:
    """The error with the base scenario's name in place of ``<dict>`` (workers load dicts)."""
    if exc.source == "<dict>":
        return ScenarioError(exc.message, source=base_label, field=exc.field)
    return exc

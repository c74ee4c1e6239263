"""What-if of placements: one jobs scenario run under several placements, side by side.

A try is written as ``pack`` or ``spread`` (every job under that policy) or as
``a=pack;b=0-7,16-23`` (the named jobs placed so, the others as written). A job moved to
a policy keeps its size (the GPU count it had as written). Each try is a full shared run
with the per-job baselines, so its slowdowns are against the job alone on the same GPUs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simtrain.errors import ScenarioError
from simtrain.jobs.placement import POLICIES, fmt_gpus
from simtrain.jobs.run import simulate_jobs
from simtrain.jobs.spec import JobsScenario, load_jobs

AS_WRITTEN = "as written"
DEFAULT_TRIES: tuple[str, ...] = (AS_WRITTEN, *POLICIES)


@dataclass(frozen=True)
class PlacementTry:
    """One placement to try: its label and the ``--set`` overrides that make it."""

    label: str
    overrides: tuple[str, ...]


def parse_try(text: str, scenario: JobsScenario) -> PlacementTry:
    """The try written ``text`` for ``scenario``'s jobs; ScenarioError (source ``--try``)
    naming what is accepted when a job name or the form is wrong."""
    text = text.strip()
    if text == AS_WRITTEN:
        return PlacementTry(AS_WRITTEN, ())
    sizes = {job.name: len(job.gpus) for job in scenario.jobs}
    if text.lower() in POLICIES:
        return PlacementTry(text.lower(), tuple(o for name in sizes
                                                for o in _moves(name, text.lower(), sizes)))
    overrides: list[str] = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, sep, value = part.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or name not in sizes or not value:
            raise ScenarioError(f"{part!r}: expected {AS_WRITTEN!r}, {' or '.join(POLICIES)}, "
                                f"or JOB=PLACEMENT[;JOB=PLACEMENT] with a job of: "
                                f"{', '.join(sizes)} (e.g. {next(iter(sizes))}=pack)",
                                source=f"--try {text}")
        overrides.extend(_moves(name, value, sizes))
    if not overrides:
        raise ScenarioError(f"expected {AS_WRITTEN!r}, {' or '.join(POLICIES)}, or "
                            f"JOB=PLACEMENT[;...]", source=f"--try {text!r}")
    return PlacementTry(text, tuple(overrides))


def _moves(name: str, value: str, sizes: dict[str, int]) -> list[str]:
    out = [f"jobs.{name}.placement={json.dumps(value)}"]
    if value.lower() in POLICIES:  # a policy needs the size the job had as written
        out.append(f"jobs.{name}.gpus={sizes[name]}")
    return out


def what_if(path: str | Path, tries: Sequence[str] = DEFAULT_TRIES,
            overrides: Sequence[str] = (),
            progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """One row per try (in order): the makespan, links shared by jobs and each job's
    GPUs, step time together and alone and slowdown; ScenarioError on bad input."""
    written = load_jobs(path, overrides)
    rows = []
    for attempt in (parse_try(t, written) for t in tries):
        if progress is not None:
            progress(attempt.label)
        result = simulate_jobs(load_jobs(path, [*overrides, *attempt.overrides]))
        summary = result.summary
        rows.append({
            "placement": attempt.label,
            "step_time_s": summary["step_time_s"],
            "shared_links": summary["shared_links"],
            "jobs": {name: {"gpus": job["gpus"], "step_time_s": job["step_time_s"],
                            "step_time_alone_s": job["step_time_alone_s"],
                            "slowdown": job["slowdown"]}
                     for name, job in summary["jobs"].items()},
        })
    return rows


def describe(scenario: JobsScenario) -> str:
    """The placement as written, e.g. ``a=0-7,16-23; b=8-15,24-31``."""
    return "; ".join(f"{job.name}={fmt_gpus(job.gpus)}" for job in scenario.jobs)

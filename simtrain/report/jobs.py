"""The report of several jobs on one cluster: a table of the jobs, then one combined Gantt.

The jobs table gives each job's GPUs, placement, step time together and alone, slowdown
and MFU; the Gantt chart groups its rows per job (the row label and the hover name the
job); the rest is the single-job report's (link utilisation shows the shared links).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from simtrain.units import fmt_seconds

if TYPE_CHECKING:
    from simtrain.jobs.run import JobsResult

# The jobs table's columns: (heading, summary key of a job, how it reads).
JOB_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("GPUs", "gpus", "text"),
    ("placement", "placement", "text"),
    ("step time", "step_time_s", "seconds"),
    ("alone", "step_time_alone_s", "seconds"),
    ("slowdown", "slowdown", "ratio"),
    ("exposed comm", "exposed_comm_s", "seconds"),
    ("MFU", "mfu", "percent"),
)


def fmt_cell(value: Any, how: str) -> str:
    """One cell of the jobs table ("n/a" when the job has no such value)."""
    if value is None:
        return "n/a"
    if how == "seconds":
        return fmt_seconds(float(value))
    if how == "ratio":
        return f"{float(value):.3f}×"
    if how == "percent":
        return f"{100 * float(value):.1f}%"
    return str(value)


def job_rows(jobs: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """The jobs table as text: one row per job, the job's name first."""
    return [[name, *(fmt_cell(job.get(key), how) for _, key, how in JOB_COLUMNS)]
            for name, job in jobs.items()]


def jobs_table_html(jobs: Mapping[str, Mapping[str, Any]]) -> str:
    """The jobs table as an HTML section."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ("job", *(c[0] for c in JOB_COLUMNS)))
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
                   for row in job_rows(jobs))
    return (f'<section id="jobs"><h2>Jobs</h2><table class="summary"><thead><tr>{head}'
            f"</tr></thead><tbody>{body}</tbody></table></section>")


def render_jobs_report(result: JobsResult, *, title: str, scenario_yaml: str | None = None,
                       overrides: Sequence[str] = (), assets: str = "inline") -> str:
    """The HTML report of a shared run (see the module docstring)."""
    from simtrain.report.html import render_report
    from simtrain.report.topology import topology_figure, topology_table_html

    cluster, scenario = result.cluster, result.scenario
    summary = result.summary
    owner = {gpu: job.name for job in scenario.jobs for gpu in job.gpus}
    where = (f"ran: {len(scenario.jobs)} jobs on {summary['num_gpus']:,} of "
             f"{cluster.num_gpus:,} × {cluster.gpu_spec.name}")
    parts = [p for p in (scenario.description, where) if p]
    if overrides:
        parts.insert(1, f"with --set {', '.join(overrides)}")
    return render_report(
        summary, result.timeline, title=title, scenario_yaml=scenario_yaml,
        server_of=cluster.server_of, graph=result.graph, links=cluster.links,
        topology=topology_figure(cluster, title=f"Topology: {cluster.num_gpus} × "
                                 f"{cluster.gpu_spec.name}"),
        topology_table=topology_table_html(cluster), subtitle=" · ".join(parts),
        assets=assets, group_of=lambda rank: owner.get(rank, "idle"),
        intro=jobs_table_html(summary["jobs"]))

"""Several jobs' steps on one cluster: their task graphs merged, run on the shared fabric.

Each job is lowered on its own (its ranks 0..n-1, explicit fidelity), then its tasks are
copied into one task graph over the whole cluster with rank ``i`` renamed to the job's
``gpus[i]``. The executor runs that graph on the cluster's flow network, so the jobs'
flows contend on the links they share by the same max-min sharing as one job's flows do.
Each job is also run alone on the same GPUs (the baseline), and its summary says how much
slower the shared run made it.

Fidelity is explicit for every job: under symmetric fidelity a mirrored replica's traffic
is counted only on the links of its representative's route, so another job's flow on a
mirrored replica's link would not see it (optimistic contention). Every job starts its
step at t = 0; a job that finishes first does not start a next step, so the others run the
rest of theirs without its traffic: their slowdowns are lower bounds of the steady state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph, TaskGraphError
from simtrain.engine.timeline import Timeline
from simtrain.errors import ScenarioError
from simtrain.fidelity import FidelityChoice
from simtrain.hardware.topology import Cluster, build_cluster
from simtrain.jobs.placement import fmt_gpus
from simtrain.jobs.spec import Job, JobsScenario
from simtrain.scenario import scenario_error
from simtrain.simulate import Plan, interference_model, lower_checked
from simtrain.simulate import _summary as job_summary
from simtrain.workload.host import issue_times
from simtrain.workload.interference import Interference
from simtrain.workload.memory import MemoryReport

FIDELITY_NOTE = ("explicit: every rank of every job simulated (under symmetric fidelity a "
                 "mirrored replica's traffic would be invisible on the other jobs' links)")
START_NOTE = ("all jobs start their step at t = 0 and run one step; once a job finishes, the "
              "others run on without its traffic, so the slowdowns of the longer jobs are "
              "lower bounds of the steady state")


@dataclass
class LoweredJob:
    """One job lowered on its own: its cluster view, plan, memory and task graph."""

    job: Job
    view: Cluster
    plan: Plan
    memory: MemoryReport
    graph: TaskGraph


@dataclass
class JobsResult:
    """The shared run: the merged graph and timeline over the whole cluster, each job's
    own timeline (its ranks 0..n-1) and the summary (``summary["jobs"][name]`` per job)."""

    scenario: JobsScenario
    cluster: Cluster
    graph: TaskGraph
    timeline: Timeline
    job_timelines: dict[str, Timeline]
    summary: dict[str, Any]

    def job_of(self, rank: int) -> str:
        """Name of the job that runs on cluster GPU ``rank`` ("" for an idle GPU)."""
        for job in self.scenario.jobs:
            if rank in job.gpus:
                return job.name
        return ""


def lower_job(job: Job) -> LoweredJob:
    """Plan, check memory and lower one job on a cluster of its own size."""
    scenario = job.scenario
    view = build_cluster(scenario.cluster)
    plan, memory, graph = lower_checked(scenario, view, FidelityChoice("explicit"),
                                        "change the job's parallelism or micro_batch_size")
    return LoweredJob(job, view, plan, memory, graph)


def merge_graphs(num_ranks: int, parts: Sequence[tuple[str, Sequence[int], TaskGraph]]
                 ) -> tuple[TaskGraph, list[int]]:
    """One graph over ``num_ranks`` ranks holding each part's tasks, rank ``i`` of a part
    renamed to its ``gpus[i]`` and ``meta["job"]`` set; returns it and each part's first
    task id (a part's task ``t`` is merged task ``offset + t``)."""
    merged = TaskGraph(num_ranks=num_ranks)
    offsets: list[int] = []
    for name, gpus, graph in parts:
        if graph.virtual:
            raise TaskGraphError(f"job {name!r}: a symmetric-fidelity graph cannot share a "
                                 "cluster (its mirrored traffic would be invisible)")
        base = len(merged.tasks)
        offsets.append(base)
        for task in graph.tasks:
            ranks = [gpus[r] for r in task.ranks]
            deps = [base + d for d in task.deps]
            meta = {**task.meta, "job": name}
            if task.comm is None:
                merged.compute(ranks[0], task.name, task.duration, kind=task.kind,
                               stream=task.stream, deps=deps, flops=task.flops,
                               nbytes=task.bytes, meta=meta)
            else:
                spec = task.comm
                merged.collective(spec.op, ranks, spec.nbytes, task.name, kind=task.kind,
                                  stream=task.stream, deps=deps, algorithm=spec.algorithm,
                                  splits=spec.splits, meta=meta)
    return merged, offsets


def _interference(lowered: Sequence[LoweredJob]) -> float | Interference:
    """The one interference model of the shared run (all jobs' must agree: it depends on
    the GPU, the shared compute section and the training dtype class)."""
    models = [interference_model(lj.job.scenario, lj.view) for lj in lowered]
    for lj, model in zip(lowered[1:], models[1:], strict=True):
        if model != models[0]:
            raise scenario_error(lj.job.scenario, "training.dtype", (
                f"the interference model of job {lj.job.name!r} differs from that of job "
                f"{lowered[0].job.name!r} (their GEMM rates differ by dtype); give the "
                "jobs the same training dtype or set compute.comm_interference"))
    return models[0]


def _run(scenario: JobsScenario, cluster: Cluster, lowered: Sequence[LoweredJob],
         interference: float | Interference) -> tuple[TaskGraph, list[int], Timeline]:
    parts = [(lj.job.name, lj.job.gpus, lj.graph) for lj in lowered]
    try:
        graph, offsets = merge_graphs(cluster.num_gpus, parts)
    except TaskGraphError as exc:
        raise ScenarioError(str(exc), source=scenario.source, field="jobs") from None
    compute = scenario.compute
    timeline = execute(graph, cluster, comm=scenario.comm.build(cluster, cluster.gpu_spec.arch),
                       interference=interference, network=scenario.sim.network,
                       issue=issue_times(graph, compute.host_kernel_issue,
                                         compute.host_microbatch))
    return graph, offsets, timeline


def split_timeline(timeline: Timeline, gpus: Sequence[int], first: int, count: int
                   ) -> Timeline:
    """The spans and flows of one part of a merged run, back on its own ranks and task ids
    (tasks ``first .. first + count - 1`` of the merged graph)."""
    local = {gpu: i for i, gpu in enumerate(gpus)}
    return Timeline(num_ranks=len(gpus),
                    spans=[replace(s, rank=local[s.rank], task=s.task - first)
                           for s in timeline.spans if first <= s.task < first + count],
                    flows=[replace(f, task=f.task - first) for f in timeline.flows
                           if first <= f.task < first + count])


def shared_links(timeline: Timeline, offsets: Sequence[int], names: Sequence[str]
                 ) -> dict[int, list[str]]:
    """Links that carried flows of more than one job: link id -> the jobs, in job order."""
    users: dict[int, set[int]] = {}
    bounds = [*offsets[1:], float("inf")]
    for flow in timeline.flows:
        part = next(i for i, end in enumerate(bounds) if flow.task < end)
        for link in flow.route:
            users.setdefault(link, set()).add(part)
    return {link: [names[i] for i in sorted(parts)]
            for link, parts in sorted(users.items()) if len(parts) > 1}


def simulate_jobs(scenario: JobsScenario, *, baseline: bool = True) -> JobsResult:
    """Simulate one step of every job of ``scenario`` together on its cluster, and (with
    ``baseline``) each job alone on the same GPUs; raises ScenarioError on bad input."""
    cluster = build_cluster(scenario.cluster)
    lowered = [lower_job(job) for job in scenario.jobs]
    interference = _interference(lowered)
    graph, offsets, timeline = _run(scenario, cluster, lowered, interference)
    names = [lj.job.name for lj in lowered]
    jobs: dict[str, dict[str, Any]] = {}
    timelines: dict[str, Timeline] = {}
    for lj, first in zip(lowered, offsets, strict=True):
        job = lj.job
        own = split_timeline(timeline, job.gpus, first, len(lj.graph.tasks))
        timelines[job.name] = own
        summary = job_summary(job.scenario, lj.view, lj.plan, lj.graph, own, lj.memory,
                              FidelityChoice("explicit"))
        summary.update({"gpus": fmt_gpus(job.gpus), "placement": job.policy or "explicit"})
        if baseline:
            alone = _run(scenario, cluster, [lj], interference)[2].end
            summary["step_time_alone_s"] = alone
            summary["slowdown"] = own.end / alone if alone > 0 else 1.0
        jobs[job.name] = summary
    shared = shared_links(timeline, offsets, names)
    used = sum(len(job.gpus) for job in scenario.jobs)
    notes = [START_NOTE]
    if scenario.sim.network == "analytic":
        notes.append("sim.network: analytic gives every collective its idle-network time, "
                     "so the jobs do not contend: use sim.network: flow")
    elif not shared:
        notes.append("no link carried the traffic of two jobs: their steps do not interact "
                     "(each is as fast as alone)")
    result_summary: dict[str, Any] = {
        "scenario": scenario.name,
        "gpu": cluster.gpu_spec.name,
        "num_gpus": used,
        "cluster_gpus": cluster.num_gpus,
        # The concurrent step's makespan: when the last job's step ends.
        "step_time_s": timeline.end,
        "jobs": jobs,
        "shared_links": len(shared),
        "tasks": len(graph.tasks),
        "fidelity": "explicit",
        "fidelity_note": FIDELITY_NOTE,
        "network": scenario.sim.network,
        "notes": notes,
    }
    return JobsResult(scenario, cluster, graph, timeline, timelines, result_summary)

"""One simulation end to end: scenario -> cluster/model/plan -> task graph -> engine -> summary."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph
from simtrain.engine.timeline import Timeline
from simtrain.hardware.topology import Cluster, build_cluster
from simtrain.parallel.ddp import DDPPlan, lower_ddp
from simtrain.report.metrics import summarize
from simtrain.scenario import Scenario, load_scenario
from simtrain.training import DTYPE_BYTES, optimizer_bytes_per_param
from simtrain.workload.compute import op_time
from simtrain.workload.model import Op, lower_model, model_flops_per_step, num_parameters


@dataclass
class SimulationResult:
    """What one run produced: the summary dict, the timeline, and the built inputs."""

    scenario: Scenario
    cluster: Cluster
    graph: TaskGraph
    timeline: Timeline
    summary: dict[str, Any] = field(default_factory=dict)


def build_graph(scenario: Scenario, cluster: Cluster) -> TaskGraph:
    """Lower the scenario's model and plan to a task graph over every GPU of ``cluster``."""
    train = scenario.training
    dp = scenario.parallelism.dp or cluster.num_gpus
    layers = lower_model(scenario.model, train.micro_batch_size, scenario.seq_len,
                         train.dtype_bytes)
    params = num_parameters(scenario.model)
    ddp = scenario.parallelism.ddp
    optimizer = Op(
        name="optimizer.step", kind="elementwise", flops=0.0,
        bytes=params * optimizer_bytes_per_param(train.optimizer, train.dtype),
        gemm_shape=None, params=(), activation_bytes=0.0,
    )
    plan = DDPPlan(
        ranks=tuple(range(dp)),
        micro_batches=micro_batches(scenario, cluster),
        grad_bytes_per_element=DTYPE_BYTES[ddp.grad_dtype],
        first_bucket_bytes=ddp.first_bucket_bytes,
        bucket_cap_bytes=ddp.bucket_cap_bytes,
        overlap=ddp.overlap,
        optimizer_op=optimizer,
    )
    graph = TaskGraph(num_ranks=cluster.num_gpus)
    gpu, compute = cluster.gpu_spec, scenario.compute
    lower_ddp(graph, layers, plan, lambda op: op_time(op, gpu, compute, train.dtype))
    return graph


def simulate(scenario: Scenario | str | Path | Mapping[str, Any]) -> SimulationResult:
    """Simulate one training step of ``scenario`` (a Scenario, a YAML path or a dict)."""
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    cluster = build_cluster(scenario.cluster)
    graph = build_graph(scenario, cluster)
    timeline = execute(graph, cluster, collective_latency=scenario.comm.collective_latency,
                       hangs=scenario.sim.hangs)
    tokens = scenario.training.global_batch_size * scenario.seq_len
    summary = {
        "scenario": scenario.name,
        "gpu": cluster.gpu_spec.name,
        **summarize(
            timeline,
            num_gpus=cluster.num_gpus,
            tokens_per_step=tokens,
            model_flops_per_step=model_flops_per_step(scenario.model, tokens, scenario.seq_len),
            peak_flops_per_gpu=cluster.gpu_spec.flops(scenario.training.dtype),
        ),
        "parameters": num_parameters(scenario.model),
        "micro_batches": micro_batches(scenario, cluster),
        "tasks": len(graph.tasks),
    }
    return SimulationResult(scenario, cluster, graph, timeline, summary)


def micro_batches(scenario: Scenario, cluster: Cluster) -> int:
    """Microbatches per rank per step (gradient-accumulation steps)."""
    dp = scenario.parallelism.dp or cluster.num_gpus
    return scenario.training.global_batch_size // (dp * scenario.training.micro_batch_size)

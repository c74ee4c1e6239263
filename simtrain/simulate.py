"""One simulation end to end: scenario -> cluster/model/plan -> task graph -> engine -> summary."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from simtrain.engine.sim import SimulationDeadlock, execute, stalled_timeline
from simtrain.engine.spantable import overlaps
from simtrain.engine.taskgraph import TaskGraph, TaskGraphError
from simtrain.engine.timeline import (
    COMM_KINDS,
    COMPUTE_KINDS,
    Timeline,
)
from simtrain.fidelity import FidelityChoice, choose_fidelity, fidelity_note
from simtrain.hardware.topology import Cluster, build_cluster
from simtrain.op_timing import op_timer, optimizer_timer
from simtrain.parallel.bucket_prepass import prepass_timer
from simtrain.parallel.expert import deepep_problem
from simtrain.parallel.fsdp import gathered_bytes
from simtrain.parallel.lower import Lowering, LowerOptions
from simtrain.parallel.plan import ParallelDims
from simtrain.parallel.program import phase_costs
from simtrain.parallel.schedule import Schedule, is_costed, make_schedule, peak_in_flight
from simtrain.parallel.shard import ShardSpec, Unit, chunk_units, placed_layers
from simtrain.report.metrics import summarize
from simtrain.report.notes import run_notes
from simtrain.scenario import Scenario, load_scenario, scenario_error
from simtrain.training import DTYPE_BYTES, optimizer_bytes_per_param
from simtrain.workload.compute import op_time
from simtrain.workload.fp8 import (
    FP8_GATHER_RECIPES,
    FP8_WEIGHT_BYTES,
    check_fp8,
)
from simtrain.workload.host import host_summary, issue_times
from simtrain.workload.interference import NCCL_CHANNELS, Interference
from simtrain.workload.memory import (
    GIB,
    MemoryReport,
    layer_activation_bytes,
    model_state_bytes,
)
from simtrain.workload.model import model_flops_per_step, num_parameters
from simtrain.workload.tables import measured_share


@dataclass
class SimulationResult:
    """What one run produced: the summary dict, the timeline, and the built inputs."""

    scenario: Scenario
    cluster: Cluster
    graph: TaskGraph
    timeline: Timeline
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """The scenario's plan resolved against its cluster: degrees, shards and schedule."""

    dims: ParallelDims
    micro_batches: int
    units: list[list[list[Unit]]]  # [stage][chunk] -> units of one rank of that stage
    schedule: Schedule  # its placement says which model chunk each units[stage][chunk] is
    p2p_bytes: float
    # Microbatches of the full step, over which once-per-step kernels (FP8 weight casts)
    # are amortised: micro_batches, unless a steady-state run simulates fewer
    # (``simtrain.steady_state``); 0 means micro_batches.
    step_micro_batches: int = 0


def build_plan(scenario: Scenario, cluster: Cluster, step_micro_batches: int = 0) -> Plan:
    """Resolve degrees, the pipeline schedule and the model shard of each (stage, chunk),
    the model chunk the schedule's placement puts there. ``step_micro_batches``: see
    ``Plan`` (0: the scenario's own)."""
    par, train, cfg = scenario.parallelism, scenario.training, scenario.model
    dims = par.dims(cluster.num_gpus)
    m = micro_batches(scenario, cluster)
    spec = ShardSpec(tp=dims.tp, cp=dims.cp, ep=dims.ep, sp=dims.sp,
                     cp_algorithm=par.cp_algorithm, cp_a2a=dims.cp_a2a, pp=dims.pp,
                     etp=dims.etp, fp8_gathers=train.fp8_recipe in FP8_GATHER_RECIPES,
                     layout=cfg.layout, tp_overlap_impl=par.tp_comm_overlap_impl,
                     tp_overlap=par.tp_comm_overlap and dims.sp and dims.tp > 1,
                     torch_ring=scenario.compute.attention_impl == "fa2",
                     recompute_modules=tuple(par.recompute_modules),
                     cross_entropy=scenario.compute.cross_entropy,
                     counts_gather=par.moe_dispatcher != "deepep", unpermute=par.moe_unpermute)
    b, s, dt = train.micro_batch_size, scenario.seq_len, train.dtype_bytes
    kind = par.schedule if dims.vpp > 1 or par.schedule != "interleaved" else "1f1b"
    schedule = make_schedule(kind, dims.pp, m, dims.vpp)
    cells = placed_layers(cfg.num_layers, schedule.positions(), par.pp_layers)
    units = [[chunk_units(cfg, layers, first=first, last=last, b=b, s=s, dt=dt, spec=spec)
              for layers, first, last in row] for row in cells]
    if is_costed(kind):  # built for this model's F, B, W times (same placement)
        costs = phase_costs(units, cp=dims.cp, recompute=par.recompute,
                            op_time=op_timer(scenario, cluster, step_micro_batches or m),
                            attention_saved=scenario.compute.op_sac_saves_attention)
        if min(costs) > 0:
            schedule = make_schedule(kind, dims.pp, m, dims.vpp, costs)
    # SP, or Megatron's scatter-gather without it, sends each TP rank's 1/tp of it.
    split = dims.sp or par.pp_scatter_gather
    p2p = dt * b * (s // dims.cp) * cfg.hidden_size / (dims.tp if split else 1)
    return Plan(dims, m, units, schedule, float(p2p), step_micro_batches)


def build_graph(scenario: Scenario, cluster: Cluster, plan: Plan | None = None,
                choice: FidelityChoice | None = None) -> TaskGraph:
    """Lower the scenario's model and plan to a task graph over every GPU of ``cluster``."""
    plan = plan or build_plan(scenario, cluster)
    choice = choice or choose_fidelity(scenario, cluster)
    train, par = scenario.training, scenario.parallelism
    ddp = par.ddp
    options = LowerOptions(
        dims=plan.dims, micro_batches=plan.micro_batches, dtype_bytes=train.dtype_bytes,
        grad_bytes_per_element=DTYPE_BYTES[ddp.grad_dtype],
        first_bucket_bytes=ddp.first_bucket_bytes, bucket_cap_bytes=ddp.bucket_cap_bytes,
        overlap=ddp.overlap,
        optimizer_bytes_per_param=optimizer_bytes_per_param(train.optimizer, train.dtype),
        recompute=par.recompute, granularity=scenario.sim.granularity,
        p2p_bytes=plan.p2p_bytes, imbalance=scenario.model.routing_imbalance,
        capacity_factor=scenario.model.capacity_factor,
        moe_dispatcher=par.moe_dispatcher,
        experts_per_token=scenario.model.experts_per_token,
        routing_node_limit=scenario.model.routing_node_limit, server_of=cluster.server_of,
        tp_comm_overlap=par.tp_comm_overlap, tp_overlap_impl=par.tp_comm_overlap_impl,
        overlap_param_gather=ddp.overlap_param_gather,
        pp_gather=par.pp_scatter_gather and not plan.dims.sp and plan.dims.tp > 1,
        reshard_after_forward=par.fsdp.reshard_after_forward, fsdp_prefetch=par.fsdp.prefetch,
        fsdp_reduce_dtype=par.fsdp.reduce_dtype, fsdp_copies=par.fsdp.copies,
        attention_saved=scenario.compute.op_sac_saves_attention,
        fsdp_sync_each_microbatch=par.fsdp.sync_each_microbatch,
    )
    options = replace(options, optimizer_step=optimizer_timer(scenario, cluster),
                      bucket_prepass=prepass_timer(scenario.parallelism.ddp,
                                                   scenario.compute, cluster.gpu_spec))
    if par.moe_dispatcher == "deepep" and plan.dims.ep > 1:
        dims = plan.dims
        problem = deepep_problem({dims.ep_group(r) for r in range(dims.world_size)},
                                 cluster.server_of)
        if problem:
            raise scenario_error(scenario, "parallelism.moe_dispatcher", problem)
    options = replace(options, symmetry=choice.symmetry)
    graph = TaskGraph(num_ranks=cluster.num_gpus)
    timer = op_timer(scenario, cluster, plan.step_micro_batches or plan.micro_batches)
    Lowering(graph, plan.units, plan.schedule, options, timer).run()
    return graph


def fidelity(scenario: Scenario, cluster: Cluster) -> str:
    """"explicit", "symmetric" or "hybrid": ``sim.fidelity`` resolved (``simtrain.fidelity``)."""
    return choose_fidelity(scenario, cluster).mode


# Weights that never get FP8 copies: norms, embeddings and the BF16 GEMMs (workload.fp8).
_BF16_WEIGHTS = ("norm", "embedding", "lm_head", "router")


def memory_report(scenario: Scenario, cluster: Cluster, plan: Plan) -> MemoryReport:
    """Per-GPU memory of the fullest stage (see ``simtrain.workload.memory`` conventions).

    Gradients are kept in ``parallelism.ddp.grad_dtype`` (fp32 by default: Megatron's and
    PyTorch AMP's 18 B/param before sharding). ZeRO-3 shards over the HSDP shard group
    (``parallelism.fsdp.shard_size``; all of dp x cp by default). Communication buffers: two
    gradient buckets in flight (zero < 3), the gathered units (ZeRO-3:
    ``simtrain.parallel.fsdp.gathered_bytes``, the running unit and ``prefetch`` ahead, or
    every unit without reshard after forward), and the pipeline send and receive buffers.
    FSDP synced once per step (``parallelism.fsdp.sync_each_microbatch`` false) holds every
    unit unsharded and its gradients unsharded in the reduce dtype until the last backward.
    """
    dims, par, train, cfg = plan.dims, scenario.parallelism, scenario.training, scenario.model
    grad_bytes = DTYPE_BYTES[par.ddp.grad_dtype]
    dt = train.dtype_bytes
    per_layer = layer_activation_bytes(cfg, train.micro_batch_size, scenario.seq_len,
                                       tp=dims.tp, cp=dims.cp, sp=dims.sp,
                                       recompute=par.recompute, dtype_bytes=dt,
                                       modules=tuple(par.recompute_modules),
                                       attention_saved=scenario.compute.op_sac_saves_attention)
    worst: MemoryReport | None = None
    for stage, chunks in enumerate(plan.units):
        params = [p for chunk in chunks for u in chunk for p in u.params]
        expert = sum(p.numel for p in params if ".experts." in p.name)
        dense = sum(p.numel for p in params) - expert
        shard = dims.fsdp_shard_size if dims.zero == 3 else dims.dp * dims.cp
        states = model_state_bytes(dense, zero=dims.zero, dp=shard,
                                   weight_bytes=dt, grad_bytes=grad_bytes)
        edp = dims.tp * dims.cp * dims.dp // (dims.etp * dims.ep)  # expert data parallel
        for k, v in model_state_bytes(expert, zero=dims.zero, dp=edp,
                                      weight_bytes=dt, grad_bytes=grad_bytes).items():
            states[k] += v
        if train.fp8_recipe is not None:  # FP8 copies of the GEMM weights (workload.fp8)
            gemm_params = sum(p.numel for p in params if p.name.endswith(".weight")
                              and not any(w in p.name for w in _BF16_WEIGHTS))
            states["fp8_weights"] = FP8_WEIGHT_BYTES * gemm_params / (
                shard if dims.zero >= 3 else 1)
        layers_per_chunk = max(sum(1 for u in chunk if u.layer >= 0) for chunk in chunks)
        acts = peak_in_flight(plan.schedule.stages[stage]) * layers_per_chunk * per_layer
        if par.recompute == "full":  # one layer recomputed at a time, fully materialised
            acts += layer_activation_bytes(cfg, train.micro_batch_size, scenario.seq_len,
                                           tp=dims.tp, cp=dims.cp, sp=dims.sp, dtype_bytes=dt)
        if any(u.name == "lm_head" for c in chunks for u in c):
            # fp32 logits/softmax of one microbatch, V/t per rank
            acts += 4.0 * train.micro_batch_size * scenario.seq_len / dims.cp \
                * cfg.vocab_size / dims.tp
        if dims.zero == 3:
            synced = par.fsdp.sync_each_microbatch
            buffers = gathered_bytes([sum(p.numel for p in u.params) * dt
                                      for c in chunks for u in c],
                                     par.fsdp.prefetch, par.fsdp.reshard_after_forward
                                     and synced)
            if not synced:  # torch _fsdp_param.py to_accumulated_grad_if_needed: each
                # unsharded gradient is kept in the reduce dtype until the last backward
                states["gradients"] = (dense + expert) * DTYPE_BYTES[
                    par.fsdp.reduce_dtype or par.ddp.grad_dtype]
        else:
            buffers = 2.0 * min(par.ddp.bucket_cap_bytes, dense * grad_bytes)
        if dims.pp > 1:
            buffers += 2.0 * plan.p2p_bytes
        report = MemoryReport(stage, {**states, "activations": acts, "comm_buffers": buffers},
                              cluster.gpu_spec.hbm_bytes)
        if worst is None or report.total > worst.total:
            worst = report
    assert worst is not None
    return worst


def step_breakdown(timeline: Timeline,
                   weights: Mapping[int, int] | None = None) -> dict[str, Any]:
    """Exposed communication per kind and idle (bubble) time, averaged over ranks.

    Exposed time of a kind is its busy time during which the rank computes nothing (kinds
    overlapping each other are each counted). Bubble is the time a rank neither computes
    nor communicates: pipeline fill and drain, and waits for late peers. These are rank
    averages: under 1F1B the last stages finish backward early, so their gradient
    reduction counts as exposed although it runs in what would otherwise be their drain
    bubble and does not lengthen the step.
    """
    step = timeline.end
    table = timeline.columns()  # arrays, no span objects (simtrain.engine.spantable)
    ranks = table.ranks()  # every rank's unions at once (SpanTable.unions)
    w = [weights.get(rank, 1) if weights else 1 for rank in ranks]
    exposed: dict[str, float] = {k: 0.0 for k in COMM_KINDS}
    bubble = 0.0
    for wk, busy in zip(w, table.unions().lengths(), strict=True):
        bubble += wk * (step - busy)
    compute = table.unions(COMPUTE_KINDS)
    for kind in COMM_KINDS:  # each kind's sum over ranks in rank order, as per rank
        comm = table.unions((kind,))
        for wk, n_comm, busy, hidden in zip(w, comm.counts(), comm.lengths(),
                                            overlaps(comm, compute), strict=True):
            if n_comm:
                exposed[kind] += wk * (busy - hidden)
    n = max(sum(w), 1)
    bubble_s = bubble / n
    return {
        "exposed_comm_by_kind": {k: v / n for k, v in exposed.items() if v > 0},
        "bubble_s": bubble_s,
        "bubble_fraction": bubble_s / step if step > 0 else 0.0,
    }


OOM_HINT = ("add tensor/pipeline parallelism, a higher parallelism.zero stage, "
            "parallelism.recompute: full or a smaller micro_batch_size")


def lower_checked(scenario: Scenario, cluster: Cluster, choice: FidelityChoice, oom_hint: str,
                  step_micro_batches: int = 0) -> tuple[Plan, MemoryReport, TaskGraph]:
    """Plan, check FP8 support and memory, and lower ``scenario`` on ``cluster``; each
    refusal a ScenarioError naming its field (``oom_hint``: what to change when it does
    not fit, before the ``sim.ignore_memory`` escape; ``step_micro_batches``: see
    ``Plan``)."""
    recipe = scenario.training.fp8_recipe
    if recipe is not None:
        try:
            check_fp8(cluster.gpu_spec.arch, cluster.gpu_spec.name, recipe)
        except ValueError as err:
            raise scenario_error(scenario, "training.dtype", str(err)) from None
    plan = build_plan(scenario, cluster, step_micro_batches)
    memory = memory_report(scenario, cluster, plan)
    if not memory.fits() and not scenario.sim.ignore_memory:
        raise scenario_error(
            scenario, "parallelism",
            f"out of memory: {memory.describe()}; {oom_hint}, or set sim.ignore_memory: "
            f"true to simulate anyway")
    try:
        graph = build_graph(scenario, cluster, plan, choice)
    except TaskGraphError as exc:  # too many tasks, or a size the engine cannot run
        raise scenario_error(scenario, "sim.granularity", str(exc)) from None
    return plan, memory, graph


def simulate(scenario: Scenario | str | Path | Mapping[str, Any], *,
             step_micro_batches: int = 0) -> SimulationResult:
    """Simulate one training step of ``scenario`` (a Scenario, a YAML path or a dict).

    Raises ScenarioError when the plan does not fit in GPU memory, unless
    ``sim.ignore_memory`` is set. ``step_micro_batches``: see ``Plan`` (steady-state runs).
    """
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    cluster = build_cluster(scenario.cluster).with_link_slowdowns(
        [(s.between, s.slowdown) for s in scenario.sim.link_slowdowns])
    choice = choose_fidelity(scenario, cluster)
    plan, memory, graph = lower_checked(scenario, cluster, choice, OOM_HINT, step_micro_batches)
    comm = scenario.comm.build(cluster, cluster.gpu_spec.arch)
    sim = scenario.sim
    compute = scenario.compute
    try:
        timeline = execute(
            graph, cluster, comm=comm, hangs=sim.hangs,
            delays={r: s.delay for r, s in sim.stragglers.items()},
            slowdowns={r: s.slowdown for r, s in sim.stragglers.items()},
            interference=interference_model(scenario, cluster), network=sim.network,
            issue=issue_times(graph, compute.host_kernel_issue, compute.host_microbatch))
    except SimulationDeadlock as exc:  # the step up to the hang, for the report
        if choice.weights:  # hybrid: say whom the rank counts in the diagnosis cover
            exc.args = (f"{exc} (hybrid fidelity: counted among the {len(choice.weights)} "
                        f"simulated ranks, which stand for all {graph.num_ranks})",)
        partial = stalled_timeline(exc, graph.num_ranks)
        exc.result = SimulationResult(scenario, cluster, graph, partial, {
            **_summary(scenario, cluster, plan, graph, partial, memory, choice),
            "deadlock": str(exc)})
        raise
    summary = _summary(scenario, cluster, plan, graph, timeline, memory, choice)
    if sim.variability is not None:
        from simtrain.study.variability import simulate_steps

        summary["variability"] = simulate_steps(
            scenario, sim.variability, baseline_s=float(summary["step_time_s"])).as_dict()
    return SimulationResult(scenario, cluster, graph, timeline, summary)


def _summary(scenario: Scenario, cluster: Cluster, plan: Plan, graph: TaskGraph,
             timeline: Timeline, memory: MemoryReport,
             choice: FidelityChoice) -> dict[str, Any]:
    """The run's summary dict: metrics of ``timeline`` and the inputs that shaped it."""
    sim = scenario.sim
    recipe = scenario.training.fp8_recipe
    tokens = scenario.training.global_batch_size * scenario.seq_len
    dims = plan.dims
    metrics = summarize(
        timeline,
        num_gpus=cluster.num_gpus,
        tokens_per_step=tokens,
        model_flops_per_step=model_flops_per_step(scenario.model, tokens, scenario.seq_len),
        # FP8 runs are reported against the BF16 peak, as Megatron Bridge and
        # torchtitan do (shared/reference/measured_runs.yaml flop_conventions).
        peak_flops_per_gpu=cluster.gpu_spec.flops(
            "bf16" if recipe is not None else scenario.training.dtype),
        weights=choice.weights,
    )
    host = host_summary(host_seconds(timeline, choice.weights), timeline.end)
    summary: dict[str, Any] = {
        "scenario": scenario.name,
        "gpu": cluster.gpu_spec.name,
        **metrics,
        # Plain-language notes on numbers that look like bugs (see simtrain.report.notes),
        # and the launch-bound note of the host model.
        "notes": [*run_notes(timeline, metrics, recompute=scenario.parallelism.recompute,
                             attention_kernel=scenario.model.attention_kernel),
                  *host.pop("notes", []),
                  *[n for n in (fidelity_note(choice, cluster.num_gpus),) if n]],
        **step_breakdown(timeline, choice.weights),
        **host,
        "peak_memory_gib": memory.total / GIB,
        "memory_breakdown": memory.gib(),
        "parallelism": {"tp": dims.tp, "cp": dims.cp, "pp": dims.pp, "dp": dims.dp,
                        "ep": dims.ep, "vpp": dims.vpp, "zero": dims.zero, "sp": dims.sp},
        "parameters": num_parameters(scenario.model),
        "micro_batches": plan.micro_batches,
        "tasks": len(graph.tasks),
        "fidelity": choice.mode,
        **({"fidelity_why": choice.why} if choice.why else {}),
        "network": sim.network,
    }
    if scenario.compute.tables:  # how much of the compute the measured tables supplied
        summary["measured_compute"] = measured_share(
            (u for chunks in plan.units for units in chunks for u in units), cluster.gpu_spec,
            scenario.compute.tables, scenario.training.dtype,
            lambda op: op_time(op, cluster.gpu_spec, scenario.compute, scenario.training.dtype))
    return summary


def interference_model(scenario: Scenario, cluster: Cluster) -> float | Interference:
    """``compute.comm_interference`` if set (a fixed slowdown; 0 = off), else the model of
    the SMs and HBM bandwidth collectives take (``simtrain.workload.interference``)."""
    cfg, gpu = scenario.compute, cluster.gpu_spec
    if cfg.comm_interference is not None:
        return cfg.comm_interference
    channels = cfg.comm_channels or NCCL_CHANNELS.get(gpu.arch)
    if channels is None:
        raise scenario_error(scenario, "compute.comm_channels",
                             f"no default NCCL channel count for GPU architecture "
                             f"{gpu.arch!r}; set compute.comm_channels (or "
                             f"compute.comm_interference: 0)")
    return Interference(
        num_sms=gpu.num_sms, channels=channels, sms_per_channel=cfg.sms_per_channel,
        hbm_bandwidth=gpu.hbm_bandwidth * cfg.hbm_efficiency(gpu.arch),
        gemm_rate=gpu.flops("bf16" if scenario.training.dtype == "fp8"
                            else scenario.training.dtype) * cfg.max_gemm_efficiency(gpu.arch))


def host_seconds(timeline: Timeline, weights: Mapping[int, int] | None = None) -> float:
    """Mean seconds per rank the GPUs waited for the host to issue kernels (simulated ranks
    weighted by the ranks they stand for when ``weights`` are given)."""
    table = timeline.columns()
    waits = dict(zip(table.ranks(), table.sums(table.mask(("host",)),
                                               lambda r: table.end[r] - table.start[r]),
                     strict=True))
    if weights:
        total = sum(weights.get(rank, 1) * w for rank, w in waits.items())
        return total / max(sum(weights.get(rank, 1) for rank in waits), 1)
    return sum(waits.values()) / max(len(waits), 1)


def micro_batches(scenario: Scenario, cluster: Cluster) -> int:
    """Microbatches per pipeline per step (gradient-accumulation steps)."""
    dims = scenario.parallelism.dims(cluster.num_gpus)
    return scenario.training.global_batch_size // (dims.dp * scenario.training.micro_batch_size)

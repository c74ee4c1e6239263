"""Megatron-Core communication overlaps: TP comm overlap (userbuffers) and ZeRO-1/2
parameter all-gathers overlapped with the first forward (``--overlap-param-gather``)."""

from __future__ import annotations

import pytest

from simtrain import ScenarioError, load_scenario, simulate
from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph
from simtrain.hardware.topology import build_cluster
from simtrain.parallel.lower import Lowering, LowerOptions
from simtrain.parallel.plan import ParallelDims
from simtrain.parallel.schedule import Step
from simtrain.parallel.shard import Comm, Compute, Unit
from simtrain.parallel.templates import Collective, Kernel, TPOverlap
from simtrain.parallel.tensor import overlap_tp
from simtrain.simulate import build_plan
from simtrain.workload.model import Op, Param


def _scenario(par, training=None, sim=None, nodes=1, model=None):
    return load_scenario({
        # tiny-gpt's kernels are shorter than their host issue cost (launch-bound, see
        # workload.host): these tests are about the GPU side, so the host is free here.
        "compute": {"host_kernel_issue": 0, "host_microbatch": 0},
        "cluster": {"preset": "dgx-a100", "nodes": nodes},
        "model": model or {"preset": "tiny-gpt"},
        "training": {"global_batch_size": 16, "micro_batch_size": 2, "seq_len": 256,
                     **(training or {})},
        "parallelism": par,
        "sim": sim or {},
    })


# ---- tp_comm_overlap ----------------------------------------------------------------------

def _tp_bytes(graph):
    return sum(t.bytes for t in graph.tasks if t.kind == "tp_comm")


@pytest.mark.parametrize("granularity", ["op", "layer"])
def test_tp_comm_overlap_hides_tp_comm_and_conserves_bytes_and_flops(granularity):
    # Longer sequences so the TP collectives are bandwidth-bound (b·s·h = 2·2048·256 bf16
    # = 2 MiB per collective) and the GEMMs are big enough to hide part of them.
    training = {"seq_len": 2048, "global_batch_size": 8}
    model = {"preset": "tiny-gpt", "max_seq_len": 2048}
    sim = {"granularity": granularity}
    off = simulate(_scenario({"tp": 4, "sp": True}, training, sim, model=model))
    on = simulate(_scenario({"tp": 4, "sp": True, "tp_comm_overlap": True}, training, sim,
                            model=model))
    a, b = off.summary, on.summary
    assert b["step_time_s"] < a["step_time_s"]
    assert b["exposed_comm_by_kind"]["tp_comm"] < a["exposed_comm_by_kind"]["tp_comm"]
    # Each collective is cut into 1/n + (n-1)/n pieces: the same bytes move, the GEMMs
    # into (n-1)/n + 1/n: the same FLOPs run.
    assert _tp_bytes(on.graph) == pytest.approx(_tp_bytes(off.graph), rel=1e-12)
    assert b["hardware_flops_per_step"] == pytest.approx(a["hardware_flops_per_step"],
                                                         rel=1e-12)
    names = {t.name for t in on.graph.tasks if t.meta.get("tp_overlap_chunks")}
    # Forward: AG_first/AG_rest pipelined with qkv; RS pieces with proj (n = 4).
    assert {"layers.0.attn.f (1/4)", "layers.0.attn.f (2-4/4)", "layers.0.attn.qkv (1-3/4)",
            "layers.0.attn.qkv (4/4)", "layers.0.attn.proj (1/4)",
            "layers.0.attn.proj (2-4/4)", "layers.0.attn.g (1-3/4)",
            "layers.0.attn.g (4/4)"} <= names
    # Backward: the GEMM run is dgrad + wgrad of one linear.
    assert "layers.0.mlp.fc2.dgrad+wgrad (1-3/4)" in names
    # Reports still see tp_comm and forward/backward compute.
    kinds = {t.kind for t in on.graph.tasks if t.meta.get("tp_overlap_chunks")}
    assert kinds == {"tp_comm", "forward", "backward"}


def test_tp_comm_overlap_at_stage_granularity_degrades_to_no_overlap():
    on = simulate(_scenario({"tp": 4, "sp": True, "tp_comm_overlap": True},
                            sim={"granularity": "stage"})).summary
    off = simulate(_scenario({"tp": 4, "sp": True}, sim={"granularity": "stage"})).summary
    assert on["step_time_s"] == off["step_time_s"]
    assert on["tasks"] == off["tasks"]


def test_tp_comm_overlap_leaves_all_reduces_alone_without_tp():
    # tp = 1: nothing to overlap, nothing changes.
    a = simulate(_scenario({"tp_comm_overlap": True})).summary
    b = simulate(_scenario({})).summary
    assert a["step_time_s"] == b["step_time_s"]


def test_tp_comm_overlap_needs_sequence_parallelism():
    with pytest.raises(ScenarioError, match=r"tp_comm_overlap needs sequence parallelism "
                       r"\(parallelism\.sp: true\)"):
        _scenario({"tp": 4, "tp_comm_overlap": True})


def _one_step_makespan(nbytes: float, g: float, *, overlap: bool, op: str) -> tuple[float, float]:
    """One TP all-gather then a GEMM (or a GEMM then a reduce-scatter) on tp = 4, alone.

    Returns (makespan, duration of the collective(s) on rank 0)."""
    n = 4
    dims = ParallelDims(tp=n, sp=True)
    gemm = Op("x.fc", "gemm", 1e9, 1e6, (64, 64, 64), (Param("x.fc.weight", 10),), 0.0)
    comm = Comm("x.f", "tp", op, None, nbytes)
    steps = (comm, Compute(gemm)) if op == "all_gather" else (Compute(gemm), comm)
    units = [[[Unit("x", steps, layer=0)]]]
    options = LowerOptions(dims=dims, micro_batches=1, dtype_bytes=2,
                           grad_bytes_per_element=4, first_bucket_bytes=2**20,
                           bucket_cap_bytes=25 * 2**20, overlap=True,
                           optimizer_bytes_per_param=16, tp_comm_overlap=overlap)
    graph = TaskGraph(num_ranks=n)
    low = Lowering(graph, units, [[Step(0, 0, "F"), Step(0, 0, "B")]], options, lambda _op: g)
    low.emit_step(Step(0, 0, "F"), None)
    s = load_scenario({"cluster": {"preset": "dgx-a100", "nodes": 1},
                       "model": {"preset": "tiny-gpt"},
                       "training": {"global_batch_size": 8, "micro_batch_size": 1}})
    full = build_cluster(s.cluster)
    graph.num_ranks = full.num_gpus
    timeline = execute(graph, full)
    comm_time = sum(sp.duration for sp in timeline.for_rank(0) if sp.kind == "tp_comm")
    return timeline.end, comm_time


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("ratio", [0.5, 2.0])  # comm time / GEMM time
def test_tp_overlap_makespan_is_the_chunked_pipeline_bound(op, ratio):
    # Measure c, the collective alone (no overlap): 512 MiB over NVLink, bandwidth-bound
    # (c ~ 1.4 ms) so the extra alpha term (~2 us) the second piece pays is ~0.1 %. Then
    # pick g = c / ratio and check the overlapped makespan against
    # c/n + (n-1)/n·max(c, g) + g/n with n = tp = 4:
    # ratio 2 (c = 2g): c/4 + 3/4·c + g/4 = c + g/4 = 1.125·c (instead of c + g = 1.5·c);
    # ratio 1/2 (g = 2c): c/4 + 3/4·g + g/4 = g + c/4 = 1.125·g (instead of 1.5·g).
    nbytes = 512 * 2**20
    _, c = _one_step_makespan(nbytes, 1.0, overlap=False, op=op)
    g = c / ratio
    serial, _ = _one_step_makespan(nbytes, g, overlap=False, op=op)
    assert serial == pytest.approx(c + g, rel=1e-6)
    n = 4
    expected = c / n + (n - 1) / n * max(c, g) + g / n
    overlapped, _ = _one_step_makespan(nbytes, g, overlap=True, op=op)
    assert overlapped == pytest.approx(expected, rel=0.01)
    assert overlapped == pytest.approx(1.125 * max(c, g), rel=0.01)


def test_tp_comm_overlap_symmetric_matches_explicit():
    par = {"tp": 2, "sp": True, "tp_comm_overlap": True, "zero": 1,
           "ddp": {"overlap_param_gather": True}}
    sym = simulate(_scenario(par, nodes=2, sim={"fidelity": "symmetric"})).summary
    exp = simulate(_scenario(par, nodes=2, sim={"fidelity": "explicit"})).summary
    assert (sym["fidelity"], exp["fidelity"]) == ("symmetric", "explicit")
    assert sym["step_time_s"] == pytest.approx(exp["step_time_s"], rel=0.01)
    assert sym["tasks"] < exp["tasks"]


# ---- overlap_param_gather -----------------------------------------------------------------

@pytest.mark.parametrize("zero", [1, 2])
def test_overlap_param_gather_moves_the_all_gather_into_the_first_forward(zero):
    # pp = 2 on 8 GPUs: dp = 4 per stage; symmetric fidelity emits one dp group per stage.
    par = {"pp": 2, "zero": zero}
    off = simulate(_scenario(par))
    on = simulate(_scenario({**par, "ddp": {"overlap_param_gather": True}}))
    assert [t for t in off.graph.tasks if t.name == "zero param all-gather"]
    assert not [t for t in on.graph.tasks if t.name == "zero param all-gather"]
    assert on.summary["step_time_s"] <= off.summary["step_time_s"]

    plan = build_plan(on.scenario, on.cluster)
    ags = [t for t in on.graph.tasks if t.name.startswith("zero param ag")]
    assert ags and all(t.stream == "dp ag" and not t.deps for t in ags)
    for stage in range(2):
        # Bytes: every parameter of the stage once, in bf16 (dtype_bytes 2), not fp32 grads.
        numel = sum(p.numel for chunk in plan.units[stage] for u in chunk for p in u.params)
        ranks = set(plan.dims.stage_ranks(stage))
        stage_bytes = sum(t.bytes for t in ags if set(t.ranks) <= ranks)
        groups = {t.ranks for t in ags if set(t.ranks) <= ranks}
        assert stage_bytes == pytest.approx(len(groups) * numel * 2, rel=1e-12)

    # Forward order: the first all-gather holds the embedding, the first kernel's weight.
    first = ags[0]
    emb = next(t for t in on.graph.tasks if t.name == "embedding.word"
               and t.meta.get("microbatch") == 0 and t.ranks == (0,))
    assert first.id in emb.deps
    # The first forward of layer 0 waits for the bucket holding its norm weight; the
    # second microbatch's does not wait again.
    norm = [t for t in on.graph.tasks if t.name == "layers.0.input_norm" and t.ranks == (0,)]
    waits = [set(t.deps) & {a.id for a in ags} for t in norm]
    assert waits[0] and not any(waits[1:])
    span = {s.task: s for s in on.timeline}
    assert span[norm[0].id].start >= max(span[a].end for a in waits[0])


def test_overlap_param_gather_at_stage_granularity_waits_for_every_bucket():
    s = simulate(_scenario({"zero": 1, "ddp": {"overlap_param_gather": True,
                                               "bucket_cap_mb": 1}},
                           sim={"granularity": "stage"}))
    ags = {t.id for t in s.graph.tasks if t.name.startswith("zero param ag")}
    assert len(ags) > 1
    fwd = next(t for t in s.graph.tasks if t.kind == "forward" and t.ranks == (0,))
    assert ags <= set(fwd.deps)


def test_overlap_param_gather_needs_the_distributed_optimizer():
    for zero in (0, 3):
        with pytest.raises(ScenarioError, match=r"overlap_param_gather needs the distributed "
                           r"optimizer \(parallelism.zero: 1 or 2\)"):
            _scenario({"zero": zero, "ddp": {"overlap_param_gather": True}})
    with pytest.raises(ValueError, match="overlap_param_gather"):
        LowerOptions(dims=ParallelDims(dp=2), micro_batches=1, dtype_bytes=2,
                     grad_bytes_per_element=4, first_bucket_bytes=1, bucket_cap_bytes=1,
                     overlap=True, optimizer_bytes_per_param=16, overlap_param_gather=True)


@pytest.mark.parametrize("par", [
    {"tp": 2, "sp": True, "pp": 2, "vpp": 2, "schedule": "interleaved", "zero": 1},
    {"tp": 2, "sp": True, "pp": 2, "zero": 2, "recompute": "full"},
    {"tp": 2, "sp": True, "cp": 2, "zero": 1, "recompute": "selective"},
    {"tp": 2, "sp": True, "ep": 2, "zero": 1, "model": "tiny-moe"},
])
@pytest.mark.parametrize("granularity", ["op", "layer", "stage"])
def test_both_overlaps_compose_with_other_plans(par, granularity):
    """Both options with interleaving, recompute, CP, MoE: no deadlock, deterministic, the
    same FLOPs and TP bytes as without them."""
    par = dict(par)
    model = {"preset": par.pop("model", "tiny-gpt")}
    on = {**par, "tp_comm_overlap": True, "ddp": {"overlap_param_gather": True}}
    training = {"global_batch_size": 16, "micro_batch_size": 1}
    sim = {"granularity": granularity}
    a = simulate(_scenario(on, training, sim, model=model))
    b = simulate(_scenario(on, training, sim, model=model))
    assert a.timeline.signature() == b.timeline.signature()
    off = simulate(_scenario(par, training, sim, model=model))
    assert a.summary["hardware_flops_per_step"] == pytest.approx(
        off.summary["hardware_flops_per_step"], rel=1e-9)
    assert _tp_bytes(a.graph) == pytest.approx(_tp_bytes(off.graph), rel=1e-12)
    # No step-time ordering here: these TP collectives (b·s·h = 128 KiB) are latency-bound
    # (~7 us launch, ~0.4 us transfer), and each of the two pieces pays the launch latency,
    # so overlap can lose, as chunked userbuffers exchanges do on small messages.


def test_selective_recompute_recomputes_standard_attention_kernels() -> None:
    # Standard attention is four kernels (scores, softmax, dropout, context); selective
    # recompute re-runs all four before backward, as it re-runs the one fused kernel.
    from simtrain.simulate import simulate

    body = {"cluster": {"preset": "dgx-a100", "nodes": 1},
            "model": {"preset": "tiny-gpt", "attention_kernel": "standard"},
            "training": {"global_batch_size": 8, "micro_batch_size": 1, "seq_len": 128},
            "parallelism": {"recompute": "selective", "dp": 8}}
    spans = simulate(body).timeline.spans
    recomputed = {s.name.rsplit(".", 1)[-1] for s in spans if s.kind == "recompute"}
    assert recomputed == {"scores", "softmax", "dropout", "context"}


def test_host_issue_time_shows_as_host_spans_when_launch_bound() -> None:
    # tiny-gpt at 128 tokens: kernels of a few microseconds. With no host cost the GPU never
    # waits for the host; at 50 us per kernel it does, in spans of kind "host" (busy,
    # neither compute nor comm), and the step grows (workload.host's flow shop).
    from simtrain.simulate import simulate

    body = {"cluster": {"preset": "dgx-a100", "nodes": 1}, "model": {"preset": "tiny-gpt"},
            "training": {"global_batch_size": 8, "micro_batch_size": 1, "seq_len": 128},
            "parallelism": {"dp": 8}}
    free = simulate({**body, "compute": {"host_kernel_issue": 0, "host_microbatch": 0}})
    slow = simulate({**body, "compute": {"host_kernel_issue": 50e-6}})
    assert not [s for s in free.timeline.spans if s.kind == "host"]
    assert free.summary["host_s"] == 0.0
    host = [s for s in slow.timeline.spans if s.kind == "host"]
    assert host and slow.summary["host_s"] > 0
    assert slow.summary["step_time_s"] > free.summary["step_time_s"] + slow.summary["host_s"] / 2
    assert slow.summary["launch_bound"]


def _k(name: str, kind: str, grad: str | None = None, linears: int = 1) -> Kernel:
    return Kernel(name, kind, 1e-3, gemm=True, layer=0, grad=grad, linears=linears)


def test_symm_mem_fuses_only_what_inductors_pass_matches():
    # torch/_inductor/fx_passes/micro_pipeline_tp.py: an all-gather fuses the matmuls
    # with its output as left operand (backward: the dgrad, not the wgrad), a
    # reduce-scatter one producing matmul (not a sum of several linears' dgrads).
    ag = Collective("l.g.bwd", "tp_comm", "all_gather", "tp", 1e6, 0)
    rs = Collective("l.f.bwd", "tp_comm", "reduce_scatter", "tp", 1e6, 0)
    proj = [_k("proj.dgrad", "backward", "input"), _k("proj.wgrad", "backward", "weight")]
    qkv = [_k("qkv.dgrad", "backward", "input", 3), _k("qkv.wgrad", "backward", "weight", 3)]
    fc1 = [_k("fc1.dgrad", "backward", "input"), _k("fc1.wgrad", "backward", "weight")]
    core = Kernel("core.bwd", "backward", 1e-3, layer=0, grad="input")  # not a GEMM
    ub = overlap_tp([ag, *proj, core, *qkv, rs])
    assert [type(t).__name__ for t in ub] == ["TPOverlap", "Kernel", "TPOverlap"]
    assert len(ub[0].run) == len(ub[2].run) == 2  # userbuffers: the whole GEMM runs
    sm = overlap_tp([ag, *proj, core, *qkv, rs], "symm_mem")
    assert isinstance(sm[0], TPOverlap) and [k.name for k in sm[0].run] == ["proj.dgrad"]
    assert [t.name for t in sm[1:]] == ["proj.wgrad", "core.bwd", "qkv.dgrad", "qkv.wgrad",
                                        "l.f.bwd"]
    assert isinstance(sm[-1], Collective)  # plain RS after the summed dgrads
    one = overlap_tp([*fc1, rs], "symm_mem")  # one linear: its dgrad fused, after the wgrad
    assert one[0].name == "fc1.wgrad" and [k.name for k in one[1].run] == ["fc1.dgrad"]
    fwd = [Collective("l.f", "tp_comm", "all_gather", "tp", 1e6, 0),
           _k("qkv", "forward", linears=3)]
    assert isinstance(overlap_tp(fwd, "symm_mem")[0], TPOverlap)  # forward: all fused


def test_symm_mem_async_tp_hides_less_than_userbuffers():
    # The same batch-first Llama: PyTorch's pass leaves the summed dgrads' reduce-scatters
    # plain and the wgrads outside the backward all-gathers' pipelines, so less is hidden.
    model = {"preset": "llama3-8b", "layout": "bsh", "num_layers": 2}
    par = {"tp": 4, "sp": True, "tp_comm_overlap": True}
    none, ub, sm = (simulate(_scenario(p, {"seq_len": 2048}, model=model)
                             ).summary["step_time_s"] for p in (
        {**par, "tp_comm_overlap": False}, par, {**par, "tp_comm_overlap_impl": "symm_mem"}))
    assert ub < sm < none

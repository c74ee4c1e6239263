"""DualPipe (DeepSeek-V3 report, Sec. 3.2.1, Table 2): two routes, bubble, memory, overlap."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from simtrain.cli import app
from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph
from simtrain.hardware.topology import build_cluster
from simtrain.parallel.lower import Lowering, LowerOptions
from simtrain.parallel.pipeline_schedule import Schedule, Step, looping
from simtrain.parallel.plan import ParallelDims
from simtrain.parallel.schedule import make_schedule, peak_in_flight, schedule_problems
from simtrain.parallel.shard import Comm, Compute, Unit
from simtrain.scenario import ScenarioError, load_scenario
from simtrain.simulate import build_graph, build_plan, step_breakdown
from simtrain.workload.model import Op

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_two_model_copies_fed_from_both_ends():
    # pp_dualpipe: 32 layers, pp 4: each copy cut in 4 chunks of 8. Rank 0 holds stage 0
    # of copy 0 (embedding + layers 0-7) and stage 3 of copy 1 (layers 24-31 + head); rank
    # 3 the reverse. Microbatches 0-3 enter at rank 0, 4-7 at rank 3.
    scenario = load_scenario(SCENARIOS / "pp_dualpipe.yaml")
    cluster = build_cluster(scenario.cluster)
    plan = build_plan(scenario, cluster)
    layers = [[[u.layer for u in c if u.layer >= 0] for c in row] for row in plan.units]
    assert layers[0] == [list(range(0, 8)), list(range(24, 32))]
    assert layers[3] == [list(range(24, 32)), list(range(0, 8))]
    assert plan.schedule.route(0) == (0, 1, 2, 3) and plan.schedule.route(7) == (4, 5, 6, 7)
    heads = [[any(u.name == "lm_head" for u in c) for c in row] for row in plan.units]
    assert heads == [[False, True], [False, False], [False, False], [True, False]]
    streams = {t.stream for t in build_graph(scenario, cluster, plan).tasks
               if t.kind == "pp_comm"}
    assert {s.split()[2] for s in streams} == {"0>1", "1>2", "2>3", "3>2", "2>1", "1>0"}


@pytest.mark.parametrize(("p", "m", "tf", "tb", "tw"), [
    # DeepSeek-V3 Table 2: DualPipe idles (p/2 - 1)(F&B + B - 3W), F a chunk's forward, B
    # its full backward (input + weight gradients), W the weight part, F&B an overlapped
    # pair; with nothing to overlap here (no collectives) F&B = F + B.
    # p = 8, F = 1, B = 1 + 1, W = 1: 3·(3 + 2 - 3) = 6; step 3m + 6 = 54 at m = 16,
    # bubble 6/54 = 0.111 (1F1B: (p - 1)(F + B) = 21, 21/69 = 0.304).
    (8, 16, 1.0, 1.0, 1.0),
    (8, 32, 1.0, 1.0, 1.0),  # 6/102 = 0.0588
    (4, 16, 1.0, 1.0, 1.0),  # 1·(3 + 2 - 3) = 2: 2/50 = 0.04
    # p = 8, F = 2, B = 3, W = 1: 3·(5 + 3 - 3) = 15; 15/(80 + 15) = 0.158 at m = 16.
    (8, 16, 2.0, 2.0, 1.0),
    # F = 1, B = 4, W = 1: 3·(5 + 4 - 3) = 18; 18/(100 + 18) = 0.153 at m = 20.
    (8, 20, 1.0, 3.0, 1.0),
    # F = 1, B = 1.5, W = 0.5: 3·(2.5 + 1.5 - 1.5) = 7.5; 7.5/(80 + 7.5) = 0.0857 at m = 32.
    (8, 32, 1.0, 1.0, 0.5),
])
def test_dualpipe_bubble_follows_deepseek_table_2_within_2pp(toy_pipeline, p, m, tf, tb, tw):
    timeline = toy_pipeline("dualpipe", p, m, 2, 2 * tf, 2 * tb, 2 * tw)
    f, b, w = tf, tb + tw, tw
    bubble = (p // 2 - 1) * ((f + b) + b - 3 * w)
    want = bubble / (m * (tf + tb + tw) + bubble)
    assert step_breakdown(timeline)["bubble_fraction"] == pytest.approx(want, abs=0.02)
    one = toy_pipeline("1f1b", p, m, 1, tf, tb, tw)
    assert timeline.end < one.end


def test_dualpipe_holds_p_plus_1_chunks_and_two_copies_of_the_parameters():
    # Table 2: activations PP + 1 (1F1B: PP) chunk-microbatches, a chunk being a pp-th of
    # the model as a 1F1B stage; parameters 2x: rank i holds 1F1B's stages i and p - 1 - i.
    for p, m in ((4, 8), (8, 16), (8, 20), (6, 12)):
        assert [peak_in_flight(s) for s in make_schedule("dualpipe", p, m, 2).stages] == [
            p + 1] * p
    plans = {}
    for name in ("pp_1f1b", "pp_dualpipe"):
        scenario = load_scenario(SCENARIOS / f"{name}.yaml")
        plans[name] = build_plan(scenario, build_cluster(scenario.cluster))

    def params(plan, stage: int) -> int:
        return sum(p.numel for c in plan.units[stage] for u in c for p in u.params)

    one, dual = plans["pp_1f1b"], plans["pp_dualpipe"]
    for i in range(4):
        assert params(dual, i) == params(one, i) + params(one, 3 - i)


@pytest.mark.parametrize(("group", "op", "dims"), [
    ("tp", "all_reduce", ParallelDims(tp=2)),
    ("ep", "all_to_all", ParallelDims(dp=2, ep=2)),  # an EP dispatch, as DeepSeek overlaps
])
def test_an_overlapped_pair_hides_one_chunks_collective_behind_the_others_kernels(
        star_fabric, group, op, dims):
    # One stage of two ranks, two microbatches; a unit is kernel a (1 s), a collective
    # (forward only: Megatron's g, or an EP all-to-all), kernel b (1 s); backward b', a' of
    # 2 s each. In
    # sequence, F1 then B0 take 1 + c + 1 + 2 + 2 = 6 + c (c the all-reduce). Overlapped,
    # the compute stream runs a [0, 1], then B0's b' a' [1, 5] while F1's all-reduce runs,
    # then F1's b [5, 6]: the pair takes 6 s, c hidden (c < 4).
    unit = Unit("layers.0", (Compute(Op("a", "elementwise", 0.0, 1.0, None, (), 0.0)),
                             Comm("g", group, op, None, 4e8),
                             Compute(Op("b", "elementwise", 0.0, 1.0, None, (), 0.0))), layer=0)
    options = LowerOptions(dims=dims, micro_batches=2, dtype_bytes=2,
                           grad_bytes_per_element=4, first_bucket_bytes=1, bucket_cap_bytes=1,
                           overlap=True, optimizer_bytes_per_param=0)

    def run(overlap: bool) -> float:
        steps = (Step(0, 0, "F"), Step(0, 1, "F", 0, overlap), Step(0, 0, "B", 0, overlap),
                 Step(0, 1, "B"))
        graph = TaskGraph(2)
        Lowering(graph, [[[unit]]], Schedule("pair", (steps,), looping(1, 1), 2), options,
                 lambda op: 0.0 if op.name == "optimizer.step" else op.bytes).run()
        return execute(graph, star_fabric(2, 1e9, 0.0)).end

    plain, paired = run(False), run(True)
    c = (plain - 1 - 1 - 6 - 4) / 2  # F0 = 2 + c and F1 + B0 = 6 + c, then B1 4 s
    assert 0 < c < 4
    assert paired == pytest.approx(plain - c)


@pytest.mark.parametrize(("overrides", "says"), [
    (["cluster.nodes=3", "parallelism.pp=3", "model.num_layers=30",
      "training.global_batch_size=48"], "needs an even number of stages >= 2, got pp=3"),
    (["training.global_batch_size=12"], "microbatches >= 2 x pp = 8, got 6"),
    (["parallelism.vpp=1"], "needs vpp: 2, got vpp=1"),
    (["parallelism.schedule=dual-pipe"], "unknown pipeline schedule 'dual-pipe'"),
])
def test_bad_dualpipe_degrees_are_one_line_and_exit_2(overrides, says):
    with pytest.raises(ScenarioError, match=says.replace("(", r"\(")):
        load_scenario(SCENARIOS / "pp_dualpipe.yaml", overrides=overrides)
    args = ["run", str(SCENARIOS / "pp_dualpipe.yaml"), "--no-report"]
    for o in overrides:
        args += ["--set", o]
    result = CliRunner().invoke(app, args)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and says in lines[0]
    assert schedule_problems("dualpipe", 4, 9, 2)[0][0] == "training.global_batch_size"


@pytest.mark.parametrize(("zero", "shard"), [(0, 1), (1, 2)])
def test_the_two_copies_of_each_chunk_sum_their_gradients(zero, shard):
    # pp_dualpipe (symmetric fidelity: ranks 0, 2, 4, 6 are stages 0-3): model part 0 is
    # on rank 0 (chunk 0) and rank 6 (chunk 1), part 3 on rank 6 (chunk 0) and rank 0
    # (chunk 1), parts 1 and 2 on ranks 2 and 4: four all-reduces over the partner pair,
    # each of the part's fp32 gradients a rank holds (ZeRO-1: its 1/dp = 1/2 shard).
    scenario = load_scenario(SCENARIOS / "pp_dualpipe.yaml",
                             overrides=[f"parallelism.zero={zero}"])
    cluster = build_cluster(scenario.cluster)
    plan = build_plan(scenario, cluster)
    sums = [t for t in build_graph(scenario, cluster, plan).tasks
            if t.name == "pp copies grad sum"]
    assert sorted(t.ranks for t in sums) == [(0, 6), (0, 6), (2, 4), (2, 4)]
    numel = {sum(p.numel for u in c for p in u.params) for row in plan.units for c in row}
    assert {t.comm.nbytes for t in sums} == {4.0 * n / shard for n in numel}
    assert all(t.stream == "dp" and t.kind == "dp_comm" for t in sums)


@settings(max_examples=25, deadline=None)
@given(half=st.integers(1, 4), extra=st.integers(0, 6))
def test_dualpipe_is_a_valid_schedule_for_any_even_degrees(half, extra):
    # Any even p and even m >= 2p: Schedule() checks every F, B, W once per microbatch and
    # chunk of its route and in order; every rank holds at most p + 1 chunk-microbatches.
    p, m = 2 * half, 4 * half + 2 * extra
    sched = make_schedule("dualpipe", p, m, 2)
    assert all(peak_in_flight(s) <= p + 1 for s in sched.stages)

"""ZB-V (Qi et al. 2024, Sec. 6): V placement built by the plan, bubble and peak memory."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.hardware.topology import build_cluster
from simtrain.parallel.schedule import make_schedule, peak_in_flight, schedule_problems
from simtrain.parallel.shard import placed_layers
from simtrain.scenario import ScenarioError, load_scenario
from simtrain.simulate import build_graph, build_plan, memory_report, step_breakdown

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_the_plan_builds_each_chunk_from_the_v_placement():
    # pp_zb_v: 32 layers in 2p = 8 model chunks of 4; stage i holds model chunks i and
    # 7 - i. Stage 0: embedding + layers 0-3 (chunk 0) and layers 28-31 + the head
    # (chunk 1); stage 3: layers 12-15 and 16-19, the turn of the V.
    scenario = load_scenario(SCENARIOS / "pp_zb_v.yaml")
    cluster = build_cluster(scenario.cluster)
    plan = build_plan(scenario, cluster)
    assert plan.schedule.placement == ((0, 7), (1, 6), (2, 5), (3, 4))
    layers = [[[u.layer for u in chunk if u.layer >= 0] for chunk in row] for row in plan.units]
    assert layers[0] == [[0, 1, 2, 3], [28, 29, 30, 31]]
    assert layers[3] == [[12, 13, 14, 15], [16, 17, 18, 19]]
    names = [[{u.name for u in chunk} for chunk in row] for row in plan.units]
    assert "embedding" in names[0][0] and "lm_head" in names[0][1]
    assert not any("lm_head" in n or "embedding" in n for row in names[1:] for n in row)
    # Transfers go where the placement says: down 0>1>2>3 and back 3>2>1>0 (the turn on
    # stage 3 stays on the GPU); looping would send 3>0 instead.
    streams = {t.stream for t in build_graph(scenario, cluster, plan).tasks
               if t.kind == "pp_comm"}
    assert {s.split()[2] for s in streams} == {"0>1", "1>2", "2>3", "3>2", "2>1", "1>0"}


def test_placed_layers_cut_the_route_not_the_looping_order():
    # V placement p = 2: stage 0 holds model chunks 0 and 3, stage 1 chunks 1 and 2, of a
    # 4-chunk route; 8 layers as [1, 3, 3, 1]: stage 0 layers 0 and 7, stage 1 1-3 and 4-6.
    positions = make_schedule("zb-v", 2, 4, 2).positions()
    assert positions == [[(0, 4), (3, 4)], [(1, 4), (2, 4)]]
    cells = placed_layers(8, positions, [1, 3, 3, 1])
    assert cells[0] == [(range(0, 1), True, False), (range(7, 8), False, True)]
    assert cells[1] == [(range(1, 4), False, False), (range(4, 7), False, False)]


@pytest.mark.parametrize(("p", "m"), [(2, 8), (4, 8), (4, 16), (8, 16), (8, 32)])
def test_zb_v_with_equal_times_idles_only_the_start_up_skew(toy_pipeline, p, m):
    # Qi et al. 2024, Sec. 6: ZB-V idles (p - 1)(T_F + T_B - 2 T_W), T's of a stage (two
    # chunks): zero when the three are equal, with 1F1B's memory. simtrain synchronises the
    # optimizer step (the paper's zero bubble also drops that, Sec. 4), so stage i still
    # starts i chunk forwards late: step = 3m + (p - 1)·T_F/2 with T = 1, e.g. p = 4,
    # m = 8: 24 + 1.5 = 25.5, bubble 1.5/25.5 = 0.0588 (1F1B: 9/33 = 0.273).
    timeline = toy_pipeline("zb-v", p, m, 2, 1.0, 1.0, 1.0, costed=True)
    skew = (p - 1) * 0.5
    assert timeline.end == pytest.approx(3 * m + skew)
    assert step_breakdown(timeline)["bubble_fraction"] == pytest.approx(
        skew / (3 * m + skew), abs=0.02)


@pytest.mark.parametrize(("p", "m", "tf", "tb", "tw"), [
    # step = m(T_F + T_B + T_W) + max((p - 1)(T_F + T_B - 2T_W), (p - 1)·T_F/2), the
    # paper's bubble or the start-up skew, whichever is longer:
    # p = 4, m = 16, T_B = 2: 64 + max(3·1, 1.5) = 67, bubble 3/67 = 0.0448.
    (4, 16, 1.0, 2.0, 1.0),
    # p = 8, m = 32, T_B = 2: 128 + max(7, 3.5) = 135, 7/135 = 0.0519.
    (8, 32, 1.0, 2.0, 1.0),
    # p = 4, m = 16, T_F = T_B = 2: 80 + max(3·2, 3) = 86, 6/86 = 0.0698.
    (4, 16, 2.0, 2.0, 1.0),
    # p = 8, m = 32, T_W = 1/2: 80 + max(7·1, 3.5) = 87, 7/87 = 0.0805.
    (8, 32, 1.0, 1.0, 0.5),
])
def test_zb_v_bubble_follows_the_paper_within_2pp(toy_pipeline, p, m, tf, tb, tw):
    timeline = toy_pipeline("zb-v", p, m, 2, tf, tb, tw, costed=True)
    extra = max((p - 1) * (tf + tb - 2 * tw), (p - 1) * tf / 2)
    want = extra / (m * (tf + tb + tw) + extra)
    assert step_breakdown(timeline)["bubble_fraction"] == pytest.approx(want, abs=0.02)
    one = toy_pipeline("1f1b", p, m, 1, tf, tb, tw, costed=True)
    assert timeline.end < one.end  # 1F1B idles (p - 1)(T_F + T_B + T_W)


def test_zb_v_holds_1f1b_activations_and_its_memory_report_agrees():
    # Qi et al. 2024, Sec. 6: peak p·M_B, 1F1B's. A chunk is half a stage, so 2p chunk-
    # microbatches: p = 4 -> 8 on every stage (1F1B: 4 whole-stage microbatches on stage 0).
    assert [peak_in_flight(s) for s in make_schedule("zb-v", 4, 8, 2).stages] == [8] * 4
    # pp_zb_v against pp_1f1b (same model and batch): stage 0 holds 8 chunk-microbatches x
    # 4 layers = 4 microbatches x 8 layers, 1F1B's 3.4375 GiB, plus the LM head's fp32
    # logits of one microbatch (the head is on stage 0 now): 4 B x 2048 x 50257 / tp 2 =
    # 0.1917 GiB.
    got = {}
    for name in ("pp_1f1b", "pp_zb_v"):
        scenario = load_scenario(SCENARIOS / f"{name}.yaml")
        cluster = build_cluster(scenario.cluster)
        got[name] = memory_report(scenario, cluster, build_plan(scenario, cluster))
    logits = 4.0 * 2048 * 50257 / 2 / 2**30
    assert got["pp_zb_v"].stage == 0
    assert got["pp_zb_v"].gib()["activations"] == pytest.approx(
        got["pp_1f1b"].gib()["activations"] + logits, rel=1e-3)


@settings(max_examples=30, deadline=None)
@given(p=st.integers(2, 6), m=st.integers(1, 20))
def test_zb_v_is_a_valid_schedule_within_1f1b_memory_for_any_degrees(p, m):
    # Schedule() checks every F, B, W once per microbatch and chunk, in order; no stage
    # holds more than 2p chunk-microbatches (p·M_B) or than all 2m it has.
    sched = make_schedule("zb-v", p, m, 2)
    assert all(peak_in_flight(s) <= min(2 * p, 2 * m) for s in sched.stages)


def test_zb_v_needs_two_chunks_per_stage():
    assert schedule_problems("zb-v", 4, 8, 2) == []
    assert schedule_problems("zb-v", 4, 8, 1)[0][0] == "parallelism.vpp"
    with pytest.raises(ScenarioError, match="schedule: zb-v places two model chunks"):
        load_scenario(SCENARIOS / "pp_zb_v.yaml", overrides=["parallelism.vpp=1"])

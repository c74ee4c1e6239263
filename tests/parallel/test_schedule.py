"""Pipeline schedules: bubble fractions with uniform stages, in-flight microbatches, no hangs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph
from simtrain.parallel.lower import Lowering, LowerOptions
from simtrain.parallel.plan import ParallelDims
from simtrain.parallel.schedule import build_schedule, make_schedule, peak_in_flight
from simtrain.parallel.shard import Compute, Unit
from simtrain.simulate import step_breakdown
from simtrain.workload.memory import pipeline_inflight_formula
from simtrain.workload.model import Op, Param


def _pipeline(star_fabric, kind: str, p: int, m: int, v: int = 1):
    """p uniform stages of v chunks; forward 1/v and backward 2/v per chunk, free p2p."""
    dims = ParallelDims(pp=p, vpp=v)
    units = [[[Unit("layers.0", (Compute(Op(f"s{s}c{c}", "elementwise", 0.0, 1.0, None, (),
                                             0.0)),), layer=0)] for c in range(v)]
             for s in range(p)]

    def op_time(op: Op) -> float:  # the backward of a 1-byte op moves 2 bytes
        return op.bytes / v

    options = LowerOptions(dims=dims, micro_batches=m, dtype_bytes=2,
                           grad_bytes_per_element=4, first_bucket_bytes=1, bucket_cap_bytes=1,
                           overlap=True, optimizer_bytes_per_param=0)
    graph = TaskGraph(p)
    Lowering(graph, units, build_schedule(kind, p, m, v), options, op_time).run()
    return execute(graph, star_fabric(p, 1e15, 0.0))


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (4, 16), (8, 8)])
def test_bubble_is_p_minus_1_over_m_plus_p_minus_1(star_fabric, kind, p, m):
    # Uniform stages, f = 1, b = 2: the step takes (m + p - 1)·3 and each stage is idle
    # for (p - 1)·3 of it, a fraction (p - 1)/(m + p - 1); e.g. p=4, m=8: 3/11 = 0.2727.
    timeline = _pipeline(star_fabric, kind, p, m)
    assert timeline.end == pytest.approx((m + p - 1) * 3.0)
    assert step_breakdown(timeline)["bubble_fraction"] == pytest.approx((p - 1) / (m + p - 1))


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 2), (4, 8, 4), (2, 8, 2), (4, 16, 2)])
def test_interleaving_divides_the_bubble_by_v(star_fabric, p, m, v):
    # Narayanan et al. 2021: the bubble time drops from (p - 1)·(f + b) to (p - 1)·(f + b)/v.
    # p=4, m=8, v=2: 1F1B idles 9 of 33; interleaved 4.5 of 28.5.
    plain = _pipeline(star_fabric, "1f1b", p, m)
    inter = _pipeline(star_fabric, "interleaved", p, m, v)
    ideal = 3.0 * m
    assert plain.end - ideal == pytest.approx((p - 1) * 3.0)
    assert inter.end - ideal == pytest.approx((p - 1) * 3.0 / v)
    assert step_breakdown(inter)["bubble_fraction"] == pytest.approx(
        (p - 1) / (v * m + p - 1))


@pytest.mark.parametrize("kind,v", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2),
                                    ("interleaved", 3)])
def test_schedules_never_deadlock_and_run_every_step_once(star_fabric, kind, v):
    for p, m in [(2, 2), (3, 6), (4, 4), (4, 12)]:
        sched = build_schedule(kind, p, m, v)
        for stage in sched:
            assert sorted((s.microbatch, s.chunk, s.phase) for s in stage) == sorted(
                (mb, c, ph) for mb in range(m) for c in range(v) for ph in "FB")
        _pipeline(star_fabric, kind, p, m, v)  # raises SimulationDeadlock on a hang


def test_in_flight_microbatches_per_stage_match_the_formulas():
    p, m = 4, 8
    for i, stage in enumerate(build_schedule("1f1b", p, m)):
        assert peak_in_flight(stage) == p - i == pipeline_inflight_formula("1f1b", p, m, i)
    for i, stage in enumerate(build_schedule("gpipe", p, m)):
        assert peak_in_flight(stage) == m == pipeline_inflight_formula("gpipe", p, m, i)
    v = 2
    for i, stage in enumerate(build_schedule("interleaved", p, m, v)):
        # stage 0: 2·3 + 1·4 + 1 = 11 chunk-microbatches = 5.5 stage equivalents,
        # p·(1 + (p - 1)/(p·v)) = 4·(1 + 3/8) = 5.5 (Korthikanti et al. 2022).
        assert peak_in_flight(stage) / v == pipeline_inflight_formula("interleaved", p, m, i, v)
    assert pipeline_inflight_formula("interleaved", 4, 8, 0, 2) == pytest.approx(
        4 * (1 + 3 / 8))


def test_schedule_errors_name_the_fix():
    with pytest.raises(ValueError, match="divisible by pp"):
        build_schedule("interleaved", 4, 6, 2)
    with pytest.raises(ValueError, match="schedule: interleaved"):
        build_schedule("1f1b", 4, 8, 2)


def _split_pipeline(star_fabric, kind: str, p: int, m: int, tf: float, tb: float, tw: float):
    """p uniform stages of one GEMM: forward tf, input gradient (dgrad) tb, weight gradient
    (wgrad) tw per microbatch; free transfers and optimizer."""
    op = Op("g", "gemm", 1.0, 1.0, (1, 2, 3), (Param("g.weight", 1),), 0.0)
    units = [[[Unit("layers.0", (Compute(op),), layer=0)]] for _ in range(p)]

    def op_time(o: Op) -> float:
        return 0.0 if o.name == "optimizer.step" else {None: tf, "input": tb, "weight": tw}[
            o.grad]

    options = LowerOptions(dims=ParallelDims(pp=p), micro_batches=m, dtype_bytes=2,
                           grad_bytes_per_element=4, first_bucket_bytes=1, bucket_cap_bytes=1,
                           overlap=True, optimizer_bytes_per_param=0)
    graph = TaskGraph(p)
    Lowering(graph, units, make_schedule(kind, p, m), options, op_time).run()
    return execute(graph, star_fabric(p, 1e15, 0.0))


@pytest.mark.parametrize(("tf", "tb", "tw", "zb", "one"), [
    # Qi et al. 2024: ZB-H1 idles (p-1)(T_F + T_B - T_W), 1F1B (p-1)(T_F + T_B + T_W).
    # p = 4, m = 8, all 1: ZB-H1 takes 8·3 + 3·1 = 27, bubble 3/27 = 0.1111 (a third of
    # 1F1B's bubble time); 1F1B 8·3 + 3·3 = 33, bubble 9/33 = 0.2727.
    (1.0, 1.0, 1.0, 3 / 27, 9 / 33),
    # T_F = T_B = 2, T_W = 1: ZB-H1 8·5 + 3·3 = 49, 9/49 = 0.1837; 1F1B 8·5 + 3·5 = 55,
    # 15/55 = 0.2727.
    (2.0, 2.0, 1.0, 9 / 49, 15 / 55),
])
def test_zb_h1_bubble_is_p_minus_1_times_f_plus_b_minus_w(star_fabric, tf, tb, tw, zb, one):
    p, m = 4, 8
    got_zb = step_breakdown(_split_pipeline(star_fabric, "zb-h1", p, m, tf, tb, tw))
    got_one = step_breakdown(_split_pipeline(star_fabric, "1f1b", p, m, tf, tb, tw))
    assert got_zb["bubble_fraction"] == pytest.approx(zb, abs=0.02)
    assert got_one["bubble_fraction"] == pytest.approx(one, abs=0.02)


def test_zb_h1_holds_no_more_activations_than_1f1b_and_needs_one_chunk():
    # Stage i defers i W's on top of 1F1B's p - i in flight: p everywhere, 1F1B's peak.
    p, m = 4, 8
    assert [peak_in_flight(s) for s in build_schedule("zb-h1", p, m)] == [p] * p
    assert max(peak_in_flight(s) for s in build_schedule("1f1b", p, m)) == p
    with pytest.raises(ValueError, match="need schedule: interleaved"):
        build_schedule("zb-h1", p, m, 2)


def _stage_idle(timeline, rank: int) -> float:
    """Idle time of ``rank`` between its first start and its last end."""
    spans = sorted((s.start, s.end) for s in timeline.by_rank()[rank])
    busy, end = 0.0, spans[0][0]
    for s, e in spans:
        busy += max(0.0, e - max(s, end))
        end = max(end, e)
    return end - spans[0][0] - busy


@pytest.mark.parametrize(("tf", "tb", "tw"), [
    # Qi et al. 2024 Table 1: ZB-H2 idles (p-1)(T_F + T_B - 2 T_W). p = 4, m = 8:
    # all 1: 3·0 = 0 on stage 0; the step (synchronised optimizer, stage 3 starts 3·T_F
    # late) 8·3 + max(0, 3) = 27, ZB-H1's 27 too: its gain needs post-validation.
    (1.0, 1.0, 1.0),
    # T_F = T_B = 2, T_W = 1: 3·(2 + 2 - 2) = 6; step 8·5 + max(6, 6) = 46 (ZB-H1: 49).
    (2.0, 2.0, 1.0),
    # T_F = 1, T_B = 3, T_W = 1: 3·(1 + 3 - 2) = 6; step 8·5 + max(6, 3) = 46.
    (1.0, 3.0, 1.0),
    # T_F = 2, T_B = T_W = 1: 3·(2 + 1 - 2) = 3; step 8·4 + max(3, 6) = 38.
    (2.0, 1.0, 1.0),
])
def test_zb_h2_bubble_is_p_minus_1_times_f_plus_b_minus_2w(star_fabric, tf, tb, tw):
    p, m = 4, 8
    timeline = _split_pipeline(star_fabric, "zb-h2", p, m, tf, tb, tw)
    formula = (p - 1) * (tf + tb - 2 * tw)
    assert _stage_idle(timeline, 0) == pytest.approx(formula, abs=1e-9)
    assert timeline.end == pytest.approx(m * (tf + tb + tw) + max(formula, (p - 1) * tf))
    one = _split_pipeline(star_fabric, "1f1b", p, m, tf, tb, tw)
    assert timeline.end <= one.end - (p - 1) * 2 * tw + 1e-9  # at least 2 W's per stage gained


@pytest.mark.parametrize(("p", "m"), [(4, 8), (4, 16), (8, 16), (2, 8)])
def test_zb_h2_fills_every_stage_with_equal_times(star_fabric, p, m):
    # T_F = T_B = T_W = 1: no stage idles between its first F and its last W (the
    # parallelogram of the paper's Fig. 3), so the step is 3m + (p - 1), the start-up skew.
    timeline = _split_pipeline(star_fabric, "zb-h2", p, m, 1.0, 1.0, 1.0)
    assert all(_stage_idle(timeline, r) == pytest.approx(0.0, abs=1e-9) for r in range(p))
    assert timeline.end == pytest.approx(3 * m + p - 1)


def test_zb_h2_holds_2p_minus_1_microbatches_and_needs_one_chunk():
    # Qi et al. 2024 Table 1: peak activation memory (2p - 1)·M_B against 1F1B's p·M_B
    # (p = 4: 7 against 4); with fewer microbatches than that, all m.
    p = 4
    assert max(peak_in_flight(s) for s in build_schedule("zb-h2", p, 8)) == 2 * p - 1 == 7
    assert max(peak_in_flight(s) for s in build_schedule("1f1b", p, 8)) == p
    assert max(peak_in_flight(s) for s in build_schedule("zb-h2", p, 3)) == 3
    with pytest.raises(ValueError, match="need schedule: interleaved"):
        build_schedule("zb-h2", p, 8, 2)


def test_zb_h2_warms_up_with_2p_minus_1_minus_2i_forwards():
    # Stage i's first gradient arrives 2p - 1 - i units in; it started at unit i, so it
    # fits 2p - 1 - 2i forwards first: p = 4 -> 7, 5, 3, 1.
    for i, stage in enumerate(build_schedule("zb-h2", 4, 8)):
        first_b = next(k for k, s in enumerate(stage) if s.phase == "B")
        assert first_b == 2 * 4 - 1 - 2 * i


@pytest.mark.parametrize(("p", "m"), [(2, 2), (3, 6), (4, 4), (4, 12), (5, 3), (1, 4)])
def test_zb_h2_runs_every_step_once_without_deadlock(star_fabric, p, m):
    make_schedule("zb-h2", p, m)  # the Schedule checks every F, B, W once and in order
    _split_pipeline(star_fabric, "zb-h2", p, m, 1.0, 2.0, 0.5)  # raises on a hang


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 8), m=st.integers(1, 24))
def test_zb_h2_is_a_valid_schedule_within_its_memory_for_any_degrees(p, m):
    # Schedule() checks every F, B, W once per microbatch and in order; the list
    # scheduling never holds more than min(2p - 1, m) microbatches on a stage, and its
    # warm-up (before the first B) is 2p - 1 - 2i forwards, capped by m.
    sched = make_schedule("zb-h2", p, m)
    for i, stage in enumerate(sched.stages):
        assert peak_in_flight(stage) <= min(2 * p - 1, m)
        first_b = next(k for k, s in enumerate(stage) if s.phase == "B")
        assert first_b == min(2 * p - 1 - 2 * i, m)

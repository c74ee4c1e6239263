"""A schedule is a value: phases F/B/W, chunk placement, transfer targets, one registry."""

from __future__ import annotations

import pytest

from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph
from simtrain.parallel.lower import Lowering, LowerOptions
from simtrain.parallel.pipeline_schedule import Schedule, Step, looping, v_shape
from simtrain.parallel.plan import ParallelDims, ParallelismConfig
from simtrain.parallel.schedule import SCHEDULES, make_schedule, schedule_problems
from simtrain.parallel.shard import Compute, Unit
from simtrain.workload.model import Op, Param


def _gemm_unit(name: str) -> list[Unit]:
    op = Op(name, "gemm", 1.0, 1.0, (1, 1, 1), (Param(f"{name}.weight", 1),), 0.0)
    return [Unit(name, (Compute(op),), layer=0)]


def _run(star_fabric, schedule: Schedule, units) -> tuple[float, TaskGraph]:
    """Every kernel (forward, dgrad, wgrad) takes 1 s; transfers and optimizer are free."""
    p, v = schedule.pp, schedule.vpp
    options = LowerOptions(dims=ParallelDims(pp=p, vpp=v), micro_batches=schedule.micro_batches,
                           dtype_bytes=2, grad_bytes_per_element=4, first_bucket_bytes=1,
                           bucket_cap_bytes=1, overlap=True, optimizer_bytes_per_param=0)
    graph = TaskGraph(p)
    Lowering(graph, units, schedule, options,
             lambda op: 0.0 if op.name == "optimizer.step" else 1.0).run()
    return execute(graph, star_fabric(p, 1e15, 0.0)).end, graph


def test_placements_and_transfer_targets():
    assert looping(2, 2) == ((0, 2), (1, 3))
    assert v_shape(2) == ((0, 3), (1, 2))
    s = make_schedule("interleaved", 2, 2, 2)
    # Looping: the last stage's chunk 0 (model chunk 1) feeds stage 0's chunk 1 (chunk 2).
    assert s.target(Step(1, 0, "F", 0)) == (0, 1)
    assert s.target(Step(0, 0, "B", 1)) == (1, 0)
    assert s.target(Step(1, 0, "F", 1)) is None  # the last model chunk's forward
    assert s.target(Step(0, 0, "B", 0)) is None  # the first one's backward
    assert not s.needs_input(Step(0, 0, "F", 0)) and s.needs_input(Step(0, 0, "F", 1))
    assert not s.split_backward and s.last_backward == "B"


def test_a_deferred_weight_gradient_fills_the_bubble(star_fabric):
    # p = 2, m = 2, F = B = W = 1 s. 1F1B (B = dgrad + wgrad = 2 s) takes
    # (m + p - 1)(F + B + W) = 3 x 3 = 9 s. Deferring the W's to the end, stage 1 runs
    # F0 [1,2] B0 [2,3] F1 [3,4] B1 [4,5] W0 W1 [5,7]; stage 0 F0 F1 [0,2], B0 after
    # stage 1's B0 [3,4], B1 after its B1 [5,6], W0 W1 [6,8]: 8 s.
    units = [[_gemm_unit("s0")], [_gemm_unit("s1")]]
    plain, _ = _run(star_fabric, make_schedule("1f1b", 2, 2), units)
    assert plain == pytest.approx(9.0)
    st = [[Step(0, 0, "F"), Step(0, 1, "F"), Step(0, 0, "B"), Step(0, 1, "B"), Step(0, 0, "W"),
           Step(0, 1, "W")],
          [Step(1, 0, "F"), Step(1, 0, "B"), Step(1, 1, "F"), Step(1, 1, "B"), Step(1, 0, "W"),
           Step(1, 1, "W")]]
    split = Schedule("deferred-w", tuple(map(tuple, st)), looping(2, 1), 2)
    assert split.split_backward and split.last_backward == "W"
    end, graph = _run(star_fabric, split, units)
    assert end == pytest.approx(8.0)
    # B runs the input gradient only, W the weight gradient, never by name.
    names = [t.name for t in graph.tasks if t.ranks == (1,) and t.kind == "backward"]
    assert names == ["s1.dgrad", "s1.dgrad", "s1.wgrad", "s1.wgrad"]


def test_v_shape_turns_on_one_stage_without_a_transfer(star_fabric):
    # p = 2, v = 2, m = 1, V placement: stage 0 holds model chunks 0 and 3, stage 1 holds
    # 1 and 2. F: s0c0 [0,1], s1c0 [1,2], s1c1 [2,3], s0c1 [3,4]; B (2 s each) back the same
    # way: 12 s. Transfers: 0>1 and 1>0 forward, 0>1 and 1>0 backward: 4, not looping's 6.
    st = tuple(tuple(Step(s, 0, ph, c) for ph, c in (("F", 0), ("F", 1), ("B", 1), ("B", 0)))
               for s in range(2))
    sched = Schedule("v", st, v_shape(2), 1)
    units = [[_gemm_unit("s0c0"), _gemm_unit("s0c1")], [_gemm_unit("s1c0"), _gemm_unit("s1c1")]]
    end, graph = _run(star_fabric, sched, units)
    assert end == pytest.approx(12.0)
    assert sum(t.kind == "pp_comm" for t in graph.tasks) == 4


def test_a_schedule_value_is_checked_when_built():
    with pytest.raises(ValueError, match="runs W of microbatch 0 chunk 0 before its B"):
        Schedule("bad", ((Step(0, 0, "F"), Step(0, 0, "W"), Step(0, 0, "B")),), looping(1, 1), 1)
    with pytest.raises(ValueError, match="must run each of FB once"):
        Schedule("short", ((Step(0, 0, "F"),),), looping(1, 1), 1)
    with pytest.raises(ValueError, match="must hold each of the 2 model chunks once"):
        Schedule("place", ((), ()), ((0,), (0,)), 1)


def test_schedules_live_in_one_registry_and_unknown_names_are_rejected():
    assert set(SCHEDULES) >= {"gpipe", "1f1b", "interleaved"}
    with pytest.raises(ValueError, match="unknown pipeline schedule 'zb-h9'; use one of gpipe"):
        make_schedule("zb-h9", 2, 4)
    with pytest.raises(ValueError, match="unknown pipeline schedule 'zb-h9'"):
        ParallelismConfig(schedule="zb-h9")
    assert schedule_problems("interleaved", 4, 6, 2)[0][0] == "training.global_batch_size"
    assert schedule_problems("interleaved", 4, None, 2) == []  # microbatches not known
    assert schedule_problems("1f1b", 4, 8, 2)[0][0] == "parallelism.schedule"


def test_routes_send_each_microbatch_through_its_own_chunks():
    # Two copies of a 2-chunk model on V placement p = 2 (stage 0 holds model chunks 0
    # and 3, stage 1 chunks 1 and 2): microbatch 0 passes 0 -> 1 (stage 0 to 1), microbatch
    # 1 passes 2 -> 3 (stage 1 to 0). Each chunk is half of the model: (position, 2).
    st = ((Step(0, 0, "F", 0), Step(0, 1, "F", 1), Step(0, 1, "B", 1), Step(0, 0, "B", 0)),
          (Step(1, 1, "F", 1), Step(1, 0, "F", 0), Step(1, 0, "B", 0), Step(1, 1, "B", 1)))
    s = Schedule("two-way", st, v_shape(2), 2, routes=((0, 1), (2, 3)))
    assert s.positions() == [[(0, 2), (1, 2)], [(1, 2), (0, 2)]]
    assert s.target(Step(0, 0, "F", 0)) == (1, 0) and s.target(Step(1, 1, "F", 1)) == (0, 1)
    assert s.target(Step(0, 1, "F", 1)) is None and s.target(Step(1, 1, "B", 1)) is None
    assert not s.needs_input(Step(1, 1, "F", 1)) and s.needs_input(Step(0, 1, "F", 1))
    with pytest.raises(ValueError, match="once per microbatch and chunk of its route"):
        Schedule("two-way", st, v_shape(2), 2, routes=((0, 1), (0, 1)))

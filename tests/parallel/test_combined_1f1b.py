"""Megatron-Core's combined 1F1B without pipelining (``schedule: combined-1f1b``)."""

from __future__ import annotations

import pytest

from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph
from simtrain.parallel.lower import Lowering, LowerOptions
from simtrain.parallel.pipeline_schedule import Step
from simtrain.parallel.plan import ParallelDims
from simtrain.parallel.schedule import make_schedule, peak_in_flight, schedule_problems
from simtrain.parallel.shard import Comm, Compute, Unit
from simtrain.scenario import ScenarioError, load_scenario
from simtrain.workload.model import Op


def test_each_forward_pairs_with_the_previous_backward():
    # Megatron-Core's docstring for 4 microbatches: F0; B0 + F1; B1 + F2; B2 + F3; B3.
    (steps,) = make_schedule("combined-1f1b", 1, 4).stages
    assert steps == (Step(0, 0, "F"), Step(0, 1, "F", 0, True), Step(0, 0, "B"),
                     Step(0, 2, "F", 0, True), Step(0, 1, "B"),
                     Step(0, 3, "F", 0, True), Step(0, 2, "B"), Step(0, 3, "B"))
    assert peak_in_flight(steps) == 2  # two microbatches' activations at once
    (one,) = make_schedule("combined-1f1b", 1, 1).stages
    assert one == (Step(0, 0, "F"), Step(0, 0, "B"))


def test_pipelines_are_refused():
    (problem,) = schedule_problems("combined-1f1b", 2, 8, 1)
    assert problem[0] == "parallelism.schedule" and "needs pp: 1" in problem[1]
    with pytest.raises(ScenarioError, match="combined-1f1b"):
        load_scenario({"cluster": {"preset": "dgx-h100", "nodes": 1},
                       "model": {"preset": "tiny-moe"},
                       "training": {"global_batch_size": 8, "micro_batch_size": 1,
                                    "seq_len": 128},
                       "parallelism": {"pp": 2, "schedule": "combined-1f1b"}})


def test_the_pair_hides_the_forwards_all_to_all_behind_the_backwards_kernels(star_fabric):
    # One stage of two ranks (dp 2, ep 2), two microbatches; a unit is kernel a (1 s), an
    # EP all-to-all of c seconds (forward only), kernel b (1 s); backward b', a' 2 s each.
    # 1F1B: F0 (2 + c), B0 (4), F1 (2 + c), B1 (4). Combined: F0, then F1's a [2 + c,
    # 3 + c] and B0's b' a' [3 + c, 7 + c] while F1's all-to-all runs, F1's b, B1: c of
    # F1's all-to-all is hidden (c < 4), F0's is not.
    unit = Unit("layers.0", (Compute(Op("a", "elementwise", 0.0, 1.0, None, (), 0.0)),
                             Comm("d", "ep", "all_to_all", None, 4e8),
                             Compute(Op("b", "elementwise", 0.0, 1.0, None, (), 0.0))), layer=0)
    options = LowerOptions(dims=ParallelDims(dp=2, ep=2), micro_batches=2, dtype_bytes=2,
                           grad_bytes_per_element=4, first_bucket_bytes=1, bucket_cap_bytes=1,
                           overlap=True, optimizer_bytes_per_param=0)

    def run(name: str) -> float:
        graph = TaskGraph(2)
        Lowering(graph, [[[unit]]], make_schedule(name, 1, 2), options,
                 lambda op: 0.0 if op.name == "optimizer.step" else op.bytes).run()
        return execute(graph, star_fabric(2, 1e9, 0.0)).end

    plain, combined = run("1f1b"), run("combined-1f1b")
    c = (plain - 12) / 2  # two forwards of 2 + c, two backwards of 4
    assert 0 < c < 4
    assert combined == pytest.approx(plain - c)

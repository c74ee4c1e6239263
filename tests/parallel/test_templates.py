"""Task templates: typed dispatch (an unknown template is an internal error) and fusing."""

from __future__ import annotations

import pytest

from simtrain.engine.taskgraph import TaskGraph
from simtrain.parallel.fuse import fuse
from simtrain.parallel.lower import Lowering, LowerOptions
from simtrain.parallel.plan import ParallelDims
from simtrain.parallel.program import forward
from simtrain.parallel.schedule import Step
from simtrain.parallel.shard import Compute, Unit
from simtrain.parallel.templates import Collective, GradScatter, Kernel, ParamGather
from simtrain.workload.model import Op


def _options(**kw):
    return LowerOptions(dims=ParallelDims(), micro_batches=1, dtype_bytes=2,
                        grad_bytes_per_element=4, first_bucket_bytes=1, bucket_cap_bytes=1,
                        overlap=True, optimizer_bytes_per_param=0, **kw)


def test_stage_granularity_sums_kernels_and_aggregates_collectives_per_group_and_op():
    # Two kernels (1 + 2 s), two TP all-reduces (10 + 30 bytes) and an FSDP pair:
    # one 3 s compute task of 2 kernels (the host issues both) named after the first and
    # last template, the all-gather before it, the aggregates after it in first-seen order.
    ts = [ParamGather("fsdp ag x", 5.0),
          Kernel("a", "backward", base=1.0, flops=4.0, params=("w1",)),
          Collective("a.g", "tp_comm", "all_reduce", "tp", 10.0),
          Kernel("b", "backward", base=2.0, flops=6.0, params=("w2",)),
          Collective("b.g", "tp_comm", "all_reduce", "tp", 30.0),
          GradScatter("fsdp rs x", 7.0)]
    out = fuse(ts, "stage", "backward")
    assert out == [ParamGather("dp all_gather", 5.0, unit="stage"),
                   Kernel("backward fsdp ag x..fsdp rs x", "backward", base=3.0, flops=10.0,
                          params=("w1", "w2"), kernels=2),
                   Collective("tp all_reduce", "tp_comm", "all_reduce", "tp", 40.0),
                   GradScatter("dp reduce_scatter", 7.0, unit="stage")]


def test_layer_granularity_fuses_kernels_of_one_layer_between_collectives():
    ts = [Kernel("layers.0.a", "forward", base=1.0, layer=0),
          Kernel("layers.0.b", "forward", base=2.0, layer=0),
          Collective("layers.0.g", "tp_comm", "all_reduce", "tp", 1.0),
          Kernel("layers.0.c", "forward", base=4.0, layer=0)]
    out = fuse(ts, "layer", "forward")
    assert [t.name for t in out] == ["layers.0", "layers.0.g", "layers.0.c"]
    assert out[0].base == 3.0
    assert [getattr(t, "kernels", None) for t in out] == [2, None, 1]


def test_an_unknown_template_is_an_internal_error_not_a_default():
    class Stranger:
        name = "stranger"

    with pytest.raises(AssertionError, match="no strategy lowers"):
        fuse([Stranger()], "stage", "forward")  # type: ignore[list-item]
    unit = Unit("u", (Compute(Op("k", "elementwise", 0.0, 1.0, None, (), 0.0)),), layer=0)
    steps = [[Step(0, 0, "F"), Step(0, 0, "B")]]
    low = Lowering(TaskGraph(1), [[[unit]]], steps, _options(), lambda op: 1.0)
    low._templates[(0, 0, "F", True)] = [Stranger()]  # type: ignore[list-item]
    with pytest.raises(AssertionError, match="no strategy lowers"):
        low.emit_step(Step(0, 0, "F"), None)
    with pytest.raises(AssertionError, match="no strategy lowers"):
        forward(Unit("v", (Stranger(),)), "forward", 1, lambda op: 1.0)  # type: ignore[arg-type]

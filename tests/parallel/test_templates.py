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


def test_stage_granularity_sums_kernels_per_layer_and_aggregates_collectives():
    # Layer 0: two kernels (1 + 2 s) with TP all-reduces (10 + 30 bytes) between them, in
    # an FSDP unit; then layer 1 (4 s) with one all-reduce (5 bytes). Per layer one compute
    # task (3 s of 2 kernels, named after its first and last kernel; then 4 s), the FSDP
    # all-gather and reduce-scatter in place, the TP aggregate (45 bytes) after the step.
    ts = [ParamGather("fsdp ag x", 5.0),
          Kernel("a", "backward", base=1.0, flops=4.0, layer=0, params=("w1",)),
          Collective("a.g", "tp_comm", "all_reduce", "tp", 10.0),
          Kernel("b", "backward", base=2.0, flops=6.0, layer=0, params=("w2",)),
          Collective("b.g", "tp_comm", "all_reduce", "tp", 30.0),
          GradScatter("fsdp rs x", 7.0),
          Kernel("c", "backward", base=4.0, flops=1.0, layer=1, params=("w3",)),
          Collective("c.g", "tp_comm", "all_reduce", "tp", 5.0)]
    out = fuse(ts, "stage", "backward")
    assert out == [ParamGather("fsdp ag x", 5.0),
                   Kernel("backward a..b", "backward", base=3.0, flops=10.0, layer=0,
                          params=("w1", "w2"), kernels=2),
                   GradScatter("fsdp rs x", 7.0),
                   Kernel("backward c..c", "backward", base=4.0, flops=1.0, layer=1,
                          params=("w3",)),
                   Collective("tp all_reduce", "tp_comm", "all_reduce", "tp", 45.0)]


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
    low._templates[(0, 0, "F")] = [Stranger()]  # type: ignore[list-item]
    with pytest.raises(AssertionError, match="no strategy lowers"):
        low.emit_step(Step(0, 0, "F"), None)
    with pytest.raises(AssertionError, match="no strategy lowers"):
        forward(Unit("v", (Stranger(),)), "forward", 1, lambda op: 1.0)  # type: ignore[arg-type]

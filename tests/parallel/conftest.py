"""Fixtures shared by the pipeline-schedule tests of this package."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from simtrain.engine.sim import execute
from simtrain.engine.taskgraph import TaskGraph
from simtrain.parallel.lower import Lowering, LowerOptions
from simtrain.parallel.plan import ParallelDims
from simtrain.parallel.schedule import make_schedule
from simtrain.parallel.shard import Compute, Unit
from simtrain.workload.model import Op, Param


@pytest.fixture
def toy_pipeline(star_fabric) -> Callable[..., Any]:
    """``run(kind, p, m, v, tf, tb, tw, costed=False)``: p ranks of v chunks (one GEMM
    each) with a chunk's forward tf/v, input gradient tb/v and weight gradient tw/v per
    microbatch; free transfers and optimizer. ``costed`` builds the schedule for those
    chunk times (the cost-aware schedules use them). Returns the executed result."""

    def run(kind: str, p: int, m: int, v: int, tf: float, tb: float, tw: float, *,
            costed: bool = False) -> Any:
        op = Op("g", "gemm", 1.0, 1.0, (1, 2, 3), (Param("g.weight", 1),), 0.0)
        units = [[[Unit("layers.0", (Compute(op),), layer=0)] for _ in range(v)]
                 for _ in range(p)]

        def op_time(o: Op) -> float:
            if o.name == "optimizer.step":
                return 0.0
            return {None: tf, "input": tb, "weight": tw}[o.grad] / v

        options = LowerOptions(dims=ParallelDims(pp=p, vpp=v), micro_batches=m,
                               dtype_bytes=2, grad_bytes_per_element=4, first_bucket_bytes=1,
                               bucket_cap_bytes=1, overlap=True, optimizer_bytes_per_param=0)
        graph = TaskGraph(p)
        costs = (tf / v, tb / v, tw / v) if costed else None
        schedule = (make_schedule(kind, p, m, v, costs) if costed
                    else make_schedule(kind, p, m, v))
        Lowering(graph, units, schedule, options, op_time).run()
        return execute(graph, star_fabric(p, 1e15, 0.0))

    return run


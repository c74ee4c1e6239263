"""One home per list of names: collective operations and span kinds, each defined once."""

from __future__ import annotations

from simtrain.comm.algorithms import ALGORITHMS
from simtrain.comm.model import BUSBW_FACTOR
from simtrain.comm.ops import REDUCING, CollectiveOp
from simtrain.engine.taskgraph import COMM_OPS
from simtrain.engine.timeline import (
    COMM_KINDS,
    COMPUTE_KINDS,
    FAULT_KINDS,
    HOST_KINDS,
    SpanKind,
)
from simtrain.report.figures import GROUP_LABELS
from simtrain.report.gantt import KIND_COLORS
from simtrain.report.trace import NCCL_FUNCS


def test_every_table_of_collectives_is_keyed_by_the_one_enum():
    assert COMM_OPS == tuple(CollectiveOp)
    assert set(ALGORITHMS) == set(CollectiveOp)  # every op runs, nothing else does
    assert set(NCCL_FUNCS) <= set(CollectiveOp) and set(BUSBW_FACTOR) <= set(CollectiveOp)
    assert REDUCING == {"all_reduce", "reduce_scatter", "reduce"}
    assert CollectiveOp.ALL_REDUCE == "all_reduce" and f"{CollectiveOp.SEND_RECV}" == "send_recv"


def test_span_kinds_partition_and_every_palette_covers_them():
    assert set(COMPUTE_KINDS) | set(HOST_KINDS) | set(COMM_KINDS) | set(FAULT_KINDS) \
        == set(SpanKind)
    assert not set(COMPUTE_KINDS) & set(COMM_KINDS)
    assert set(KIND_COLORS) == set(SpanKind)
    assert set(GROUP_LABELS) == set(COMM_KINDS)

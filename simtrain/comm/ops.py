"""The collective operations, named once: the task graph, the algorithms table, the
nccl-tests sweep, the trace export and the CLI all read :class:`CollectiveOp`.

Members equal their strings (``CollectiveOp.ALL_REDUCE == "all_reduce"``), so a task built
with ``op="all_reduce"`` and one built with the member are the same.
"""

from __future__ import annotations

from enum import StrEnum


class CollectiveOp(StrEnum):
    """A communication primitive (see ``simtrain.comm.algorithms`` for how each runs)."""

    ALL_REDUCE = "all_reduce"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_GATHER = "all_gather"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    SCATTER = "scatter"
    GATHER = "gather"
    ALL_TO_ALL = "all_to_all"
    ALL_TO_ALL_V = "all_to_all_v"  # uneven splits (MoE dispatch with routing imbalance)
    SEND_RECV = "send_recv"  # point to point
    BARRIER = "barrier"


# Operations that combine values (a reduction operator applies: NCCL's "Sum" kernels).
REDUCING: frozenset[str] = frozenset({CollectiveOp.ALL_REDUCE, CollectiveOp.REDUCE_SCATTER,
                                      CollectiveOp.REDUCE})

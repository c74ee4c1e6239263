"""Megatron-Core's combined 1F1B without pipelining (``--overlap-moe-expert-parallel-comm``).

megatron-core 0.19.2 ``pipeline_parallel/combined_1f1b.py``,
``combined_1f1b_schedule_for_no_pipelining`` (called from ``forward_backward_no_pipelining``
when ``overlap_moe_expert_parallel_comm`` is set): "the forward pass of Transformer layers
for one micro-batch runs in parallel with the backward pass of another ... EP A2A in
forward step is hidden by the attention/mlp computation in the backward step, and vice
versa". With m microbatches: phase 0 the first forward alone, phase i (1 <= i < m)
microbatch i's forward with microbatch i - 1's backward, phase m the last backward alone.

In simtrain's terms: one stage, the steps F0, (F1 & B0), ..., (F(m-1) & B(m-2)), B(m-1),
each pair marked ``Step.overlap`` on its forward, so the lowering interleaves the two
steps' tasks as it does DualPipe's chunk pairs (``lower.py``): one microbatch's kernels
queue while the other's all-to-alls run. Two microbatches' activations are held at once
(``peak_in_flight`` reads it from the steps). Megatron-Core's pipelined variant (the
interleaved schedule's combined 1F1B) is not modelled: pp must be 1.
"""

from __future__ import annotations

from simtrain.parallel.pipeline_schedule import Step


def combined_1f1b(p: int, m: int, v: int) -> list[list[Step]]:
    """The one stage's steps: F0, then each forward overlapped with the previous backward."""
    assert p == 1 and v == 1, "combined_1f1b_problems rejects pipelines"
    steps = [Step(0, 0, "F")]
    for mb in range(1, m):
        steps += [Step(0, mb, "F", 0, True), Step(0, mb - 1, "B")]
    return [[*steps, Step(0, m - 1, "B")]]


def combined_1f1b_problems(p: int, m: int | None, v: int) -> list[tuple[str, str]]:
    """Why the no-pipelining combined 1F1B cannot run p stages with v chunks each."""
    if p == 1 and v == 1:
        return []
    return [("parallelism.schedule", f"schedule: combined-1f1b is Megatron-Core's "
             f"no-pipelining combined 1F1B, so it needs pp: 1 and vpp: 1 (got pp={p}, "
             f"vpp={v}); use pp: 1 or another schedule")]

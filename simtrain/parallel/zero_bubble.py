"""ZB-H1, the first zero-bubble schedule (Qi et al. 2024, "Zero Bubble Pipeline Parallelism",
Sec. 3.1): 1F1B with each backward split into B (input gradients) and W (weight gradients).

Stage i (of p) runs 1F1B's min(p - 1 - i, m) warm-up forwards and the same order of F and
B; after each B it runs the W of the microbatch i B's earlier, so stage i keeps i weight
gradients deferred, and the deferred W's run at the end, where 1F1B's cool-down bubble was.
A microbatch's activations live from its F to its W: stage i holds at most
(p - i) + i = p of them, the peak of 1F1B's first stage, so the peak memory does not grow.

With uniform stages (T_F, T_B, T_W per microbatch) and T_W <= T_F the bubble is
(p - 1)(T_F + T_B - T_W), against 1F1B's (p - 1)(T_F + T_B + T_W): a third of it when the
three are equal.
"""

from __future__ import annotations

from simtrain.parallel.pipeline_schedule import Step


def zb_h1(p: int, m: int, v: int) -> list[list[Step]]:
    """Per stage, ZB-H1's steps in execution order (one chunk per stage)."""
    return [_stage(i, p, m) for i in range(p)]


def _stage(i: int, p: int, m: int) -> list[Step]:
    warmup = min(p - 1 - i, m)
    steps = [Step(i, k, "F") for k in range(warmup)]
    done_w = 0
    for k in range(m):
        if warmup + k < m:
            steps.append(Step(i, warmup + k, "F"))
        steps.append(Step(i, k, "B"))
        if k >= i:  # i weight gradients stay deferred
            steps.append(Step(i, k - i, "W"))
            done_w += 1
    steps += [Step(i, k, "W") for k in range(done_w, m)]
    return steps

"""ZB-H2 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", Sec. 3.1, Fig. 3): the
zero-bubble schedule for a memory budget of about twice 1F1B's.

Built, as the paper's handcrafted schedules are, for equal forward, input-gradient and
weight-gradient times (one unit each) by list scheduling: every stage, whenever it is free,
starts the step it can start earliest, ties broken in the order

1. a B whose gradient has arrived (what the previous stage waits for);
2. an F whose activations have arrived, while fewer than min(2p - 1, m) microbatches are
   in flight on the stage (forward run, weight gradient not yet);
3. the oldest deferred W.

Stage i so runs 2p - 1 - 2i forwards before its first B (the first gradient reaches it
after 2p - 1 - i units; it started at unit i), the paper's extra warm-up F's, and its
W's wait behind B's and F's until the tail, the paper's reordering of the tail's W's that
turns 1F1B's trapezoid into a parallelogram (for p = 4, m = 8 the last stage ends
F7 B7 W1 ... W7). A microbatch's activations live from its F to its W: at most 2p - 1 of
them per stage, the paper's peak (2p - 1)·M_B (Table 1) against 1F1B's p·M_B.

Bubble (Table 1), T_W <= T_F: (p - 1)(T_F + T_B - 2 T_W) on stage 0, zero when the three
are equal. Stage i starts i·T_F late; removing that skew needs the optimizer
step unsynchronised across stages (the paper's post-validation, Sec. 4). simtrain's step
ends when its slowest stage does, so the step is m(T_F + T_B + T_W) plus the larger of
(p - 1)(T_F + T_B - 2 T_W) and (p - 1)·T_F.
"""

from __future__ import annotations

from functools import lru_cache

from simtrain.parallel.pipeline_schedule import Phase, Step


def zb_h2(p: int, m: int, v: int) -> list[list[Step]]:
    """Per stage, ZB-H2's steps in execution order (one chunk per stage)."""
    return [list(steps) for steps in _build(p, m)]


@lru_cache(maxsize=64)
def _build(p: int, m: int) -> tuple[tuple[Step, ...], ...]:
    """The list scheduling above (cached: the planner asks for the same degrees often)."""
    cap = min(2 * p - 1, m)  # microbatches in flight per stage, the paper's 2p - 1
    steps: list[list[Step]] = [[] for _ in range(p)]
    clock = [0.0] * p  # when each stage is next free, in units of one step
    ready: dict[tuple[int, int, Phase], float] = {}  # (stage, mb, phase) -> input arrives
    for mb in range(m):
        ready[(0, mb, "F")] = 0.0
    nxt_f, nxt_b, nxt_w = [0] * p, [0] * p, [0] * p
    total = 3 * m
    while any(len(s) < total for s in steps):
        # the stage that can start something earliest runs next (ties: lower stage)
        best: tuple[float, int, Phase] | None = None
        for i in range(p):
            pick = _next(i, clock[i], cap, m, nxt_f[i], nxt_b[i], nxt_w[i], ready)
            if pick is not None and (best is None or pick[0] < best[0]):
                best = (pick[0], i, pick[1])
        assert best is not None, "ZB-H2 list scheduling made no progress"
        start, i, phase = best
        counter = {"F": nxt_f, "B": nxt_b, "W": nxt_w}[phase]
        mb = counter[i]
        counter[i] += 1
        steps[i].append(Step(i, mb, phase))
        clock[i] = start + 1.0
        if phase == "F":
            if i + 1 < p:
                ready[(i + 1, mb, "F")] = clock[i]
            else:
                ready[(i, mb, "B")] = clock[i]
        elif phase == "B" and i > 0:
            ready[(i - 1, mb, "B")] = clock[i]
    return tuple(tuple(s) for s in steps)


def _next(i: int, now: float, cap: int, m: int, f: int, b: int, w: int,
          ready: dict[tuple[int, int, Phase], float]) -> tuple[float, Phase] | None:
    """(start time, phase) of the step stage i runs next, by the priorities above; None
    when it has nothing left it could ever start without another stage moving first."""
    options: list[tuple[float, int, Phase]] = []
    if b < f and (i, b, "B") in ready:
        options.append((max(now, ready[(i, b, "B")]), 0, "B"))
    if f < m and f - w < cap and (i, f, "F") in ready:
        options.append((max(now, ready[(i, f, "F")]), 1, "F"))
    if w < b:
        options.append((now, 2, "W"))
    if not options:
        return None
    start, _, phase = min(options)
    return start, phase

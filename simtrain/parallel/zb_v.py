"""ZB-V (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", Sec. 6): zero bubble with the
activation memory of 1F1B, by a V-shaped placement of two model chunks per stage.

The model is cut in 2p chunks; stage i holds chunk i and chunk 2p - 1 - i
(``pipeline_schedule.v_shape``), so a microbatch goes down the stages and back up, and the
first stage holds both the first chunk and the last (the loss): the last stage turns the
microbatch round without a transfer, and stage 0 starts the backward as soon as its own
forward of the last chunk ends. Backward is split into B (input gradients) and W (weight
gradients), as in ZB-H1/H2.

Built, as the paper's ZB-V is, from the chunk's forward, input-gradient and weight-gradient
times (``costs``: the scenario's own, from the lowering's templates; equal times by
default), by list scheduling with free transfers: every stage, whenever it is free, starts
the step it can start earliest, ties broken in the order

1. a B whose gradient has arrived, the later model chunk first (what the stages before it
   wait for);
2. an F whose activations have arrived, the later model chunk first, while fewer than 2p
   chunk-microbatches are in flight on the stage (forward run, W not yet);
3. the oldest deferred W;

and again with 1 and 2 swapped; the shorter of the two is the schedule (the paper's
scheduler also tries several heuristics and keeps the best).

A chunk holds half a stage's layers, so 2p chunk-microbatches in flight are p microbatches
of a whole stage, 1F1B's peak p·M_B (the paper's memory budget for ZB-V); the cap is what
makes the W's run where they fit instead of all at the end.

Bubble: the paper's ZB-V idles (p - 1)(T_F + T_B - 2T_W) per stage (T_F, T_B, T_W those of
a stage, two chunks), none when the three are equal, with peak memory p·M_B. As for ZB-H2,
the paper's zero bubble also needs the optimizer step unsynchronised across stages (its
Sec. 4); simtrain keeps it synchronised, so stage i still starts i chunk forwards late.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache

from simtrain.parallel.pipeline_schedule import Phase, Placement, Step, v_shape

Key = tuple[int, int, int, Phase]  # (stage, chunk, microbatch, phase)
Costs = tuple[float, float, float]  # seconds (or any unit) of a chunk's F, B and W


def zb_v(p: int, m: int, v: int, costs: Costs = (1.0, 1.0, 1.0)) -> list[list[Step]]:
    """Per stage, ZB-V's steps in execution order (two chunks per stage, V placement), for
    chunk step times ``costs``: the shorter of the two list schedulings (B or F first)."""
    routes = tuple(tuple(range(2 * p)) for _ in range(m))
    best = min((list_schedule(v_shape(p), routes, 2 * p, costs, f_first)
                for f_first in (False, True)), key=lambda r: r[0])
    return [list(steps) for steps in best[1]]


@lru_cache(maxsize=64)
def list_schedule(placement: Placement, routes: tuple[tuple[int, ...], ...],
                  cap: int, costs: Costs = (1.0, 1.0, 1.0), f_first: bool = False
                  ) -> tuple[float, tuple[tuple[Step, ...], ...]]:
    """(makespan, steps): list scheduling of split-backward steps with step times ``costs``
    (priorities above, F before B if ``f_first``): microbatch mb passes the model chunks
    ``routes[mb]``; at most ``cap`` chunk-microbatches in flight per stage. Per (stage,
    chunk), forwards and backwards run in microbatch order."""
    p, v = len(placement), len(placement[0])
    where = {k: (s, c) for s, row in enumerate(placement) for c, k in enumerate(row)}
    order: list[list[list[int]]] = [[[] for _ in range(v)] for _ in range(p)]
    for mb, route in enumerate(routes):
        for k in route:
            s, c = where[k]
            order[s][c].append(mb)
    ready: dict[Key, float] = {}
    for mb, route in enumerate(routes):
        s, c = where[route[0]]
        ready[(s, c, mb, "F")] = 0.0
    nxt_f = [[0] * v for _ in range(p)]
    nxt_b = [[0] * v for _ in range(p)]
    pending_w: list[deque[tuple[int, int]]] = [deque() for _ in range(p)]  # (chunk, mb)
    live = [0] * p
    clock = [0.0] * p
    steps: list[list[Step]] = [[] for _ in range(p)]
    total = [3 * sum(len(o) for o in order[s]) for s in range(p)]
    while any(len(steps[s]) < total[s] for s in range(p)):
        best: tuple[float, int, int, Phase, int] | None = None  # start, prio, stage, ..
        for s in range(p):
            options: list[tuple[float, int, int, Phase, int]] = []
            for c in range(v):
                if nxt_b[s][c] < nxt_f[s][c]:
                    mb = order[s][c][nxt_b[s][c]]
                    if (s, c, mb, "B") in ready:
                        options.append((max(clock[s], ready[(s, c, mb, "B")]),
                                        int(f_first), -placement[s][c], "B", c))
                if nxt_f[s][c] < len(order[s][c]) and live[s] < cap:
                    mb = order[s][c][nxt_f[s][c]]
                    if (s, c, mb, "F") in ready:
                        options.append((max(clock[s], ready[(s, c, mb, "F")]),
                                        1 - int(f_first), -placement[s][c], "F", c))
            if pending_w[s]:
                options.append((clock[s], 2, 0, "W", pending_w[s][0][0]))
            if options:
                start, prio, _, phase, c = min(options)
                if best is None or (start, prio) < (best[0], best[1]):
                    best = (start, prio, s, phase, c)
        assert best is not None, "ZB-V list scheduling made no progress"
        start, _, s, phase, c = best
        if phase == "W":
            c, mb = pending_w[s].popleft()
            live[s] -= 1
        elif phase == "F":
            mb = order[s][c][nxt_f[s][c]]
            nxt_f[s][c] += 1
            live[s] += 1
        else:
            mb = order[s][c][nxt_b[s][c]]
            nxt_b[s][c] += 1
            pending_w[s].append((c, mb))
        steps[s].append(Step(s, mb, phase, c))
        clock[s] = start + costs["FBW".index(phase)]
        route = routes[mb]
        j = route.index(placement[s][c])
        if phase == "F":
            nxt = where[route[j + 1]] if j + 1 < len(route) else (s, c)
            ready[(*nxt, mb, "F" if j + 1 < len(route) else "B")] = clock[s]
        elif phase == "B" and j > 0:
            ready[(*where[route[j - 1]], mb, "B")] = clock[s]
    return max(clock), tuple(tuple(st) for st in steps)

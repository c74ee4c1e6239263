"""The pipeline schedules, in one registry: name -> how to build its steps and placement.

A schedule (``pipeline_schedule.py``) says only *what* each stage runs and in which order;
the lowering turns every step into tasks and the dependencies between stages (activations
forward, gradients backward) into point-to-point transfers.

- GPipe (Huang et al. 2019): every forward, then every backward.
- 1F1B (PipeDream-Flush, Narayanan et al. 2021): stage i runs min(p - i - 1, m) warm-up
  forwards, then alternates one forward and one backward, then drains the backwards.
- Interleaved 1F1B (Megatron-LM ``forward_backward_pipelining_with_interleaving``): as
  1F1B over m·v chunk-microbatches taken in groups of p per chunk; warm-up
  2·(p - i - 1) + (v - 1)·p; looping placement.

- ZB-H1 (Qi et al. 2024, ``zero_bubble.py``): 1F1B with backward split into B and W,
  stage i keeping i W's deferred to the cool-down.
- ZB-H2 (Qi et al. 2024, ``zb_h2.py``): up to 2p - 1 microbatches in flight, extra warm-up
  F's and the W's deferred to the tail, so no stage idles when T_F = T_B = T_W.
- ZB-V (Qi et al. 2024, ``zb_v.py``): two chunks per stage in a V (``v_shape``), list
  scheduled for the model's F, B, W times within 2p chunk-microbatches in flight (1F1B's
  memory); (p - 1)(f + b - 2w) idle, none when the three are equal.
- DualPipe (DeepSeek-V3, ``dualpipe.py``): V placement with two routes (a model copy fed
  from each end), forward and backward chunk pairs overlapped; (p/2 - 1)(F&B + B - 3W).
- Combined 1F1B (Megatron-Core ``--overlap-moe-expert-parallel-comm``, pp 1,
  ``combined_1f1b.py``): each forward overlapped with the previous microbatch's backward.

Bubble with uniform stages (forward f, backward b per microbatch and stage): GPipe and 1F1B
both take (m + p - 1)·(f + b), a bubble fraction (p - 1)/(m + p - 1); interleaving divides
the bubble time by v; ZB-H1 (forward, input- and weight-gradient times f, b, w, w <= f)
idles (p - 1)(f + b - w) against 1F1B's (p - 1)(f + b + w); ZB-H2 (p - 1)(f + b - 2w) on
its first stage.

Adding a schedule: a ``ScheduleKind`` entry in ``SCHEDULES`` (its steps, placement and the
pp/vpp/microbatch combinations it can run), its builder here or in one module of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simtrain.parallel.combined_1f1b import combined_1f1b, combined_1f1b_problems
from simtrain.parallel.dualpipe import dualpipe, dualpipe_problems, dualpipe_routes
from simtrain.parallel.pipeline_schedule import (
    Phase,
    Placement,
    Schedule,
    Step,
    looping,
    peak_in_flight,
    v_shape,
)
from simtrain.parallel.zb_h2 import zb_h2
from simtrain.parallel.zb_v import zb_v
from simtrain.parallel.zero_bubble import zb_h1

__all__ = ["SCHEDULES", "Costs", "Schedule", "ScheduleKind", "Step", "build_schedule",
           "is_costed", "make_schedule", "model_chunks", "peak_in_flight",
           "schedule_problems"]

Problems = list[tuple[str, str]]  # (scenario field, message with the fix)


Costs = tuple[float, float, float]  # a model chunk's F, B (input gradients) and W times


@dataclass(frozen=True)
class ScheduleKind:
    """A registered schedule: ``steps(p, m, v)`` per stage (``steps(p, m, v, costs)`` if
    ``costed``: built for a chunk's F, B, W times), ``placement(p, v)``, and
    ``problems(p, m, v)``: why it cannot run those degrees (empty when it can; m None when
    the microbatch count is not known)."""

    name: str
    summary: str
    steps: Callable[..., list[list[Step]]]
    problems: Callable[[int, int | None, int], Problems]
    placement: Callable[[int, int], Placement] = looping
    costed: bool = False
    # (p, m) -> the model chunks each microbatch passes (None: all of them, in order), and
    # (p, v) -> how many model chunks one route passes (the parts the model is cut in).
    routes: Callable[[int, int], tuple[tuple[int, ...], ...]] | None = None
    route_length: Callable[[int, int], int] = lambda p, v: p * v


def _gpipe(p: int, m: int, v: int) -> list[list[Step]]:
    return [[Step(i, mb, "F") for mb in range(m)] + [Step(i, mb, "B") for mb in range(m)]
            for i in range(p)]


def _one_chunk(name: str) -> Callable[[int, int | None, int], Problems]:
    def problems(p: int, m: int | None, v: int) -> Problems:
        if v == 1:
            return []
        return [("parallelism.schedule", f"vpp={v} virtual stages need schedule: interleaved "
                 f"(got {name}); set it or use vpp: 1")]
    return problems


def _one_f_one_b(p: int, m: int, v: int) -> list[list[Step]]:
    return [_one_f_one_b_stage(i, p, m, v) for i in range(p)]


def _one_f_one_b_stage(stage: int, p: int, m: int, v: int) -> list[Step]:
    total = m * v

    def step(k: int, phase: Phase) -> Step:
        group, within = divmod(k, p * v)
        chunk = within // p
        if phase == "B":
            chunk = v - 1 - chunk
        return Step(stage, group * p + k % p, phase, chunk)

    if v == 1:
        warmup = min(p - stage - 1, m)
    else:
        warmup = min(2 * (p - stage - 1) + (v - 1) * p, total)
    steps = [step(k, "F") for k in range(warmup)]
    for i in range(total - warmup):
        steps += [step(warmup + i, "F"), step(i, "B")]
    steps += [step(k, "B") for k in range(total - warmup, total)]
    return steps


def _interleaved_problems(p: int, m: int | None, v: int) -> Problems:
    if v == 1 and p > 1:
        return [("parallelism.vpp", "schedule: interleaved needs vpp >= 2 virtual stages per "
                 "rank; set vpp or use schedule: 1f1b")]
    if v > 1 and m is not None and m % p:
        return [("training.global_batch_size", f"the interleaved schedule needs microbatches "
                 f"({m}) divisible by pp={p}; use a global batch giving a multiple of {p} "
                 f"microbatches")]
    return []


def _two_chunks(name: str) -> Callable[[int, int | None, int], Problems]:
    def problems(p: int, m: int | None, v: int) -> Problems:
        if v == 2 and p >= 2:
            return []
        return [("parallelism.vpp", f"schedule: {name} places two model chunks per stage in "
                 f"a V, so it needs pp >= 2 and vpp: 2 (got pp={p}, vpp={v}); set vpp: 2")]
    return problems


SCHEDULES: dict[str, ScheduleKind] = {k.name: k for k in (
    ScheduleKind("gpipe", "every forward, then every backward (Huang et al. 2019)",
                 _gpipe, _one_chunk("gpipe")),
    ScheduleKind("1f1b", "warm-up forwards, then one forward one backward (PipeDream-Flush)",
                 _one_f_one_b, _one_chunk("1f1b")),
    ScheduleKind("interleaved", "1F1B over vpp looping model chunks per stage (Megatron-LM)",
                 _one_f_one_b, _interleaved_problems),
    ScheduleKind("zb-h1", "1F1B with weight gradients deferred to the cool-down (Qi et al. "
                 "2024)", zb_h1, _one_chunk("zb-h1")),
    ScheduleKind("zb-h2", "zero bubble with 2p - 1 microbatches in flight: extra warm-up "
                 "forwards, weight gradients in the tail (Qi et al. 2024)", zb_h2,
                 _one_chunk("zb-h2")),
    ScheduleKind("zb-v", "zero bubble with 1F1B's memory: two chunks per stage in a V, "
                 "weight gradients deferred within 2p chunks in flight (Qi et al. 2024)",
                 zb_v, _two_chunks("zb-v"), lambda p, v: v_shape(p), costed=True),
    ScheduleKind("dualpipe", "bidirectional: two model copies fed from both ends, forward "
                 "and backward chunks overlapped (DeepSeek-V3)", dualpipe, dualpipe_problems,
                 lambda p, v: v_shape(p), routes=dualpipe_routes, route_length=lambda p, v: p),
    ScheduleKind("combined-1f1b", "no pipeline: each forward overlapped with the previous "
                 "microbatch's backward, hiding EP all-to-alls (Megatron-Core "
                 "overlap_moe_expert_parallel_comm)", combined_1f1b, combined_1f1b_problems),
)}


def _kind(name: str) -> ScheduleKind:
    if name not in SCHEDULES:
        raise ValueError(f"unknown pipeline schedule {name!r}; use one of "
                         f"{', '.join(SCHEDULES)}")
    return SCHEDULES[name]


def schedule_problems(name: str, p: int, m: int | None, v: int) -> Problems:
    """Why schedule ``name`` cannot run p stages, m microbatches (None: not known yet, so
    not checked), v chunks per stage."""
    return _kind(name).problems(p, m, v)


def model_chunks(name: str, p: int, v: int) -> int:
    """How many parts schedule ``name`` cuts the model in for p stages, v chunks each (one
    ``pp_layers`` count per part)."""
    return _kind(name).route_length(p, v)


def is_costed(name: str) -> bool:
    """Whether schedule ``name`` is built for the model's F, B, W times (``make_schedule``
    ``costs``) rather than from the degrees alone."""
    return _kind(name).costed


def make_schedule(name: str, p: int, m: int, v: int = 1, costs: Costs | None = None
                  ) -> Schedule:
    """The schedule ``name`` for p stages, m microbatches and v model chunks per stage;
    a costed schedule is built for a chunk's F, B, W times ``costs`` (None: equal)."""
    if p < 1 or m < 1 or v < 1:
        raise ValueError(f"need p, m, v >= 1, got p={p}, m={m}, v={v}")
    kind = _kind(name)
    problems = schedule_problems(name, p, m, v)
    if problems:
        raise ValueError(problems[0][1])
    if kind.costed:
        steps = kind.steps(p, m, v, costs or (1.0, 1.0, 1.0))
    else:
        steps = kind.steps(p, m, v)
    routes = kind.routes(p, m) if kind.routes is not None else ()
    return Schedule(name, tuple(tuple(s) for s in steps), kind.placement(p, v), m, routes)


def build_schedule(kind: str, p: int, m: int, v: int = 1) -> list[list[Step]]:
    """Per stage, the steps of ``make_schedule(kind, p, m, v)`` in execution order."""
    return [list(steps) for steps in make_schedule(kind, p, m, v).stages]

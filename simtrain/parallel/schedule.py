"""Pipeline schedules as data: per stage, the ordered list of (stage, microbatch, phase, chunk).

A schedule says only *what* each stage runs and in which order; the lowering turns every
step into tasks and the dependencies between stages (activations forward, gradients
backward) into point-to-point transfers. Chunk c of stage i is model chunk c·p + i
(virtual pipeline stages, Narayanan et al. 2021, Sec. 2.2).

- GPipe (Huang et al. 2019): every forward, then every backward.
- 1F1B (PipeDream-Flush, Narayanan et al. 2021): stage i runs min(p - i - 1, m) warm-up
  forwards, then alternates one forward and one backward, then drains the backwards.
- Interleaved 1F1B (Megatron-LM ``forward_backward_pipelining_with_interleaving``): as
  1F1B over m·v chunk-microbatches taken in groups of p per chunk; warm-up
  2·(p - i - 1) + (v - 1)·p.

Bubble with uniform stages (forward f, backward b per microbatch and stage): GPipe and 1F1B
both take (m + p - 1)·(f + b), a bubble fraction (p - 1)/(m + p - 1); interleaving divides
the bubble time by v.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Phase = Literal["F", "B"]


@dataclass(frozen=True, slots=True)
class Step:
    """One unit of pipeline work: ``phase`` of ``microbatch`` for model chunk ``chunk``."""

    stage: int
    microbatch: int
    phase: Phase
    chunk: int = 0


def build_schedule(kind: str, p: int, m: int, v: int = 1) -> list[list[Step]]:
    """Per stage, its steps in execution order (``kind``: gpipe, 1f1b, interleaved)."""
    if p < 1 or m < 1 or v < 1:
        raise ValueError(f"need p, m, v >= 1, got p={p}, m={m}, v={v}")
    if kind == "gpipe":
        if v != 1:
            raise ValueError(f"the GPipe schedule has no virtual stages (vpp={v}); use "
                             "schedule: interleaved or vpp: 1")
        return [[Step(i, mb, "F") for mb in range(m)] + [Step(i, mb, "B") for mb in range(m)]
                for i in range(p)]
    if kind == "1f1b" and v != 1:
        raise ValueError(f"vpp={v} needs schedule: interleaved (1f1b has one chunk per stage)")
    if kind not in ("1f1b", "interleaved"):
        raise ValueError(f"unknown pipeline schedule {kind!r}; use gpipe, 1f1b or interleaved")
    if v > 1 and m % p:
        raise ValueError(f"the interleaved schedule needs microbatches ({m}) divisible by pp "
                         f"({p}); use a global batch giving a multiple of {p} microbatches")
    return [_one_f_one_b(i, p, m, v) for i in range(p)]


def _one_f_one_b(stage: int, p: int, m: int, v: int) -> list[Step]:
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


def peak_in_flight(steps: list[Step]) -> int:
    """Most chunk-microbatches whose forward ran and backward did not, over ``steps``."""
    live = peak = 0
    for s in steps:
        live += 1 if s.phase == "F" else -1
        peak = max(peak, live)
    return peak

"""A pipeline schedule as a value: steps, phases, chunk placement, and where transfers go.

A ``Schedule`` lists, per stage, the steps it runs in order; a ``Step`` is one phase of one
microbatch for one of the stage's model chunks. Phases: "F" (forward), "B" (backward) and,
for zero-bubble schedules (Qi et al. 2024), the backward split in two: "B" computes the
input gradients only (what the previous stage waits for) and "W" the weight gradients,
which may be deferred to fill bubbles. A schedule without "W" steps runs the whole
backward in "B".

The placement says which model chunk each (stage, chunk) holds: looping (Megatron's
virtual stages: chunk c of stage i is model chunk c·p + i, Narayanan et al. 2021, Sec. 2.2)
or V-shaped (chunk 0 of stage i is model chunk i, chunk 1 is 2p - 1 - i, so the first and
last model chunks share stage 0; Qi et al. 2024, ZB-V). The stage each transfer goes to
follows from it: a forward's activations go to the next model chunk of the microbatch's
route, a backward's input gradients to the previous one; between two chunks on one stage
there is no transfer.

A route is the model chunks one microbatch passes, in forward order: by default every
microbatch passes all of them, 0 to p·v - 1. A bidirectional schedule (DualPipe) holds two
copies of the model and feeds each microbatch through one of them: two routes of p chunks
each, so each route's chunks split the whole model (``positions``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

Phase = Literal["F", "B", "W"]
PHASES: tuple[Phase, ...] = ("F", "B", "W")


@dataclass(frozen=True, slots=True)
class Step:
    """One unit of pipeline work: ``phase`` of ``microbatch`` for model chunk ``chunk``.
    ``overlap``: its tasks interleave with those of the stage's next step(s), up to the
    first step without the flag (DualPipe's forward-backward chunk pairs)."""

    stage: int
    microbatch: int
    phase: Phase
    chunk: int = 0
    overlap: bool = False


Placement = tuple[tuple[int, ...], ...]  # [stage][chunk] -> model chunk


def looping(p: int, v: int) -> Placement:
    """Chunk c of stage i is model chunk c·p + i (Megatron interleaving)."""
    return tuple(tuple(c * p + i for c in range(v)) for i in range(p))


def v_shape(p: int) -> Placement:
    """Two chunks per stage: stage i holds model chunks i and 2p - 1 - i."""
    return tuple((i, 2 * p - 1 - i) for i in range(p))


@dataclass(frozen=True)
class Schedule:
    """Per stage, its steps in execution order, over ``micro_batches`` microbatches, with
    each (stage, chunk)'s model chunk in ``placement`` and, if ``routes`` is given, the
    model chunks microbatch mb passes in ``routes[mb]`` (else all, in order). Checked on
    construction: every stage runs F and B (and W, if any stage does) once per microbatch
    and chunk of its route, in the order F, B, W."""

    name: str
    stages: tuple[tuple[Step, ...], ...]
    placement: Placement
    micro_batches: int
    routes: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        p, v = len(self.placement), len(self.placement[0]) if self.placement else 0
        if sorted(k for row in self.placement for k in row) != list(range(p * v)):
            raise ValueError(f"schedule {self.name!r}: placement {self.placement} must hold "
                             f"each of the {p * v} model chunks once")
        if len(self.stages) != p:
            raise ValueError(f"schedule {self.name!r} has {len(self.stages)} stages of steps "
                             f"for {p} stages of placement")
        if self.routes and (len(self.routes) != self.micro_batches or not all(
                r and set(r) <= set(range(p * v)) for r in self.routes)):
            raise ValueError(f"schedule {self.name!r}: routes must list, for each of the "
                             f"{self.micro_batches} microbatches, model chunks below {p * v}")
        phases = PHASES if self.split_backward else PHASES[:2]
        for s, steps in enumerate(self.stages):
            want = sorted((mb, c, ph) for mb in range(self.micro_batches) for c in range(v)
                          if self.placement[s][c] in self.route(mb) for ph in phases)
            seen = [(st.microbatch, st.chunk, st.phase) for st in steps]
            if any(st.stage != s for st in steps) or sorted(seen) != want:
                raise ValueError(f"schedule {self.name!r}: stage {s} must run each of "
                                 f"{''.join(phases)} once per microbatch and chunk of its "
                                 f"route")
            if steps and steps[-1].overlap:
                raise ValueError(f"schedule {self.name!r}: stage {s}'s last step cannot "
                                 f"overlap a next one")
            done: set[tuple[int, int, str]] = set()
            for mb, c, ph in seen:
                before = PHASES[PHASES.index(ph) - 1] if ph != "F" else None
                if before is not None and (mb, c, before) not in done:
                    raise ValueError(f"schedule {self.name!r}: stage {s} runs {ph} of "
                                     f"microbatch {mb} chunk {c} before its {before}")
                done.add((mb, c, ph))

    @classmethod
    def from_steps(cls, name: str, stages: Sequence[Sequence[Step]],
                   micro_batches: int | None = None) -> Schedule:
        """A looping-placement schedule of ``stages`` (chunks and microbatches as used)."""
        v = 1 + max((st.chunk for steps in stages for st in steps), default=0)
        m = micro_batches if micro_batches is not None else 1 + max(
            (st.microbatch for steps in stages for st in steps), default=0)
        return cls(name, tuple(tuple(steps) for steps in stages), looping(len(stages), v), m)

    # ---- shape -----------------------------------------------------------------------
    @property
    def pp(self) -> int:
        return len(self.placement)

    @property
    def vpp(self) -> int:
        return len(self.placement[0])

    @cached_property
    def split_backward(self) -> bool:
        """Whether backward runs as B (input gradients) then W (weight gradients)."""
        return any(st.phase == "W" for steps in self.stages for st in steps)

    @property
    def last_backward(self) -> Phase:
        """The phase after which a chunk's gradients of a microbatch are all produced."""
        return "W" if self.split_backward else "B"

    # ---- where data goes -------------------------------------------------------------
    @cached_property
    def _where(self) -> dict[int, tuple[int, int]]:
        return {k: (s, c) for s, row in enumerate(self.placement) for c, k in enumerate(row)}

    @cached_property
    def _all(self) -> tuple[int, ...]:
        return tuple(range(self.pp * self.vpp))

    @cached_property
    def _index(self) -> dict[tuple[int, ...], dict[int, int]]:
        return {r: {k: j for j, k in enumerate(r)} for r in {*self.routes, self._all}}

    @cached_property
    def _last(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for mb in range(self.micro_batches):
            for k in self.route(mb):
                out[k] = mb
        return out

    def last_microbatch(self, stage: int, chunk: int) -> int:
        """The last microbatch passing ``chunk`` of ``stage`` (its gradients complete)."""
        return self._last[self.placement[stage][chunk]]

    def route(self, microbatch: int) -> tuple[int, ...]:
        """The model chunks ``microbatch`` passes, in forward order."""
        return self.routes[microbatch] if self.routes else self._all

    def positions(self) -> list[list[tuple[int, int]]]:
        """[stage][chunk] -> (position, length) of the chunk in the routes through it: the
        chunk holds part ``position`` of the model cut in ``length`` parts."""
        out: dict[int, tuple[int, int]] = {}
        for r in {*self.routes} or {self._all}:
            for j, k in enumerate(r):
                assert out.setdefault(k, (j, len(r))) == (j, len(r)), "routes disagree"
        return [[out[k] for k in row] for row in self.placement]

    def needs_input(self, step: Step) -> bool:
        """Whether ``step`` waits for another step's output: a forward for the previous
        model chunk's activations, a backward for the next one's gradients."""
        k = self.placement[step.stage][step.chunk]
        r = self.route(step.microbatch)
        if step.phase == "F":
            return k != r[0]
        return step.phase == "B" and k != r[-1]

    def target(self, step: Step) -> tuple[int, int] | None:
        """(stage, chunk) consuming ``step``'s output, None when nothing does (the route's
        last model chunk's forward, its first one's backward, any W)."""
        k = self.placement[step.stage][step.chunk]
        r = self.route(step.microbatch)
        j = self._index[r][k]
        if step.phase == "F" and j != len(r) - 1:
            return self._where[r[j + 1]]
        if step.phase == "B" and j != 0:
            return self._where[r[j - 1]]
        return None


def peak_in_flight(steps: Sequence[Step]) -> int:
    """Most chunk-microbatches whose forward ran and backward did not, over ``steps``; a
    split backward holds the activations until its W (the weight gradients need the saved
    inputs)."""
    phases = [s.phase for s in steps]
    release = "W" if "W" in phases else "B"
    live = peak = 0
    for phase in phases:
        if phase == "F":
            live += 1
            if live > peak:
                peak = live
        elif phase == release:
            live -= 1
    return peak

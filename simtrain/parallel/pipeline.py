"""Pipeline parallelism: run a schedule's steps across stages, with their transfers.

Each stage runs its steps in the schedule's order (``schedule.py``). A step's input comes
from another stage (activations forward, gradients backward): a send/recv is created right
after its producer, in the producer's schedule order, and the receiver consumes in the
same order (every stage runs the same forward sequence), so every link stream is
FIFO-consistent and cannot deadlock. Transfers use one stream per direction and link,
shared by both ends ("pp fwd 0>1", "pp bwd 1>0"). Stages are emitted step by step from a
worklist: a step whose input transfer does not exist yet waits for its producer.

Megatron's scatter-gather (``--scatter-gather-tensors-in-pipeline``, without SP): each TP
rank sends only its 1/tp slice of the activation (or gradient) to its partner, and the
receiving stage all-gathers the slices over its TP group (intra-node) before the step:
p2p bytes / tp, plus one TP all-gather of the whole tensor (``receive``).

A schedule with two routes (DualPipe) holds two copies of each model chunk on two stages;
they must stay equal, so after both have their gradients (and their DP reductions) the
two stages' partner ranks all-reduce the chunk's gradients (``sum_copies``), one
collective per rank pair on the DP stream, before the optimizer.
"""

from __future__ import annotations

from collections.abc import Callable

from simtrain.parallel.ddp import DP_STREAM
from simtrain.parallel.emit import Emitter
from simtrain.parallel.pipeline_schedule import Schedule, Step
from simtrain.parallel.templates import Collective

# (stage, chunk, microbatch, phase) -> rank -> the transfer the rank's step waits for
Inbox = dict[tuple[int, int, int, str], dict[int, int]]


Incoming = dict[int, int] | None
Overlapped = Callable[[list[tuple[Step, Incoming]], Callable[[Step], None]], None]


def run_schedule(em: Emitter, schedule: Schedule, p2p_bytes: float,
                 emit: Callable[[Step, Incoming], None], done: Callable[[Step], None],
                 overlapped: Overlapped | None = None) -> None:
    """Emit every stage's steps through ``emit``, interleaved by a worklist so each step
    comes after the transfer it needs; ``done`` runs after each step and its transfer. A
    group of overlapped steps (``Step.overlap``) waits for all its inputs and goes to
    ``overlapped`` with a callback that sends each step's output and runs ``done``."""
    stages = schedule.stages
    p = len(stages)
    pos = [0] * p
    inbox: Inbox = {}

    def key(step: Step) -> tuple[int, int, int, str]:
        return (step.stage, step.chunk, step.microbatch, step.phase)

    def finish(step: Step) -> None:
        send(em, schedule, step, p2p_bytes, inbox)
        done(step)

    while any(pos[s] < len(stages[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            steps = stages[s]
            while pos[s] < len(steps):
                end = pos[s]
                while steps[end].overlap and overlapped is not None:
                    end += 1  # Schedule checks that a stage's last step is not flagged
                group = steps[pos[s]:end + 1]
                wants = [schedule.needs_input(st) for st in group]
                if any(w and key(st) not in inbox for st, w in zip(group, wants, strict=True)):
                    break
                items = [(st, inbox.pop(key(st)) if w else None)
                         for st, w in zip(group, wants, strict=True)]
                if len(items) == 1:
                    emit(*items[0])
                    finish(items[0][0])
                else:
                    assert overlapped is not None
                    overlapped(items, finish)
                pos[s] = end + 1
                progressed = True
        if not progressed:
            stuck = [stages[s][pos[s]] for s in range(p) if pos[s] < len(stages[s])]
            raise RuntimeError(f"pipeline schedule cannot make progress at {stuck}")


def send(em: Emitter, schedule: Schedule, step: Step, nbytes: float, inbox: Inbox) -> None:
    """The transfer of ``step``'s output to the step that consumes it, into ``inbox``: a
    send/recv per rank pair, or nothing to wait for when the consumer is on this stage."""
    target = schedule.target(step)
    if target is None:
        return
    s = step.stage
    dst_s, dst_c = target
    out: dict[int, int] = {}
    if dst_s != s:
        stream = f"pp {'fwd' if step.phase == 'F' else 'bwd'} {s}>{dst_s}"
        srcs, dsts = em.stage_ranks[s], em.stage_ranks[dst_s]
        first = em.p2p_each(srcs, dsts, nbytes, f"pp {step.phase} mb{step.microbatch}",
                            kind="pp_comm", stream=stream, deps=list(map(em.dep, srcs)),
                            meta={"microbatch": step.microbatch, "chunk": step.chunk})
        out = dict(zip(dsts, range(first, first + len(dsts)), strict=True))
    inbox[(dst_s, dst_c, step.microbatch, step.phase)] = out


def receive(em: Emitter, step: Step, incoming: dict[int, int], nbytes: float,
            gather: bool) -> None:
    """Make ``step``'s ranks wait for their ``incoming`` transfers; if ``gather``
    (scatter-gather), then for the TP all-gather of the ``nbytes`` slices into the whole
    tensor (``nbytes`` x tp), on the stage's TP stream."""
    st = em.state
    for r in em.stage_ranks[step.stage]:
        st.frontier[r] = [*em.dep(r), incoming[r]]
    if gather:
        name = f"pp {step.phase} mb{step.microbatch} gather"
        em.collective(step.stage, Collective(name, "pp_comm", "all_gather", "tp",
                                             nbytes * em.dims.tp),
                      {"microbatch": step.microbatch, "chunk": step.chunk})


def copies(schedule: Schedule) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """(stage, chunk) -> every (stage, chunk) holding the same part of the model, when the
    schedule's routes hold the model more than once; empty otherwise."""
    if len(set(schedule.routes)) < 2:
        return {}
    by_part: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for s, row in enumerate(schedule.positions()):
        for c, part in enumerate(row):
            by_part.setdefault(part, []).append((s, c))
    return {cell: cells for cells in by_part.values() for cell in cells}


def sum_copies(em: Emitter, cells: list[tuple[int, int]], nbytes: float,
               ready: dict[int, list[int]], chunk: int) -> None:
    """All-reduce the ``nbytes`` of gradients each rank holds of one model part over the
    partner ranks of the stages in ``cells`` (index k of each stage's ranks: the same
    tp/cp/dp coordinates), after what ``ready`` lists per rank; the optimizer waits."""
    st = em.state
    for members in zip(*(em.stage_ranks[s] for s, _ in cells), strict=True):
        group = tuple(sorted(members))
        deps = sorted({t for r in group for t in ready[r]})
        tid = em.coll("all_reduce", group, nbytes, "pp copies grad sum", kind="dp_comm",
                      stream=DP_STREAM, deps=deps, meta={"chunk": chunk})
        for r in group:
            st.reductions[r].append(tid)

"""Lower a training step under any combination of TP, SP, CP, PP, EP, DP/ZeRO to a task graph.

Per pipeline stage, every rank of the stage runs the same program (its shard of the stage's
model chunks, ``shard.py``) in the order of the pipeline schedule (``schedule.py``).
Each pipeline step is lowered once to typed task templates (``templates.py``), which the
strategies then emit for every rank or group of the stage through one shared emitter
(``emit.py``): collectives once per group, point-to-point transfers once per rank pair.

The strategies are applied in a fixed order (as torchtitan applies its parallelisms):

1. symmetry (``symmetry.py``): which ranks are simulated; the others' collectives become
   weighted copies;
2. the layer program (``program.py``): forward and backward kernels, TP/SP, CP and EP
   collectives of each unit, and what recompute recomputes;
3. FSDP (``data_parallel.py``): each unit between its parameter all-gather and its
   gradient reduce-scatter;
4. TP communication overlap (``tensor.py``): TP all-gathers/reduce-scatters pipelined with
   their GEMM runs;
5. granularity (``fuse.py``): one task per kernel, per run of kernels between collectives,
   or per pipeline step;
6. the pipeline (``pipeline.py``): the schedule's steps (``pipeline_schedule.py``: F, B
   and, for zero-bubble schedules, W) across stages with their transfers; each chunk's DP
   gradient reduction after its last microbatch's backward (its W when split;
   ``data_parallel.py``; ZeRO-1/2 parameter all-gathers first when overlapped);
7. the optimizer and the ZeRO-1/2 parameter all-gather (``data_parallel.py``).

Streams per rank: "compute"; one per process-group kind ("tp", "cp", "ep", "dp", and
"dp ag" for ZeRO-3 parameter all-gathers, so prefetch is not queued behind gradient
reduce-scatters); ring attention uses one stream per CP link ("cp a>b"); pipeline
transfers one per direction and link ("pp fwd 0>1", "pp bwd 1>0").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from simtrain.engine.collector import collection_paused
from simtrain.engine.taskgraph import TaskGraph
from simtrain.parallel import data_parallel, program
from simtrain.parallel.bucket_prepass import PrepassWatch
from simtrain.parallel.context import emit_ring
from simtrain.parallel.data_parallel import FSDP_AG_STREAM, emit_grad_scatter, emit_param_gather
from simtrain.parallel.emit import Emitter
from simtrain.parallel.expert import Dispatch, with_route_splits
from simtrain.parallel.fuse import fuse
from simtrain.parallel.options import LowerOptions
from simtrain.parallel.pipeline import copies, receive, run_schedule, sum_copies
from simtrain.parallel.pipeline_schedule import Schedule
from simtrain.parallel.pipeline_schedule import Step as PipeStep
from simtrain.parallel.program import is_core_attention
from simtrain.parallel.replay import Entry, Replay
from simtrain.parallel.shard import Unit
from simtrain.parallel.templates import (
    Collective,
    GradScatter,
    Kernel,
    ParamGather,
    RingAttention,
    Template,
    TPOverlap,
    unhandled,
)
from simtrain.parallel.tensor import emit_tp_overlap, overlap_tp
from simtrain.workload.model import Op

__all__ = ["FSDP_AG_STREAM", "LowerOptions", "Lowering", "is_core_attention"]


class Lowering:
    """Emit one training step; ``units[stage][chunk]`` is the stage's shard of each chunk."""

    def __init__(self, graph: TaskGraph, units: Sequence[Sequence[Sequence[Unit]]],
                 schedule: Schedule | Sequence[Sequence[PipeStep]], options: LowerOptions,
                 op_time: Callable[[Op], float]):
        self.graph = graph
        self.units = units
        # Plain per-stage step lists run with looping placement.
        self.schedule = (schedule if isinstance(schedule, Schedule) else
                         Schedule.from_steps("steps", schedule, options.micro_batches))
        self.o = options
        self.dims = options.dims
        # 1. symmetry: the emitter simulates one rank per role under symmetric fidelity.
        self.em = Emitter(graph, options.dims, op_time, symmetric=options.symmetric,
                          imbalance=options.imbalance,
                          capacity_factor=options.capacity_factor,
                          symmetry=options.symmetry)
        self._templates: dict[tuple[int, int, str, bool], list[Template]] = {}
        self._replay = Replay(graph)  # steps lowered once, replayed (replay.py)
        self._plain: dict[int, bool] = {}  # id(templates) -> only kernels and collectives
        # Two-route schedules (DualPipe): the cells holding each model part twice, and the
        # per-rank tasks their gradient sum waits for, as each copy finishes.
        self._copies = copies(self.schedule)
        self._copy_ready: dict[tuple[int, int], dict[int, list[int]]] = {}
        if options.bucket_prepass is not None and self.dims.zero != 3:
            self.em.state.prepass = PrepassWatch.build(
                [(s, c, data_parallel.buckets(chunk, options))
                 for s, chunks in enumerate(units) for c, chunk in enumerate(chunks)],
                options.bucket_prepass)

    def templates(self, stage: int, chunk: int, phase: str, sync: bool = True
                  ) -> list[Template]:
        """The task templates of ``phase`` of ``chunk`` on ``stage`` (computed once);
        ``sync`` false: without FSDP's gradient reduce-scatters (and their copy-ins).
        Synced once per step (``fsdp_sync_each_microbatch`` false), every unit's
        reduce-scatter follows the whole phase, as torch pipelining calls each FSDP2
        group's ``post_backward`` after the stage's last backward (``fsdp.py``)."""
        key = (stage, chunk, phase, sync)
        if key in self._templates:
            return self._templates[key]
        o, cp, duration = self.o, self.dims.cp, self.em.duration
        out: list[Template] = []
        units = self.units[stage][chunk]
        split = self.schedule.split_backward
        at_end = sync and not o.fsdp_sync_each_microbatch
        sync = sync and not at_end  # each unit's reduce-scatter right after its backward
        for unit in (units if phase == "F" else reversed(units)):
            # 2. the layer program, 3. FSDP around each unit.
            if phase == "F":
                body = program.forward(unit, "forward", cp, duration)
                out += data_parallel.with_fsdp(unit, body, o, duration)
            elif phase == "B":
                body = program.backward(unit, o.recompute, cp, duration,
                                        "input" if split else "all", o.attention_saved)
                out += data_parallel.with_fsdp(unit, body, o, duration,
                                               scatter=sync and not split)
            else:  # "W": the weight gradients deferred from B, then their reduce-scatter
                body = program.backward(unit, o.recompute, cp, duration, "weight")
                out += data_parallel.with_fsdp(unit, body, o, duration, gather=False,
                                                scatter=sync)
        if at_end and phase == ("W" if split else "B"):
            for unit in reversed(units):
                out += data_parallel.with_fsdp(unit, [], o, duration, gather=False,
                                                scatter=True)
        # EP all-to-alls carry each rank's routed bytes (all-to-all-v) under imbalance or
        # a DeepEP dispatch.
        out = with_route_splits(out, self.dims.ep, o.imbalance, o.capacity_factor,
                                self._dispatch(stage))
        if o.tp_overlap:  # 4. TP comm overlap
            out = overlap_tp(out, o.tp_overlap_impl)
        out = fuse(out, o.granularity, "forward" if phase == "F" else "backward")  # 5.
        self._templates[key] = out
        return out

    def _step_templates(self, step: PipeStep) -> list[Template]:
        """``step``'s templates: FSDP reduce-scatters every microbatch, or only on the
        chunk's last one (``fsdp_sync_each_microbatch`` false)."""
        sync = (self.o.fsdp_sync_each_microbatch
                or step.microbatch == self.schedule.last_microbatch(step.stage, step.chunk))
        return self.templates(step.stage, step.chunk, step.phase, sync)

    def _dispatch(self, stage: int) -> Dispatch | None:
        """The stage's MoE token dispatch (every EP group of a uniform cluster alike)."""
        o = self.o
        if o.moe_dispatcher != "deepep" or self.dims.ep == 1 or o.server_of is None:
            return None
        # Every EP group is spread over nodes alike (checked: expert.deepep_problem).
        group = self.em.groups(stage, "ep")[0]
        return Dispatch(True, o.experts_per_token, o.routing_node_limit,
                        tuple(o.server_of(r) for r in group))

    def emit_step(self, step: PipeStep, incoming: dict[int, int] | None) -> None:
        """Emit ``step`` on every rank of its stage; ``incoming`` maps rank -> p2p task."""
        if incoming:  # the transfer (scatter-gather: then its TP all-gather)
            receive(self.em, step, incoming, self.o.p2p_bytes, self.o.pp_gather)
        templates = self._step_templates(step)
        if not self._replayable(step, templates):
            self._emit(step, templates, defaultdict(list))
            return
        # The same templates as an earlier microbatch's: its rows again (replay.py).
        frontier, key = self.em.state.frontier, (step.stage, id(templates))
        ranks = self.em.stage_ranks[step.stage]
        entry, meta = Entry.of(frontier, ranks), _step_meta(step)
        if not self._replay.replay(key, ranks, entry, meta, frontier):
            first = len(self.graph)
            self._emit(step, templates, defaultdict(list))
            self._replay.record(key, first, ranks, entry, frontier, meta)

    def _replayable(self, step: PipeStep, templates: list[Template]) -> bool:
        """Whether ``step`` lowers to the same rows every microbatch: plain kernels and
        collectives, not the chunk's last gradients, no overlapped parameter gathers."""
        if (step.phase != "F" and step.microbatch == self.schedule.last_microbatch(
                step.stage, step.chunk)) or (self.em.state.param_ag and step.phase == "F"
                                             and step.microbatch == 0):
            return False
        plain = self._plain.get(id(templates))
        if plain is None:
            plain = self._plain[id(templates)] = all(
                type(t) in (Kernel, Collective) for t in templates)
        return plain

    def emit_overlapped(self, group: Sequence[tuple[PipeStep, dict[int, int] | None]],
                        finish: Callable[[PipeStep], None]) -> None:
        """Emit ``group``'s first step interleaved with the rest (DualPipe's overlapped
        forward and backward chunks): two dependency chains from the stage's frontier, their
        templates alternating run by run (each up to and including a collective), so one
        chain's kernels queue on the compute stream while the other's collectives run.
        ``finish(step)`` (its transfer, its gradients) runs for every step once both chains
        are done, as DeepSeek's overlapped chunk sends its outputs after the pair."""
        st, stage = self.em.state, group[0][0].stage
        ranks = self.em.stage_ranks[stage]
        base = {r: list(self.em.dep(r)) for r in ranks}
        chains = [list(group[:1]), list(group[1:])]
        fronts = [dict(base), dict(base)]
        runs: list[list[tuple[PipeStep, list[Template]]]] = []
        for chain in chains:
            runs.append([(step, piece) for step, _ in chain
                         for piece in _runs(self._step_templates(step))])
        incoming = {id(step): inc for step, inc in group}
        starts: dict[int, dict[int, list[list[int]]]] = defaultdict(lambda: defaultdict(list))
        seen: set[int] = set()
        for k in range(max(len(r) for r in runs)):
            for c, chain_runs in enumerate(runs):
                if k >= len(chain_runs):
                    continue
                step, piece = chain_runs[k]
                st.frontier.update(fronts[c])
                if id(step) not in seen:
                    seen.add(id(step))
                    got = incoming[id(step)]
                    if got:
                        receive(self.em, step, got, self.o.p2p_bytes, self.o.pp_gather)
                self._emit(step, piece, starts[id(step)])
                fronts[c] = {r: st.frontier.get(r, []) for r in ranks}
        for r in ranks:
            st.frontier[r] = sorted({*fronts[0][r], *fronts[1][r]})
        for step, _ in group:  # the pair's outputs leave when both are done (DeepSeek)
            finish(step)

    def _emit(self, step: PipeStep, templates: Sequence[Template],
              unit_starts: dict[int, list[list[int]]]) -> None:
        """Emit ``templates`` of ``step`` on every rank of its stage."""
        em = self.em
        stage = step.stage
        grads = (step.microbatch == self.schedule.last_microbatch(stage, step.chunk)
                 and step.phase != "F")
        meta = _step_meta(step)
        # The first forward of a chunk waits for its overlapped parameter all-gathers.
        gather = bool(em.state.param_ag) and step.phase == "F" and step.microbatch == 0
        kernel, collective = em.kernel, em.collective
        for t in templates:
            match t:
                case Kernel():
                    kernel(stage, t, meta, gather, grads)
                case Collective():
                    collective(stage, t, meta)
                case RingAttention():
                    emit_ring(em, stage, t, meta)
                case TPOverlap():
                    emit_tp_overlap(em, stage, t, meta, gather=gather, grads=grads,
                                    impl=self.o.tp_overlap_impl)
                case ParamGather():
                    emit_param_gather(em, stage, t, meta, unit_starts)
                case GradScatter():
                    emit_grad_scatter(em, stage, t, meta)
                case _:
                    raise unhandled(t)

    def _step_done(self, step: PipeStep) -> None:
        if (step.phase == self.schedule.last_backward
                and step.microbatch == self.schedule.last_microbatch(step.stage, step.chunk)):
            em, cell = self.em, (step.stage, step.chunk)
            ranks = em.stage_ranks[step.stage]
            before = {r: len(em.state.reductions[r]) for r in ranks}
            data_parallel.reduce_gradients(em, step.stage, step.chunk,
                                           self.units[step.stage][step.chunk], self.o)
            if cell in self._copies:  # wait for the last W and this copy's DP reductions
                self._copy_ready[cell] = {r: [*em.dep(r), *em.state.reductions[r][before[r]:]]
                                          for r in ranks}

    def run(self) -> None:
        """Emit every stage's schedule, interleaved through a worklist, then the optimizer."""
        with collection_paused():
            self._run()

    def _run(self) -> None:
        o, em = self.o, self.em
        if o.overlap_param_gather and self.dims.zero in (1, 2):
            for s in range(self.dims.pp):
                data_parallel.gather_params(em, s, self.units[s], o)
        # 6. the pipeline, with each chunk's gradient reduction after its last backward.
        run_schedule(em, self.schedule, o.p2p_bytes, self.emit_step, self._step_done,
                     self.emit_overlapped)
        # Two copies of a model part (DualPipe) sum their gradients once both are reduced,
        # after every DP reduction on the FIFO DP stream, in the parts' order.
        for cells in sorted({tuple(c) for c in self._copies.values()}):
            ready = {r: t for c in cells for r, t in self._copy_ready[c].items()}
            s, c = cells[0]
            sum_copies(em, list(cells), data_parallel.grad_shard_bytes(self.units[s][c], o),
                       ready, c)
        for s in range(self.dims.pp):  # 7. the optimizer
            data_parallel.optimizer(em, s, self.units[s], o)


def _step_meta(step: PipeStep) -> dict[str, int]:
    """The meta of ``step``'s tasks (kernels add their kernel count)."""
    return {"microbatch": step.microbatch, "chunk": step.chunk, "stage": step.stage}


def _runs(templates: Sequence[Template]) -> list[list[Template]]:
    """``templates`` cut after each template that is not a plain kernel (a collective, a
    ring-attention or TP-overlap block, an FSDP gather or scatter)."""
    out: list[list[Template]] = [[]]
    for t in templates:
        out[-1].append(t)
        if not isinstance(t, Kernel):
            out.append([])
    return [r for r in out if r]

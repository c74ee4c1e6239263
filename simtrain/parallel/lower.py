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

from simtrain.engine.taskgraph import TaskGraph
from simtrain.parallel import data_parallel, program
from simtrain.parallel.context import emit_ring
from simtrain.parallel.data_parallel import FSDP_AG_STREAM, emit_grad_scatter, emit_param_gather
from simtrain.parallel.emit import Emitter
from simtrain.parallel.fuse import fuse
from simtrain.parallel.options import LowerOptions
from simtrain.parallel.pipeline import run_schedule
from simtrain.parallel.pipeline_schedule import Schedule
from simtrain.parallel.pipeline_schedule import Step as PipeStep
from simtrain.parallel.program import is_core_attention
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
        self._templates: dict[tuple[int, int, str], list[Template]] = {}

    def templates(self, stage: int, chunk: int, phase: str) -> list[Template]:
        """The task templates of ``phase`` of ``chunk`` on ``stage`` (computed once)."""
        key = (stage, chunk, phase)
        if key in self._templates:
            return self._templates[key]
        o, cp, duration = self.o, self.dims.cp, self.em.duration
        out: list[Template] = []
        units = self.units[stage][chunk]
        split = self.schedule.split_backward
        for unit in (units if phase == "F" else reversed(units)):
            # 2. the layer program, 3. FSDP around each unit.
            if phase == "F":
                body = program.forward(unit, "forward", cp, duration)
                out += data_parallel.with_fsdp(unit, body, o)
            elif phase == "B":
                body = program.backward(unit, o.recompute, cp, duration,
                                        "input" if split else "all")
                out += data_parallel.with_fsdp(unit, body, o, scatter=not split)
            else:  # "W": the weight gradients deferred from B, then their reduce-scatter
                body = program.backward(unit, o.recompute, cp, duration, "weight")
                out += data_parallel.with_fsdp(unit, body, o, gather=False, scatter=True)
        if o.tp_overlap:  # 4. TP comm overlap
            out = overlap_tp(out)
        out = fuse(out, o.granularity, "forward" if phase == "F" else "backward")  # 5.
        self._templates[key] = out
        return out

    def emit_step(self, step: PipeStep, incoming: dict[int, int] | None) -> None:
        """Emit ``step`` on every rank of its stage; ``incoming`` maps rank -> p2p task."""
        em = self.em
        st = em.state
        stage = step.stage
        if incoming:
            for r in em.stage_ranks[stage]:
                st.frontier[r] = [*em.dep(r), incoming[r]]
        grads = step.microbatch == self.o.micro_batches - 1 and step.phase != "F"
        meta = {"microbatch": step.microbatch, "chunk": step.chunk, "stage": stage}
        unit_starts: dict[int, list[list[int]]] = defaultdict(list)  # frontier per unit
        # The first forward of a chunk waits for its overlapped parameter all-gathers.
        gather = bool(st.param_ag) and step.phase == "F" and step.microbatch == 0
        kernel, collective = em.kernel, em.collective
        for t in self.templates(stage, step.chunk, step.phase):
            match t:
                case Kernel():
                    kernel(stage, t, meta, gather, grads)
                case Collective():
                    collective(stage, t, meta)
                case RingAttention():
                    emit_ring(em, stage, t, meta)
                case TPOverlap():
                    emit_tp_overlap(em, stage, t, meta, gather=gather, grads=grads)
                case ParamGather():
                    emit_param_gather(em, stage, t, meta, unit_starts)
                case GradScatter():
                    emit_grad_scatter(em, stage, t, meta)
                case _:
                    raise unhandled(t)

    def _step_done(self, step: PipeStep) -> None:
        if (step.phase == self.schedule.last_backward
                and step.microbatch == self.o.micro_batches - 1):
            data_parallel.reduce_gradients(self.em, step.stage, step.chunk,
                                           self.units[step.stage][step.chunk], self.o)

    def run(self) -> None:
        """Emit every stage's schedule, interleaved through a worklist, then the optimizer."""
        o, em = self.o, self.em
        if o.overlap_param_gather and self.dims.zero in (1, 2):
            for s in range(self.dims.pp):
                data_parallel.gather_params(em, s, self.units[s], o)
        # 6. the pipeline, with each chunk's gradient reduction after its last backward.
        run_schedule(em, self.schedule, o.p2p_bytes, self.emit_step, self._step_done)
        for s in range(self.dims.pp):  # 7. the optimizer
            data_parallel.optimizer(em, s, self.units[s], o)

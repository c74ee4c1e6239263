"""One rank's share of the model under TP, SP, CP and EP, as a program of steps.

The model is cut into units (the embedding, each transformer layer, the final norm, the LM
head), built once by ``simtrain.workload.layers`` for the rank's shard. A unit is a list of
steps in forward order: compute ops (a ``simtrain.workload`` ``Op`` with its shard's
shape), communication (op in forward, op in backward, over the tp/cp/ep group) and ring
attention (CP). The layer's communication sites become collectives here:

1. TP (Megatron, Shoeybi et al. 2019): the "f" operator before a column-parallel GEMM is
   identity forward / all-reduce backward; "g" after a row-parallel GEMM all-reduces
   forward. Each moves b·s·h elements, forward and backward.
2. SP (Korthikanti et al. 2022): f becomes all-gather (backward reduce-scatter) and g
   reduce-scatter (backward all-gather).
3. CP: every rank holds s/cp tokens (load-balanced causal chunks: 2·cp chunks, rank i takes
   i and 2·cp - 1 - i, so every rank does the same attention work). Ring attention passes
   K,V blocks around the CP ring in cp - 1 steps overlapped with cp blockwise attention
   steps (backward passes K,V and dK,dV); the all-gather variant gathers K,V up front
   (backward reduce-scatters dK,dV).
4. EP (MoE, Fedus et al. 2021; Megatron-Core): all-to-all dispatch of top-k token copies
   to the ranks owning the experts and all-to-all combine; the same in reverse in backward.

At tp = cp = ep = 1 the ops are exactly those of ``lower_model`` (the same builders).
"""

from __future__ import annotations

from dataclasses import dataclass

from simtrain.parallel.templates import unhandled
from simtrain.workload.layers import (
    ContextAttention,
    LayerProgram,
    Shard,
    Site,
    block,
    embedding,
    head,
    kv_heads_per_rank,
    padded_vocab,
)
from simtrain.workload.model import ModelConfig
from simtrain.workload.ops import Op, Param

__all__ = ["Comm", "Compute", "Ring", "ShardSpec", "Step", "Unit", "block_unit",
           "chunk_units", "embedding_unit", "head_units", "kv_heads_per_rank",
           "padded_vocab", "stage_layers", "to_unit"]


@dataclass(frozen=True, slots=True)
class Compute:
    """A kernel; expert kernels (``Op.role``) scale with the rank's routed-token load."""

    op: Op

    @property
    def expert(self) -> bool:
        return self.op.role == "expert"


@dataclass(frozen=True, slots=True)
class Comm:
    """A collective over the ``group`` ("tp", "cp", "ep"); ``fwd``/``bwd`` op or None.
    ``route``: an EP all-to-all's forward direction ("to_experts" for dispatch,
    "from_experts" for combine; backward runs the other way), "" otherwise."""

    name: str
    group: str
    fwd: str | None
    bwd: str | None
    nbytes: float
    route: str = ""

    @property
    def kind(self) -> str:
        return f"{self.group}_comm"


@dataclass(frozen=True, slots=True)
class Ring:
    """Ring attention: ``steps`` blocks of ``op``/steps, K,V blocks of ``kv_bytes`` passed on."""

    op: Op
    kv_bytes: float
    steps: int


Step = Compute | Comm | Ring


@dataclass(frozen=True)
class Unit:
    """A named group of steps in forward order; its params are registered in this order."""

    name: str
    steps: tuple[Step, ...]
    layer: int = -1  # transformer layer index, -1 for embedding/head

    @property
    def params(self) -> tuple[Param, ...]:
        return tuple(p for s in self.steps if isinstance(s, Compute) for p in s.op.params)


@dataclass(frozen=True)
class ShardSpec(Shard):
    """Degrees that shape one rank's ops, and how CP attends (ring or all-gather of K,V)."""

    cp_algorithm: str = "ring"


def _comm(name: str, group: str, fwd: str | None, bwd: str | None, nbytes: float,
          size: int, route: str = "") -> list[Step]:
    return [Comm(name, group, fwd, bwd, nbytes, route)] if size > 1 else []


def to_unit(program: LayerProgram, spec: ShardSpec) -> Unit:
    """``program`` with its communication sites made collectives of ``spec``'s groups."""
    steps: list[Step] = []
    t, sp = spec.tp, spec.sp
    for item in program.items:
        match item:
            case Op():
                steps.append(Compute(item))
            case Site(kind="f"):  # Megatron's f before a column-parallel GEMM
                steps += (_comm(item.name, "tp", "all_gather", "reduce_scatter", item.nbytes, t)
                          if sp else _comm(item.name, "tp", None, "all_reduce", item.nbytes, t))
            case Site(kind="g"):  # Megatron's g after a row-parallel GEMM
                steps += (_comm(item.name, "tp", "reduce_scatter", "all_gather", item.nbytes, t)
                          if sp else _comm(item.name, "tp", "all_reduce", None, item.nbytes, t))
            case Site(kind="dispatch" | "combine"):
                route = "to_experts" if item.kind == "dispatch" else "from_experts"
                steps += _comm(item.name, "ep", "all_to_all", "all_to_all", item.nbytes,
                               spec.ep, route)
            case ContextAttention():
                if spec.cp_algorithm == "allgather":
                    steps += _comm(item.gather_name, "cp", "all_gather", "reduce_scatter",
                                   item.kv_bytes * spec.cp, spec.cp)
                    steps.append(Compute(item.core))
                else:
                    steps.append(Ring(item.core, item.kv_bytes, spec.cp))
            case _:
                raise unhandled(item)
    return Unit(program.name, tuple(steps), layer=program.layer)


def block_unit(cfg: ModelConfig, i: int, b: int, s: int, dt: int, spec: ShardSpec) -> Unit:
    """Transformer layer ``i`` on one rank: b sequences, s/cp tokens each, 1/t of the heads."""
    return to_unit(block(cfg, i, b, s, dt, spec), spec)


def embedding_unit(cfg: ModelConfig, b: int, s: int, dt: int, spec: ShardSpec) -> Unit:
    """Vocab-parallel lookup, then the TP all-reduce (SP: reduce-scatter) of the partial
    embeddings."""
    return to_unit(embedding(cfg, b, s, dt, spec), spec)


def head_units(cfg: ModelConfig, b: int, s: int, dt: int, spec: ShardSpec) -> list[Unit]:
    """Final norm, then the vocab-parallel LM head and fp32 cross-entropy (V/t per rank)."""
    return [to_unit(p, spec) for p in head(cfg, b, s, dt, spec)]


def stage_layers(num_layers: int, pp: int, vpp: int,
                 pp_layers: list[int] | None = None) -> list[list[range]]:
    """Transformer layers of each (stage, chunk): chunk c of stage i is model chunk c·pp + i.
    ``pp_layers`` gives each model chunk's layer count, first to last (pp·vpp of them; one
    per stage when vpp = 1); None splits the layers evenly."""
    counts = pp_layers if pp_layers is not None else [num_layers // (pp * vpp)] * (pp * vpp)
    assert len(counts) == pp * vpp, "pp_layers is checked against pp x vpp in plan.py"
    starts = [sum(counts[:k]) for k in range(pp * vpp)]
    return [[range(starts[c * pp + i], starts[c * pp + i] + counts[c * pp + i])
             for c in range(vpp)] for i in range(pp)]


def chunk_units(cfg: ModelConfig, layers: range, *, first: bool, last: bool, b: int, s: int,
                dt: int, spec: ShardSpec) -> list[Unit]:
    """Units of one model chunk: the embedding if ``first``, its layers, the head if ``last``."""
    units = [embedding_unit(cfg, b, s, dt, spec)] if first else []
    units += [block_unit(cfg, i, b, s, dt, spec) for i in layers]
    if last:
        units += head_units(cfg, b, s, dt, spec)
    return units

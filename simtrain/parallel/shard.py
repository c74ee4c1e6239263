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
   (backward reduce-scatters dK,dV); Ulysses (a2a) all-to-alls Q,K,V to heads/cp over
   all tokens and the output back; a2a+p2p does that over cp_a2a ranks and runs ring
   attention across the cp/cp_a2a groups (``context_volume.py``).
4. EP (MoE, Fedus et al. 2021; Megatron-Core): all-to-all dispatch of top-k token copies
   to the ranks owning the experts and all-to-all combine; the same in reverse in backward.

At tp = cp = ep = 1 the ops are exactly those of ``lower_model`` (the same builders).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from simtrain.parallel.context_volume import CP_A2A_GROUP, CP_RING_GROUP
from simtrain.parallel.ring_merge import backward_merge_bytes, forward_merge_bytes
from simtrain.parallel.sp_layout import layout_copies
from simtrain.parallel.templates import unhandled
from simtrain.workload.fp8 import FP8_GATHER_SHARE, gathers_fp8
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
           "padded_vocab", "placed_layers", "stage_layers", "to_unit"]


@dataclass(frozen=True, slots=True)
class Compute:
    """A kernel; expert kernels (``Op.role``) scale with the rank's routed-token load;
    ``recompute``: its module is checkpointed, so it runs again before its backward."""

    op: Op
    recompute: bool = False

    @property
    def expert(self) -> bool:
        return self.op.role == "expert"


@dataclass(frozen=True, slots=True)
class Comm:
    """A collective over the ``group`` ("tp", "cp", "ep"); ``fwd``/``bwd`` op or None.
    ``route``: an EP all-to-all's forward direction ("to_experts" for dispatch,
    "from_experts" for combine; backward runs the other way), "" otherwise.
    ``nbytes`` per rank forward; ``bwd_nbytes`` backward (None: the same)."""

    name: str
    group: str
    fwd: str | None
    bwd: str | None
    nbytes: float
    route: str = ""
    bwd_nbytes: float | None = None

    @property
    def backward_nbytes(self) -> float:
        """Bytes per rank of the backward collective."""
        return self.nbytes if self.bwd_nbytes is None else self.bwd_nbytes

    @property
    def kind(self) -> str:
        """The span kind: the group's parallelism ("cp_a2a" is CP's) + "_comm"."""
        return f"{self.group.split('_')[0]}_comm"


@dataclass(frozen=True, slots=True)
class Ring:
    """Ring attention: ``steps`` blocks of ``op``/steps, K,V blocks of ``kv_bytes`` passed on
    around each ``group`` ("cp", or "cp_ring" under a2a+p2p)."""

    op: Op
    kv_bytes: float
    steps: int
    group: str = "cp"
    # PyTorch's ring (``ring_merge.py``): HBM bytes of its merge kernels per ring
    # attention, forward and backward; (0, 0) for fused corrections (Transformer Engine).
    merge_bytes: tuple[float, float] = (0.0, 0.0)


Step = Compute | Comm | Ring


@dataclass(frozen=True)
class Unit:
    """A named group of steps in forward order; its params are registered in this order."""

    name: str
    steps: tuple[Step, ...]
    layer: int = -1  # transformer layer index, -1 for embedding/head

    @cached_property  # read for every candidate's memory report and bound: built once
    def params(self) -> tuple[Param, ...]:
        return tuple(p for s in self.steps if isinstance(s, Compute) for p in s.op.params)


@dataclass(frozen=True)
class ShardSpec(Shard):
    """Degrees that shape one rank's ops, and how CP attends (``context_volume.py``);
    ``cp_a2a``: the CP ranks of each all-to-all (cp for a2a, 1 for ring and allgather);
    ``layout``: the activations' "sbh" or "bsh" order, ``tp_overlap``: async TP on
    (``sp_layout.py``: the copies a batch-first layout adds around SP collectives),
    ``tp_overlap_impl``: whose (``tensor.py``; "symm_mem" fuses no summed dgrads);
    ``torch_ring``: ring attention is PyTorch's, with its merge kernels (``ring_merge.py``)."""

    cp_algorithm: str = "ring"
    cp_a2a: int = 1
    fp8_gathers: bool = False  # SP all-gathers of FP8 GEMM operands move FP8 (workload.fp8)
    layout: str = "sbh"
    tp_overlap: bool = False
    tp_overlap_impl: str = "userbuffers"
    torch_ring: bool = False  # PyTorch's ring attention (ring_merge.py)
    recompute_modules: tuple[str, ...] = ()  # Op.module names re-run before the backward
    cross_entropy: str = "unfused"  # the loss kernels (workload.cross_entropy)
    # A dropless dispatch gathers its routing counts with NCCL (the "counts" site, moe.py);
    # DeepEP exchanges them inside its own dispatch (its notify step), not as a collective.
    counts_gather: bool = True


def _comm(name: str, group: str, fwd: str | None, bwd: str | None, nbytes: float,
          size: int, route: str = "", bwd_nbytes: float | None = None) -> list[Step]:
    return [Comm(name, group, fwd, bwd, nbytes, route, bwd_nbytes)] if size > 1 else []


def _fp8_share(spec: ShardSpec, kind: str, neighbour: object) -> float:
    """Byte share of an SP all-gather beside ``neighbour`` (the GEMM after an "f", before a
    "g"): FP8_GATHER_SHARE where it gathers that FP8 GEMM's operand, else 1."""
    if spec.fp8_gathers and isinstance(neighbour, Op) and gathers_fp8(kind, neighbour):
        return FP8_GATHER_SHARE
    return 1.0


def to_unit(program: LayerProgram, spec: ShardSpec) -> Unit:
    """``program`` with its communication sites made collectives of ``spec``'s groups."""
    steps: list[Step] = []
    t, sp = spec.tp, spec.sp
    items = program.items
    for i, item in enumerate(items):
        match item:
            case Op():
                steps.append(Compute(item, item.module in spec.recompute_modules))
            case Site(kind="f"):  # Megatron's f before a column-parallel GEMM
                nxt = items[i + 1] if i + 1 < len(items) else None
                fwd = item.nbytes * _fp8_share(spec, "f", nxt)
                # PyTorch's async TP fuses no backward reduce-scatter of summed dgrads
                summed = (spec.tp_overlap_impl == "symm_mem" and isinstance(nxt, Op)
                          and len(nxt.parts) > 1)
                steps += _sp_site(item, spec, (
                    _comm(item.name, "tp", "all_gather", "reduce_scatter", fwd, t,
                          bwd_nbytes=item.nbytes)
                    if sp else _comm(item.name, "tp", None, "all_reduce", item.nbytes, t)),
                    fused_bwd=not summed)
            case Site(kind="g"):  # Megatron's g after a row-parallel GEMM
                bwd = item.nbytes * _fp8_share(spec, "g", items[i - 1] if i else None)
                steps += _sp_site(item, spec, (
                    _comm(item.name, "tp", "reduce_scatter", "all_gather", item.nbytes, t,
                          bwd_nbytes=bwd)
                    if sp else _comm(item.name, "tp", "all_reduce", None, item.nbytes, t)))
            case Site(kind="dispatch" | "combine"):
                route = "to_experts" if item.kind == "dispatch" else "from_experts"
                steps += _comm(item.name, "ep", "all_to_all", "all_to_all", item.nbytes,
                               spec.ep, route)
            case Site(kind="counts"):  # a dropless dispatch's routing counts, forward only
                if spec.counts_gather:
                    steps += _comm(item.name, "ep", "all_gather", None, item.nbytes, spec.ep)
            case ContextAttention():
                steps += _context(item, spec)
            case _:
                raise unhandled(item)
    return Unit(program.name, tuple(steps), layer=program.layer)


def _sp_site(item: Site, spec: ShardSpec, comm: list[Step], fused_bwd: bool = True
             ) -> list[Step]:
    """``comm`` (the f or g collective of ``item``) with the copies a batch-first layout
    adds around SP collectives (``sp_layout.layout_copies``; ``fused_bwd``: async TP
    pipelines the backward collective too); as is otherwise."""
    if not (comm and spec.sp and spec.layout == "bsh") or item.kind not in ("f", "g"):
        return comm
    (coll,) = comm  # the copies reorder the bytes each direction's collective moves
    assert isinstance(coll, Comm)
    before, after = layout_copies(item.name, item.kind, coll.nbytes, spec.tp,
                                  spec.tp_overlap, coll.backward_nbytes, fused_bwd)
    return [*(Compute(op) for op in before), *comm, *(Compute(op) for op in after)]


def _context(item: ContextAttention, spec: ShardSpec) -> list[Step]:
    """The CP attention of ``item`` under ``spec.cp_algorithm`` (``context_volume.py``)."""
    cp, u = spec.cp, spec.cp_a2a
    if spec.cp_algorithm == "allgather":
        return [*_comm(item.gather_name, "cp", "all_gather", "reduce_scatter",
                       item.kv_bytes * cp, cp), Compute(item.core)]
    if u == 1:
        return [Ring(item.core, item.kv_bytes, cp, merge_bytes=_merges(item, cp, spec))]
    # Ulysses: Q, K, V to all tokens x heads/u, attention, the output back; the backward
    # reverses both (dO, then dQ, dK, dV). The full attention of the rank's heads has the
    # FLOPs and bytes of ``item.core`` (s/cp queries x all heads = s queries x heads/cp).
    group = "cp" if u == cp else CP_A2A_GROUP
    attn = item.core.name.rsplit(".", 1)[0]
    steps: list[Step] = [Comm(f"{attn}.qkv_a2a", group, "all_to_all", "all_to_all",
                              item.q_bytes + item.kv_bytes)]
    steps.append(Compute(item.core) if u == cp else
                 Ring(item.core, item.kv_bytes, cp // u, CP_RING_GROUP))
    steps.append(Comm(f"{attn}.out_a2a", group, "all_to_all", "all_to_all", item.o_bytes))
    return steps


def _merges(item: ContextAttention, steps: int, spec: ShardSpec) -> tuple[float, float]:
    """(forward, backward) bytes of PyTorch's ring merges for ``item`` (bf16 SDPA tensors:
    2 B per element of its output and K,V); none for other rings."""
    if not spec.torch_ring:
        return 0.0, 0.0
    e, kv = item.o_bytes / 2, item.kv_bytes / 2
    return forward_merge_bytes(e, kv, steps), backward_merge_bytes(e, kv, steps)


def block_unit(cfg: ModelConfig, i: int, b: int, s: int, dt: int, spec: ShardSpec) -> Unit:
    """Transformer layer ``i`` on one rank: b sequences, s/cp tokens each, 1/t of the heads."""
    return to_unit(block(cfg, i, b, s, dt, spec), spec)


def embedding_unit(cfg: ModelConfig, b: int, s: int, dt: int, spec: ShardSpec) -> Unit:
    """Vocab-parallel lookup, then the TP all-reduce (SP: reduce-scatter) of the partial
    embeddings."""
    return to_unit(embedding(cfg, b, s, dt, spec), spec)


def head_units(cfg: ModelConfig, b: int, s: int, dt: int, spec: ShardSpec) -> list[Unit]:
    """Final norm, then the vocab-parallel LM head and fp32 cross-entropy (V/t per rank)."""
    return [to_unit(p, spec) for p in head(cfg, b, s, dt, spec, loss=spec.cross_entropy)]


def stage_layers(num_layers: int, pp: int, vpp: int,
                 pp_layers: list[int] | None = None) -> list[list[range]]:
    """Transformer layers of each (stage, chunk) under looping placement: chunk c of stage i
    is model chunk c·pp + i. ``pp_layers`` gives each model chunk's layer count, first to
    last (pp·vpp of them; one per stage when vpp = 1); None splits the layers evenly."""
    positions = [[(c * pp + i, pp * vpp) for c in range(vpp)] for i in range(pp)]
    return [[r for r, _, _ in row] for row in placed_layers(num_layers, positions, pp_layers)]


def placed_layers(num_layers: int, positions: list[list[tuple[int, int]]],
                  counts: list[int] | None = None) -> list[list[tuple[range, bool, bool]]]:
    """[stage][chunk] -> (its transformer layers, holds the embedding, holds the head), from
    each chunk's (position, length) on its route (``Schedule.positions``): the model cut in
    ``length`` parts of ``counts`` layers (first to last; None: even), part ``position``."""
    out = []
    for row in positions:
        cells = []
        for j, n in row:
            sizes = counts if counts is not None else [num_layers // n] * n
            assert len(sizes) == n, "pp_layers is checked against the route length in plan.py"
            start = sum(sizes[:j])
            cells.append((range(start, start + sizes[j]), j == 0, j == n - 1))
        out.append(cells)
    return out


def chunk_units(cfg: ModelConfig, layers: range, *, first: bool, last: bool, b: int, s: int,
                dt: int, spec: ShardSpec) -> list[Unit]:
    """Units of one model chunk: the embedding if ``first``, its layers, the head if ``last``."""
    units = [embedding_unit(cfg, b, s, dt, spec)] if first else []
    units += [block_unit(cfg, i, b, s, dt, spec) for i in layers]
    if last:
        units += head_units(cfg, b, s, dt, spec)
    return units

"""The scenario's ``parallelism:`` section, and ``ParallelDims``: degrees, ranks and groups.

``ParallelDims`` is the one validated object that owns the degrees (tp, cp, pp, dp, ep,
virtual stages, ZeRO stage, SP), the rank <-> coordinate mapping and the process groups.
Ranks are laid out by ``order`` from innermost to outermost; the default "tp-cp-pp-dp"
(Megatron-LM, Llama 3 §3.3.2) keeps the TP group on consecutive ranks, i.e. inside one
server when tp divides the GPUs per node. Experts are laid out over the same ranks of a
pipeline stage by Megatron-Core's MoE parallel folding (Liu et al. 2025, arXiv:2504.14960):
the stage's tp·cp·dp ranks in rank order (tp, then cp before dp as in Megatron's
tp-cp-dp-pp) are re-cut as expert tensor parallel (``etp``, innermost), expert parallel
(``ep``) and expert data parallel (the rest), so etp·ep must divide tp·cp·dp. With etp =
tp (Megatron's default) and cp = 1 an EP group is ``ep`` consecutive DP replicas; etp = 1
lets EP span the TP ranks too (DeepSeek-V3 and Qwen3 recipes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from simtrain.parallel.context_volume import CP_ALGORITHMS, check_context, ulysses_degree
from simtrain.parallel.ddp import DDPConfig
from simtrain.parallel.expert import expert_layout_problem
from simtrain.parallel.fsdp import FSDPConfig, check_fsdp
from simtrain.parallel.schedule import SCHEDULES, model_chunks, schedule_problems
from simtrain.workload.layers import kv_heads_per_rank
from simtrain.workload.memory import Recompute
from simtrain.workload.model import ModelConfig
from simtrain.workload.moe import RECOMPUTE_MODULES
from simtrain.workload.unpermute import UNPERMUTE_IMPLS

DIMS = ("tp", "cp", "pp", "dp")
TP_OVERLAP_NEEDS_SP = ("tp_comm_overlap needs sequence parallelism (parallelism.sp: true): "
                       "Transformer Engine overlaps only the SP all-gathers and "
                       "reduce-scatters; set parallelism.sp: true or tp_comm_overlap: false")
PARAM_GATHER_NEEDS_ZERO = ("parallelism.ddp.overlap_param_gather needs the distributed "
                           "optimizer (parallelism.zero: 1 or 2), got zero={zero}; set zero "
                           "to 1 or 2 or overlap_param_gather: false")


class ParallelismConfig(BaseModel):
    """How the step is split across GPUs. Data parallelism over every GPU by default.

    ``dp`` None means "whatever is left": world / (tp·cp·pp). ``pp_layers`` gives uneven
    stages: transformer layers per model chunk, first to last (pp·vpp counts, placed by the
    schedule: looping puts model chunk c·pp + i in chunk c of stage i), e.g. lighter first
    and last chunks as Megatron's ``--decoder-first/last-pipeline-num-layers``. ``zero`` is
    the ZeRO stage (0 = DDP, 1 = optimizer states, 2 = + gradients, 3 = + parameters, i.e.
    FSDP full sharding). ``recompute``: none, selective (attention core, Korthikanti et al.
    2022), op (torchtitan's per-op checkpointing, ``op_checkpoint.py``) or full (whole
    layers). ``cp_algorithm``: ring attention, all-gather of KV,
    Ulysses all-to-all (a2a) or a2a over ``cp_a2a_size`` ranks x ring across (a2a+p2p);
    see ``context_volume.py``. ``fsdp``: the ZeRO-3 knobs (HSDP shard group, reshard,
    prefetch, reduce dtype; ``fsdp.py``).
    ``tp_comm_overlap`` (Megatron-Core ``--tp-comm-overlap``, Transformer Engine
    userbuffers; needs ``sp``) pipelines each TP all-gather / reduce-scatter with the GEMM
    consuming / producing it in tp chunks; ``tp_comm_overlap_impl: symm_mem`` is PyTorch's
    async TP (torch.compile's micro-pipeline pass), which pipelines fewer GEMMs
    (``tensor.py``).
    """

    model_config = ConfigDict(extra="forbid")

    dp: int | None = Field(None, gt=0, description="data-parallel degree; the rest if None")
    tp: int = Field(1, gt=0)
    cp: int = Field(1, gt=0)
    pp: int = Field(1, gt=0)
    ep: int = Field(1, gt=0)
    etp: int | None = Field(None, gt=0, description="expert tensor parallelism (None: tp)")
    # MoE token dispatch: NCCL all-to-all, or DeepEP's node-deduplicated dispatch
    # (one network copy per destination node, forwarded over NVLink; docs/moe.md).
    moe_dispatcher: Literal["alltoall", "deepep"] = "alltoall"
    moe_unpermute: str = Field("fused", description="the dispatcher's unpermute kernels: "
                               + ", ".join(UNPERMUTE_IMPLS) + " (workload/unpermute.py)")
    vpp: int = Field(1, gt=0, description="virtual pipeline stages (model chunks) per rank")
    sp: bool = False
    zero: Literal[0, 1, 2, 3] = 0
    order: str = "tp-cp-pp-dp"
    schedule: str = Field("1f1b", description="pipeline schedule: one of "
                          + ", ".join(SCHEDULES))
    pp_layers: list[int] | None = None
    recompute: Recompute = "none"
    recompute_modules: list[str] = Field(
        default_factory=list, description="Megatron-Core output-discarding recompute of "
        "MoE-layer modules: " + ", ".join(RECOMPUTE_MODULES) + " (workload/moe.py)")
    cp_algorithm: str = Field("ring", description="context parallel attention: one of "
                              + ", ".join(CP_ALGORITHMS))
    cp_a2a_size: int | None = Field(None, gt=0, description="a2a+p2p: CP ranks of each "
                                    "all-to-all (Megatron hierarchical_context_parallel_"
                                    "sizes[0])")
    tp_comm_overlap: bool = Field(False, description="pipeline TP all-gathers/reduce-"
                                  "scatters with their GEMMs (TE userbuffers; needs sp)")
    tp_comm_overlap_impl: Literal["userbuffers", "symm_mem"] = Field(
        "userbuffers", description="who pipelines them: TE's userbuffers (every GEMM run "
        "beside the collective) or PyTorch's symmetric-memory async TP (only the matmuls "
        "inductor's micro_pipeline_tp pass fuses)")
    # Megatron-LM --scatter-gather-tensors-in-pipeline (on by default before Megatron-Core):
    # each TP rank sends 1/tp of the activation to its partner on the next stage, which
    # all-gathers it over TP (intra-node) instead of every rank sending all of it.
    pp_scatter_gather: bool = Field(
        False, description="send 1/tp of each activation between pipeline stages and "
        "all-gather it over TP on the receiving stage (Megatron; for sp: false)")
    ddp: DDPConfig = Field(default_factory=DDPConfig)
    fsdp: FSDPConfig = Field(default_factory=FSDPConfig)

    @field_validator("cp_algorithm", "schedule", "moe_unpermute")
    @classmethod
    def _known_name(cls, value: str, info: ValidationInfo) -> str:
        """A name from its one list (CP algorithms, the schedule registry, unpermutes)."""
        known, what = {"cp_algorithm": (CP_ALGORITHMS, "cp_algorithm"),
                       "moe_unpermute": (UNPERMUTE_IMPLS, "moe_unpermute")}.get(
                           info.field_name or "", (SCHEDULES, "pipeline schedule"))
        if value not in known:
            raise ValueError(f"unknown {what} {value!r}; use one of {', '.join(known)}")
        return value

    @field_validator("recompute_modules")
    @classmethod
    def _known_modules(cls, value: list[str]) -> list[str]:
        """Names from ``moe.RECOMPUTE_MODULES`` (core attention is ``recompute: selective``)."""
        unknown = [v for v in value if v not in RECOMPUTE_MODULES]
        if unknown:
            raise ValueError(f"unknown recompute module(s) {unknown}; use "
                             f"{', '.join(RECOMPUTE_MODULES)} (core_attn is recompute: "
                             f"selective)")
        return value

    def dims(self, world_size: int) -> ParallelDims:
        """The validated degrees for a cluster of ``world_size`` GPUs (ValueError if bad)."""
        inner = self.tp * self.cp * self.pp
        dp = self.dp if self.dp is not None else max(1, world_size // inner)
        return ParallelDims(tp=self.tp, cp=self.cp, pp=self.pp, dp=dp, ep=self.ep,
                            vpp=self.vpp, zero=self.zero, sp=self.sp, order=self.order,
                            world_size=world_size,
                            cp_a2a=ulysses_degree(self.cp_algorithm, self.cp, self.cp_a2a_size),
                            fsdp_shard=self.fsdp.shard_size or 0, etp=self.etp or 0)


@dataclass(frozen=True)
class ParallelDims:
    """Parallel degrees with their invariants, the rank layout and the process groups.

    A rank's coordinates are its indices along ``order`` (innermost first): with the default
    "tp-cp-pp-dp", rank = tp_i + tp·(cp_i + cp·(pp_i + pp·dp_i)).
    """

    tp: int = 1
    cp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    vpp: int = 1
    zero: int = 0
    sp: bool = False
    order: str = "tp-cp-pp-dp"
    world_size: int = 0  # 0: tp·cp·pp·dp
    cp_a2a: int = 1  # CP ranks of each Ulysses all-to-all (context_volume.py); 1: none
    fsdp_shard: int = 0  # HSDP shard group size over dp x cp (fsdp.py); 0: all of it
    etp: int = 0  # expert tensor parallelism; 0: tp
    _axes: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("tp", "cp", "pp", "dp", "ep", "vpp"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"parallelism.{name} must be a positive integer, got {value!r}")
        axes = tuple(a.strip() for a in self.order.split("-"))
        if sorted(axes) != sorted(DIMS):
            raise ValueError(f"parallelism.order {self.order!r} must name each of tp, cp, pp, "
                             f"dp once, innermost first, e.g. 'tp-cp-pp-dp'")
        object.__setattr__(self, "_axes", axes)
        product = self.tp * self.cp * self.pp * self.dp
        if self.world_size == 0:
            object.__setattr__(self, "world_size", product)
        if product != self.world_size:
            raise ValueError(
                f"tp x cp x pp x dp = {self.tp} x {self.cp} x {self.pp} x {self.dp} = "
                f"{product} does not match the world size {self.world_size}; change the "
                f"degrees so they multiply to {self.world_size} (or leave dp unset to use "
                f"{self.world_size} / (tp x cp x pp))")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"parallelism.zero must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.sp and self.tp == 1:
            raise ValueError("parallelism.sp (sequence parallelism) splits activations "
                             "across the tensor-parallel group, so it needs tp > 1; set "
                             "tp >= 2 or sp: false")
        if self.etp == 0:
            object.__setattr__(self, "etp", self.tp)
        problem = expert_layout_problem(self.tp, self.cp, self.dp, self.ep, self.etp,
                                        self.sp)
        if problem:
            raise ValueError(problem)
        if self.cp % self.cp_a2a:
            raise ValueError(f"the CP all-to-all degree {self.cp_a2a} must divide cp="
                             f"{self.cp}")
        if self.fsdp_shard and (self.dp * self.cp) % self.fsdp_shard:
            raise ValueError(f"parallelism.fsdp.shard_size={self.fsdp_shard} must divide "
                             f"dp x cp = {self.dp * self.cp}")
        if self.vpp > 1 and self.pp == 1:
            raise ValueError(f"parallelism.vpp={self.vpp} needs pipeline parallelism; set "
                             f"pp >= 2 or vpp: 1")

    # ---- coordinates -------------------------------------------------------------------
    def size(self, dim: str) -> int:
        return int(getattr(self, dim))

    def coords(self, rank: int) -> dict[str, int]:
        """Coordinates of ``rank`` along tp, cp, pp, dp."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} outside 0..{self.world_size - 1}")
        out = {}
        for axis in self._axes:
            out[axis] = rank % self.size(axis)
            rank //= self.size(axis)
        return out

    def stride(self, dim: str) -> int:
        """Rank distance between neighbours along ``dim`` (product of inner degrees)."""
        out = 1
        for axis in self._axes:
            if axis == dim:
                return out
            out *= self.size(axis)
        raise ValueError(f"unknown parallel dimension {dim!r}; expected one of {self._axes}")

    def rank(self, **coords: int) -> int:
        """The rank at ``coords`` (missing ones are 0)."""
        rank, stride = 0, 1
        for axis in self._axes:
            rank += coords.get(axis, 0) * stride
            stride *= self.size(axis)
        return rank

    def group(self, rank: int, dims: str | Iterable[str]) -> tuple[int, ...]:
        """Ranks sharing every coordinate of ``rank`` except along ``dims`` (in rank order).

        ``dims`` may be several, e.g. ("dp", "cp") for the gradient-reduction group.
        """
        free = (dims,) if isinstance(dims, str) else tuple(dims)
        base = self.coords(rank)
        members = [base]
        for axis in free:
            members = [{**m, axis: i} for m in members for i in range(self.size(axis))]
        return tuple(sorted(self.rank(**m) for m in members))

    def groups(self, dims: str | Iterable[str]) -> list[tuple[int, ...]]:
        """All distinct groups along ``dims``, each in rank order, sorted by first rank."""
        seen: dict[tuple[int, ...], None] = {}
        for rank in range(self.world_size):
            seen.setdefault(self.group(rank, dims), None)
        return list(seen)

    # ---- experts (MoE parallel folding) --------------------------------------------------
    def _expert_slot(self, rank: int) -> tuple[dict[str, int], int]:
        """(coords, index of ``rank`` among its stage's ranks in rank order, tp innermost):
        Megatron-Core re-reads the global ranks as tp-ep-dp-pp for its expert groups
        (parallel_state.initialize_model_parallel), so EP takes CP before DP ranks."""
        (inner, outer), c = self._fold, self.coords(rank)
        return c, c["tp"] + self.tp * (c[inner] + self.size(inner) * c[outer])

    @property
    def _fold(self) -> tuple[str, str]:
        return ("cp", "dp") if self.stride("cp") <= self.stride("dp") else ("dp", "cp")

    def _slot_rank(self, c: dict[str, int], slot: int) -> int:
        (inner, outer), rest, n = self._fold, slot // self.tp, self.size(self._fold[0])
        return self.rank(tp=slot % self.tp, pp=c["pp"], **{inner: rest % n, outer: rest // n})

    def ep_group(self, rank: int) -> tuple[int, ...]:
        """Expert-parallel group, in EP-index order: the ranks of the stage whose expert
        slots etp_i + etp·(j + ep·edp_i) differ only in j."""
        (c, slot), e = self._expert_slot(rank), self.etp
        return tuple(self._slot_rank(c, slot % e + e * (j + self.ep * (slot // (e * self.ep))))
                     for j in range(self.ep))

    def ep_index(self, rank: int) -> int:
        """Position of ``rank`` in its EP group (which experts it holds)."""
        return self._expert_slot(rank)[1] // self.etp % self.ep

    def expert_dp_group(self, rank: int) -> tuple[int, ...]:
        """Ranks holding the same expert shards: same etp and EP index, every expert-data
        index (with etp = tp: same tp/pp and EP index)."""
        (c, slot), block = self._expert_slot(rank), self.etp * self.ep
        return tuple(sorted(self._slot_rank(c, slot % block + block * k)
                            for k in range(self.tp * self.cp * self.dp // block)))

    def split_group(self, rank: int, dims: str | Iterable[str], size: int,
                    part: Literal["block", "stride"]) -> tuple[int, ...]:
        """A sub-group of ``rank``'s group along ``dims`` (in rank order) cut into blocks of
        ``size`` consecutive members: ``rank``'s block, or ("stride") the members at
        ``rank``'s offset in every block. Hierarchical CP's all-to-all and ring levels,
        HSDP's shard and replicate groups."""
        group = self.group(rank, dims)
        i = group.index(rank)
        if part == "block":
            start = i // size * size
            return group[start:start + size]
        return group[i % size::size]

    @property
    def fsdp_shard_size(self) -> int:
        """Ranks one ZeRO-3 parameter is sharded over: the HSDP shard group, or dp x cp."""
        return self.fsdp_shard or self.dp * self.cp

    def stage_ranks(self, stage: int) -> list[int]:
        """Ranks of pipeline stage ``stage``, ordered by (dp, cp, tp) so index k of every
        stage is the p2p partner of index k of its neighbours."""
        if not 0 <= stage < self.pp:
            raise ValueError(f"stage {stage} outside 0..{self.pp - 1}")
        return [self.rank(tp=t, cp=c, pp=stage, dp=d)
                for d in range(self.dp) for c in range(self.cp) for t in range(self.tp)]

    @property
    def grad_dims(self) -> tuple[str, ...]:
        """Dimensions over which gradients are reduced: DP and CP (CP ranks hold the same
        weights and see different tokens, as in Megatron-Core)."""
        return ("dp", "cp")


def check_parallelism(par: ParallelismConfig, model: ModelConfig, *, num_gpus: int,
                      gpus_per_node: int, global_batch: int, micro_batch: int,
                      seq_len: int) -> list[tuple[str, str]]:
    """Every problem with ``par`` for this model, cluster and batch, as (field, message).

    Each message names the numbers involved and a fix. Empty when the plan is possible.
    """
    options: list[tuple[str, str]] = []
    if par.tp_comm_overlap and par.tp > 1 and not par.sp:
        options.append(("parallelism.tp_comm_overlap", TP_OVERLAP_NEEDS_SP))
    if par.pp_scatter_gather and par.sp:
        options.append(("parallelism.pp_scatter_gather", "sequence parallelism already sends "
                         "1/tp of each activation between stages (Megatron scatter-gathers "
                         "only without SP); set pp_scatter_gather: false or sp: false"))
    if par.recompute_modules and (par.recompute in ("full", "op") or not model.is_moe):
        options.append(("parallelism.recompute_modules", f"recompute_modules "
                        f"{par.recompute_modules} re-run MoE-layer kernels under recompute: "
                        f"none or selective; got recompute: {par.recompute} and "
                        f"{model.num_experts} experts"))
    if par.ddp.overlap_param_gather and par.zero not in (1, 2):
        options.append(("parallelism.ddp.overlap_param_gather",
                        PARAM_GATHER_NEEDS_ZERO.format(zero=par.zero)))
    inner = par.tp * par.cp * par.pp
    sharding = check_context(par.cp_algorithm, par.cp_a2a_size, cp=par.cp, tp=par.tp,
                             heads=model.num_heads,
                             kv_heads_per_rank=kv_heads_per_rank(model.kv_heads, par.tp))
    sharding += check_fsdp(par.fsdp, zero=par.zero, dp=par.dp or num_gpus // inner,
                           cp=par.cp)
    if sharding:
        return options + sharding
    if inner == 1 and par.dp is not None and par.ep == 1:  # plain data parallelism
        return options + check_plan(par.dp, num_gpus, global_batch, micro_batch)
    problems: list[tuple[str, str]] = options
    if par.dp is None and num_gpus % inner:
        return [("parallelism", f"tp x cp x pp = {par.tp} x {par.cp} x {par.pp} = {inner} "
                 f"does not divide the cluster's {num_gpus} GPUs; pick degrees whose product "
                 f"divides {num_gpus}")]
    try:
        dims = par.dims(num_gpus)
    except ValueError as exc:
        return [("parallelism", str(exc))]
    t, a, kv = dims.tp, model.num_heads, model.kv_heads
    if a % t:
        problems.append(("parallelism.tp", f"num_heads={a} is not divisible by tp={t}; use a "
                         f"tp dividing {a}"))
    if (kv >= t and kv % t) or (kv < t and t % kv):
        problems.append(("parallelism.tp", f"num_kv_heads={kv} and tp={t}: each TP rank "
                         f"needs whole KV heads (kv_heads % tp == 0, or tp % kv_heads == 0 "
                         f"to replicate them); use a tp dividing {kv} or a multiple of it"))
    if model.ffn_size % t or (model.is_moe and model.expert_ffn_size % dims.etp) or (
            model.shared_expert_ffn_size and model.shared_expert_ffn_size % t):
        problems.append(("parallelism.tp", f"the MLP width {model.ffn_size} (experts "
                         f"{model.expert_ffn_size}, shared experts "
                         f"{model.shared_expert_ffn_size or 0}) is not divisible by tp={t} "
                         f"(experts: by etp={dims.etp})"))
    if t > 1 and gpus_per_node % t and par.order.startswith("tp"):
        problems.append(("parallelism.tp", f"tp={t} does not divide the {gpus_per_node} GPUs "
                         f"per node, so TP groups would straddle servers; use a tp dividing "
                         f"{gpus_per_node} (or set parallelism.order to place TP yourself)"))
    layers, p, v = model.num_layers, dims.pp, dims.vpp
    # The parts a microbatch's route cuts the model in: pp x vpp, or pp for DualPipe's
    # two copies of the model.
    n = model_chunks(par.schedule, p, v)
    parts = f"pp x vpp = {p} x {v} = {p * v}" if n == p * v else f"pp = {p} (per model copy)"
    if par.pp_layers is not None:
        counts = par.pp_layers
        if len(counts) != n or sum(counts) != layers or min(counts, default=0) < 1:
            problems.append(("parallelism.pp_layers", f"pp_layers={counts} must list {parts}"
                             f" positive layer counts (one per model "
                             f"chunk, first to last) summing to num_layers={layers}; got "
                             f"{len(counts)} summing to {sum(counts)}"))
    elif layers % n:
        problems.append(("parallelism.pp", f"num_layers={layers} is not divisible by "
                         f"{parts}; change pp/vpp or give uneven stages "
                         f"with parallelism.pp_layers (one count per model chunk)"))
    if dims.ep > 1 and not model.is_moe:
        problems.append(("parallelism.ep", f"ep={dims.ep} needs a mixture-of-experts model "
                         f"(model.num_experts > 0); set ep: 1"))
    if model.is_moe and model.num_experts % dims.ep:
        problems.append(("parallelism.ep", f"num_experts={model.num_experts} is not "
                         f"divisible by ep={dims.ep}; use an ep dividing {model.num_experts}"))
    per_step = dims.dp * micro_batch
    if global_batch % per_step:
        problems.append(("training.global_batch_size",
                         f"global_batch_size={global_batch} is not divisible by dp x "
                         f"micro_batch_size = {dims.dp} x {micro_batch} = {per_step}; use a "
                         f"multiple of {per_step}"))
    known = global_batch // per_step if not global_batch % per_step else None
    problems += schedule_problems(par.schedule, p, known, v)
    if dims.cp > 1 and seq_len % (2 * dims.cp):
        problems.append(("training.seq_len", f"seq_len={seq_len} is not divisible by 2 x cp "
                         f"= {2 * dims.cp} (load-balanced causal context parallelism splits "
                         f"each sequence in 2·cp chunks); use a multiple of {2 * dims.cp}"))
    local = seq_len // dims.cp
    if dims.sp and local % t:
        problems.append(("training.seq_len", f"sequence parallelism splits the {local} "
                         f"tokens per rank across tp={t}; use a seq_len divisible by "
                         f"cp x tp = {dims.cp * t}"))
    return problems


def check_plan(
    dp: int, num_gpus: int, global_batch: int, micro_batch: int
) -> list[tuple[str, str]]:
    """Problems with a data-parallel plan as (field, message-with-fix) pairs; empty if fine."""
    problems: list[tuple[str, str]] = []
    if dp != num_gpus:
        problems.append((
            "parallelism.dp",
            f"dp={dp} does not match the cluster's {num_gpus} GPUs (world size); "
            f"set parallelism.dp to {num_gpus} or change cluster.nodes",
        ))
        return problems
    per_step = dp * micro_batch
    if global_batch % per_step:
        problems.append((
            "training.global_batch_size",
            f"global_batch_size={global_batch} is not divisible by dp x micro_batch_size = "
            f"{dp} x {micro_batch} = {per_step}; use a multiple of {per_step}",
        ))
    return problems

"""Size limits checked before anything is built, so an absurd scenario fails in milliseconds.

A typo such as ``nodes: 1e12`` or ``num_layers: 1000000000`` would otherwise build a
topology or a task graph until memory runs out (3-6 GB before failing, issue 20). Each
limit sits well above the largest published configuration, so no real scenario meets it:

| limit | value | largest real case |
| --- | --- | --- |
| GPUs in the cluster | 131,072 | ~100k-GPU clusters (2024); builds in ~12 s, 460 MB |
| GPUs per node | 1,024 | 72 in an NVL72 rack |
| layers | 8,192 | 126 (Llama 3 405B), 96 (GPT-3 175B) |
| hidden / FFN width | 1,048,576 | 53,248 (Llama 3 405B FFN) |
| vocabulary | 16,777,216 | 256,000 (Gemma) |
| sequence length | 16,777,216 tokens | 1M-10M token context research runs |
| experts | 4,096 | 256 (DeepSeek-V3), 2,048 (Switch-C) |
| microbatches per step | 65,536 | 96 (GPT-3 175B on 1,024 A100s) |
| tasks in the graph | 4,000,000 | 3.66M (bench_scale explicit dense-512: Llama 3 70B, layers) |

Besides: efficiencies of at least 1% of peak and oversubscription of at most 1000, so no
derived time or rate leaves the range floats represent. The task limit bounds memory: the
graph is held as columns, about 70 bytes per task while it is built (318 MB of RSS for
3.66M tasks, measured Dec 2026; it was ~600 bytes as one object per task) and about 400
bytes per task once simulated with its spans (dense-64 explicit: 246 MB for 448k tasks), so
a graph that hits it fails at ~0.35 GB.
The other rows only scale work: they are caught before the cluster or model is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simtrain.hardware.topology import ClusterConfig
    from simtrain.scenario import Scenario

MAX_GPUS = 131_072
MAX_GPUS_PER_NODE = 1_024
MAX_LAYERS = 8_192
MAX_WIDTH = 2**20
MAX_VOCAB = 2**24
MAX_SEQ_LEN = 2**24
MAX_EXPERTS = 4_096
MAX_MICRO_BATCHES = 65_536
MAX_TASKS = 4_000_000
# A straggler computing 1000x slower is as good as hung: model it with sim.hangs.
MAX_SLOWDOWN = 1_000.0
# Kernels below 1% of peak FLOP/s or HBM bandwidth are not what the roofline models (a
# launch-bound kernel is the launch overhead's job); 1e-300 gave a 3e296 s step.
MIN_EFFICIENCY = 0.01
# Fat-tree oversubscription: 1 (non-blocking) to a few in practice; 1e300 would leave the
# uplinks at 1e-290 B/s.
MAX_OVERSUBSCRIPTION = 1_000.0


class _Problems(list[tuple[str, str]]):
    """(dotted field, message) pairs; ``over`` adds one when a value passes its limit."""

    def over(self, field: str, value: float | None, limit: float, what: str) -> None:
        if value is not None and value > limit:
            self.append((field, f"{value:,} {what} is beyond the {limit:,} simtrain "
                         f"accepts (1..{limit:,}; see simtrain/limits.py)"))


def cluster_problems(cluster: ClusterConfig) -> list[tuple[str, str]]:
    """(dotted field, message) for each cluster size beyond its limit (before building)."""
    problems = _Problems()
    if cluster.custom is not None:  # its size is bounded by the file's (simtrain.yamlfile)
        return problems
    problems.over("cluster.gpus_per_node", cluster.gpus_per_node, MAX_GPUS_PER_NODE,
                  "GPUs per node")
    problems.over("cluster.nodes", cluster.nodes, MAX_GPUS, "nodes")
    problems.over("cluster.oversubscription", cluster.oversubscription, MAX_OVERSUBSCRIPTION,
                  "oversubscription")
    if not problems:
        problems.over("cluster.nodes", cluster.nodes * cluster.gpus_per_node, MAX_GPUS,
                      f"GPUs ({cluster.nodes:,} nodes x {cluster.gpus_per_node})")
    for name in ("nics_per_node", "pcie_switches_per_node", "nodes_per_leaf"):
        limit = MAX_GPUS if name == "nodes_per_leaf" else MAX_GPUS_PER_NODE
        problems.over(f"cluster.{name}", getattr(cluster, name), limit, name.replace("_", " "))
    return problems


def size_problems(scenario: Scenario) -> list[tuple[str, str]]:
    """(dotted field, message) for every size beyond its limit, before anything is built."""
    problems = _Problems(cluster_problems(scenario.cluster))
    over = problems.over
    model, train = scenario.model, scenario.training
    over("model.num_layers", model.num_layers, MAX_LAYERS, "layers")
    for name in ("hidden_size", "ffn_hidden_size", "moe_ffn_hidden_size", "num_heads",
                 "num_kv_heads", "head_dim"):
        over(f"model.{name}", getattr(model, name), MAX_WIDTH, name.replace("_", " "))
    over("model.vocab_size", model.vocab_size, MAX_VOCAB, "vocabulary entries")
    over("model.max_seq_len", model.max_seq_len, MAX_SEQ_LEN, "tokens")
    over("training.seq_len", train.seq_len, MAX_SEQ_LEN, "tokens")
    over("model.num_experts", model.num_experts, MAX_EXPERTS, "experts")
    over("model.experts_per_token", model.experts_per_token, MAX_EXPERTS, "experts per token")
    over("training.global_batch_size", train.global_batch_size // train.micro_batch_size,
         MAX_MICRO_BATCHES, f"microbatches (global_batch_size {train.global_batch_size:,} "
         f"/ micro_batch_size {train.micro_batch_size:,})")
    for name in ("gemm_efficiency", "attention_efficiency", "memory_efficiency"):
        value = getattr(scenario.compute, name)
        if value is not None and value < MIN_EFFICIENCY:
            problems.append((f"compute.{name}", (
                f"{value:g} of the peak is below the {MIN_EFFICIENCY:g} the roofline accepts "
                f"({MIN_EFFICIENCY:g}..1); a kernel that slow is launch-bound: raise "
                "compute.launch_overhead instead")))
    ep = scenario.parallelism.ep
    if model.num_experts and ep > 1 and model.routing_imbalance > ep - 1:
        problems.append(("model.routing_imbalance", (
            f"{model.routing_imbalance:g} would give the busiest of {ep} expert-parallel "
            f"ranks {1 + model.routing_imbalance:g}x the mean load, more than all tokens; "
            f"accepted: 0..{ep - 1} (ep - 1)")))
    return problems

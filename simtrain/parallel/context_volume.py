"""Context parallelism's algorithms: their names, degrees, traffic and the plan checks.

Four ways to run attention when each of the cp ranks of a CP group holds s/cp tokens
(names as Megatron-Core's ``cp_comm_type``, TransformerConfig docs, "context_parallel"):

- ``ring`` (Megatron's "p2p"; ring attention, Liu et al. 2023): cp blockwise attention
  steps; between them every rank passes the K,V block it holds to the next rank, cp - 1
  passes of b·(s/cp)·2·kv elements, overlapped with the block computed meanwhile; the
  backward passes K,V and dK,dV (twice the bytes).
- ``allgather`` (Megatron's "all_gather"): K,V all-gathered before attention (b·s·2·kv
  elements gathered; each rank's block reaches the cp - 1 others), dK,dV
  reduce-scattered after its backward; not overlapped.
- ``a2a`` (DeepSpeed-Ulysses, Jacobs et al. 2023, "DeepSpeed Ulysses: System
  Optimizations for Enabling Training of Extreme Long Sequence Transformer Models",
  arXiv 2309.14509, Sec. 3): an all-to-all over the CP group turns Q, K, V from
  "s/cp tokens, all heads" into "all s tokens, heads/cp"; each rank runs ordinary
  attention on its heads; a second all-to-all turns the output back. Every all-to-all
  moves (cp-1)/cp of a rank's buffer: b·(s/cp)·(q + 2·kv) elements before, b·(s/cp)·o
  after (the paper's 4·N·h/P per link for MHA, where q = kv = o = h); the backward runs the
  same two in reverse (dO, then dQ, dK, dV). Needs the heads and the KV heads of a TP rank
  divisible by cp (the paper's and Transformer Engine's requirement).
- ``a2a+p2p`` (Megatron's hierarchical CP, ``hierarchical_context_parallel_sizes``
  [u, cp/u]): an all-to-all over u consecutive CP ranks (inside a node: NVLink), then ring
  attention over the cp/u groups that hold the same heads (across nodes), cp/u - 1 passes
  of b·(s/(cp/u))·2·kv/u = b·(s/cp)·2·kv elements. u = cp is ``a2a``, u = 1 is ``ring``.

q, kv, o are a TP rank's query, key (= value) and output widths (heads · head_dim); every
formula below is per rank and per transformer layer, in bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

CP_ALGORITHMS = ("ring", "allgather", "a2a", "a2a+p2p")
CP_A2A_GROUP, CP_RING_GROUP = "cp_a2a", "cp_ring"  # the two levels of a2a+p2p


def ulysses_degree(algorithm: str, cp: int, a2a_size: int | None) -> int:
    """u, the CP ranks an all-to-all spans: cp for a2a, ``a2a_size`` for a2a+p2p, 1 else."""
    if algorithm == "a2a":
        return cp
    if algorithm == "a2a+p2p":
        if a2a_size is None:
            raise ValueError("parallelism.cp_algorithm a2a+p2p needs parallelism.cp_a2a_size")
        return a2a_size
    return 1


@dataclass(frozen=True, slots=True)
class CPTraffic:
    """Bytes one rank sends per transformer layer for context parallelism."""

    forward: float
    backward: float


def ulysses_buffers(m: int, q: int, kv: int, o: int, dt: float) -> tuple[float, float]:
    """(before, after): a rank's all-to-all buffers for ``m`` = b·s/cp local tokens:
    dt·m·(q + 2·kv) for Q, K, V and dt·m·o for the attention output (Jacobs et al. 2023)."""
    return dt * m * (q + 2 * kv), dt * m * o


def kv_block_bytes(m: int, kv: int, dt: float) -> float:
    """The K,V block a rank holds (and ring attention passes on): dt·m·2·kv bytes."""
    return dt * m * 2 * kv


def cp_traffic(algorithm: str, *, m: int, q: int, kv: int, o: int, cp: int, u: int,
               dt: float) -> CPTraffic:
    """Bytes a rank sends per layer (module docstring): ring (cp-1)·K,V block forward,
    twice that backward; allgather (cp-1)·K,V block each way; a2a (u-1)/u of both
    buffers each way; a2a+p2p the a2a over u plus the ring over cp/u."""
    kvb = kv_block_bytes(m, kv, dt)
    if algorithm == "ring":
        return CPTraffic((cp - 1) * kvb, 2 * (cp - 1) * kvb)
    if algorithm == "allgather":  # every rank's block reaches the cp - 1 others
        return CPTraffic((cp - 1) * kvb, (cp - 1) * kvb)
    if algorithm not in ("a2a", "a2a+p2p"):
        raise ValueError(f"unknown cp_algorithm {algorithm!r}; use one of "
                         f"{', '.join(CP_ALGORITHMS)}")
    before, after = ulysses_buffers(m, q, kv, o, dt)
    a2a = (u - 1) / u * (before + after)
    r = cp // u
    return CPTraffic(a2a + (r - 1) * kvb, a2a + 2 * (r - 1) * kvb)


def check_context(algorithm: str, a2a_size: int | None, *, cp: int, tp: int, heads: int,
                  kv_heads_per_rank: int) -> list[tuple[str, str]]:
    """Problems with the CP algorithm for this plan and model, as (field, message)."""
    field = "parallelism.cp_a2a_size"
    if algorithm != "a2a+p2p":
        if a2a_size is not None:
            return [(field, f"cp_a2a_size={a2a_size} is the all-to-all level of "
                     f"cp_algorithm a2a+p2p, but cp_algorithm is {algorithm!r}; set "
                     f"cp_algorithm: a2a+p2p or remove cp_a2a_size")]
    elif a2a_size is None:
        return [(field, f"cp_algorithm a2a+p2p needs cp_a2a_size, the all-to-all degree "
                 f"inside each ring step (Megatron's hierarchical_context_parallel_sizes"
                 f"[0]); give a divisor of cp={cp}, e.g. the CP ranks of one node")]
    elif cp % a2a_size:
        return [(field, f"cp_a2a_size={a2a_size} must divide cp={cp} (a2a+p2p runs "
                 f"cp/cp_a2a_size ring steps of cp_a2a_size-way all-to-alls); use a "
                 f"divisor of {cp}")]
    u = ulysses_degree(algorithm, cp, a2a_size)
    if u == 1:
        return []
    local = heads // tp
    if local % u or kv_heads_per_rank % u:
        return [("parallelism.cp_algorithm",
                 f"cp_algorithm {algorithm} splits each TP rank's attention heads {u} ways "
                 f"(all-to-all over {u} CP ranks), but a TP rank holds {local} heads and "
                 f"{kv_heads_per_rank} KV heads (num_heads / tp, num_kv_heads / tp); "
                 f"use an all-to-all degree dividing both, or cp_algorithm: ring")]
    return []

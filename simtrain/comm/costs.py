"""Closed-form alpha-beta costs of collective algorithms (Hockney model).

n is the message size in bytes (nccl-tests convention: the full array for all-reduce,
reduce-scatter and all-gather; the per-rank send buffer for all-to-all), P the number of
ranks, alpha the latency of one step in seconds, B the bandwidth each rank can send (and
receive) at, in bytes/s. Each formula assumes an uncongested, full-bisection network where
every rank has its own send and receive link of bandwidth B (a switch, or NVSwitch); the
tests check the flow simulation against them. Sources: Thakur, Rabenseifner and Gropp,
"Optimization of Collective Communication Operations in MPICH" (IJHPCA 2005); Patarasuk
and Yuan, "Bandwidth optimal all-reduce algorithms" (JPDC 2009) for the ring; Sanders,
Speck and Träff, "Two-tree algorithms for full bandwidth broadcast, reduction and scan"
(Parallel Computing 2009) for the double binary tree NCCL uses.
"""

from __future__ import annotations

import math


def _log2(p: int) -> int:
    return math.ceil(math.log2(p)) if p > 1 else 0


def ring_all_reduce_time(n: float, p: int, alpha: float, bandwidth: float) -> float:
    """Ring all-reduce: 2(P-1)·alpha + 2(P-1)/P · n/B (reduce-scatter then all-gather).

    The seed notes write the factor 2P/(P-1); that is a typo, see DESIGN.md.
    """
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / bandwidth


def ring_reduce_scatter_time(n: float, p: int, alpha: float, bandwidth: float) -> float:
    """Ring reduce-scatter (or all-gather) of an n-byte array: (P-1)·alpha + (P-1)/P · n/B."""
    if p <= 1:
        return 0.0
    return (p - 1) * alpha + (p - 1) / p * n / bandwidth


ring_all_gather_time = ring_reduce_scatter_time


def bidirectional_ring_all_reduce_time(n: float, p: int, alpha: float, bandwidth: float) -> float:
    """Two rings in opposite directions, n/2 each, on full-duplex neighbour links.

    2(P-1)·alpha + (P-1)/P · n/B: each direction of every link carries half the bytes. On a
    switch where a rank's sends share one uplink the gain vanishes (the flows share it).
    """
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * alpha + (p - 1) / p * n / bandwidth


def chain_broadcast_time(n: float, p: int, alpha: float, bandwidth: float) -> float:
    """Pipelined chain (ring) broadcast or reduce: (P-1)·alpha + n/B for large n."""
    if p <= 1:
        return 0.0
    return (p - 1) * alpha + n / bandwidth


def binomial_broadcast_time(n: float, p: int, alpha: float, bandwidth: float) -> float:
    """Binomial tree (MST) broadcast or reduce: ceil(log2 P)·(alpha + n/B)."""
    return _log2(p) * (alpha + n / bandwidth)


def binomial_all_reduce_time(n: float, p: int, alpha: float, bandwidth: float) -> float:
    """Binomial reduce then binomial broadcast: 2·ceil(log2 P)·(alpha + n/B)."""
    return 2 * binomial_broadcast_time(n, p, alpha, bandwidth)


def recursive_doubling_all_reduce_time(n: float, p: int, alpha: float, bandwidth: float) -> float:
    """Recursive doubling, full vector each step (MPICH short messages): log2 P·(alpha + n/B)."""
    return _log2(p) * (alpha + n / bandwidth)


def halving_doubling_all_reduce_time(n: float, p: int, alpha: float, bandwidth: float) -> float:
    """Rabenseifner: recursive-halving reduce-scatter + recursive-doubling all-gather.

    2·log2(P)·alpha + 2(P-1)/P · n/B (P a power of two): the ring's bandwidth with
    logarithmic latency.
    """
    if p <= 1:
        return 0.0
    return 2 * _log2(p) * alpha + 2 * (p - 1) / p * n / bandwidth


def halving_doubling_reduce_scatter_time(
    n: float, p: int, alpha: float, bandwidth: float
) -> float:
    """Recursive halving reduce-scatter (or doubling all-gather): log2 P·alpha + (P-1)/P·n/B."""
    if p <= 1:
        return 0.0
    return _log2(p) * alpha + (p - 1) / p * n / bandwidth


def double_binary_tree_all_reduce_time(
    n: float, p: int, alpha: float, bandwidth: float
) -> float:
    """Pipelined double binary tree all-reduce: 2·depth·alpha + 2·n/B.

    Two binary trees each carry n/2; every rank is interior in at most one of them, so in
    the reduce (and again in the broadcast) phase a rank receives at most 2 × n/2 = n
    bytes and sends n/2 + n/2 = n: n/B per phase once the pipeline is full. depth =
    floor(log2 P) is the height of a heap-ordered binary tree of P nodes.
    """
    if p <= 1:
        return 0.0
    depth = math.floor(math.log2(p))
    return 2 * depth * alpha + 2 * n / bandwidth


def direct_all_to_all_time(n: float, p: int, alpha: float, bandwidth: float) -> float:
    """All pairs at once: alpha + (P-1)/P · n/B (each rank sends n/P to each of P-1 peers)."""
    if p <= 1:
        return 0.0
    return alpha + (p - 1) / p * n / bandwidth


def pairwise_all_to_all_time(n: float, p: int, alpha: float, bandwidth: float) -> float:
    """P-1 rounds of pairwise exchange (MPICH long messages): (P-1)·(alpha + n/(P·B))."""
    if p <= 1:
        return 0.0
    return (p - 1) * (alpha + n / (p * bandwidth))


def linear_scatter_time(n: float, p: int, alpha: float, bandwidth: float) -> float:
    """Root sends each of P-1 ranks its n/P chunk at once: alpha + (P-1)/P · n/B."""
    if p <= 1:
        return 0.0
    return alpha + (p - 1) / p * n / bandwidth


def binomial_scatter_time(n: float, p: int, alpha: float, bandwidth: float) -> float:
    """Binomial scatter (or gather), halving the data each step: log2 P·alpha + (P-1)/P·n/B."""
    if p <= 1:
        return 0.0
    return _log2(p) * alpha + (p - 1) / p * n / bandwidth


def hierarchical_all_reduce_time(
    n: float, g: int, nodes: int, alpha_intra: float, b_intra: float,
    alpha_inter: float, b_inter: float,
) -> float:
    """Intra-node ring reduce-scatter, inter-node ring all-reduce of n/G, intra all-gather.

    2·[(G-1)·a_i + (G-1)/G·n/B_i] + 2(N-1)·a_e + 2(N-1)/N·(n/G)/B_e, with G GPUs per
    node (each in its own inter-node ring over N nodes, through its own NIC).
    """
    intra = 2 * ring_reduce_scatter_time(n, g, alpha_intra, b_intra)
    return intra + ring_all_reduce_time(n / g, nodes, alpha_inter, b_inter)


def dissemination_barrier_time(p: int, alpha: float) -> float:
    """Dissemination barrier (Hensgen et al. 1988): ceil(log2 P) rounds of empty messages."""
    return _log2(p) * alpha


def nvls_all_reduce_time(n: float, p: int, alpha: float, bandwidth: float) -> float:
    """NVLink SHARP all-reduce: alpha + (n + n/P)/B.

    Each GPU sends n of contributions to the switch and receives its n/P reduced shard
    (reduce-scatter by multimem.ld_reduce), then sends that shard and receives all P
    shards, n (all-gather by multicast store); both halves pipelined, so per direction a
    GPU's link carries n + n/P. busbw = 2(P-1)/P·n/t -> 2(P-1)/(P+1)·B for large n.
    """
    if p <= 1:
        return 0.0
    return alpha + (n + n / p) / bandwidth


def nvls_reduce_scatter_time(n: float, p: int, alpha: float, bandwidth: float) -> float:
    """NVLink SHARP reduce-scatter (or all-gather): alpha + n/B (n up and n/P down, or the
    reverse: the larger direction carries n)."""
    if p <= 1:
        return 0.0
    return alpha + n / bandwidth


def collnet_all_reduce_time(
    n: float, g: int, alpha: float, b_intra: float, b_net: float,
) -> float:
    """InfiniBand SHARP all-reduce, pipelined: alpha + max(2(G-1)/G·n/B_intra, (n/G)/B_net).

    Inside a server of G GPUs a ring reduce-scatter and all-gather (2(G-1)/G·n per hop);
    each GPU's n/G shard goes up to the SHARP switch and the reduced shard comes back
    (n/G each way over its NIC); the stages overlap over chunks, so the slower one sets
    the time, independent of the number of servers.
    """
    intra = 2 * (g - 1) / g * n / b_intra if g > 1 else 0.0
    return alpha + max(intra, n / g / b_net)


def double_tree_load(nodes: int) -> float:
    """Shards a node's NIC carries per direction in a double binary tree all-reduce over
    ``nodes`` (two mirrored heap-ordered trees, half a shard each, reduce and broadcast
    pipelined): half its tree degree summed over both trees, at the busiest node. 2 nodes:
    1 (root of one tree, leaf of the other); 3 and 4 nodes: 1.5; 5 and more: 2 (interior
    in one tree: two children and a parent, leaf in the other)."""
    if nodes <= 1:
        return 0.0
    degree = [0] * nodes
    for order in (list(range(nodes)), list(range(nodes - 1, -1, -1))):
        for i in range(1, nodes):
            degree[order[i]] += 1
            degree[order[(i - 1) // 2]] += 1
    return max(degree) / 2


def nvls_tree_all_reduce_time(
    n: float, g: int, nodes: int, alpha: float, b_nvlink: float, b_net: float,
) -> float:
    """NCCL's NVLSTree all-reduce, pipelined: alpha + max((n + n/G)/B_nvlink, L·(n/G)/B_net).

    Inside each NVLink domain of G GPUs an NVLS reduce-scatter and all-gather (n + n/G per
    direction on a GPU's link to the NVSwitch); each GPU heads its n/G shard's double
    binary tree over the domains, through its NIC, carrying L = ``double_tree_load(nodes)``
    shards per direction; the stages overlap, so the slower one sets the time.
    """
    if nodes <= 1:
        return nvls_all_reduce_time(n, g, alpha, b_nvlink)
    return alpha + max((n + n / g) / b_nvlink, double_tree_load(nodes) * n / g / b_net)

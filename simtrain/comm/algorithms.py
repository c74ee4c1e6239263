"""Collective algorithms lowered to phases of concurrent flows.

A collective becomes a list of ``Phase``s executed one after another: each phase first pays
its latency (alpha terms), then runs its flows concurrently over the topology. NCCL
pipelines a ring's steps in chunks, so all 2(P-1) steps of a ring all-reduce keep the same
neighbour links busy at once; a ring is therefore one phase whose flows each carry
2(P-1)/P of the message, after 2(P-1) step latencies. Pipelined trees are likewise one
phase per direction. Store-and-forward algorithms (binomial trees, recursive doubling and
halving) are one phase per round. On an idle network each lowering reproduces its closed
form in ``simtrain.comm.costs``; under contention the flows slow down as they should.

Every lowering is a pure function ``(call, ctx) -> list[Phase]``; ``ALGORITHMS`` maps
op -> name -> lowering. The first entry of each op is its default.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from simtrain.comm.in_network import IN_NETWORK
from simtrain.comm.phases import (
    AlgorithmError,
    Call,
    Context,
    Flow,
    Lowering,
    Phase,
    heap_edges,
    ring_channels,
    ring_hops,
    ring_phase,
    servers,
)


def _power_of_two(p: int, name: str) -> int:
    if p & (p - 1):
        raise AlgorithmError(f"{name} needs a power-of-two group, got {p} ranks; use ring")
    return p.bit_length() - 1


def _rounds(p: int) -> int:
    return math.ceil(math.log2(p)) if p > 1 else 0


# ----------------------------------------------------------------------------- rings


def _ring_steps(op: str, p: int) -> tuple[int, float]:
    """(steps, fraction of n each rank sends): all-reduce 2(P-1) and 2(P-1)/P, else P-1."""
    if op == "all_reduce":
        return 2 * (p - 1), 2 * (p - 1) / p
    return p - 1, (p - 1) / p


def ring(call: Call, ctx: Context) -> list[Phase]:
    """Ring all-reduce (2(P-1) steps of 2(P-1)/P·n), reduce-scatter / all-gather (P-1 steps)."""
    if len(call.ranks) <= 1:
        return []
    steps, fraction = _ring_steps(call.op, len(call.ranks))
    orders = ring_channels(call.ranks, ctx.fabric)
    return [ring_phase(orders, call.nbytes * fraction / len(orders), steps, ctx)]


def bidirectional_ring(call: Call, ctx: Context) -> list[Phase]:
    """Two rings in opposite directions, each carrying half the message."""
    if len(call.ranks) <= 1:
        return []
    steps, fraction = _ring_steps(call.op, len(call.ranks))
    orders = ring_channels(call.ranks, ctx.fabric)
    both = [*orders, *[list(reversed(o)) for o in orders]]
    return [ring_phase(both, call.nbytes * fraction / len(both), steps, ctx)]


def chain(call: Call, ctx: Context) -> list[Phase]:
    """Pipelined chain from the root (NCCL's ring broadcast/reduce): P-1 hops of n bytes."""
    if len(call.ranks) <= 1:
        return []
    hops = ring_hops(call.ranks)[:-1]
    if call.op == "reduce":
        hops = [(b, a) for a, b in reversed(hops)]
    latency = sum(ctx.hop_latency(a, b) for a, b in hops)  # the first chunk's path
    return [Phase(latency, tuple((a, b, call.nbytes) for a, b in hops))]


# ----------------------------------------------------------------------------- trees


def _binomial_rounds(p: int) -> list[list[tuple[int, int]]]:
    """Broadcast rounds over indices 0..p-1: in round k, i < 2^k sends to i + 2^k."""
    return [[(i, i + (1 << k)) for i in range(1 << k) if i + (1 << k) < p]
            for k in range(_rounds(p))]


def binomial(call: Call, ctx: Context) -> list[Phase]:
    """Binomial tree (MST) broadcast, reduce, or all-reduce (reduce then broadcast), n per edge."""
    r, p = call.ranks, len(call.ranks)
    down = [[(r[a], r[b]) for a, b in rnd] for rnd in _binomial_rounds(p)]
    up = [[(b, a) for a, b in rnd] for rnd in reversed(down)]
    rounds = {"broadcast": down, "reduce": up, "all_reduce": up + down}[call.op]
    return [Phase(ctx.step_alpha(rnd), tuple((a, b, call.nbytes) for a, b in rnd))
            for rnd in rounds]


def tree(call: Call, ctx: Context) -> list[Phase]:
    """NCCL's tree all-reduce: intra-server chains joined by a double binary tree of servers.

    Two trees each carry half the data, pipelined: a reduce phase up the trees, then a
    broadcast phase down. Tree B mirrors tree A (Sanders et al. 2009), so a server interior
    in one is a leaf in the other. Like NCCL's channels, there are G/2 such pairs on
    servers of G GPUs, each pair's chains rotated so its two trees leave every server
    through two other GPUs (and NICs).
    """
    if len(call.ranks) <= 1:
        return []
    groups = servers(call.ranks, ctx.fabric)
    n = len(groups)
    depth = math.floor(math.log2(n)) if n > 1 else 0
    pairs = max(1, min(len(g) for g in groups) // 2)
    share = call.nbytes / (2 * pairs)
    up: list[Flow] = []
    alpha_up = 0.0
    for c in range(pairs):
        for t in range(2):
            head = 2 * c + t
            chains = [g[head % len(g):] + g[:head % len(g)] for g in groups]
            node_order = list(range(n)) if t == 0 else list(range(n - 1, -1, -1))
            edges = [(chains[a][0], chains[b][0]) for a, b in heap_edges(node_order)]
            intra = [(ch[i + 1], ch[i]) for ch in chains for i in range(len(ch) - 1)]
            up.extend((a, b, share) for a, b in edges + intra)
            longest = max(len(ch) for ch in chains) - 1
            alpha_up = max(alpha_up,
                           longest * ctx.step_alpha(intra) + depth * ctx.step_alpha(edges))
    down = tuple((b, a, nbytes) for a, b, nbytes in up)
    return [Phase(alpha_up, tuple(up)), Phase(alpha_up, down)]


# ----------------------------------------------------------------------------- doubling


def _exchange(ranks: Sequence[int], distance: int, nbytes: float, ctx: Context) -> Phase:
    pairs = [(ranks[i], ranks[i ^ distance]) for i in range(len(ranks))]
    return Phase(ctx.step_alpha(pairs), tuple((a, b, nbytes) for a, b in pairs))


def recursive_doubling(call: Call, ctx: Context) -> list[Phase]:
    """Recursive doubling: all-reduce exchanging the full vector each round (short messages),
    or all-gather doubling the gathered block each round."""
    r, p = call.ranks, len(call.ranks)
    levels = _power_of_two(p, "recursive doubling")
    if call.op == "all_reduce":
        return [_exchange(r, 1 << k, call.nbytes, ctx) for k in range(levels)]
    return [_exchange(r, 1 << k, call.nbytes * (1 << k) / p, ctx) for k in range(levels)]


def halving_doubling(call: Call, ctx: Context) -> list[Phase]:
    """Rabenseifner: recursive-halving reduce-scatter, then recursive-doubling all-gather."""
    r, p = call.ranks, len(call.ranks)
    levels = _power_of_two(p, "halving-doubling")
    halving = [_exchange(r, p >> (k + 1), call.nbytes / (2 << k), ctx) for k in range(levels)]
    if call.op == "reduce_scatter":
        return halving
    doubling = [_exchange(r, 1 << k, call.nbytes * (1 << k) / p, ctx) for k in range(levels)]
    if call.op == "all_gather":
        return doubling
    return halving + doubling


# ----------------------------------------------------------------------------- hierarchies


def _grid(call: Call, ctx: Context, name: str) -> list[list[int]]:
    groups = servers(call.ranks, ctx.fabric)
    if len({len(g) for g in groups}) != 1:
        raise AlgorithmError(f"{name} needs the same number of GPUs on every server; "
                             f"got {[len(g) for g in groups]}")
    return groups


def _rings_phase(rings: Sequence[Sequence[int]], nbytes: float, op: str, ctx: Context) -> Phase:
    """Concurrent independent rings, each doing ``op`` on ``nbytes``."""
    flows: list[Flow] = []
    labels: list[int] = []
    latency = 0.0
    for members in rings:
        if len(members) > 1:
            phase = ring(Call(op, tuple(members), nbytes), ctx)[0]
            base = max(labels, default=-1) + 1
            flows.extend(phase.flows)
            labels.extend(base + k for k in phase.coupled or (0,) * len(phase.flows))
            latency = max(latency, phase.latency)
    return Phase(latency, tuple(flows), tuple(labels))


def hierarchical(call: Call, ctx: Context) -> list[Phase]:
    """Intra-server ring reduce-scatter, inter-server ring all-reduce of each n/G shard
    (G rings, one per local GPU and rail), intra-server ring all-gather."""
    groups = _grid(call, ctx, "hierarchical all-reduce")
    g = len(groups[0])
    columns = [[grp[i] for grp in groups] for i in range(g)]
    return [
        _rings_phase(groups, call.nbytes, "reduce_scatter", ctx),
        _rings_phase(columns, call.nbytes / g, "all_reduce", ctx),
        _rings_phase(groups, call.nbytes, "all_gather", ctx),
    ]


def ring_2d(call: Call, ctx: Context) -> list[Phase]:
    """2-D ring all-reduce (Ying et al. 2018): two halves run the grid in opposite orders
    at once — rows then columns for one, columns then rows for the other — so intra- and
    inter-server links are busy together."""
    rows = _grid(call, ctx, "2-D ring all-reduce")
    g, n = len(rows[0]), len(rows)
    cols = [[row[i] for row in rows] for i in range(g)]
    half = call.nbytes / 2
    plan = [("reduce_scatter", half, half), ("all_reduce", half / g, half / n),
            ("all_gather", half, half)]
    phases = []
    for op, a_bytes, b_bytes in plan:
        a = _rings_phase(rows if op != "all_reduce" else cols, a_bytes, op, ctx)
        b = _rings_phase(cols if op != "all_reduce" else rows, b_bytes, op, ctx)
        phases.append(Phase(max(a.latency, b.latency), a.flows + b.flows))
    return phases


# ----------------------------------------------------------------------------- personalised


def _matrix(call: Call) -> list[list[float]]:
    p = len(call.ranks)
    if call.splits is not None:
        return [list(row) for row in call.splits]
    return [[0.0 if i == j else call.nbytes / p for j in range(p)] for i in range(p)]


def direct(call: Call, ctx: Context) -> list[Phase]:
    """Every pair at once (all-to-all[-v]); or the root's sends/receives (scatter/gather);
    or one message (send/recv)."""
    r, p = call.ranks, len(call.ranks)
    if p <= 1:
        return []
    if call.op == "send_recv":
        pairs = [(r[0], r[1])]
        return [Phase(ctx.step_alpha(pairs), ((r[0], r[1], call.nbytes),))]
    if call.op in ("scatter", "gather"):
        pairs = [(r[0], b) for b in r[1:]]
        if call.op == "gather":
            pairs = [(b, a) for a, b in pairs]
        return [Phase(ctx.step_alpha(pairs), tuple((a, b, call.nbytes / p) for a, b in pairs))]
    m = _matrix(call)
    flows = tuple((r[i], r[j], m[i][j]) for i in range(p) for j in range(p) if i != j)
    return [Phase(ctx.step_alpha([(a, b) for a, b, _ in flows]), flows)]


def pairwise(call: Call, ctx: Context) -> list[Phase]:
    """P-1 rounds; in round k rank i sends to rank i+k (MPICH's long-message all-to-all)."""
    r, p = call.ranks, len(call.ranks)
    m = _matrix(call)
    phases = []
    for k in range(1, p):
        flows = tuple((r[i], r[(i + k) % p], m[i][(i + k) % p]) for i in range(p))
        phases.append(Phase(ctx.step_alpha([(a, b) for a, b, _ in flows]), flows))
    return phases


def binomial_scatter(call: Call, ctx: Context) -> list[Phase]:
    """Binomial scatter: each round a holder passes the upper half of its blocks on.
    Gather runs the same rounds in reverse."""
    r, p = call.ranks, len(call.ranks)
    block = call.nbytes / p
    rounds = []
    for k in reversed(range(_rounds(p))):
        d = 1 << k
        rnd = [(i, i + d, block * (min(i + 2 * d, p) - i - d))
               for i in range(0, p, 2 * d) if i + d < p]
        rounds.append(rnd)
    if call.op == "gather":
        rounds = [[(b, a, nb) for a, b, nb in rnd] for rnd in reversed(rounds)]
    return [Phase(ctx.step_alpha([(r[a], r[b]) for a, b, _ in rnd]),
                  tuple((r[a], r[b], nb) for a, b, nb in rnd)) for rnd in rounds]


def dissemination(call: Call, ctx: Context) -> list[Phase]:
    """Barrier: ceil(log2 P) rounds, rank i signals rank i + 2^k (empty messages)."""
    r, p = call.ranks, len(call.ranks)
    return [Phase(ctx.step_alpha([(r[i], r[(i + (1 << k)) % p]) for i in range(p)]), ())
            for k in range(_rounds(p))]


ALGORITHMS: dict[str, dict[str, Lowering]] = {
    "all_reduce": {"ring": ring, "tree": tree, "bidirectional_ring": bidirectional_ring,
                   "binomial": binomial, "recursive_doubling": recursive_doubling,
                   "halving_doubling": halving_doubling, "hierarchical": hierarchical,
                   "ring_2d": ring_2d},
    "reduce_scatter": {"ring": ring, "bidirectional_ring": bidirectional_ring,
                       "halving_doubling": halving_doubling},
    "all_gather": {"ring": ring, "bidirectional_ring": bidirectional_ring,
                   "recursive_doubling": recursive_doubling,
                   "halving_doubling": halving_doubling},
    "broadcast": {"ring": chain, "binomial": binomial},
    "reduce": {"ring": chain, "binomial": binomial},
    "scatter": {"direct": direct, "binomial": binomial_scatter},
    "gather": {"direct": direct, "binomial": binomial_scatter},
    "all_to_all": {"direct": direct, "pairwise": pairwise},
    "all_to_all_v": {"direct": direct, "pairwise": pairwise},
    "send_recv": {"direct": direct},
    "barrier": {"dissemination": dissemination},
}
for _op, _table in IN_NETWORK.items():  # NVLS and SHARP: switch-ended flows, same contract
    ALGORITHMS[_op].update(_table)


def lowering(op: str, algorithm: str) -> Lowering:
    """The lowering of ``algorithm`` for ``op``; a clear error naming the choices."""
    table = ALGORITHMS.get(op)
    if table is None:
        raise AlgorithmError(f"unknown collective {op!r}; known: {', '.join(ALGORITHMS)}")
    if algorithm not in table:
        raise AlgorithmError(f"algorithm {algorithm!r} is not available for {op}; choose one "
                             f"of: auto, {', '.join(table)}")
    return table[algorithm]

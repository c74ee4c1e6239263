"""In-network reductions: collectives whose flows end at a switch that reduces or multicasts.

NVLS (NVLink SHARP, NVSwitch gen 3+: HGX/DGX H100 and newer, NVL72) and InfiniBand SHARP
(NCCL's CollNet) are lowerings like any other: phases of flows, some of whose endpoints
are ``SwitchPort``s. The switch reads each GPU's contribution, reduces it and returns the
result (NVLS ``multimem.ld_reduce``), or takes one GPU's data and delivers it to every GPU
(``multimem.st`` multicast). Per GPU and direction an NVLS all-reduce of n bytes over P
ranks moves n + n/P: n of contributions up and n/P of its reduced shard down
(reduce-scatter), then n/P of its shard up and n of everyone's shards down (all-gather).
NCCL pipelines both halves over chunks, so they run as one phase. NVLSTree joins several
NVLink domains: NVLS inside each, a double binary tree of each GPU's shard between them
(``nvls_tree``). Sources: NVIDIA, "NVLink
SHARP" (Hopper architecture whitepaper, 2022); NCCL 2.30.7 src/device/all_reduce.h
(runRing for NVLS: scatter / reduce / gather warps) and tuning.cc (latencies), transcribed
in ../shared/reference/nccl.yaml.
"""

from __future__ import annotations

from simtrain.comm.phases import (
    AlgorithmError,
    Call,
    Context,
    Flow,
    Lowering,
    Phase,
    heap_edges,
    ring_hops,
    servers,
)
from simtrain.engine.network import SwitchPort


def _one_switch(call: Call, ctx: Context, level: str, name: str) -> None:
    """Raise unless every rank of the call hangs off one reducing switch of ``level``."""
    found = {ctx.reducer(level, r) for r in call.ranks}
    if None in found:
        raise AlgorithmError(f"{name} needs NVSwitch SHARP (NVLink SHARP: Hopper or newer "
                             "GPUs on an NVSwitch, cluster nvlink_sharp not false); this "
                             "cluster has none; use ring or tree")
    if len(found) > 1:
        raise AlgorithmError(f"{name} needs all {len(call.ranks)} ranks under one {level}; "
                             f"they span {len(found)}")


def nvls_flows(op: str, ranks: tuple[int, ...], nbytes: float) -> list[Flow]:
    """The flows of an NVLS ``op`` over ``ranks`` (see the module docstring), per rank r:
    reduce_scatter r->switch n and switch->r n/P; all_gather r->switch n/P and switch->r
    n; all_reduce both."""
    p = len(ranks)
    flows: list[Flow] = []
    for r in ranks:
        sw = SwitchPort(r, "nvswitch")
        if op in ("all_reduce", "reduce_scatter"):
            flows += [(r, sw, nbytes), (sw, r, nbytes / p)]
        if op in ("all_reduce", "all_gather"):
            flows += [(r, sw, nbytes / p), (sw, r, nbytes)]
    return flows


def nvls(call: Call, ctx: Context) -> list[Phase]:
    """NVLink SHARP all-reduce, reduce-scatter or all-gather inside one NVLink domain.

    One pipelined phase after NCCL's NVLS latency (hwLat[NVLINK][NVLS][Simple], 25 us in
    NCCL 2.30.7): time = alpha + (n + n/P) / B for all-reduce, n / B for the others, B
    being a GPU's NVLink bandwidth to the switch (with the switch's reduction
    efficiency as the backend's wire factor).
    """
    if len(call.ranks) <= 1:
        return []
    _one_switch(call, ctx, "nvswitch", "NVLS")
    return [Phase(ctx.switch_alpha("nvlink"), tuple(nvls_flows(call.op, call.ranks,
                                                                call.nbytes)))]


def _sharp_level(ranks: list[int], ctx: Context) -> str:
    """The lowest InfiniBand level where ``ranks`` (one rail) meet at one SHARP switch."""
    for level in ("leaf", "spine"):
        found = {ctx.reducer(level, r) for r in ranks}
        if None not in found and len(found) == 1:
            return level
    raise AlgorithmError("CollNet needs InfiniBand SHARP switches above every rank "
                         "(cluster ib_sharp: true); use ring or tree")


def collnet(call: Call, ctx: Context) -> list[Phase]:
    """InfiniBand SHARP all-reduce (NCCL CollNet): per server a ring reduce-scatter over
    NVLink, each GPU's n/G shard reduced in the switch (up n/G, down n/G), a ring
    all-gather; pipelined over chunks, so one phase whose intra-server rings carry
    2(G-1)/G·n per hop. Latency: NCCL's CollNet rows (hwLat NVLINK + NET, 3.7 + 31 us)."""
    if len(call.ranks) <= 1:
        return []
    groups = servers(call.ranks, ctx.fabric)
    if len(groups) < 2:
        raise AlgorithmError("CollNet reduces across servers; this group has one, use "
                             "ring, tree or nvls")
    g = len(groups[0])
    if any(len(grp) != g for grp in groups):
        raise AlgorithmError(f"CollNet needs the same number of GPUs on every server; got "
                             f"{[len(grp) for grp in groups]}")
    flows: list[Flow] = []
    labels: list[int] = []
    for k, grp in enumerate(groups):
        if g > 1:
            hops = ring_hops(grp)
            flows += [(a, b, 2 * (g - 1) / g * call.nbytes) for a, b in hops]
            labels += [k] * len(hops)
    base = len(groups)
    for i in range(g):
        column = [grp[i] for grp in groups]
        level = _sharp_level(column, ctx)
        for r in column:
            sw = SwitchPort(r, level)
            flows += [(r, sw, call.nbytes / g), (sw, r, call.nbytes / g)]
            labels += [base, base + 1]
            base += 2
    alpha = ctx.switch_alpha("nvlink") + ctx.switch_alpha("net")
    return [Phase(alpha, tuple(flows), tuple(labels))]


def _equal_servers(call: Call, ctx: Context, name: str) -> list[list[int]]:
    """The group's ranks per server; an error unless there are several, all the same size."""
    groups = servers(call.ranks, ctx.fabric)
    if len(groups) < 2:
        raise AlgorithmError(f"{name} joins NVLink domains; this group has one, use nvls, "
                             "ring or tree")
    if len({len(grp) for grp in groups}) != 1:
        raise AlgorithmError(f"{name} needs the same number of GPUs on every server; got "
                             f"{[len(grp) for grp in groups]}")
    return groups


def nvls_tree(call: Call, ctx: Context) -> list[Phase]:
    """NCCL's NVLSTree all-reduce across NVLink domains (servers or NVL72 racks).

    Inside each domain of G GPUs an NVLS reduce-scatter and all-gather through the
    NVSwitch (``nvls_flows``, at the switch's wire factor ``ctx.nvls_wire``); between
    domains each GPU is the head of its n/G shard, reduced up and broadcast down a double
    binary tree over the domains on its rail (two mirrored trees of n/(2G) each, as
    NCCL's tree), through its NIC. NCCL runs the stages as one pipeline on the same
    channels, so they form one phase: per direction a head's NIC carries n/G on two
    domains (root in one tree, leaf in the other) and up to 2n/G on more (interior in one
    tree: two children up and down). Latency: the NVLS pipeline's (added by the model)
    plus one network step per tree level up and down (hwLat[NET][NVLS_TREE], 20.9 us in
    NCCL 2.30.7)."""
    groups = _equal_servers(call, ctx, "NVLSTree")
    for grp in groups:
        _one_switch(Call(call.op, tuple(grp), call.nbytes), ctx, "nvswitch", "NVLSTree")
    g, n = len(groups[0]), len(groups)
    wire = ctx.nvls_wire(g)
    flows: list[Flow] = [(a, b, nb * wire) for grp in groups
                         for a, b, nb in nvls_flows("all_reduce", tuple(grp), call.nbytes)]
    share = call.nbytes / g / 2
    edges: list[tuple[int, int]] = []
    for i in range(g):
        column = [grp[i] for grp in groups]
        for order in (column, column[::-1]):
            edges += heap_edges(order)
    flows += [(child, parent, share) for child, parent in edges]
    flows += [(parent, child, share) for child, parent in edges]
    depth = (n.bit_length() - 1)
    alpha = ctx.switch_alpha("nvlink") + 2 * depth * ctx.step_alpha(edges)
    return [Phase(alpha, tuple(flows))]


IN_NETWORK: dict[str, dict[str, Lowering]] = {
    "all_reduce": {"nvls": nvls, "collnet": collnet, "nvls_tree": nvls_tree},
    "reduce_scatter": {"nvls": nvls},
    "all_gather": {"nvls": nvls},
}

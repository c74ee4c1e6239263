"""Max-min fair sharing of link bandwidth among flows, without SimPy.

``max_min_rates`` is the progressive filling the flow network runs on every start and end
(pure Python below ``VECTOR_THRESHOLD`` flows, numpy above); ``couple`` merges the hops of
a pipelined ring into one flow; ``isolated_time`` predicts when a set of flows started
together alone would end (collective selection and tests).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Sequence
from itertools import chain

import numpy as np

# Route crossings (flow x link) in one rating from which the numpy filling beats the heap.
# Measured on the 970 ratings of the DeepSeek-V3 256-GPU AutoModel row (2 cores): heap
# 6.1 ms vs arrays 7.7 ms over 33 ratings under 256 crossings, arrays 2.6x faster from 256
# to 1,024 crossings and 9x faster from 2,048 to 8,192 (ZeRO-3 rings coupled over 144
# links beside all-to-alls).
VECTOR_THRESHOLD = 256


def max_min_rates(
    routes: Sequence[tuple[int, ...]],
    capacity: Sequence[float],
    caps: Sequence[float] | None = None,
    weights: Sequence[tuple[float, ...] | None] | None = None,
    *,
    vector: bool | None = None,
) -> list[float]:
    """Max-min fair rates (bytes/s) for flows with the given routes over links of ``capacity``.

    Progressive filling: repeatedly find the link whose remaining capacity divided by the
    weight of its unfrozen flows is smallest, give those flows that share, and remove them.
    ``caps`` optionally bounds each flow's own rate (a protocol or host-staging limit),
    modelled as a private link. ``weights[i][k]`` (default 1) says how many identical copies
    of flow i cross its k-th link: a flow standing for m symmetric flows uses m times its
    rate there (symmetric fidelity). A flow with an empty route gets an infinite rate.
    ``vector`` picks the numpy filling (default: from ``VECTOR_THRESHOLD`` route crossings
    on); both give the same rates up to float rounding (the max-min allocation is unique).
    """
    if vector if vector is not None else sum(map(len, routes)) >= VECTOR_THRESHOLD:
        return _fill_arrays(routes, capacity, caps, weights)
    rates = [0.0] * len(routes)
    remaining_cap: dict[int, float] = {}
    users: dict[int, list[tuple[int, float]]] = {}
    load: dict[int, float] = {}  # total weight of unfrozen flows per link
    paths: list[list[tuple[int, float]]] = []
    # A link crossed by one flow only limits that flow alone, to capacity / weight: fold
    # all of a flow's private links (and its own cap) into one private limit, so the
    # filling below runs over shared links only (a wide ring crosses thousands of links
    # nobody else uses). The rates are the same as filling over every link.
    crossers: dict[int, int] = {}
    for route in routes:
        for link in route:
            crossers[link] = crossers.get(link, 0) + 1
    for i, route in enumerate(routes):
        if not route:
            rates[i] = float("inf")
            paths.append([])
            continue
        w = weights[i] if weights is not None else None
        limit = caps[i] if caps is not None else float("inf")
        path = []
        for k, link in enumerate(route):
            weight = 1.0 if w is None else w[k]
            if crossers[link] == 1:
                limit = min(limit, capacity[link] / weight)
            else:
                path.append((link, weight))
        if limit < float("inf"):
            private = -1 - i  # negative ids never clash with real links
            path.append((private, 1.0))
            remaining_cap[private] = limit
        paths.append(path)
        for link, weight in path:
            if link not in users:
                users[link] = []
                load[link] = 0.0
                if link >= 0:
                    remaining_cap[link] = capacity[link]
            users[link].append((i, weight))
            load[link] += weight
    frozen = [not route for route in routes]
    # Lazy min-heap of (fair share, link): a link's share only grows as flows freeze, so
    # stale entries (share no longer current) are skipped when popped. Ties break on the
    # link id, so the result does not depend on dict order.
    current = {link: remaining_cap[link] / w for link, w in load.items()}
    heap = [(share, link) for link, share in current.items()]
    heapq.heapify(heap)
    while heap:
        share, bottleneck = heapq.heappop(heap)
        if current.get(bottleneck) != share:
            continue
        del current[bottleneck]
        for i, _ in users[bottleneck]:
            if frozen[i]:
                continue
            frozen[i] = True
            rates[i] = share
            for link, weight in paths[i]:
                if link == bottleneck:
                    continue
                remaining_cap[link] -= share * weight
                load[link] -= weight
                if load[link] <= 1e-12:
                    current.pop(link, None)
                else:
                    updated = max(remaining_cap[link], 0.0) / load[link]
                    current[link] = updated
                    heapq.heappush(heap, (updated, link))
    return rates


def _fill_arrays(routes: Sequence[tuple[int, ...]], capacity: Sequence[float],
                 caps: Sequence[float] | None,
                 weights: Sequence[tuple[float, ...] | None] | None) -> list[float]:
    """The progressive filling of ``max_min_rates`` on arrays of route crossings (edges).

    Links crossed by one flow fold into that flow's private limit, as in the heap filling.
    Each round takes every link at the least fair share at once (links tied exactly keep
    that share while the others freeze: (c - s*w) / (l - w) = s when c / l = s), freezes
    their unfrozen flows at it, charges it to the other links those flows cross and drops
    their edges, so a round costs the edges still unfrozen and the rounds are the distinct
    rate levels, not the bottleneck links."""
    n = len(routes)
    lengths = np.fromiter(map(len, routes), dtype=np.int64, count=n)
    n_edges = int(lengths.sum())
    rate = np.full(n, np.inf)  # an empty route is instant
    if n_edges == 0:
        return rate.tolist()
    raw = np.fromiter(chain.from_iterable(routes), dtype=np.int64, count=n_edges)
    edge_flow = np.repeat(np.arange(n), lengths)
    if weights is None:
        edge_w = np.ones(n_edges)
    else:
        edge_w = np.fromiter(chain.from_iterable(
            (1.0,) * len(r) if w is None else w for r, w in zip(routes, weights, strict=True)),
            dtype=np.float64, count=n_edges)
    ids, edge_link = np.unique(raw, return_inverse=True)
    n_links = len(ids)
    link_cap = np.fromiter((capacity[link] for link in ids.tolist()), dtype=np.float64,
                           count=n_links)
    private = np.bincount(edge_link, minlength=n_links)[edge_link] == 1
    limit = np.full(n, np.inf) if caps is None else np.array(caps, dtype=np.float64)
    if private.any():
        np.minimum.at(limit, edge_flow[private], link_cap[edge_link[private]] / edge_w[private])
    shared = ~private
    e_flow, e_link, e_w, cap = edge_flow[shared], edge_link[shared], edge_w[shared], link_cap
    capped = np.flatnonzero(limit < np.inf)  # each a private link of its own limit
    if len(capped):
        e_flow = np.concatenate([e_flow, capped])
        e_link = np.concatenate([e_link, n_links + np.arange(len(capped))])
        e_w = np.concatenate([e_w, np.ones(len(capped))])
        cap = np.concatenate([cap, limit[capped]])
        n_links += len(capped)
    load = np.bincount(e_link, weights=e_w, minlength=n_links)
    active = load > 1e-12
    frozen = np.zeros(n, dtype=bool)
    while active.any():
        with np.errstate(divide="ignore"):
            share = np.where(active, np.maximum(cap, 0.0) / np.where(active, load, 1.0),
                             np.inf)
        value = share.min()
        bottleneck = share == value
        active &= ~bottleneck
        newly = np.zeros(n, dtype=bool)
        newly[e_flow[bottleneck[e_link]]] = True
        newly &= ~frozen
        if not newly.any():
            continue
        frozen |= newly
        rate[newly] = value
        hit = newly[e_flow]
        cap = cap - np.bincount(e_link[hit], weights=value * e_w[hit], minlength=n_links)
        load -= np.bincount(e_link[hit], weights=e_w[hit], minlength=n_links)
        e_flow, e_link, e_w = e_flow[~hit], e_link[~hit], e_w[~hit]
        active &= load > 1e-12
    return rate.tolist()


def couple(
    transfers: Sequence[tuple[tuple[int, ...], float]],
    weights: Sequence[tuple[float, ...] | None] | None,
    labels: Sequence[int],
) -> tuple[list[tuple[tuple[int, ...], float]], list[tuple[float, ...]], list[list[int]]]:
    """Merge the flows of each label into one flow that moves them at one common rate.

    A pipelined ring forwards every chunk hop by hop, so all its hops carry data at the
    pace of the slowest: modelled as one flow over the union of their links, each link
    weighted by how many of the hops (and their symmetric copies) cross it, carrying one
    hop's bytes (the largest, when they differ). Under max-min sharing this flow's rate is
    the ring's rate; what the fast hops would not use stays free for other traffic. Returns
    (merged transfers, their weights, the original indices of each merged flow).
    """
    groups: dict[int, list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(label, []).append(i)
    merged: list[tuple[tuple[int, ...], float]] = []
    merged_weights: list[tuple[float, ...]] = []
    members: list[list[int]] = []
    for index in groups.values():
        live = [i for i in index if transfers[i][1] > 0 and transfers[i][0]]
        nbytes = max((transfers[i][1] for i in live), default=0.0)
        if weights is None or all(weights[i] is None for i in live):
            # Every hop counts 1 per link: a C-level count, in first-crossing order as the
            # loop below (integer sums of 1.0 are exact either way).
            tally = Counter(chain.from_iterable(transfers[i][0] for i in live))
            merged.append((tuple(tally), nbytes))
            merged_weights.append(tuple(float(n) for n in tally.values()))
            members.append(index)
            continue
        counts: dict[int, float] = {}
        for i in live:
            w = weights[i]
            for k, link in enumerate(transfers[i][0]):
                counts[link] = counts.get(link, 0.0) + (1.0 if w is None else w[k])
        merged.append((tuple(counts), nbytes))
        merged_weights.append(tuple(counts.values()))
        members.append(index)
    return merged, merged_weights, members


def isolated_time(
    flows: Sequence[tuple[tuple[int, ...], float]],
    capacity: Sequence[float],
    caps: Sequence[float] | None = None,
    weights: Sequence[tuple[float, ...] | None] | None = None,
    coupled: Sequence[int] | None = None,
) -> float:
    """Seconds until the last of ``flows`` (route, bytes) ends when they start together alone.

    The same max-min sharing as the engine, without SimPy: used to predict an algorithm's
    uncongested time (for NCCL-style selection) and in tests. ``coupled`` labels flows that
    move at one common rate (``couple``).
    """
    if coupled is not None:
        flows, merged_weights, members = couple(flows, weights, coupled)
        weights = list(merged_weights)
        if caps is not None:
            caps = [min(caps[i] for i in index) for index in members]
    # Only the links the flows cross: ``capacity`` lists every link of the cluster (a
    # million on 16k GPUs) and this runs for every candidate algorithm of every collective.
    check_transfers(flows, [capacity[link] for route, _ in flows for link in route], caps)
    active = [(route, nbytes, i) for i, (route, nbytes) in enumerate(flows) if nbytes > 0 and route]
    now = 0.0
    remaining = {i: nbytes for _, nbytes, i in active}
    while active:
        rates = max_min_rates([r for r, _, _ in active], capacity,
                              None if caps is None else [caps[i] for _, _, i in active],
                              None if weights is None else [weights[i] for _, _, i in active])
        times = [remaining[i] / rate for (_, _, i), rate in zip(active, rates, strict=True)]
        step = min(times)
        now += step
        still = []
        for (route, nbytes, i), rate, t in zip(active, rates, times, strict=True):
            # The flows whose own time is the step end now, whatever the float residue of
            # remaining - rate * step (for 5e-324 bytes, step underflows to 0): every
            # round ends at least one flow, so the loop runs at most len(flows) times.
            if t <= step:
                continue
            remaining[i] -= rate * step
            if remaining[i] > nbytes * 1e-12:
                still.append((route, nbytes, i))
        active = still
    return now


def check_transfers(flows: Sequence[tuple[tuple[int, ...], float]],
                    capacity: Sequence[float] | None = None,
                    caps: Sequence[float] | None = None) -> None:
    """Raise ValueError unless every size is finite and >= 0 and every capacity and cap is
    > 0 (a cap may be infinite): a NaN or infinite size would never finish."""
    for route, nbytes in flows:
        if not (math.isfinite(nbytes) and nbytes >= 0):
            raise ValueError(f"a transfer must move a finite, non-negative number of bytes, "
                             f"got {nbytes!r} over links {route}")
    for name, values, inf_ok in (("link capacity", capacity, False), ("flow cap", caps, True)):
        for value in values or ():
            if not (value > 0 and (inf_ok or math.isfinite(value))):
                raise ValueError(f"a {name} must be {'> 0' if inf_ok else 'finite and > 0'} "
                                 f"bytes/s, got {value!r}")



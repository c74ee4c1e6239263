"""Link utilisation over time, from the timeline's network flows.

Each ``FlowRecord`` moved ``nbytes`` over its route's directed links in [start, end); its
average rate ``nbytes / (end - start)`` is charged to every link of the route. A link's
utilisation in a time bin is the bytes it carried in the bin divided by what its
bandwidth could carry. Cost: O(flows × route length + links × log flows).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from simtrain.engine.timeline import Timeline
from simtrain.units import fmt_bandwidth


@dataclass(frozen=True)
class LinkLoad:
    """One link's traffic in a step: total bytes and binned utilisation (0..1 of bandwidth)."""

    link: int
    label: str
    kind: str
    bandwidth: float
    nbytes: float
    utilisation: np.ndarray  # one value per bin


def link_label(link: Any, index: int) -> str:
    """``src→dst (kind, bandwidth)`` for a fabric link; ``link 3`` when it has no names."""
    src, dst = getattr(link, "src", None), getattr(link, "dst", None)
    kind = getattr(link, "kind", "")
    bw = getattr(link, "bandwidth", 0.0)
    where = f"{src}→{dst}" if src is not None and dst is not None else f"link {index}"
    extra = ", ".join(x for x in (kind, fmt_bandwidth(bw) if bw else "") if x)
    return f"{where} ({extra})" if extra else where


def _ramps(points: np.ndarray, rates: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Σ_i rates[i]·max(0, t - points[i]) at each t (vectorised with cumulative sums)."""
    order = np.argsort(points, kind="stable")
    p_sorted, r_sorted = points[order], rates[order]
    cum_r = np.concatenate(([0.0], np.cumsum(r_sorted)))
    cum_rp = np.concatenate(([0.0], np.cumsum(r_sorted * p_sorted)))
    k = np.searchsorted(p_sorted, t, side="right")
    result: np.ndarray = cum_r[k] * t - cum_rp[k]
    return result


def _integral(starts: np.ndarray, ends: np.ndarray, rates: np.ndarray,
              t: np.ndarray) -> np.ndarray:
    """F(t) = bytes carried by all flows up to time t (piecewise-linear, vectorised): each
    flow ramps up at its rate from its start and stops ramping at its end."""
    return _ramps(starts, rates, t) - _ramps(ends, rates, t)


def choose_busiest(totals: dict[int, float], links: Sequence[Any], top: int) -> list[int]:
    """The ``top`` busiest links: the busiest of each link kind first, then the rest.

    Busiest means the largest share of line rate used over the step (bytes / bandwidth;
    bytes alone when a link has no bandwidth). Taking each kind's busiest first keeps a
    slow, saturated NIC in view next to NVLink links that move more bytes.
    """

    def load(lk: int) -> float:
        bw = float(getattr(links[lk], "bandwidth", 0.0) or 0.0) if 0 <= lk < len(links) else 0.0
        return totals[lk] / bw if bw > 0 else totals[lk]

    def kind(lk: int) -> str:
        return str(getattr(links[lk], "kind", "")) if 0 <= lk < len(links) else ""

    ranked = sorted(totals, key=lambda lk: (-load(lk), lk))
    firsts: dict[str, int] = {}
    for lk in ranked:
        firsts.setdefault(kind(lk), lk)
    head = sorted(firsts.values(), key=ranked.index)[:top]
    rest = [lk for lk in ranked if lk not in set(head)]
    return sorted(head + rest[: top - len(head)], key=ranked.index)


def busiest_links(
    timeline: Timeline,
    links: Sequence[Any],
    *,
    top: int = 6,
    bins: int = 200,
    horizon: float | None = None,
) -> tuple[np.ndarray, list[LinkLoad]]:
    """Bin edges (s) and the ``top`` busiest links (see :func:`choose_busiest`), in order.

    ``links`` is the fabric's link list (``Cluster.links``), indexed by the flows' link ids.
    """
    horizon = timeline.end if horizon is None else horizon
    edges = np.linspace(0.0, horizon, bins + 1) if horizon > 0 else np.zeros(1)
    per_link: dict[int, list[int]] = {}
    totals: dict[int, float] = {}
    flows = timeline.flows
    for i, f in enumerate(flows):
        if f.end <= f.start or f.nbytes <= 0:
            continue
        for lk in f.route:
            per_link.setdefault(lk, []).append(i)
            totals[lk] = totals.get(lk, 0.0) + f.nbytes
    chosen = choose_busiest(totals, links, top)
    out: list[LinkLoad] = []
    for lk in chosen:
        idx = per_link[lk]
        starts = np.array([flows[i].start for i in idx])
        ends = np.array([flows[i].end for i in idx])
        rates = np.array([flows[i].nbytes for i in idx]) / (ends - starts)
        link = links[lk] if 0 <= lk < len(links) else None
        bw = float(getattr(link, "bandwidth", 0.0) or 0.0)
        carried = np.diff(_integral(starts, ends, rates, edges)) if bins > 0 else np.zeros(0)
        width = np.diff(edges)
        with np.errstate(divide="ignore", invalid="ignore"):
            util = np.where((width > 0) & (bw > 0), carried / (width * bw), 0.0)
        out.append(LinkLoad(lk, link_label(link, lk), str(getattr(link, "kind", "")), bw,
                            totals[lk], util))
    return edges, out

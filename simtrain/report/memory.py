"""Memory per GPU: the stack at its peak, and memory over the step.

The memory model (``simtrain.workload.memory``) gives the peak stack of the fullest stage:
weights, gradients, optimizer states and buffers are held the whole step; activations
are saved by each microbatch's forward and freed by its backward. The timeline does not
carry bytes, so the curve over time takes its *shape* from the timeline and its *scale*
from the model: a (microbatch, model chunk) pair holds a share of its activations that
grows with the forward spans it has finished and shrinks with the backward spans, and the
curve is scaled so its maximum is the model's activation peak. The y axis starts at 0 and
ends just above the peak; HBM capacity is drawn when the peak comes near it and named in
the title otherwise (an 80 GiB axis under 6 GiB of data hides the shape).
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from simtrain.engine.timeline import SpanKind, Timeline
from simtrain.report.rows import rank_labels, role_representatives
from simtrain.units import fmt_bytes

GIB = 2**30
# Fixed colours so the bar and the curve read alike; other categories take plotly's.
MEMORY_COLORS = {"weights": "#4c78a8", "gradients": "#f58518", "optimizer": "#54a24b",
                 "activations": "#e45756", "comm_buffers": "#b279a2"}
CAPACITY_LINE_ABOVE = 0.5  # draw the HBM line when the peak is above this share of it


def activation_units(timeline: Timeline, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(times in s, microbatch-chunks of activations held) on ``rank`` over the step.

    Each forward span of microbatch m, chunk c adds 1/(forward spans of (m, c)) when it
    ends; each backward span removes 1/(backward spans of (m, c)). Starts and ends at 0.
    """
    fwd: dict[tuple[int, int], int] = {}
    bwd: dict[tuple[int, int], int] = {}
    spans = [s for s in timeline.spans if s.rank == rank and "microbatch" in s.meta
             and s.kind in (SpanKind.FORWARD, SpanKind.BACKWARD)]
    for s in spans:
        key = (int(s.meta["microbatch"]), int(s.meta.get("chunk", 0)))
        table = fwd if s.kind == SpanKind.FORWARD else bwd
        table[key] = table.get(key, 0) + 1
    events = []
    for s in spans:
        key = (int(s.meta["microbatch"]), int(s.meta.get("chunk", 0)))
        if s.kind == SpanKind.FORWARD:
            events.append((s.end, 1.0 / fwd[key]))
        elif key in fwd:
            events.append((s.end, -1.0 / bwd[key]))
    events.sort()
    times = np.array([0.0] + [t for t, _ in events] + [timeline.end])
    held = np.concatenate(([0.0], np.cumsum([d for _, d in events]), [0.0]))
    held[-2:] = np.maximum(held[-2:], 0.0)
    return times, np.maximum(held, 0.0)


def fullest_rank(timeline: Timeline) -> int | None:
    """The rank (one per role) holding the most activations at once; None if none do."""
    best: tuple[float, int] | None = None
    for rank in role_representatives(timeline):
        _, held = activation_units(timeline, rank)
        peak = float(held.max()) if held.size else 0.0
        if peak > 0 and (best is None or peak > best[0] + 1e-12):
            best = (peak, rank)
    return None if best is None else best[1]


def _to_gib(key: str, value: float, plain_is_gib: bool) -> float:
    k = key.lower()
    if k.endswith("_gib") or k.endswith("_gb"):
        return value
    if k.endswith("_mib"):
        return value / 1024
    if k.endswith("_bytes") or not plain_is_gib:
        return value / GIB
    return value


def _strip_unit(key: str) -> str:
    for suffix in ("_gib", "_gb", "_mib", "_bytes"):
        if key.lower().endswith(suffix):
            return key[: -len(suffix)]
    return key


def _stacks(breakdown: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """{group: {category: GiB}} from a flat or nested ``memory_breakdown``.

    A key ending in ``_gib``/``_mib``/``_bytes`` says its unit; plain keys are GiB when every
    plain amount is below 10^6 (no memory category is under a megabyte when in bytes), else
    bytes.
    """
    if all(isinstance(v, Mapping) for v in breakdown.values()):
        groups = {str(g): dict(v) for g, v in breakdown.items()}
    else:
        groups = {"per GPU": dict(breakdown)}
    plain = [float(v) for parts in groups.values() for k, v in parts.items()
             if isinstance(v, int | float) and _strip_unit(k) == k]
    plain_is_gib = all(abs(v) < 1e6 for v in plain)
    return {g: {_strip_unit(k): _to_gib(k, float(v), plain_is_gib) for k, v in parts.items()
                if isinstance(v, int | float)} for g, parts in groups.items()}


def memory_figure(summary: Mapping[str, Any], capacity_bytes: float | None = None,
                  timeline: Timeline | None = None, server_of: Any = None) -> go.Figure | None:
    """The memory stack from ``summary["memory_breakdown"]`` (absent: no figure) and, when
    ``timeline`` is given and the stack has activations, memory over the step beside it.

    Accepts ``{category: amount}`` (one GPU) or ``{gpu or stage: {category: amount}}``.
    """
    breakdown = summary.get("memory_breakdown")
    if not isinstance(breakdown, Mapping) or not breakdown:
        return None
    groups = _stacks(breakdown)
    categories: list[str] = []
    for parts in groups.values():
        categories += [c for c in parts if c not in categories]
    flat = len(groups) == 1 and "activations" in categories
    rank = fullest_rank(timeline) if timeline is not None and flat else None
    fig = make_subplots(rows=1, cols=2, column_widths=[0.25, 0.75], shared_yaxes=True,
                        horizontal_spacing=0.03) if rank is not None else go.Figure()
    names = list(groups)
    top = max(sum(parts.values()) for parts in groups.values())
    for cat in categories:
        color = MEMORY_COLORS.get(cat)
        bar = go.Bar(name=cat.replace("_", " "), x=names,
                     y=[parts.get(cat, 0.0) for parts in groups.values()],
                     marker={"color": color} if color else None, legendgroup=cat,
                     hovertemplate=f"%{{x}}<br>{html.escape(cat)}: %{{y:.2f}} GiB"
                     "<extra></extra>")
        if rank is None:
            fig.add_trace(bar)
        else:
            fig.add_trace(bar, row=1, col=1)
    title = "Memory per GPU"
    if rank is not None:
        assert timeline is not None
        _add_over_time(fig, timeline, rank, groups[names[0]], categories, server_of)
        label = rank_labels(range(timeline.num_ranks), server_of).get(rank, str(rank))
        title = f"Memory per GPU: the peak stack, and over the step on {label}"
    ymax = top * 1.12 if top > 0 else 1.0
    if capacity_bytes:
        cap = capacity_bytes / GIB
        if top >= CAPACITY_LINE_ABOVE * cap:
            ymax = max(ymax, cap * 1.05)
            fig.add_hline(y=cap, line_dash="dash", line_color="#555",
                          annotation_text=f"HBM {fmt_bytes(capacity_bytes)}")
        title += f" · peak {top:,.1f} GiB, {top / cap:.0%} of {fmt_bytes(capacity_bytes)} HBM"
    fig.update_layout(title={"text": title, "font": {"size": 14}}, barmode="stack",
                      height=400, template="plotly_white",
                      margin={"l": 10, "r": 10, "t": 60, "b": 50},
                      bargap=0.5 if len(names) <= 2 else 0.3)
    fig.update_yaxes(title={"text": "GiB"}, range=[0, ymax], row=None, col=None)
    if rank is not None:
        fig.update_yaxes(title=None, row=1, col=2)
        fig.update_xaxes(title={"text": "time (ms)"}, row=1, col=2)
    return fig


def _add_over_time(fig: go.Figure, timeline: Timeline, rank: int, stack: Mapping[str, float],
                   categories: list[str], server_of: Any) -> None:
    """Stacked areas: the held categories flat across the step, activations on top."""
    times, held = activation_units(timeline, rank)
    scale = stack.get("activations", 0.0) / float(held.max()) if held.max() > 0 else 0.0
    x = times * 1e3
    for cat in [c for c in categories if c != "activations"] + ["activations"]:
        y = held * scale if cat == "activations" else np.full_like(x, stack.get(cat, 0.0))
        color = MEMORY_COLORS.get(cat)
        fig.add_trace(go.Scatter(
            x=x, y=np.round(y, 6), name=cat.replace("_", " "), legendgroup=cat,
            showlegend=False, stackgroup="held", mode="lines", line={"shape": "hv",
                                                                    "width": 0.5,
                                                                    "color": color},
            hovertemplate=f"%{{x:.2f}} ms<br>{html.escape(cat)}: %{{y:.2f}} GiB"
            "<extra></extra>"), row=1, col=2)
    del server_of


MEMORY_CAPTION = ("Over the step: the rank holding the most activations at once. Weights, "
                  "gradients, optimizer states and buffers are held throughout; activations "
                  "take their shape from the timeline (a microbatch's share grows with its "
                  "finished forward spans and shrinks with its backward spans) and their "
                  "scale from the memory model, whose peak the curve reaches.")

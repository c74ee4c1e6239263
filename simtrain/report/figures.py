"""Breakdown figures of the report, each computed from the timeline (or the summary).

- communication per parallel group: overlapped with compute vs exposed, per span kind;
- the memory stack per GPU and memory over the step (:mod:`simtrain.report.memory`);
- utilisation over time of the busiest links (from the timeline's flows);
- the critical path as an HTML table of merged segments with their share of the step.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from simtrain.engine.timeline import (
    COMM_KINDS,
    COMPUTE_KINDS,
    SpanKind,
    Timeline,
    merge_intervals,
)
from simtrain.engine.timeline import overlap_length as _overlap
from simtrain.report.critical import CriticalPath
from simtrain.report.gantt import KIND_COLORS, ServerOf, kind_color, plural, rank_labels
from simtrain.report.links import busiest_links
from simtrain.units import fmt_bytes, fmt_seconds

GROUP_LABELS: dict[str, str] = {
    SpanKind.DP_COMM: "DP / ZeRO",
    SpanKind.TP_COMM: "TP / SP",
    SpanKind.CP_COMM: "CP",
    SpanKind.PP_COMM: "PP send/recv",
    SpanKind.EP_COMM: "EP all-to-all",
    SpanKind.COMM: "other comm",
}
LINK_COLORS = {"nvlink": "#2ca02c", "pcie": "#ff7f0e", "ib": "#1f77b4", "ethernet": "#9467bd"}
OVERLAPPED_COLOR = "#74c476"
EXPOSED_COLOR = "#de2d26"
_LAYOUT: dict[str, Any] = {
    "template": "plotly_white",
    "margin": {"l": 10, "r": 10, "t": 60, "b": 50},
}


def comm_overlap(timeline: Timeline) -> dict[str, tuple[float, float]]:
    """Per communication kind: (overlapped, exposed) seconds, averaged over ranks.

    Overlapped is the part of the kind's busy time during which the rank also computes;
    exposed is the rest. O(spans log spans).
    """
    compute: dict[int, list[tuple[float, float]]] = {}
    comm: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for s in timeline.spans:
        if s.kind in COMPUTE_KINDS:
            compute.setdefault(s.rank, []).append((s.start, s.end))
        elif s.kind in COMM_KINDS or s.is_comm:
            comm.setdefault((s.rank, s.kind), []).append((s.start, s.end))
    merged_compute = {r: merge_intervals(v) for r, v in compute.items()}
    ranks = {s.rank for s in timeline.spans}
    totals: dict[str, list[float]] = {}
    for (rank, kind), intervals in comm.items():
        merged = merge_intervals(intervals)
        busy = sum(e - s for s, e in merged)
        hidden = _overlap(merged, merged_compute.get(rank, []))
        acc = totals.setdefault(kind, [0.0, 0.0])
        acc[0] += hidden
        acc[1] += busy - hidden
    n = max(len(ranks), 1)
    order = [k for k in COMM_KINDS if k in totals] + sorted(set(totals) - set(COMM_KINDS))
    return {k: (totals[k][0] / n, totals[k][1] / n) for k in order}


def comm_overlap_figure(timeline: Timeline) -> go.Figure | None:
    """Stacked bars per parallel group: overlapped vs exposed communication (ms per GPU)."""
    data = comm_overlap(timeline)
    if not data:
        return None
    labels = [GROUP_LABELS.get(k, k) for k in data]
    fig = go.Figure()
    for i, (name, color) in enumerate((("overlapped with compute", OVERLAPPED_COLOR),
                                       ("exposed", EXPOSED_COLOR))):
        fig.add_trace(go.Bar(
            name=name, y=labels, x=[v[i] * 1e3 for v in data.values()], orientation="h",
            marker={"color": color},
            hovertemplate=f"%{{y}}<br>{name}: %{{x:.3f}} ms per GPU<extra></extra>",
        ))
    fig.update_layout(
        title={"text": "Communication per parallel group: overlapped vs exposed (mean per GPU)"},
        barmode="stack", height=max(240, 50 * len(labels) + 140),
        xaxis={"title": {"text": "time (ms)"}},
        yaxis={"type": "category", "autorange": "reversed", "automargin": True}, **_LAYOUT,
    )
    return fig


def link_utilisation_figure(timeline: Timeline, links: Sequence[Any], *, top: int = 6,
                            bins: int = 200) -> go.Figure | None:
    """Utilisation (% of line rate) over time of the ``top`` links that carried most bytes,
    one small panel per link on a shared time axis (lines drawn over each other hid the
    links that moved together), each 0-100% and filled, named above its panel."""
    edges, loads = busiest_links(timeline, links, top=top, bins=bins)
    if not loads:
        return None
    centres = (edges[:-1] + edges[1:]) / 2 * 1e3
    n = len(loads)
    titles = [f"{load.label} · {fmt_bytes(load.nbytes)} · peak "
              f"{float(load.utilisation.max(initial=0.0)) * 100:.0f}%" for load in loads]
    fig = make_subplots(rows=n, cols=1, shared_xaxes=True, vertical_spacing=0.35 / n,
                        subplot_titles=titles)
    for i, load in enumerate(loads, start=1):
        color = LINK_COLORS.get(load.kind, "#555555")
        fig.add_trace(go.Scatter(
            name=load.label, x=centres, y=np.round(load.utilisation * 100, 3), mode="lines",
            line={"shape": "hv", "width": 1, "color": color}, fill="tozeroy",
            showlegend=False,
            hovertemplate=f"{html.escape(load.label)}<br>%{{x:.3f}} ms: %{{y:.1f}}%"
            "<extra></extra>",
        ), row=i, col=1)
        fig.update_yaxes(range=[0, 105], tickvals=[0, 50, 100], ticksuffix="%", row=i, col=1)
    fig.update_xaxes(title={"text": "time (ms)"}, rangemode="tozero", row=n, col=1)
    fig.update_annotations(font={"size": 11}, xanchor="left", x=0)
    fig.update_layout(
        title={"text": f"Utilisation of the {n} busiest links (share of line rate; "
                       "the busiest of each link kind first)"},
        height=90 * n + 130, **_LAYOUT,
    )
    return fig


def critical_path_html(path: CriticalPath, *, server_of: ServerOf | None = None,
                       num_ranks: int = 0, max_rows: int = 40, longest: int = 10) -> str:
    """The critical path in three views: share of the step per kind; the path's stretches
    on each GPU in time order (where it hops between GPUs); its longest segments."""
    if not path.spans:
        return '<p class="muted">No critical path: the timeline is empty.</p>'
    step = path.step_time or 1.0
    labels = rank_labels(range(max(num_ranks, 1 + max(s.rank for s in path.spans))), server_of)
    esc = html.escape

    def swatch(kind: str) -> str:
        return f'<span style="color:{KIND_COLORS.get(kind, kind_color(kind))}">■</span>'

    def pct(x: float) -> str:
        return f"{x / step * 100:.1f}%"

    shares = " · ".join(f"{swatch(k)} {esc(k)} {v * 100:.1f}%"
                        for k, v in path.share_by_kind().items())
    waiting = max(step - path.busy, 0.0)
    head = (f"<p>{plural(len(path.spans), 'span')} on the critical path cover "
            f"{pct(path.busy)} of the step ({fmt_seconds(waiting)} between them). "
            f"By kind: {shares}</p>")
    stretches = path.stretches()
    rows = []
    for run in stretches[:max_rows]:
        busy: dict[str, float] = {}
        for s in run:
            busy[s.kind] = busy.get(s.kind, 0.0) + s.duration
        total = sum(busy.values())
        kinds = ", ".join(f"{swatch(k)} {esc(k)} {fmt_seconds(v)}"
                          for k, v in sorted(busy.items(), key=lambda kv: -kv[1]))
        what = esc(run[0].name if len(run) == 1 else f"{run[0].name} … {run[-1].name}")
        rows.append(
            f"<tr><td>{esc(labels.get(run[0].rank, str(run[0].rank)))}</td>"
            f'<td class="num">{fmt_seconds(run[0].start)}</td>'
            f'<td class="num">{fmt_seconds(run[-1].end)}</td>'
            f'<td class="num">{len(run):,}</td><td class="num">{fmt_seconds(total)}</td>'
            f'<td class="num">{pct(total)}</td><td>{kinds}</td><td>{what}</td></tr>'
        )
    if len(stretches) > max_rows:
        rest = sum(s.duration for run in stretches[max_rows:] for s in run)
        rows.append(f'<tr><td colspan="4">… {len(stretches) - max_rows:,} more stretches</td>'
                    f'<td class="num">{fmt_seconds(rest)}</td><td class="num">{pct(rest)}</td>'
                    "<td></td><td></td></tr>")
    by_gpu = (
        '<table class="summary" id="critical-path-table"><thead><tr><th>GPU</th><th>from</th>'
        "<th>to</th><th>spans</th><th>busy</th><th>share of step</th><th>by kind</th>"
        f'<th>spans</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )
    top = sorted(path.segments(), key=lambda g: (-g.busy, g.start))[:longest]
    seg_rows = "".join(
        f"<tr><td>{esc(labels.get(g.rank, str(g.rank)))}</td><td>{esc(g.stream)}</td>"
        f"<td>{swatch(g.kind)} {esc(g.kind)}</td>"
        f"<td>{esc(g.first if g.count == 1 else f'{g.first} … {g.last}')}</td>"
        f'<td class="num">{g.count:,}</td><td class="num">{fmt_seconds(g.start)}</td>'
        f'<td class="num">{fmt_seconds(g.busy)}</td><td class="num">{pct(g.busy)}</td></tr>'
        for g in top
    )
    longest_table = (
        f"<h4>Longest segments (consecutive spans of one kind on one stream)</h4>"
        '<table class="summary" id="critical-path-longest"><thead><tr><th>GPU</th>'
        "<th>stream</th><th>kind</th><th>spans</th><th>count</th><th>start</th><th>busy</th>"
        f"<th>share of step</th></tr></thead><tbody>{seg_rows}</tbody></table>"
    )
    return f"{head}<h4>Stretches on each GPU, in time order</h4>{by_gpu}{longest_table}"

"""Interactive Gantt chart of a timeline: one row per (rank, stream), one trace per span kind.

Rows are ordered node → GPU → stream (compute streams above communication streams), so rank
0's compute stream is the top row. Each span kind is a single ``go.Bar`` trace (colour and
legend toggle per kind); hover details travel in ``customdata`` with one shared
``hovertemplate``, which keeps a 50k-span timeline to a handful of traces and builds in well
under a second. Times are shown in milliseconds.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import plotly.graph_objects as go

from simtrain.engine.timeline import COMM_KINDS, COMPUTE_KINDS, HOST_KINDS, Span, Timeline
from simtrain.report.rows import (
    GPUS_PER_NODE,
    ServerOf,
    all_ranks,
    default_server_of,
    order_ranks,
    rank_labels,
    representative_ranks,
    role_representatives,
    select_rows,
    stream_sort_key,
    subset_note,
)
from simtrain.units import fmt_bytes, fmt_seconds

# Row selection lives in rows.py; these names stay importable from here.
__all__ = [
    "AGGREGATE_ABOVE", "AGGREGATE_BINS", "CRITICAL_PATH_COLOR", "CRITICAL_PATH_NAME",
    "DEFAULT_MAX_ROWS", "FALLBACK_COLOR", "GPUS_PER_NODE", "HOVER_TEMPLATE", "KIND_COLORS",
    "KIND_ORDER", "ServerOf", "all_ranks", "default_server_of", "fmt_flops", "gantt_figure",
    "hover_fields", "kind_color", "order_ranks", "ordered_kinds", "rank_labels",
    "representative_ranks", "role_representatives", "stream_sort_key", "subset_note",
]


# Compute kinds in blues/greens, communication kinds in oranges/reds/purples.
KIND_COLORS: dict[str, str] = {
    "forward": "#6baed6",
    "backward": "#2171b5",
    "recompute": "#17becf",
    "optimizer": "#31a354",
    "compute": "#74c476",
    "dp_comm": "#fd8d3c",
    "tp_comm": "#d62728",
    "cp_comm": "#9467bd",
    "pp_comm": "#e7298a",
    "ep_comm": "#6a3d9a",
    "comm": "#fdae6b",
    "host": "#969696",
    # A deadlocked step's report (simtrain.engine.sim.stalled_timeline): the rank that
    # stopped in black, the ranks blocked behind it in pale grey.
    "hung": "#000000",
    "blocked": "#d9d9d9",
}
FALLBACK_COLOR = "#999999"
KIND_ORDER: tuple[str, ...] = COMPUTE_KINDS + HOST_KINDS + COMM_KINDS
DEFAULT_MAX_ROWS = 64
# Above this many drawn spans, tiny same-kind neighbours merge into one bar (1/BINS of the
# step at most), so a big timeline stays a few thousand SVG bars.
AGGREGATE_ABOVE = 5000
AGGREGATE_BINS = 600
CRITICAL_PATH_NAME = "critical path"
CRITICAL_PATH_COLOR = "#111111"

# customdata columns: name, kind, start, duration, bytes line, flops line, meta lines.
HOVER_TEMPLATE = (
    "<b>%{customdata[0]}</b><br>"
    "kind: %{customdata[1]}<br>"
    "start: %{customdata[2]}<br>"
    "duration: %{customdata[3]}"
    "%{customdata[4]}%{customdata[5]}%{customdata[6]}"
    "<extra>%{y}</extra>"
)


def kind_color(kind: str) -> str:
    """Fixed colour of a span kind (grey for kinds the palette does not know)."""
    return KIND_COLORS.get(kind, FALLBACK_COLOR)


def ordered_kinds(kinds: Iterable[str]) -> list[str]:
    """Kinds in palette order (compute first, then comm), unknown kinds last, alphabetically."""
    present = set(kinds)
    known = [k for k in KIND_ORDER if k in present]
    return known + sorted(present - set(KIND_ORDER))


def fmt_flops(flops: float) -> str:
    """FLOPs as TFLOP for hover text: 1.5e12 -> '1.50 TFLOP'."""
    tflop = flops / 1e12
    return f"{tflop:,.2f} TFLOP" if tflop >= 0.01 else f"{tflop:.3g} TFLOP"


def _fmt_meta_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def hover_fields(span: Span) -> tuple[str, str, str, str, str, str, str]:
    """The customdata row of one span (HTML-escaped; optional lines are empty when absent)."""
    esc = html.escape
    nbytes = f"<br>bytes: {fmt_bytes(span.bytes)}" if span.bytes > 0 else ""
    flops = f"<br>FLOPs: {fmt_flops(span.flops)}" if span.flops > 0 else ""
    meta = "".join(
        f"<br>{esc(str(k).replace('_', ' '))}: {esc(_fmt_meta_value(v))}"
        for k, v in span.meta.items()
    )
    return (
        esc(span.name),
        esc(span.kind),
        fmt_seconds(span.start),
        fmt_seconds(span.duration),
        nbytes,
        flops,
        meta,
    )


@dataclass
class _KindBars:
    """Column lists of one kind's bars, turned into a single trace at the end."""

    y: list[str] = field(default_factory=list)
    base: list[float] = field(default_factory=list)
    length: list[float] = field(default_factory=list)
    custom: list[tuple[str, ...]] = field(default_factory=list)

    def add(self, label: str, start: float, end: float, custom: tuple[str, ...]) -> None:
        self.y.append(label)
        self.base.append(start * 1e3)
        self.length.append((end - start) * 1e3)
        self.custom.append(custom)


def _aggregate(spans: list[Span], resolution: float) -> list[list[Span]]:
    """Runs of same-kind spans on one row, each at most ``resolution`` long (sorted input)."""
    groups: list[list[Span]] = []
    for s in spans:
        g = groups[-1] if groups else None
        if (g is not None and g[-1].kind == s.kind and s.start - g[-1].end <= resolution
                and s.end - g[0].start <= resolution):
            g.append(s)
        else:
            groups.append([s])
    return groups


def _group_fields(group: list[Span]) -> tuple[str, ...]:
    if len(group) == 1:
        return hover_fields(group[0])
    first, last = group[0], group[-1]
    nbytes = sum(s.bytes for s in group)
    flops = sum(s.flops for s in group)
    busy = sum(s.duration for s in group)
    esc = html.escape
    return (
        esc(f"{len(group)} × {first.kind}: {first.name} … {last.name}"),
        esc(first.kind),
        fmt_seconds(first.start),
        f"{fmt_seconds(last.end - first.start)} (busy {fmt_seconds(busy)})",
        f"<br>bytes: {fmt_bytes(nbytes)}" if nbytes > 0 else "",
        f"<br>FLOPs: {fmt_flops(flops)}" if flops > 0 else "",
        "<br>aggregated: zoomed out view of a large timeline; the trace export has every span",
    )


def gantt_figure(
    timeline: Timeline,
    *,
    title: str = "",
    ranks: Sequence[int] | None = None,
    server_of: ServerOf | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    representatives: Sequence[int] | None = None,
    highlight: Iterable[Span] = (),
    aggregate_above: int = AGGREGATE_ABOVE,
    x_range: tuple[float, float] | None = None,
) -> go.Figure:
    """Gantt chart of ``timeline``: rows (rank, stream), bars coloured by span kind, x in ms.

    ``ranks`` restricts the chart to those ranks (None: all). If more than ``max_rows`` rows
    remain, a representative subset of ranks is shown (first, last, evenly spaced) and the
    title says so. ``server_of`` maps a rank to its node for labels and grouping (default
    ``rank // 8``).

    ``representatives``: ranks shown at first (e.g. one per role); the other selected ranks
    are drawn as hidden traces that a menu in the chart reveals. ``highlight``: spans to
    outline (the critical path). Above ``aggregate_above`` drawn spans, runs of same-kind
    spans on a row shorter than 1/``AGGREGATE_BINS`` of the step merge into one bar, which
    keeps the browser responsive. ``x_range`` (ms) fixes the time axis (aligned charts).
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, got {max_rows}")
    rows, shown, available = select_rows(timeline, ranks, server_of, max_rows,
                                          representatives or ())
    labels = rank_labels(all_ranks(timeline), server_of)
    row_label = {(r, st): f"{labels[r]} · {st}" for r, st in rows}
    shown_ranks = {r for r, _ in rows}
    reps = set(representatives or ()) & shown_ranks
    two_levels = bool(reps) and reps != shown_ranks
    level_of = {row: (0 if not two_levels or row[0] in reps else 1) for row in rows}

    per_row: dict[tuple[int, str], list[Span]] = {}
    for s in timeline.spans:
        key = (s.rank, s.stream)
        if key in row_label:
            per_row.setdefault(key, []).append(s)
    drawn = sum(len(v) for v in per_row.values())
    aggregate = drawn > aggregate_above
    resolution = (timeline.end or 1.0) / AGGREGATE_BINS

    bars: dict[tuple[int, str], _KindBars] = {}
    for row in rows:
        spans = per_row.get(row, [])
        level = level_of[row]
        if aggregate:
            spans = sorted(spans, key=lambda s: (s.start, s.end))
            for group in _aggregate(spans, resolution):
                kb = bars.setdefault((level, group[0].kind), _KindBars())
                kb.add(row_label[row], group[0].start, group[-1].end, _group_fields(group))
        else:
            for s in spans:
                kb = bars.setdefault((level, s.kind), _KindBars())
                kb.add(row_label[row], s.start, s.end, hover_fields(s))

    fig = go.Figure()
    visible_flags: list[bool] = []
    for level in (0, 1) if two_levels else (0,):
        for kind in ordered_kinds(k for lv, k in bars if lv == level):
            kb = bars[(level, kind)]
            fig.add_trace(_bar_trace(kind, kb, kind_color(kind), legendgroup=kind,
                                     showlegend=level == 0, visible=level == 0))
            visible_flags.append(level == 0)
    # Critical runs on a row merge across short gaps, so the outline reads as one box
    # around a burst of thin bars instead of painting each of them black.
    crit = _highlight_bars(highlight, row_label, level_of, (timeline.end or 1.0) / 150)
    for level, kb in sorted(crit.items()):
        trace = _bar_trace(CRITICAL_PATH_NAME, kb, "rgba(0,0,0,0)", legendgroup="critical",
                           showlegend=level == 0, visible=level == 0)
        trace.marker.line = {"width": 1.6, "color": CRITICAL_PATH_COLOR}
        fig.add_trace(trace)
        visible_flags.append(level == 0)

    full_title = title
    rows0 = [row_label[r] for r in rows if level_of[r] == 0]
    categories = [row_label[r] for r in rows]
    if two_levels:
        note = (f"one representative rank per role ({len(reps)} of {available} ranks); "
                "use the menu to show more")
        full_title = f"{title} — {note}" if title else note
    elif shown < available:
        note = subset_note(shown, available)
        full_title = f"{title} — {note}" if title else note
    if aggregate:
        full_title += " · small spans aggregated"
    fig.update_layout(
        title={"text": html.escape(full_title)},
        template="plotly_white",
        barmode="overlay",
        dragmode="zoom",
        hovermode="closest",
        height=_height(len(rows0)),
        margin={"l": 10, "r": 10, "t": 80 if two_levels else 60, "b": 50},
        legend={"title": {"text": "kind"}},
        xaxis={"title": {"text": "time (ms)"}, "rangemode": "tozero"},
        yaxis={
            "type": "category",
            "categoryorder": "array",
            "categoryarray": rows0,
            "autorange": "reversed",
            "automargin": True,
        },
    )
    if x_range is not None:
        fig.update_xaxes(range=list(x_range), autorange=False)
    if two_levels:
        fig.update_layout(updatemenus=[{
            "type": "dropdown", "direction": "down", "x": 1.0, "xanchor": "right",
            "y": 1.0, "yanchor": "bottom", "showactive": True,
            "buttons": [
                {"label": f"{len(reps)} representative ranks", "method": "update",
                 "args": [{"visible": visible_flags},
                          {"yaxis.categoryarray": rows0, "height": _height(len(rows0))}]},
                {"label": f"{shown} ranks", "method": "update",
                 "args": [{"visible": [True] * len(visible_flags)},
                          {"yaxis.categoryarray": categories,
                           "height": _height(len(categories))}]},
            ],
        }])
    return fig


def _height(rows: int) -> int:
    return max(300, 22 * rows + 160)


def _bar_trace(name: str, kb: _KindBars, color: str, **kw: Any) -> go.Bar:
    return go.Bar(
        name=name,
        y=np.array(kb.y, dtype=object),
        base=np.array(kb.base, dtype=float),
        x=np.array(kb.length, dtype=float),
        orientation="h",
        width=0.8,
        marker={"color": color, "line": {"width": 0}},
        customdata=np.array(kb.custom, dtype=object),
        hovertemplate=HOVER_TEMPLATE,
        **kw,
    )


def _highlight_bars(
    spans: Iterable[Span],
    row_label: dict[tuple[int, str], str],
    level_of: dict[tuple[int, str], int],
    resolution: float,
) -> dict[int, _KindBars]:
    """Outline bars for the highlighted spans on drawn rows; touching spans merge."""
    per_row: dict[tuple[int, str], list[Span]] = {}
    for s in spans:
        if (s.rank, s.stream) in row_label:
            per_row.setdefault((s.rank, s.stream), []).append(s)
    out: dict[int, _KindBars] = {}
    for row, row_spans in per_row.items():
        row_spans.sort(key=lambda s: s.start)
        runs: list[list[Span]] = []
        for s in row_spans:
            if runs and s.start - runs[-1][-1].end <= resolution:
                runs[-1].append(s)
            else:
                runs.append([s])
        kb = out.setdefault(level_of[row], _KindBars())
        for run in runs:
            first, last = run[0], run[-1]
            custom = (
                html.escape(f"critical path: {first.name} … {last.name}" if len(run) > 1
                            else f"critical path: {first.name}"),
                "critical path", fmt_seconds(first.start), fmt_seconds(last.end - first.start),
                "", "", f"<br>spans: {len(run)}",
            )
            kb.add(row_label[row], first.start, last.end, custom)
    return out

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

from simtrain.engine.timeline import (
    COMM_KINDS,
    COMPUTE_KINDS,
    HOST_KINDS,
    Span,
    SpanKind,
    Timeline,
    merge_intervals,
)
from simtrain.report.rows import (
    GPUS_PER_NODE,
    ServerOf,
    all_ranks,
    default_server_of,
    order_ranks,
    plural,
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
    "AGGREGATE_ABOVE", "AGGREGATE_BINS", "BUBBLE_NAME", "CRITICAL_PATH_COLOR",
    "CRITICAL_PATH_NAME", "DEFAULT_MAX_ROWS", "FALLBACK_COLOR", "GPUS_PER_NODE",
    "HOVER_TEMPLATE", "IDLE_NAME", "KIND_COLORS", "KIND_ORDER", "MICROBATCH_NAME", "ServerOf",
    "all_ranks", "default_server_of", "fmt_flops", "gantt_figure", "hover_fields",
    "kind_color", "order_ranks", "ordered_kinds", "plural", "rank_labels",
    "representative_ranks", "role_representatives", "stream_sort_key", "subset_note",
]


# Compute kinds in blues/greens, communication kinds in oranges/reds/purples.
KIND_COLORS: dict[str, str] = {
    SpanKind.FORWARD: "#6baed6",
    SpanKind.BACKWARD: "#2171b5",
    SpanKind.RECOMPUTE: "#17becf",
    SpanKind.OPTIMIZER: "#31a354",
    SpanKind.COMPUTE: "#74c476",
    SpanKind.DP_COMM: "#fd8d3c",
    SpanKind.TP_COMM: "#d62728",
    SpanKind.CP_COMM: "#9467bd",
    SpanKind.PP_COMM: "#e7298a",
    SpanKind.EP_COMM: "#6a3d9a",
    SpanKind.COMM: "#fdae6b",
    SpanKind.HOST: "#969696",
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
# Bars fill the middle of a row; the critical path is a strip just below them, so it never
# covers a bar (a thin collective stays its own colour and keeps its hover).
BAR_WIDTH = 0.72
STRIP_OFFSET = BAR_WIDTH / 2 + 0.02
STRIP_WIDTH = 0.16
# Idle time (no span on any of the rank's streams) is shaded on the compute row when a
# gap is at least this share of the step: the pipeline bubble in a pipelined job, waits
# for late peers (stragglers, slower stages) in any job.
BUBBLE_NAME = "pipeline bubble (idle)"
IDLE_NAME = "idle (waiting for peers)"
IDLE_COLOR = "rgba(150,150,150,0.35)"
IDLE_MIN_SHARE = 1 / 400
MICROBATCH_NAME = "microbatch ids"
LEGEND_ROW_PX = 22

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
    known = [str(k) for k in KIND_ORDER if k in present]
    return known + sorted(str(k) for k in present - set(KIND_ORDER))


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
    pipelined = any(s.kind == SpanKind.PP_COMM for s in timeline.spans)
    step = timeline.end or 1.0
    for level, kb in sorted(_idle_bars(timeline, rows, row_label, level_of, step).items()):
        fig.add_trace(_idle_trace(kb, BUBBLE_NAME if pipelined else IDLE_NAME,
                                  showlegend=level == 0, visible=level == 0))
        visible_flags.append(level == 0)
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
        trace = _bar_trace(CRITICAL_PATH_NAME, kb, CRITICAL_PATH_COLOR, legendgroup="critical",
                           showlegend=level == 0, visible=level == 0)
        trace.update(width=STRIP_WIDTH, offset=STRIP_OFFSET)
        fig.add_trace(trace)
        visible_flags.append(level == 0)
    if pipelined and not aggregate:
        for level, kb in sorted(_microbatch_bars(per_row, row_label, level_of).items()):
            fig.add_trace(_label_trace(kb, showlegend=level == 0, visible=level == 0))
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
    # The legend may only use the plot area (height less the top and bottom margins).
    legend_rows = sum(1 for tr in fig.data if tr.showlegend is not False) + 1  # + title
    top = 80 if two_levels else 60
    min_height = LEGEND_ROW_PX * legend_rows + top + 50 + 20
    fig.update_layout(
        title={"text": html.escape(full_title)},
        template="plotly_white",
        barmode="overlay",
        dragmode="zoom",
        hovermode="closest",
        height=_height(len(rows0), min_height),
        margin={"l": 10, "r": 10, "t": top, "b": 50},
        legend={"title": {"text": "kind"}, "tracegroupgap": 0},
        uniformtext={"mode": "hide", "minsize": 8},
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
                {"label": plural(len(reps), "representative rank"), "method": "update",
                 "args": [{"visible": visible_flags},
                          {"yaxis.categoryarray": rows0,
                           "height": _height(len(rows0), min_height)}]},
                {"label": plural(shown, "rank"), "method": "update",
                 "args": [{"visible": [True] * len(visible_flags)},
                          {"yaxis.categoryarray": categories,
                           "height": _height(len(categories), min_height)}]},
            ],
        }])
    return fig


def _height(rows: int, at_least: int = 300) -> int:
    """Figure height: 22 px per row, and never less than the legend needs (else plotly
    hides the last legend entries behind a scroll bar)."""
    return max(300, at_least, 22 * rows + 160)


def _idle_bars(timeline: Timeline, rows: Sequence[tuple[int, str]],
               row_label: dict[tuple[int, str], str], level_of: dict[tuple[int, str], int],
               step: float) -> dict[int, _KindBars]:
    """Gaps in [0, step] when a drawn rank runs nothing on any stream, on its compute row."""
    compute_row: dict[int, tuple[int, str]] = {}
    for row in rows:
        if row[1].startswith("compute"):
            compute_row.setdefault(row[0], row)
    busy: dict[int, list[tuple[float, float]]] = {}
    for s in timeline.spans:
        if s.rank in compute_row:
            busy.setdefault(s.rank, []).append((s.start, s.end))
    out: dict[int, _KindBars] = {}
    for rank, row in compute_row.items():
        t = 0.0
        gaps = []
        for start, end in merge_intervals(busy.get(rank, [])) + [(step, step)]:
            if start - t >= step * IDLE_MIN_SHARE:
                gaps.append((t, start))
            t = max(t, end)
        for start, end in gaps:
            custom = ("idle: no kernel on any stream", "idle", fmt_seconds(start),
                      fmt_seconds(end - start), "", "", "")
            out.setdefault(level_of[row], _KindBars()).add(row_label[row], start, end, custom)
    return out


def _idle_trace(kb: _KindBars, name: str, **kw: Any) -> go.Bar:
    trace = _bar_trace(name, kb, IDLE_COLOR, legendgroup="idle", **kw)
    trace.marker.pattern = {"shape": "/", "fgcolor": "#888", "size": 6, "solidity": 0.15}
    trace.update(hovertemplate=f"<b>{html.escape(name)}</b><br>start: %{{customdata[2]}}"
                 "<br>duration: %{customdata[3]}<extra>%{y}</extra>")
    return trace


def _microbatch_bars(per_row: dict[tuple[int, str], list[Span]],
                     row_label: dict[tuple[int, str], str],
                     level_of: dict[tuple[int, str], int]) -> dict[int, _KindBars]:
    """One labelled block per run of a microbatch's forward (F3) or backward (B3) on a
    compute row; plotly shows a label only where it fits (``uniformtext``)."""
    out: dict[int, _KindBars] = {}
    phase = {SpanKind.FORWARD: "F", SpanKind.BACKWARD: "B", SpanKind.RECOMPUTE: "R"}
    for row, spans in per_row.items():
        if not row[1].startswith("compute"):
            continue
        runs: list[tuple[str, float, float]] = []
        for s in sorted(spans, key=lambda s: s.start):
            mb = s.meta.get("microbatch")
            if s.kind not in phase or mb is None:
                continue
            chunk = s.meta.get("chunk", 0)
            label = f"{phase[SpanKind(s.kind)]}{mb}" + (f".{chunk}" if chunk else "")
            if runs and runs[-1][0] == label:
                runs[-1] = (label, runs[-1][1], s.end)
            else:
                runs.append((label, s.start, s.end))
        for label, start, end in runs:
            out.setdefault(level_of[row], _KindBars()).add(
                row_label[row], start, end, (label, "", "", "", "", "", ""))
    return out


def _label_trace(kb: _KindBars, **kw: Any) -> go.Bar:
    """Transparent bars that only carry text; they take no hover (the bars below keep it)."""
    trace = _bar_trace(MICROBATCH_NAME, kb, "rgba(0,0,0,0)", legendgroup="microbatch", **kw)
    trace.update(text=[c[0] for c in kb.custom], textposition="inside",
                 insidetextanchor="middle", textfont={"color": "#ffffff", "size": 11},
                 hoverinfo="skip", hovertemplate=None, customdata=None)
    return trace


def _bar_trace(name: str, kb: _KindBars, color: str, **kw: Any) -> go.Bar:
    return go.Bar(
        name=name,
        y=np.array(kb.y, dtype=object),
        base=np.array(kb.base, dtype=float),
        x=np.array(kb.length, dtype=float),
        orientation="h",
        width=BAR_WIDTH,
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

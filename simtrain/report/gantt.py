"""Interactive Gantt chart of a timeline: one row per (rank, stream), one trace per span kind.

Rows are ordered node → GPU → stream (compute streams above communication streams), so rank
0's compute stream is the top row. Each span kind is a single ``go.Bar`` trace (colour and
legend toggle per kind); hover details travel in ``customdata`` with one shared
``hovertemplate``, which keeps a 50k-span timeline to a handful of traces and builds in well
under a second. Times are shown in milliseconds.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import plotly.graph_objects as go

from simtrain.engine.timeline import (
    COMM_KINDS,
    COMPUTE_KINDS,
    HOST_KINDS,
    Span,
    SpanKind,
    Timeline,
)
from simtrain.report.bars import (
    BUBBLE_NAME,
    CRITICAL_PATH_COLOR,
    CRITICAL_PATH_NAME,
    HOVER_TEMPLATE,
    IDLE_NAME,
    MICROBATCH_NAME,
    STRIP_OFFSET,
    STRIP_WIDTH,
    KindBars,
    aggregate_runs,
    bar_trace,
    fmt_flops,
    group_fields,
    highlight_bars,
    hover_fields,
    idle_bars,
    idle_trace,
    label_trace,
    microbatch_bars,
)
from simtrain.report.columns import SpanColumns
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
    # A deadlocked step's report (simtrain.engine.sim.stalled_timeline): the rank that
    # stopped in black, the ranks blocked behind it in pale grey.
    SpanKind.HUNG: "#000000",
    SpanKind.BLOCKED: "#d9d9d9",
}
FALLBACK_COLOR = "#999999"
KIND_ORDER: tuple[str, ...] = COMPUTE_KINDS + HOST_KINDS + COMM_KINDS
DEFAULT_MAX_ROWS = 64
# Above this many drawn spans, tiny same-kind neighbours merge into one bar (1/BINS of the
# step at most), so a big timeline stays a few thousand SVG bars.
AGGREGATE_ABOVE = 5000
AGGREGATE_BINS = 600
LEGEND_ROW_PX = 22  # height of one legend entry (plotly, 12 px font)
def kind_color(kind: str) -> str:
    """Fixed colour of a span kind (grey for kinds the palette does not know)."""
    return KIND_COLORS.get(kind, FALLBACK_COLOR)


def ordered_kinds(kinds: Iterable[str]) -> list[str]:
    """Kinds in palette order (compute first, then comm), unknown kinds last, alphabetically."""
    present = set(kinds)
    known = [str(k) for k in KIND_ORDER if k in present]
    return known + sorted(str(k) for k in present - set(KIND_ORDER))


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
    group_of: Callable[[int], str] | None = None,
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
    ``group_of`` (e.g. the job of a rank on a shared cluster) groups the rows, groups in
    order of first appearance, and prefixes each row label with its group.
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, got {max_rows}")
    cols = SpanColumns.from_timeline(timeline)
    codes = np.unique(cols.row_code())
    n_streams = max(len(cols.streams), 1)
    present = [(r, cols.streams[st]) for r, st in zip((codes // n_streams).tolist(),
                                                       (codes % n_streams).tolist(), strict=True)]
    rows, shown, available = select_rows(timeline, ranks, server_of, max_rows,
                                          representatives or (), rows_present=present)
    every_rank = set(range(timeline.num_ranks)) | set(np.unique(cols.rank).tolist())
    labels = rank_labels(sorted(every_rank), server_of)
    row_label = {(r, st): f"{labels[r]} · {st}" for r, st in rows}
    if group_of is not None:
        groups = {r: group_of(r) for r, _ in rows}
        first = {g: i for i, g in reversed(list(enumerate(groups[r] for r, _ in rows)))}
        rows = sorted(rows, key=lambda row: first[groups[row[0]]])  # stable: order kept
        row_label = {row: f"{groups[row[0]]} · {text}" for row, text in row_label.items()}
    shown_ranks = {r for r, _ in rows}
    reps = set(representatives or ()) & shown_ranks
    two_levels = bool(reps) and reps != shown_ranks
    level_of = {row: (0 if not two_levels or row[0] in reps else 1) for row in rows}

    step = cols.step_end or 1.0
    in_time_order = cols.rows_spans(rows, by_time=True)
    drawn = sum(len(ix) for ix in in_time_order)
    aggregate = drawn > aggregate_above
    # Rows in order of their first span (as a pass over the timeline meets them); each
    # row's spans in timeline order, or by time where they will be aggregated.
    row_spans = in_time_order if aggregate else cols.rows_spans(rows)
    filled = sorted((int(ix.min()), i) for i, ix in enumerate(row_spans) if len(ix))
    all_spans = cols.spans
    per_row: dict[tuple[int, str], list[Span]] = {
        rows[i]: [all_spans[j] for j in row_spans[i].tolist()] for _, i in filled}
    resolution = step / AGGREGATE_BINS

    bars: dict[tuple[int, str], KindBars] = {}
    for row in rows:
        spans = per_row.get(row, [])
        level = level_of[row]
        if aggregate:
            for group in aggregate_runs(spans, resolution):
                kb = bars.setdefault((level, group[0].kind), KindBars())
                kb.add(row_label[row], group[0].start, group[-1].end, group_fields(group))
        else:
            for s in spans:
                kb = bars.setdefault((level, s.kind), KindBars())
                kb.add(row_label[row], s.start, s.end, hover_fields(s))

    fig = go.Figure()
    visible_flags: list[bool] = []
    pipelined = cols.has_kind(SpanKind.PP_COMM)
    ends = None
    if group_of is not None:  # a group's rows are idle only until its own last span ends
        group_end: dict[str, float] = {}
        for r, e in zip(cols.rank.tolist(), cols.end.tolist(), strict=True):
            g = group_of(r)
            group_end[g] = max(group_end.get(g, 0.0), e)
        ends = {r: group_end[group_of(r)] for r, _ in rows}
    for level, kb in sorted(idle_bars(cols, rows, row_label, level_of, step, ends).items()):
        fig.add_trace(idle_trace(kb, BUBBLE_NAME if pipelined else IDLE_NAME,
                                  showlegend=level == 0, visible=level == 0))
        visible_flags.append(level == 0)
    for level in (0, 1) if two_levels else (0,):
        for kind in ordered_kinds(k for lv, k in bars if lv == level):
            kb = bars[(level, kind)]
            fig.add_trace(bar_trace(kind, kb, kind_color(kind), legendgroup=kind,
                                     showlegend=level == 0, visible=level == 0))
            visible_flags.append(level == 0)
    # Critical runs on a row merge across short gaps, so the outline reads as one box
    # around a burst of thin bars instead of painting each of them black.
    crit = highlight_bars(highlight, row_label, level_of, step / 150)
    for level, kb in sorted(crit.items()):
        trace = bar_trace(CRITICAL_PATH_NAME, kb, CRITICAL_PATH_COLOR, legendgroup="critical",
                           showlegend=level == 0, visible=level == 0)
        trace.update(width=STRIP_WIDTH, offset=STRIP_OFFSET)
        fig.add_trace(trace)
        visible_flags.append(level == 0)
    if pipelined and not aggregate:
        for level, kb in sorted(microbatch_bars(per_row, row_label, level_of).items()):
            fig.add_trace(label_trace(kb, showlegend=level == 0, visible=level == 0))
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


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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import plotly.graph_objects as go

from simtrain.engine.timeline import COMM_KINDS, COMPUTE_KINDS, Span, Timeline
from simtrain.units import fmt_bytes, fmt_seconds

ServerOf = Callable[[int], int]

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
}
FALLBACK_COLOR = "#999999"
KIND_ORDER: tuple[str, ...] = COMPUTE_KINDS + COMM_KINDS
DEFAULT_MAX_ROWS = 64
GPUS_PER_NODE = 8

# customdata columns: name, kind, start, duration, bytes line, flops line, meta lines.
HOVER_TEMPLATE = (
    "<b>%{customdata[0]}</b><br>"
    "kind: %{customdata[1]}<br>"
    "start: %{customdata[2]}<br>"
    "duration: %{customdata[3]}"
    "%{customdata[4]}%{customdata[5]}%{customdata[6]}"
    "<extra>%{y}</extra>"
)


def default_server_of(rank: int) -> int:
    """Node of a rank when the caller does not know the cluster: 8 GPUs per node."""
    return rank // GPUS_PER_NODE


def kind_color(kind: str) -> str:
    """Fixed colour of a span kind (grey for kinds the palette does not know)."""
    return KIND_COLORS.get(kind, FALLBACK_COLOR)


def ordered_kinds(kinds: Iterable[str]) -> list[str]:
    """Kinds in palette order (compute first, then comm), unknown kinds last, alphabetically."""
    present = set(kinds)
    known = [k for k in KIND_ORDER if k in present]
    return known + sorted(present - set(KIND_ORDER))


def stream_sort_key(stream: str) -> tuple[int, str]:
    """Compute streams above communication streams, then by name."""
    return (0 if stream.startswith("compute") else 1, stream)


def order_ranks(ranks: Iterable[int], server_of: ServerOf | None = None) -> list[int]:
    """Ranks grouped by node, then by rank: the display order of every per-rank chart."""
    node = server_of or default_server_of
    return sorted(set(ranks), key=lambda r: (node(r), r))


def rank_labels(ranks: Iterable[int], server_of: ServerOf | None = None) -> dict[int, str]:
    """Label "node{n}/gpu{i}" per rank; i is the rank's position among its node's ranks.

    Pass every rank of the cluster (not just the displayed ones) so that GPU indices do not
    shift when a subset is shown.
    """
    node = server_of or default_server_of
    labels: dict[int, str] = {}
    seen_per_node: dict[int, int] = {}
    for rank in sorted(set(ranks)):
        n = node(rank)
        gpu = seen_per_node.get(n, 0)
        seen_per_node[n] = gpu + 1
        labels[rank] = f"node{n}/gpu{gpu}"
    return labels


def representative_ranks(ranks: Sequence[int], limit: int) -> list[int]:
    """At most ``limit`` of ``ranks`` (kept in order): the first, the last, evenly spaced between.

    Used whenever a chart would have too many rows to read; ``ranks`` is usually the output
    of :func:`order_ranks`.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if len(ranks) <= limit:
        return list(ranks)
    if limit == 1:
        return [ranks[0]]
    # Spacing (n-1)/(limit-1) > 1 when n > limit, so rounded indices are distinct.
    idx = np.linspace(0, len(ranks) - 1, limit).round().astype(int)
    return [ranks[i] for i in idx.tolist()]


def all_ranks(timeline: Timeline) -> list[int]:
    """Every rank of the timeline: 0..num_ranks-1 plus any rank seen in a span."""
    return sorted(set(range(timeline.num_ranks)) | {s.rank for s in timeline.spans})


def subset_note(shown: int, total: int) -> str:
    """Title suffix saying a chart shows only a representative subset of ranks."""
    return f"showing {shown} of {total} ranks (first, last, evenly spaced)"


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


def _select_rows(
    timeline: Timeline,
    ranks: Sequence[int] | None,
    server_of: ServerOf | None,
    max_rows: int,
) -> tuple[list[tuple[int, str]], int, int]:
    """Rows to draw in display order, plus (ranks shown, ranks available)."""
    streams: dict[int, set[str]] = {}
    wanted = set(ranks) if ranks is not None else None
    for s in timeline.spans:
        if wanted is None or s.rank in wanted:
            streams.setdefault(s.rank, set()).add(s.stream)
    ordered = order_ranks(streams, server_of)
    total_rows = sum(len(v) for v in streams.values())
    if total_rows > max_rows and ordered:
        per_rank = max(len(v) for v in streams.values())
        keep = max(min(2, len(ordered)), max_rows // per_rank)
        ordered = representative_ranks(ordered, keep)
    rows = [(r, st) for r in ordered for st in sorted(streams[r], key=stream_sort_key)]
    return rows, len(ordered), len(streams)


def gantt_figure(
    timeline: Timeline,
    *,
    title: str = "",
    ranks: Sequence[int] | None = None,
    server_of: ServerOf | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> go.Figure:
    """Gantt chart of ``timeline``: rows (rank, stream), bars coloured by span kind, x in ms.

    ``ranks`` restricts the chart to those ranks (None: all). If more than ``max_rows`` rows
    remain, a representative subset of ranks is shown (first, last, evenly spaced) and the
    title says so. ``server_of`` maps a rank to its node for labels and grouping (default
    ``rank // 8``).
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, got {max_rows}")
    rows, shown, available = _select_rows(timeline, ranks, server_of, max_rows)
    labels = rank_labels(all_ranks(timeline), server_of)
    row_label = {(r, st): f"{labels[r]} · {st}" for r, st in rows}

    bars: dict[str, _KindBars] = {}
    for s in timeline.spans:
        label = row_label.get((s.rank, s.stream))
        if label is None:
            continue
        kb = bars.get(s.kind)
        if kb is None:
            kb = bars[s.kind] = _KindBars()
        kb.y.append(label)
        kb.base.append(s.start * 1e3)
        kb.length.append((s.end - s.start) * 1e3)
        kb.custom.append(hover_fields(s))

    fig = go.Figure()
    for kind in ordered_kinds(bars):
        kb = bars[kind]
        fig.add_trace(
            go.Bar(
                name=kind,
                y=np.array(kb.y, dtype=object),
                base=np.array(kb.base, dtype=float),
                x=np.array(kb.length, dtype=float),
                orientation="h",
                width=0.8,
                marker={"color": kind_color(kind), "line": {"width": 0}},
                customdata=np.array(kb.custom, dtype=object),
                hovertemplate=HOVER_TEMPLATE,
            )
        )

    full_title = title
    if shown < available:
        note = subset_note(shown, available)
        full_title = f"{title} — {note}" if title else note
    categories = [row_label[r] for r in rows]
    fig.update_layout(
        title={"text": html.escape(full_title)},
        template="plotly_white",
        barmode="overlay",
        dragmode="zoom",
        hovermode="closest",
        height=max(300, 22 * len(rows) + 160),
        margin={"l": 10, "r": 10, "t": 60, "b": 50},
        legend={"title": {"text": "kind"}},
        xaxis={"title": {"text": "time (ms)"}, "rangemode": "tozero"},
        yaxis={
            "type": "category",
            "categoryorder": "array",
            "categoryarray": categories,
            "autorange": "reversed",
            "automargin": True,
        },
    )
    return fig

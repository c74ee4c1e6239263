"""The Gantt chart's bars: column lists per trace, hover text, and the marks drawn over or
beside the span bars (critical-path strip, idle shading, microbatch labels).

Kept apart from :mod:`simtrain.report.gantt`, which chooses rows and lays the figure out.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import plotly.graph_objects as go

from simtrain.engine.timeline import Span, SpanKind, merge_intervals
from simtrain.report.columns import SpanColumns
from simtrain.report.schema import IDLE_LABEL
from simtrain.units import fmt_bytes, fmt_seconds

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
IDLE_NAME = IDLE_LABEL
IDLE_COLOR = "rgba(150,150,150,0.35)"
IDLE_MIN_SHARE = 1 / 400
MICROBATCH_NAME = "microbatch ids"

# customdata columns: name, kind, start, duration, bytes line, flops line, meta lines.
HOVER_TEMPLATE = (
    "<b>%{customdata[0]}</b><br>"
    "kind: %{customdata[1]}<br>"
    "start: %{customdata[2]}<br>"
    "duration: %{customdata[3]}"
    "%{customdata[4]}%{customdata[5]}%{customdata[6]}"
    "<extra>%{y}</extra>"
)


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
class KindBars:
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


def aggregate_runs(spans: list[Span], resolution: float) -> list[list[Span]]:
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


def group_fields(group: list[Span]) -> tuple[str, ...]:
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


def idle_bars(columns: SpanColumns, rows: Sequence[tuple[int, str]],
               row_label: dict[tuple[int, str], str], level_of: dict[tuple[int, str], int],
               step: float, ends: Mapping[int, float] | None = None) -> dict[int, KindBars]:
    """Gaps in [0, step] when a drawn rank runs nothing on any stream, on its compute row;
    ``ends`` (rank -> time) ends a rank's range earlier (a job that finished its step)."""
    compute_row: dict[int, tuple[int, str]] = {}
    for row in rows:
        if row[1].startswith("compute"):
            compute_row.setdefault(row[0], row)
    busy = columns.busy_by_rank(list(compute_row))
    out: dict[int, KindBars] = {}
    for rank, row in compute_row.items():
        t = 0.0
        gaps = []
        last = step if ends is None else ends.get(rank, step)
        for start, end in merge_intervals(busy.get(rank, [])) + [(last, last)]:
            if start - t >= step * IDLE_MIN_SHARE:
                gaps.append((t, start))
            t = max(t, end)
        for start, end in gaps:
            custom = ("idle: no kernel on any stream", "idle", fmt_seconds(start),
                      fmt_seconds(end - start), "", "", "")
            out.setdefault(level_of[row], KindBars()).add(row_label[row], start, end, custom)
    return out


def idle_trace(kb: KindBars, name: str, **kw: Any) -> go.Bar:
    trace = bar_trace(name, kb, IDLE_COLOR, legendgroup="idle", **kw)
    trace.marker.pattern = {"shape": "/", "fgcolor": "#888", "size": 6, "solidity": 0.15}
    trace.update(hovertemplate=f"<b>{html.escape(name)}</b><br>start: %{{customdata[2]}}"
                 "<br>duration: %{customdata[3]}<extra>%{y}</extra>")
    return trace


def microbatch_bars(per_row: dict[tuple[int, str], list[Span]],
                     row_label: dict[tuple[int, str], str],
                     level_of: dict[tuple[int, str], int]) -> dict[int, KindBars]:
    """One labelled block per run of a microbatch's forward (F3) or backward (B3) on a
    compute row; plotly shows a label only where it fits (``uniformtext``)."""
    out: dict[int, KindBars] = {}
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
            out.setdefault(level_of[row], KindBars()).add(
                row_label[row], start, end, (label, "", "", "", "", "", ""))
    return out


def label_trace(kb: KindBars, **kw: Any) -> go.Bar:
    """Transparent bars that only carry text; they take no hover (the bars below keep it)."""
    trace = bar_trace(MICROBATCH_NAME, kb, "rgba(0,0,0,0)", legendgroup="microbatch", **kw)
    trace.update(text=[c[0] for c in kb.custom], textposition="inside",
                 insidetextanchor="middle", textfont={"color": "#ffffff", "size": 11},
                 hoverinfo="skip", hovertemplate=None, customdata=None)
    return trace


def bar_trace(name: str, kb: KindBars, color: str, **kw: Any) -> go.Bar:
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


def highlight_bars(
    spans: Iterable[Span],
    row_label: dict[tuple[int, str], str],
    level_of: dict[tuple[int, str], int],
    resolution: float,
) -> dict[int, KindBars]:
    """Outline bars for the highlighted spans on drawn rows; touching spans merge."""
    per_row: dict[tuple[int, str], list[Span]] = {}
    for s in spans:
        if (s.rank, s.stream) in row_label:
            per_row.setdefault((s.rank, s.stream), []).append(s)
    out: dict[int, KindBars] = {}
    for row, row_spans in per_row.items():
        row_spans.sort(key=lambda s: s.start)
        runs: list[list[Span]] = []
        for s in row_spans:
            if runs and s.start - runs[-1][-1].end <= resolution:
                runs[-1].append(s)
            else:
                runs.append([s])
        kb = out.setdefault(level_of[row], KindBars())
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

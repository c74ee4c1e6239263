"""Side-by-side comparison of runs: key metrics with differences, and aligned Gantt charts.

Differences are taken against the first run (the baseline): absolute and relative
(``(value - base) / base``). The HTML report puts one Gantt per run on a shared time axis
(same x range, zooming one zooms all), so "what moved" is visible at a glance.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simtrain.engine.taskgraph import TaskGraph
from simtrain.engine.timeline import Timeline
from simtrain.report.critical import critical_path
from simtrain.report.gantt import ServerOf, gantt_figure
from simtrain.report.html import figure_div, fmt_value, gantt_ranks, page
from simtrain.report.schema import BY_KEY, Metric, label, number, shown_in

# The rows: the schema's ``compare`` metrics, shown when at least one run has the key.
COMPARE_METRICS: tuple[Metric, ...] = shown_in("compare")
COMPARE_MAX_ROWS = 32
_SYNC_JS = """
<script>
(function () {
  var ids = %s, busy = false;
  ids.forEach(function (id) {
    var gd = document.getElementById(id);
    if (!gd || !gd.on) { return; }
    gd.on('plotly_relayout', function (ev) {
      if (busy) { return; }
      var upd = {};
      if (ev['xaxis.range[0]'] !== undefined) {
        upd['xaxis.range'] = [ev['xaxis.range[0]'], ev['xaxis.range[1]']];
      } else if (ev['xaxis.range']) {
        upd['xaxis.range'] = ev['xaxis.range'];
      } else { return; }
      busy = true;
      var pending = ids.filter(function (o) { return o !== id; }).map(function (o) {
        return Plotly.relayout(o, upd);
      });
      Promise.all(pending).then(function () { busy = false; }, function () { busy = false; });
    });
  });
})();
</script>
"""


@dataclass(frozen=True)
class Difference:
    """One metric of one run against the baseline."""

    value: float | None
    delta: float | None
    relative: float | None


@dataclass
class ComparedRun:
    """What the comparison needs from one simulation."""

    name: str
    summary: dict[str, Any]
    timeline: Timeline
    server_of: ServerOf | None = None
    graph: TaskGraph | None = None


def differences(summaries: Sequence[Mapping[str, Any]]) -> dict[str, list[Difference]]:
    """Per metric present in any summary: each run's value and its change vs the first."""
    out: dict[str, list[Difference]] = {}
    for metric in COMPARE_METRICS:
        key = metric.key
        values = [number(s, key) for s in summaries]
        if all(v is None for v in values):
            continue
        base = values[0]
        row = []
        for v in values:
            delta = v - base if v is not None and base is not None else None
            rel = delta / base if delta is not None and base else None
            row.append(Difference(v, delta, rel))
        out[key] = row
    return out


def metric_label(key: str, summaries: Sequence[Mapping[str, Any]] = ()) -> str:
    """The row label of ``key`` for these runs (idle time named by its cause)."""
    metric = BY_KEY.get(key)
    return label(metric, *summaries) if metric is not None else key


def fmt_delta(key: str, diff: Difference) -> str:
    """``+12.30 ms (+3.4%)``; empty for the baseline or a missing value."""
    if diff.delta is None:
        return "n/a"
    sign = "+" if diff.delta >= 0 else "−"
    metric = BY_KEY.get(key)
    if metric is not None and metric.unit == "fraction":
        text = f"{sign}{abs(diff.delta) * 100:.1f} pp"  # percentage points
    else:
        text = sign + fmt_value(key, abs(diff.delta) if key != "num_gpus" else int(abs(diff.delta)))
    if diff.relative is not None:
        text += f" ({diff.relative * 100:+.1f}%)"
    return text


def compare_table_html(names: Sequence[str], diffs: Mapping[str, list[Difference]],
                       summaries: Sequence[Mapping[str, Any]] = ()) -> str:
    """Metrics as rows, runs as columns; every run after the first shows its difference."""
    esc = html.escape
    head = "".join(f"<th>{esc(n)}</th>" for n in names)
    head += "".join(f"<th>Δ {esc(n)}</th>" for n in names[1:])
    rows = []
    for key, row in diffs.items():
        cells = "".join(
            f'<td class="num">{esc(fmt_value(key, d.value)) if d.value is not None else "n/a"}'
            "</td>" for d in row)
        cells += "".join(f'<td class="num">{esc(fmt_delta(key, d))}</td>' for d in row[1:])
        rows.append(f"<tr><th>{esc(metric_label(key, summaries))}</th>{cells}</tr>")
    return (f'<table class="summary" id="compare-table"><thead><tr><th>metric</th>{head}</tr>'
            f'</thead><tbody>{"".join(rows)}</tbody></table>')


def render_compare(runs: Sequence[ComparedRun], *, title: str = "simtrain · compare",
                   max_rows: int = COMPARE_MAX_ROWS) -> str:
    """One HTML report: the comparison table, then one Gantt per run on a shared time axis."""
    if not runs:
        raise ValueError("nothing to compare: give at least one run")
    names = [r.name for r in runs]
    diffs = differences([r.summary for r in runs])
    horizon = max(r.timeline.end for r in runs) * 1e3
    divs, ids = [], []
    for i, run in enumerate(runs):
        path = critical_path(run.timeline, run.graph)
        fig = gantt_figure(run.timeline, title=run.name, server_of=run.server_of,
                           max_rows=max_rows, representatives=gantt_ranks(run.timeline, path),
                           highlight=path.spans, x_range=(0.0, horizon * 1.02))
        div_id = f"gantt-{i}"
        ids.append(div_id)
        divs.append(figure_div(fig, div_id, include_plotlyjs=i == 0))
    ids_js = "[" + ", ".join(f'"{i}"' for i in ids) + "]"
    body = (
        f"<header><h1>{html.escape(title)}</h1>"
        f'<p class="muted">Differences are against the first run, {html.escape(names[0])}. '
        "The Gantt charts share one time axis: zoom one and the others follow.</p></header>\n"
        '<section id="comparison"><h2>Summary</h2>'
        f"{compare_table_html(names, diffs, [r.summary for r in runs])}"
        "</section>\n"
        f'<section id="gantts"><h2>Timelines</h2>{"".join(divs)}</section>\n'
        + _SYNC_JS % ids_js
    )
    return page(title, body)


def unique_names(names: Sequence[str], fallback: Callable[[int], str]) -> list[str]:
    """Names made unique: a repeated name gets ``fallback(i)`` (e.g. the file name) added."""
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    out = [n if counts[n] == 1 else f"{n} ({fallback(i)})" for i, n in enumerate(names)]
    if len(set(out)) < len(out):
        out = [f"{n} #{i + 1}" for i, n in enumerate(out)]
    return out

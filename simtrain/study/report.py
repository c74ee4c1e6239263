"""The sweep report: metrics against the axes, best and worst points' Gantt charts, table.

One self-contained HTML page (plotly.js inlined once; see :mod:`simtrain.report.html`).
The schema's sweep metrics (step time, tokens/s, MFU, peak memory) are drawn against the
axes: a line per metric when one dimension varies, a heatmap over the first two varying
dimensions otherwise (with a slider over the remaining ones). Heatmap colours run from 0
to the largest value, so a 2% spread looks like 2%, not like black against yellow; a
metric equal at every point gets no colour bar. A weak-scaling sweep (nodes zipped with
the global batch) also gets tokens/s per GPU and scaling efficiency against GPUs.
Invalid points are gaps, listed with reasons.
The best and worst points (by the sweep's objective) are simulated again here, in the
parent, to draw their Gantt charts: timelines never travel between processes.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from simtrain.report.gantt import gantt_figure
from simtrain.report.html import FigureDivs, cards_html, page, write_report
from simtrain.report.schema import shown_in

if TYPE_CHECKING:
    from simtrain.study.run import SweepResult
    from simtrain.study.spec import SweepSpec

# Display units per schema unit: (scale, unit label).
_DISPLAY: dict[str, tuple[float, str]] = {"s": (1e3, "ms"), "fraction": (100.0, "%"),
                                          "rate": (1e-3, "k/s"), "gib": (1.0, "GiB")}
# (summary column, label, scale for display, better when lower): the schema's sweep metrics.
METRICS: tuple[tuple[str, str, float, bool], ...] = tuple(
    (m.key, f"{m.label} ({_DISPLAY[m.unit][1]})", _DISPLAY[m.unit][0], m.better == "lower")
    for m in shown_in("sweep"))
MAX_TABLE_ROWS = 2000
MAX_SLIDER_STEPS = 48
HEAT_COLORSCALE = "Blues"
UNIFORM_REL = 1e-9  # values this close to each other count as one value


def render_sweep_report(result: SweepResult, assets: str = "inline") -> str:
    """The report for a finished (or partial) sweep as one HTML string (deterministic)."""
    spec, rows = result.spec, result.rows
    div = FigureDivs(assets)
    counts = result.counts
    parts = [f"<header><h1>Sweep: {html.escape(spec.name)}</h1>",
             f'<p class="muted">{len(rows):,} of {len(spec):,} points · {counts["ok"]:,} ok · '
             f'{counts["invalid"]:,} invalid · {counts["failed"]:,} failed · base '
             f"{html.escape(spec.base_label)} · objective {spec.objective.goal} "
             f"{html.escape(spec.objective.metric)}</p></header>"]
    figures = metric_figures(spec, rows)
    scaling = weak_scaling_figure(spec, rows)
    if scaling is not None:
        figures.append(("weak-scaling", scaling))
    if figures:
        parts.append('<section id="metrics"><h2>Metrics against the axes</h2>')
        parts.extend(div(fig, f"sweep-{name}") for name, fig in figures)
        parts.append("</section>")
    for label, row in (("best", result.best), ("worst", result.worst)):
        if row is not None:
            parts.append(_point_section(spec, label, row, div))
    parts.append(_table_html(spec, rows))
    return page(f"sweep {spec.name}", "\n".join(parts))


def write_sweep_report(result: SweepResult, path: Path, assets: str = "inline") -> Path:
    """Render and write the report (creating folders; plotly.js beside it when
    ``assets="external"``); return its path."""
    return write_report(path, render_sweep_report(result, assets))


def metric_figures(spec: SweepSpec, rows: Sequence[dict[str, Any]]
                   ) -> list[tuple[str, go.Figure]]:
    """(name, figure) per metric present in ``rows``.

    One varying dimension: a line. Two: a heatmap. More: a heatmap over the first two
    with a slider over the combinations of the others (up to ``MAX_SLIDER_STEPS``; beyond
    that each cell shows the best value over the other dimensions). Colours share one
    scale across slider steps. Invalid points are gaps (marked "invalid" in heatmaps).
    """
    sizes = [len(next(iter(d.values()))) for d in spec.dims]
    varying = [i for i, n in enumerate(sizes) if n > 1]
    if not varying:
        return []
    rest = varying[2:]
    combos = list(itertools.product(*(range(sizes[i]) for i in rest)))
    collapse = len(combos) > MAX_SLIDER_STEPS
    out = []
    for column, label, scale, lower in METRICS:
        if not any(isinstance(r.get(column), int | float) for r in rows):
            continue
        layers: dict[tuple[int, ...], dict[tuple[int, ...], float]] = {
            () if collapse else c: {} for c in combos}
        invalid: dict[tuple[int, ...], set[tuple[int, ...]]] = {c: set() for c in layers}
        for r in rows:
            coords = _unravel(r["index"], sizes)
            which = () if collapse else tuple(coords[i] for i in rest)
            layer = layers[which]
            key = tuple(coords[i] for i in varying[:2])
            v = r.get(column)
            if r["status"] != "ok" or not isinstance(v, int | float):
                invalid[which].add(key)
                continue
            old, value = layer.get(key), float(v) * scale
            if old is None or (value < old if lower else value > old):
                layer[key] = value
        note = " (best over the other axes)" if collapse else ""
        if len(varying) == 1:
            fig = _line(spec, varying[0], layers[()], label)
            note += _uniform_note(list(layers[()].values()))
        else:
            # a step's name: the other dimensions' values ("" for the collapsed layer ())
            steps = [(", ".join(f"{_dim_label(spec, d, short=True)}={_dim_values(spec, d)[i]}"
                                for d, i in zip(rest, c, strict=False)), cells, invalid[c])
                     for c, cells in layers.items()]
            fig = _heatmap(spec, varying[0], varying[1], steps, label)
            note += _uniform_note([v for _, cells, _ in steps for v in cells.values()])
        fig.update_layout(title=f"{label}{note}", height=420 if len(layers) > 1 else 380,
                          margin={"t": 50, "b": 40})
        out.append((column, fig))
    return out


def weak_scaling_dim(spec: SweepSpec) -> tuple[int, float] | None:
    """(dimension, sequences per node) of a weak-scaling sweep, or None.

    Weak scaling: one dimension moves ``cluster.nodes`` with ``training.global_batch_size``
    at a fixed batch per node, the first entry's, for at least two node counts (entries
    with another batch per node, e.g. a deliberately invalid point, are left out).
    """
    for i, dim in enumerate(spec.dims):
        nodes, batch = dim.get("cluster.nodes"), dim.get("training.global_batch_size")
        if nodes is None or batch is None or len(nodes) < 2:
            continue
        try:
            per_node = [float(b) / float(n) for n, b in zip(nodes, batch, strict=True)]
        except (TypeError, ValueError, ZeroDivisionError):
            continue
        same = {n for n, r in zip(nodes, per_node, strict=True) if r == per_node[0]}
        if len(same) >= 2:
            return i, per_node[0]
    return None


def weak_scaling_figure(spec: SweepSpec, rows: Sequence[dict[str, Any]]) -> go.Figure | None:
    """Tokens/s per GPU and scaling efficiency against GPUs, a line per combination of
    the other axes. Efficiency at n GPUs = (tokens/s per GPU at n) / (at the fewest GPUs of
    that line): 100% is perfect weak scaling."""
    found = weak_scaling_dim(spec)
    if found is None:
        return None
    dim, per_node = found
    sizes = [len(next(iter(d.values()))) for d in spec.dims]
    others = [i for i, n in enumerate(sizes) if n > 1 and i != dim]
    lines: dict[tuple[int, ...], list[tuple[float, float]]] = {}
    for r in rows:
        tps, gpus = r.get("tokens_per_s"), r.get("num_gpus")
        if r.get("status") != "ok" or not isinstance(tps, int | float) \
                or not isinstance(gpus, int | float) or gpus <= 0:
            continue
        coords = _unravel(r["index"], sizes)
        at = {k: v[coords[dim]] for k, v in spec.dims[dim].items()}
        if float(at["training.global_batch_size"]) / float(at["cluster.nodes"]) != per_node:
            continue
        lines.setdefault(tuple(coords[i] for i in others), []).append(
            (float(gpus), float(tps) / float(gpus)))
    if not lines:
        return None
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=(
        "tokens/s per GPU", "weak-scaling efficiency (vs the fewest GPUs)"))
    palette = qualitative.D3
    for n, (key, points) in enumerate(sorted(lines.items())):
        points.sort()
        name = ", ".join(f"{_dim_label(spec, d, short=True).rsplit('.', 1)[-1]}="
                         f"{_dim_values(spec, d)[i]}" for d, i in zip(others, key, strict=True))
        xs = [g for g, _ in points]
        tps_gpu = [v for _, v in points]
        eff = [v / tps_gpu[0] * 100 for v in tps_gpu]
        style = {"legendgroup": name or "all", "mode": "lines+markers",
                 "line": {"color": palette[n % len(palette)]}}
        fig.add_trace(go.Scatter(x=xs, y=tps_gpu, name=name or "tokens/s per GPU", **style,
                                 hovertemplate="%{x} GPUs: %{y:,.0f} tokens/s per GPU"),
                      row=1, col=1)
        fig.add_trace(go.Scatter(x=xs, y=eff, name=name, showlegend=False, **style,
                                 hovertemplate="%{x} GPUs: %{y:.1f}% efficiency"),
                      row=1, col=2)
    fig.update_xaxes(title="GPUs", type="log", tickvals=sorted({g for p in lines.values()
                                                                for g, _ in p}))
    fig.update_yaxes(title="tokens/s per GPU", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title="efficiency (%)", range=[0, 105], row=1, col=2)
    fig.update_layout(title="Weak scaling: throughput per GPU as nodes and batch grow "
                            "together", height=420, margin={"t": 80, "b": 40},
                      template="plotly_white",
                      legend={"title": {"text": "other axes"}})
    return fig


def _uniform_note(values: list[float]) -> str:
    """' — the same at every point (36.34)' when all values are equal, else ''."""
    if values and max(values) - min(values) <= UNIFORM_REL * max(abs(v) for v in values):
        return f" — the same at every point ({values[0]:.4g})"
    return ""


def _line(spec: SweepSpec, dim: int, cells: dict[tuple[int, ...], float], label: str
          ) -> go.Figure:
    values = _dim_values(spec, dim)
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    xs = values if numeric else [str(v) for v in values]
    ys = [cells.get((i,)) for i in range(len(values))]
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="lines+markers", name=label,
                               connectgaps=False))
    log = numeric and min(values) > 0 and max(values) / min(values) >= 16
    fig.update_xaxes(title=_dim_label(spec, dim), type="log" if log else None)
    fig.update_yaxes(title=label)
    return fig


def _heatmap(spec: SweepSpec, dx: int, dy: int,
             steps: list[tuple[str, dict[tuple[int, ...], float], set[tuple[int, ...]]]],
             label: str) -> go.Figure:
    """One heatmap trace per step (slider when several), all on one colour scale.

    A step is (name, {(x, y): value}, {(x, y) of invalid points}); invalid cells read
    "invalid", cells not run yet stay blank. Colours run from 0 (or the smallest value when
    negative) to the largest, so they are proportional to the values; when every value is
    the same there is nothing to scale and no colour bar.
    """
    xs, ys = _dim_values(spec, dx), _dim_values(spec, dy)
    known = [v for _, cells, _ in steps for v in cells.values()]
    zmin, zmax = (min(0.0, min(known)), max(known)) if known else (None, None)
    uniform = bool(known) and max(known) - min(known) <= UNIFORM_REL * max(abs(v) for v in known)
    fig = go.Figure()
    for n, (_, cells, bad) in enumerate(steps):
        z = [[cells.get((i, j)) for i in range(len(xs))] for j in range(len(ys))]
        text = [[f"{v:.4g}" if v is not None else "invalid" if (i, j) in bad else ""
                 for i, v in enumerate(row)] for j, row in enumerate(z)]
        fig.add_trace(go.Heatmap(x=[str(v) for v in xs], y=[str(v) for v in ys], z=z,
                                 text=text, texttemplate="%{text}", colorscale=HEAT_COLORSCALE,
                                 zmin=zmin, zmax=zmax if zmax != zmin else None,
                                 showscale=not uniform,
                                 colorbar={"title": {"text": f"{label}<br>from 0"}},
                                 hoverongaps=False, visible=n == 0))
    if len(steps) > 1:
        fig.update_layout(sliders=[_slider(spec, [name for name, _, _ in steps])])
    fig.update_xaxes(title=_dim_label(spec, dx), type="category")
    fig.update_yaxes(title=_dim_label(spec, dy), type="category")
    if uniform:
        fig.update_layout(meta={"uniform": known[0]})
    return fig


def _slider(spec: SweepSpec, names: list[str]) -> dict[str, Any]:
    """A slider over the other dimensions. The axis names go once into the label above
    the slider; each tick shows only the values, and when even those would run into each
    other (about 7 px a character, ~900 px of slider) only every k-th tick is labelled:
    the label above always names the current step in full."""
    keys = [k.split("=", 1)[0] for k in names[0].split(", ")] if names and names[0] else []
    values = [" · ".join(part.split("=", 1)[-1] for part in name.split(", ")) for name in names]
    width = max((len(v) for v in values), default=1) * 7 + 16
    every = max(1, -(-width * len(values) // 900))
    steps = [{"label": v if i % every == 0 else "", "method": "update", "name": v,
              "args": [{"visible": [k == i for k in range(len(names))]}]}
             for i, v in enumerate(values)]
    return {"active": 0, "pad": {"t": 40}, "steps": steps,
            "currentvalue": {"prefix": f"{', '.join(keys)} = ", "xanchor": "left"}}


def _point_section(spec: SweepSpec, label: str, row: dict[str, Any], div: FigureDivs) -> str:
    """Cards, axis values and the Gantt chart of one point, simulated again here."""
    from simtrain.report.jobs import jobs_table_html
    from simtrain.study.spec import Point
    from simtrain.study.worker import simulate_point

    values = tuple((k, row[k]) for k in spec.axes)
    point = Point(row["index"], row["point_id"], values)
    source = spec.base_path if spec.base_path is not None else spec.base
    result = simulate_point(source, point.overrides)
    where = ", ".join(f"{k} = {v}" for k, v in values)
    fig = gantt_figure(result.timeline, server_of=result.cluster.server_of,
                       title=f"{label} point #{point.index}: {where}")
    jobs = result.summary.get("jobs")
    table = jobs_table_html(jobs) if isinstance(jobs, dict) else ""
    return (f'<section id="{label}"><h2>{label.capitalize()} point (#{point.index})</h2>'
            f"<p>{html.escape(where)}</p>{cards_html(result.summary)}{table}\n"
            f"{div(fig, f'gantt-{label}')}</section>")


def _table_html(spec: SweepSpec, rows: Sequence[dict[str, Any]]) -> str:
    shown = rows[:MAX_TABLE_ROWS]
    head = ["#", *spec.axes, "status", *(m[1] for m in METRICS), "reason"]
    body = []
    for r in shown:
        cells = [str(r["index"]), *(html.escape(str(r.get(k))) for k in spec.axes),
                 r["status"]]
        for column, _, scale, _lower in METRICS:
            v = r.get(column)
            cells.append(f"{v * scale:.4g}" if isinstance(v, int | float) else "")
        cells.append(html.escape(r.get("error") or ""))
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    more = (f'<p class="muted">first {MAX_TABLE_ROWS:,} of {len(rows):,} rows; the CSV and '
            "Parquet files have all</p>") if len(rows) > MAX_TABLE_ROWS else ""
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return (f'<section id="points"><h2>Points</h2>{more}<table class="summary">'
            f"<thead><tr>{header}</tr></thead><tbody>{''.join(body)}</tbody></table></section>")


def _dim_values(spec: SweepSpec, dim: int) -> list[Any]:
    return list(next(iter(spec.dims[dim].values())))


def _dim_label(spec: SweepSpec, dim: int, *, short: bool = False) -> str:
    keys = list(spec.dims[dim])
    if short or len(keys) == 1:
        return keys[0]
    return f"{keys[0]} (with {', '.join(keys[1:])})"


def _unravel(index: int, sizes: Sequence[int]) -> list[int]:
    """Grid coordinates of ``index`` (first dimension slowest)."""
    coords = []
    for n in reversed(sizes):
        coords.append(index % n)
        index //= n
    return coords[::-1]

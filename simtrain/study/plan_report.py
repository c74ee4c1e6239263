"""The ``simtrain plan`` HTML report: search counts, the ranking table (search estimate beside
the final step), goodput under failures, rejected candidates by reason, the trade-off of
time, cost and memory headroom with its Pareto front, and the top plans' Gantt charts (one
self-contained page, plotly.js inlined once; see :mod:`simtrain.report.html`)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from simtrain.report.gantt import gantt_figure
from simtrain.report.html import FigureDivs, cards_html, page, write_report
from simtrain.study.plan_result import (
    HEAD,
    fmt_duration,
    format_rows,
    pareto_front,
    shown_columns,
)
from simtrain.units import fmt_bytes, fmt_seconds

if TYPE_CHECKING:
    from simtrain.study.plan_result import PlanResult


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f'<table class="summary"><thead><tr>{header}</tr></thead><tbody>{body}</tbody>' \
           f"</table>"


def goodput_html(result: PlanResult, row: dict[str, Any]) -> str:
    """The goodput of the best plan: what fails, how often, and what it costs."""
    cfg = result.spec.goodput
    counts = result.components.get(int(row["nodes"]), {})
    per_day = {c: counts.get(c, 0.0) * rate * 24 for c, rate in cfg.rates_per_hour.items()}
    rows = [[c, f"{counts.get(c, 0):,.0f}", f"{rate:.3g}", f"{per_day[c]:.2f}"]
            for c, rate in cfg.rates_per_hour.items()]
    facts = [
        ["mean time between failures", fmt_duration(float(row["mtbf_s"]))],
        ["checkpoint (weights + optimizer states)", fmt_bytes(float(row["checkpoint_bytes"]))],
        ["checkpoint write", fmt_seconds(float(row["checkpoint_write_s"]))],
        ["restart (relaunch + read back + re-warm)", fmt_seconds(float(row["restart_s"]))],
        ["checkpoint interval" + (" (Daly's optimum)" if cfg.interval_s is None else ""),
         fmt_seconds(float(row["checkpoint_interval_s"]))],
        ["goodput", f"{float(row['goodput']):.1%}"],
        ["time to train: failure-free → expected",
         f"{fmt_duration(float(row['ideal_time_to_train_s']))} → "
         f"{fmt_duration(float(row['effective_time_to_train_s']))}"],
        ["GPU-hours", f"{float(row['effective_gpu_hours']):,.0f}"],
    ]
    if row["cost"] is not None:
        facts.append([f"cost at {cfg.price_per_gpu_hour:g} per GPU-hour",
                      f"{float(row['cost']):,.0f}"])
    return (f'<section id="goodput"><h2>Goodput of #1 under failures</h2>'
            f'{_table(("", ""), facts)}<h3>Failures by component</h3>'
            f'{_table(("component", "count", "failures per hour each", "expected per day"), rows)}'
            f'<p class="muted">Default rates: Llama 3 (Dubey et al. 2024, Table 5), 419 '
            f"unexpected interruptions in 54 days on 16,384 H100s.</p></section>")


def tradeoff_figure(result: PlanResult) -> go.Figure:
    """Every simulated plan: time-to-train vs cost (or GPU-hours), coloured by memory
    headroom, the Pareto front outlined."""
    sims = [c for c in result.candidates if c.status == "simulated"]
    front = {id(c) for c in pareto_front(result, sims)}
    pts = [(*result.time_and_cost(c, result.step_of(c)), c.headroom_gib, c.label,
            id(c) in front) for c in sims]
    money = result.spec.goodput.price_per_gpu_hour is not None
    fig = go.Figure()
    for on_front in (False, True):
        sel = [p for p in pts if p[4] == on_front]
        fig.add_trace(go.Scatter(
            x=[p[0] / 86400 for p in sel], y=[p[1] for p in sel], mode="markers",
            name="Pareto front" if on_front else "simulated plans", text=[p[3] for p in sel],
            hovertemplate="%{text}<br>%{x:.2f} days · %{y:,.0f}<br>headroom "
                          "%{marker.color:.1f} GiB<extra></extra>",
            marker={"color": [p[2] for p in sel], "colorscale": "Viridis", "cmin": 0,
                    "size": 11 if on_front else 7, "showscale": on_front,
                    "colorbar": {"title": "headroom (GiB)"},
                    "line": {"width": 2 if on_front else 0, "color": "#d62728"}}))
    fig.update_layout(title="Time, cost and memory headroom of the simulated plans",
                      xaxis_title="expected time to train (days)",
                      yaxis_title="cost" if money else "GPU-hours", height=460,
                      legend={"orientation": "h", "y": -0.2})
    return fig


def render_plan_report(result: PlanResult, runs: list[Any], assets: str = "inline") -> str:
    """The report; ``runs`` are SimulationResults of the first plans, in rank order."""
    spec, counts = result.spec, result.counts
    rows = result.rows()
    div = FigureDivs(assets)
    facts = (f"{spec.tokens:.3g} tokens · global batch {spec.global_batch:,} × "
             f"{spec.seq_len:,} tokens · nodes {', '.join(map(str, spec.nodes))} · "
             f"{counts['enumerated']:,} candidates: {counts['invalid']:,} invalid, "
             f"{counts['oom']:,} out of memory, {counts['pruned']:,} pruned by the bound, "
             f"{counts['simulated']:,} simulated, {counts['failed']:,} failed · search "
             f"{result.wall_s:.1f} s · ranked by {spec.rank_by} · final network "
             f"{spec.final_network} for the best {spec.final_count}")
    parts = [f"<header><h1>Plan: {html.escape(spec.name)}</h1>"
             f'<p class="muted">{html.escape(facts)}</p></header>']
    cells = format_rows(rows)
    keep = shown_columns(cells)
    table = _table([HEAD[i] for i in keep], [[r[i] for i in keep] for r in cells])
    parts.append(f'<section id="ranking"><h2>Ranking</h2>{table}'
                 f'<p class="muted">search step: the analytic (idle network) simulation the '
                 f"search ranked by; final step: the {spec.final_network} network run, with "
                 f"its change in brackets. Time to train and GPU-hours include failures and "
                 f"checkpoints (goodput).</p></section>")
    if rows:
        parts.append(goodput_html(result, rows[0]))
    rejected = [[r["reason"], r["field"], f"{r['count']:,}", r["example"], r["message"]]
                for r in result.rejections()]
    if rejected:
        parts.append(f'<section id="rejected"><h2>Rejected candidates</h2>'
                     f'{_table(("reason", "field", "count", "example", "why"), rejected)}'
                     f"</section>")
    if any(c.status == "simulated" for c in result.candidates):
        parts.append(f'<section id="tradeoff"><h2>Trade-off</h2>'
                     f'{div(tradeoff_figure(result), "plan-tradeoff")}</section>')
    for row, run in zip(rows, runs, strict=False):
        div_id = f"gantt-plan-{row['rank']}"
        fig = gantt_figure(run.timeline, server_of=run.cluster.server_of,
                           title=f"#{row['rank']}: {row['plan']}")
        parts.append(f'<section id="plan-{row["rank"]}"><h2>#{row["rank"]}: '
                     f'{html.escape(row["plan"])}</h2>{cards_html(run.summary)}\n'
                     f"{div(fig, div_id)}</section>")
    return page(f"plan {spec.name}", "\n".join(parts))


def write_plan_report(result: PlanResult, path: Path | str, *, charts: int = 3,
                      assets: str = "inline") -> Path:
    """Simulate (or reuse) the first ``charts`` plans and write the report; return its path."""
    from simtrain.study.plan import simulate_ranked

    runs = simulate_ranked(result, charts)
    return write_report(path, render_plan_report(result, runs, assets))

"""The ``simtrain plan`` HTML report: search counts, the ranking table, the top plans' Gantt
charts (one self-contained page, plotly.js inlined once; see :mod:`simtrain.report.html`)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simtrain.report.gantt import gantt_figure
from simtrain.report.html import FigureDivs, cards_html, page, write_report

if TYPE_CHECKING:
    from simtrain.study.plan import PlanResult

HEAD = ("#", "plan", "GPUs", "step time", "tokens/s", "MFU", "memory (GiB)",
        "time to train", "GPU-hours")


def render_plan_report(result: PlanResult, runs: list[Any]) -> str:
    """The report; ``runs`` are SimulationResults of the first plans, in rank order."""
    from simtrain.study.plan import format_rows

    spec, counts = result.spec, result.counts
    rows = result.rows()
    div = FigureDivs()
    facts = (f"{spec.tokens:.3g} tokens · global batch {spec.global_batch:,} × "
             f"{spec.seq_len:,} tokens · nodes {', '.join(map(str, spec.nodes))} · "
             f"{counts['enumerated']:,} candidates: {counts['invalid']:,} invalid, "
             f"{counts['oom']:,} out of memory, {counts['pruned']:,} pruned by the bound, "
             f"{counts['simulated']:,} simulated, {counts['failed']:,} failed · search "
             f"{result.wall_s:.1f} s · final network {spec.final_network}")
    parts = [f"<header><h1>Plan: {html.escape(spec.name)}</h1>"
             f'<p class="muted">{html.escape(facts)}</p></header>']
    cells = format_rows(rows)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                   for r in cells)
    header = "".join(f"<th>{h}</th>" for h in HEAD)
    parts.append(f'<section id="ranking"><h2>Ranking</h2><table class="summary"><thead>'
                 f"<tr>{header}</tr></thead><tbody>{body}</tbody></table></section>")
    for row, run in zip(rows, runs, strict=False):
        div_id = f"gantt-plan-{row['rank']}"
        fig = gantt_figure(run.timeline, server_of=run.cluster.server_of,
                           title=f"#{row['rank']}: {row['plan']}")
        parts.append(f'<section id="plan-{row["rank"]}"><h2>#{row["rank"]}: '
                     f'{html.escape(row["plan"])}</h2>{cards_html(run.summary)}\n'
                     f"{div(fig, div_id)}</section>")
    return page(f"plan {spec.name}", "\n".join(parts))


def write_plan_report(result: PlanResult, path: Path | str, *, charts: int = 3) -> Path:
    """Simulate (or reuse) the first ``charts`` plans and write the report; return its path."""
    from simtrain.study.plan import simulate_ranked

    runs = simulate_ranked(result, charts)
    return write_report(path, render_plan_report(result, runs))

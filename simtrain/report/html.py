"""Self-contained HTML report: key numbers, the Gantt chart, breakdowns, summary and scenario.

By default the document opens offline on its own: plotly.js is inlined exactly once (with
the first figure) and nothing references the network. With ``assets="external"`` the
document loads plotly.js from a file beside it (``plotly_asset_name()``, written once per
folder by ``write_report``), which keeps a folder of many reports ~4.6 MB smaller per
report; the document is otherwise the same. Output is deterministic (fixed div ids, no
timestamps), so the same timeline gives byte-identical HTML.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs, get_plotlyjs_version

from simtrain.engine.taskgraph import TaskGraph
from simtrain.engine.timeline import Timeline, union_length
from simtrain.report.critical import CriticalPath, critical_path
from simtrain.report.figures import (
    comm_overlap_figure,
    critical_path_html,
    link_utilisation_figure,
)
from simtrain.report.gantt import (
    DEFAULT_MAX_ROWS,
    ServerOf,
    all_ranks,
    gantt_figure,
    kind_color,
    order_ranks,
    ordered_kinds,
    plural,
    rank_labels,
    representative_ranks,
    role_representatives,
    subset_note,
)
from simtrain.report.memory import MEMORY_CAPTION, memory_figure
from simtrain.report.schema import BY_KEY, fmt_count, fmt_percent, label, number, shown_in
from simtrain.units import fmt_bytes, fmt_seconds

_SHARE_OF_STEP = ("compute_s", "comm_s", "exposed_comm_s", "bubble_s")

PLOTLY_CONFIG: dict[str, Any] = {"scrollZoom": True, "displaylogo": False}
GANTT_DIV_ID = "gantt-chart"
# How a report gets plotly.js: inlined in the document, or from a file beside it.
REPORT_ASSETS: tuple[str, ...] = ("inline", "external")
BREAKDOWN_DIV_ID = "breakdown-chart"

_CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif;
       margin: 0 auto; max-width: 1600px; padding: 1rem 2rem; color: #1f2933;
       background: #fafbfc; line-height: 1.4; }
h1 { font-size: 1.6rem; margin: 0.2rem 0 0.8rem; }
h2 { font-size: 1.2rem; margin: 1.6rem 0 0.4rem; border-bottom: 1px solid #d9e2ec; }
h3 { font-size: 1.05rem; margin: 1.2rem 0 0.4rem; }
.cards { display: flex; flex-wrap: wrap; gap: 0.75rem; }
.card { background: #fff; border: 1px solid #d9e2ec; border-radius: 6px;
        padding: 0.5rem 0.9rem; min-width: 9rem; }
.card .label { font-size: 0.8rem; color: #52606d; text-transform: uppercase; }
.card .value { font-size: 1.35rem; font-weight: 600; }
.card .sub { font-size: 0.8rem; color: #52606d; }
table.summary { border-collapse: collapse; background: #fff; font-size: 0.9rem; }
table.summary td, table.summary th { border: 1px solid #d9e2ec; padding: 0.25rem 0.7rem;
                                     text-align: left; }
table.summary td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #fff; border: 1px solid #d9e2ec; padding: 0.8rem; overflow-x: auto; }
.muted { color: #52606d; font-size: 0.85rem; }
.subtitle { margin: -0.4rem 0 0.8rem; color: #334e68; }
ul.notes { background: #fffbea; border: 1px solid #f0d98c; border-radius: 6px;
           padding: 0.5rem 0.9rem 0.5rem 2rem; font-size: 0.9rem; max-width: 75rem; }
"""


# --- value formatting -------------------------------------------------------------------


def fmt_value(key: str, value: Any) -> str:
    """Human form of one summary value, chosen by its key's unit suffix (SI inside)."""
    leaf = key.rsplit(".", 1)[-1].lower()
    parent = key.split(".", 1)[0].lower() if "." in key else ""
    if isinstance(value, bool) or value is None:
        return str(value)
    if key in BY_KEY and isinstance(value, int | float | np.integer | np.floating):
        return BY_KEY[key].fmt(float(value))
    if isinstance(value, int | float | np.integer | np.floating):
        v = float(value)
        if leaf.endswith("_gib"):
            return f"{v:,.2f} GiB"
        # Nested values without a unit take their section's: seconds per kind, memory in GiB.
        if parent.endswith("_by_kind") and parent.startswith(("exposed", "comm", "time")):
            return fmt_seconds(v)
        if parent == "memory_breakdown" and abs(v) < 1e6:
            return f"{v:,.2f} GiB"
        if leaf.endswith("_per_s") or leaf.endswith("_per_second"):
            return f"{fmt_count(v)}/s"
        if leaf.endswith("_s") or leaf.endswith("_seconds"):
            return fmt_seconds(v)
        if leaf.endswith("_bytes") or leaf == "bytes" or "_bytes_per_" in leaf:
            return fmt_bytes(v)
        if leaf in ("mfu", "hfu") or leaf.endswith("_fraction") or leaf.endswith("_frac"):
            return fmt_percent(v)
        if isinstance(value, int | np.integer):
            return f"{int(value):,}"
        return f"{v:.6g}"
    if isinstance(value, list | tuple):
        if all(isinstance(x, str | int | float) for x in value):
            return ", ".join(str(x) for x in value)
        return json.dumps(value, default=str)
    return str(value)


def flatten(summary: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) pairs of a nested summary, in insertion order."""
    for key, value in summary.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from flatten(value, path + ".")
        else:
            yield path, value


# --- header cards -----------------------------------------------------------------------

def cards_html(summary: Mapping[str, Any]) -> str:
    """The key-number cards (the schema's ``card`` metrics present in ``summary``); the
    compute, communication and idle cards also show their share of the step time."""
    step = number(summary, "step_time_s")
    parts: list[str] = []
    for metric in shown_in("card"):
        value = number(summary, metric.key)
        if value is None:
            continue
        sub = ""
        if metric.key in _SHARE_OF_STEP and step:
            sub = f'<div class="sub">{fmt_percent(value / step)} of step</div>'
        parts.append(
            f'<div class="card"><div class="label">{html.escape(label(metric, summary))}</div>'
            f'<div class="value">{html.escape(metric.fmt(value))}</div>{sub}</div>'
        )
    return f'<div class="cards">{"".join(parts)}</div>'


def summary_table_html(summary: Mapping[str, Any]) -> str:
    """Every summary key (nested keys dotted) with its human-formatted value."""
    rows = "".join(
        f'<tr><th>{html.escape(key)}</th><td class="num">{html.escape(fmt_value(key, value))}'
        "</td></tr>"
        for key, value in flatten(summary) if key != "notes"  # shown above, in full
    )
    return f'<table class="summary"><tbody>{rows}</tbody></table>'


# --- breakdown chart --------------------------------------------------------------------


def busy_time_figure(
    timeline: Timeline,
    *,
    server_of: ServerOf | None = None,
    max_ranks: int = DEFAULT_MAX_ROWS,
) -> go.Figure:
    """Stacked horizontal bars: per rank, busy time (ms) of each span kind.

    Busy time of a kind is the union of its spans on that rank, so concurrent spans of one
    kind (e.g. two comm streams) count once. Above ``max_ranks`` ranks a representative
    subset is shown, as in the Gantt chart.
    """
    intervals: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for s in timeline.spans:
        intervals.setdefault((s.rank, s.kind), []).append((s.start, s.end))
    ordered = order_ranks({rank for rank, _ in intervals}, server_of)
    shown = representative_ranks(ordered, max_ranks) if ordered else []
    labels = rank_labels(all_ranks(timeline), server_of)
    y = np.array([labels[r] for r in shown], dtype=object)

    fig = go.Figure()
    for kind in ordered_kinds(k for _, k in intervals):
        busy = [union_length(intervals.get((r, kind), ())) * 1e3 for r in shown]
        fig.add_trace(
            go.Bar(
                name=kind,
                y=y,
                x=np.array(busy, dtype=float),
                orientation="h",
                marker={"color": kind_color(kind)},
                hovertemplate=f"%{{y}}<br>{html.escape(kind)}: %{{x:.3f}} ms<extra></extra>",
            )
        )
    title = "Busy time by kind per rank"
    if len(shown) < len(ordered):
        title += f" — {subset_note(len(shown), len(ordered))}"
    fig.update_layout(
        title={"text": title},
        template="plotly_white",
        barmode="stack",
        height=max(300, 20 * len(shown) + 160),
        margin={"l": 10, "r": 10, "t": 60, "b": 50},
        legend={"title": {"text": "kind"}},
        xaxis={"title": {"text": "busy time (ms)"}},
        yaxis={"type": "category", "autorange": "reversed", "automargin": True},
    )
    return fig


# --- document ---------------------------------------------------------------------------

# Above this many ranks the Gantt first shows one representative rank per role.
REPRESENTATIVES_ABOVE = 8


def gantt_ranks(timeline: Timeline, path: CriticalPath) -> list[int] | None:
    """Ranks the Gantt shows first: one per role plus the critical path's last rank.

    None (show every rank) when the timeline has at most ``REPRESENTATIVES_ABOVE`` ranks.
    """
    ranks = {s.rank for s in timeline.spans}
    if len(ranks) <= REPRESENTATIVES_ABOVE:
        return None
    reps = set(role_representatives(timeline))
    if path.spans:
        reps.add(path.spans[-1].rank)
    return sorted(reps)


def plotly_asset_name() -> str:
    """File name of the external plotly.js asset; versioned, so folders never mix copies."""
    return f"plotly-{get_plotlyjs_version()}.min.js"


def check_assets(assets: str) -> str:
    """``assets`` if it is one of REPORT_ASSETS, else a ValueError naming the choices."""
    if assets not in REPORT_ASSETS:
        raise ValueError(f"report assets must be one of {', '.join(REPORT_ASSETS)}, "
                         f"got {assets!r}")
    return assets


class FigureDivs:
    """Figures to HTML divs with fixed ids; plotly.js comes with the first one only, inlined
    or (``assets="external"``) as a script tag loading ``plotly_asset_name()``."""

    def __init__(self, assets: str = "inline") -> None:
        self.first = True
        self.include: bool | str = (True if check_assets(assets) == "inline"
                                    else plotly_asset_name())

    def __call__(self, fig: go.Figure, div_id: str) -> str:
        out = figure_div(fig, div_id, include_plotlyjs=self.include if self.first else False)
        self.first = False
        return out


def figure_div(fig: go.Figure, div_id: str, *, include_plotlyjs: bool | str) -> str:
    """A figure as a div. The div takes its height from the chart, not a fixed style, so a
    menu that changes the chart's height (more Gantt rows) pushes the page down."""
    out = fig.to_html(full_html=False, include_plotlyjs=include_plotlyjs, config=PLOTLY_CONFIG,
                      div_id=div_id)
    inner = f'(<div id="{re.escape(div_id)}" class="plotly-graph-div" style=")height:[^;"]*;\\s*'
    out = re.sub(inner, r"\1", out, count=1)
    # plotly >= 6 also wraps the div in one with a fixed height.
    return re.sub(r'^(\s*<div style=")height:[^;"]*;\s*', r"\1", out, count=1)


def page(title: str, body: str) -> str:
    """The HTML document around ``body`` (styles inline, nothing fetched)."""
    esc_title = html.escape(title)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc_title}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f"{body}\n</body>\n</html>\n"
    )


def render_report(
    summary: dict[str, Any],
    timeline: Timeline,
    *,
    title: str,
    scenario_yaml: str | None = None,
    server_of: ServerOf | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    graph: TaskGraph | None = None,
    links: Sequence[Any] | None = None,
    topology: go.Figure | None = None,
    topology_table: str = "",
    hbm_bytes: float | None = None,
    subtitle: str = "",
    assets: str = "inline",
    group_of: Callable[[int], str] | None = None,
    intro: str = "",
) -> str:
    """One HTML document (plotly.js inline once, no network references; with
    ``assets="external"`` it loads ``plotly_asset_name()`` from its own folder instead).

    Sections in order: header with key-number cards; the Gantt chart (critical path
    drawn as a strip under its bars; one rank per role first on big clusters); breakdowns
    (busy time by kind per rank, communication overlapped vs exposed per group, memory
    when the summary has ``memory_breakdown`` (over the step too: from ``timeline``),
    busiest links over time when ``links`` and flows exist, the critical path table, the
    summary table); the topology figure when given; the scenario.
    ``graph`` lets the critical path follow task dependencies, not just stream order;
    ``subtitle`` (e.g. the scenario's description and plan) goes under the title.
    ``group_of`` groups the Gantt rows (the jobs of a shared cluster); ``intro`` is HTML
    placed before the Gantt chart (their table).
    """
    path = critical_path(timeline, graph)
    div = FigureDivs(assets)
    gantt = gantt_figure(timeline, server_of=server_of, max_rows=max_rows,
                         representatives=gantt_ranks(timeline, path), highlight=path.spans,
                         group_of=group_of)
    parts = [*([intro] if intro else []),
             f'<section id="gantt"><h2>Timeline</h2>\n{div(gantt, GANTT_DIV_ID)}\n</section>',
             '<section id="breakdown"><h2>Breakdown</h2>']
    breakdown = busy_time_figure(timeline, server_of=server_of, max_ranks=max_rows)
    parts.append(div(breakdown, BREAKDOWN_DIV_ID))
    overlap = comm_overlap_figure(timeline)
    if overlap is not None:
        parts.append(div(overlap, "comm-overlap-chart"))
    memory = memory_figure(summary, hbm_bytes, timeline, server_of)
    if memory is not None:
        parts.append(div(memory, "memory-chart"))
        if len(memory.data) > len(summary.get("memory_breakdown") or {}):
            parts.append(f'<p class="muted">{html.escape(MEMORY_CAPTION)}</p>')
    if links is not None and timeline.flows:
        util = link_utilisation_figure(timeline, links)
        if util is not None:
            parts.append(div(util, "links-chart"))
    parts.append('<h3 id="critical-path">Critical path</h3>')
    parts.append(critical_path_html(path, server_of=server_of, num_ranks=timeline.num_ranks))
    parts.append(f"<h3>Summary</h3>\n{summary_table_html(summary)}\n</section>")
    if topology is not None:
        parts.append(f'<section id="topology"><h2>Topology</h2>\n'
                     f'{div(topology, "topology-chart")}\n{topology_table}</section>')
    if scenario_yaml is not None:
        parts.append(
            '<section id="scenario"><h2>Scenario</h2><details><summary>scenario YAML</summary>'
            f"<pre>{html.escape(scenario_yaml)}</pre></details></section>"
        )
    n_ranks = len({s.rank for s in timeline.spans})
    facts = (
        f"{plural(len(timeline), 'span')} on {plural(n_ranks, 'rank')} · timeline ends at "
        f"{fmt_seconds(timeline.end)} · drag to zoom, scroll to zoom, double-click to reset, "
        "click legend entries to toggle kinds; the black strip under the bars is the critical path"
    )
    sub = f'<p class="subtitle">{html.escape(subtitle)}</p>' if subtitle else ""
    notes = "".join(f"<li>{html.escape(str(n))}</li>" for n in summary.get("notes") or ())
    notes = f'<ul class="notes" id="notes">{notes}</ul>' if notes else ""
    header = (f"<header><h1>{html.escape(title)}</h1>{sub}{cards_html(summary)}{notes}"
              f'<p class="muted">{html.escape(facts)}</p></header>')
    return page(title, header + "\n" + "\n".join(parts))


def write_report(path: Path | str, html: str) -> Path:
    """Write ``html`` to ``path`` as UTF-8, creating parent directories; return the path.
    A document that loads ``plotly_asset_name()`` gets that file beside it."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    if f'src="{plotly_asset_name()}"' in html:
        write_plotly_asset(out.parent)
    return out


def write_plotly_asset(folder: Path | str) -> Path:
    """Write plotly.js as ``folder/plotly_asset_name()`` unless an identical copy is there."""
    target = Path(folder) / plotly_asset_name()
    code = get_plotlyjs().encode("utf-8")
    if not target.is_file() or target.stat().st_size != len(code):
        target.write_bytes(code)
    return target

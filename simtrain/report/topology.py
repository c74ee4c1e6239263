"""The cluster topology for people: link classes with counts, totals, and a layered drawing.

The drawing puts each node class on its own level (spines on top, GPUs at the bottom) and
colours links by kind. Big clusters are drawn in part: the first servers and the last one,
with the switches they use, so the figure stays small whatever the GPU count.
"""

from __future__ import annotations

import html
from collections import Counter
from typing import Any

import plotly.graph_objects as go

from simtrain.report.rows import plural
from simtrain.units import fmt_bandwidth, fmt_seconds

LEVELS = {"spine": 5, "leaf": 4, "nic": 3, "cpu": 2.5, "pcie_switch": 2, "nvswitch": 2,
          "gpu": 1}
LINK_COLORS = {"nvlink": "#2ca02c", "pcie": "#1f77b4", "ib": "#d62728", "ethernet": "#ff7f0e",
               "qpi": "#9467bd"}
NODE_COLORS = {"gpu": "#76b900", "nvswitch": "#2ca02c", "pcie_switch": "#1f77b4",
               "cpu": "#9467bd", "nic": "#8c564b", "leaf": "#d62728", "spine": "#7f0000"}


def topology_rows(cluster: Any) -> list[dict[str, Any]]:
    """``Cluster.describe()`` rows, busiest classes (by count) first, in display units."""
    rows = sorted(cluster.describe(), key=lambda r: (-r["count"], r["kind"], r["between"]))
    return [{"kind": r["kind"], "between": r["between"], "links": r["count"],
             "directed": r["directed"], "bandwidth": fmt_bandwidth(r["bandwidth"]),
             "latency": fmt_seconds(r["latency"]), "bandwidth_Bps": r["bandwidth"],
             "latency_s": r["latency"]} for r in rows]


def topology_totals(cluster: Any) -> dict[str, Any]:
    """Counts of GPUs, servers, nodes per class and directed links."""
    kinds = Counter(str(d.get("kind", "?")) for d in cluster.node_attrs.values())
    return {
        "gpu": cluster.gpu_spec.name,
        "gpus": cluster.num_gpus,
        "servers": cluster.num_servers,
        "gpus_per_server": cluster.gpus_per_server,
        "nodes_by_kind": dict(sorted(kinds.items())),
        "directed_links": len(cluster.links),
    }


def topology_table_html(cluster: Any) -> str:
    """The link classes as an HTML table, with the totals in a line above it."""
    totals = topology_totals(cluster)
    by_kind = ", ".join(f"{n:,} {k}" for k, n in totals["nodes_by_kind"].items())
    rows = "".join(
        f"<tr><td>{html.escape(r['kind'])}</td><td>{html.escape(r['between'])}</td>"
        f'<td class="num">{r["links"]:,}</td><td class="num">{r["bandwidth"]}</td>'
        f'<td class="num">{r["latency"]}</td></tr>' for r in topology_rows(cluster))
    return (f"<p>{totals['gpus']:,} × {html.escape(totals['gpu'])} in "
            f"{plural(totals['servers'], 'server')}; nodes: {html.escape(by_kind)}; "
            f"{totals['directed_links']:,} directed links</p>"
            '<table class="summary" id="topology-table"><thead><tr><th>kind</th><th>between</th>'
            "<th>links</th><th>bandwidth / direction</th><th>latency</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>")


def _shown_nodes(cluster: Any, max_servers: int, attrs: dict[str, dict[str, Any]],
                 succ: dict[str, list[str]]) -> tuple[list[str], int]:
    servers = sorted({d["server"] for d in attrs.values() if "server" in d})
    if len(servers) > max_servers:
        keep = set(servers[: max_servers - 1]) | {servers[-1]}
    else:
        keep = set(servers)
    nodes = [n for n, d in attrs.items() if d.get("server") in keep]
    chosen = set(nodes)
    for level in ("leaf", "spine"):
        extra = sorted({m for n in list(chosen) for m in succ[n]
                        if attrs[m].get("kind") == level and m not in chosen})
        nodes.extend(extra)
        chosen.update(extra)
    # Switches without a server attribute (custom graphs): keep those touching shown nodes.
    # Nodes of servers not shown and the leaf/spine levels (chosen above) stay out: through
    # a spine every leaf and through a leaf every NIC is a neighbour, which at 16k GPUs drew
    # 512 leaves and 512 NICs for four servers.
    others = sorted({m for n in list(chosen) for m in succ[n]
                     if m not in chosen and "server" not in attrs[m]
                     and attrs[m].get("kind") not in ("leaf", "spine")})
    nodes.extend(others)
    return nodes, len(keep)


def topology_figure(cluster: Any, *, max_servers: int = 4, title: str = "") -> go.Figure:
    """Layered drawing of the topology (part of it for clusters over ``max_servers``)."""
    # From the cluster's node and link lists, not its networkx graph: at 16k GPUs building
    # the graph (a quarter of a million edges) took longer than the rest of the report.
    attrs = cluster.node_attrs
    nodes, shown = _shown_nodes(cluster, max_servers, attrs, cluster.successors())
    by_level: dict[float, list[str]] = {}
    for n in nodes:
        by_level.setdefault(LEVELS.get(attrs[n].get("kind", ""), 2), []).append(n)
    pos: dict[str, tuple[float, float]] = {}
    for level, members in by_level.items():
        for i, n in enumerate(members):
            pos[n] = ((i + 0.5) / len(members), level)
    fig = go.Figure()
    edges: dict[str, list[tuple[str, str, Any]]] = {}
    seen: set[tuple[str, str]] = set()
    # Only the shown nodes' own edges (the whole graph has ~16 edges per GPU), in the
    # graph's edge order: node insertion order, then each node's adjacency order.
    out_links: dict[str, list[Any]] = {}
    for lk in cluster.links:
        if lk.src in pos:
            out_links.setdefault(lk.src, []).append(lk)
    shown_edges = ((u, lk.dst, lk) for u in attrs if u in out_links for lk in out_links[u])
    for u, v, d in shown_edges:
        if v in pos and (v, u) not in seen:
            seen.add((u, v))
            edges.setdefault(str(d.kind), []).append((u, v, d))
    for kind in sorted(edges):
        xs: list[float | None] = []
        ys: list[float | None] = []
        mx, my, text = [], [], []
        for u, v, d in edges[kind]:
            xs += [pos[u][0], pos[v][0], None]
            ys += [pos[u][1], pos[v][1], None]
            mx.append((pos[u][0] + pos[v][0]) / 2)
            my.append((pos[u][1] + pos[v][1]) / 2)
            text.append(html.escape(f"{u} ↔ {v}: {kind}, {fmt_bandwidth(d.bandwidth)} "
                                    f"per direction, {fmt_seconds(d.latency)}"))
        color = LINK_COLORS.get(kind, "#999")
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=f"{kind} link",
                                 line={"color": color, "width": 1}, hoverinfo="skip",
                                 legendgroup=kind))
        fig.add_trace(go.Scatter(x=mx, y=my, mode="markers", marker={"size": 5, "color": color},
                                 text=text, hovertemplate="%{text}<extra></extra>",
                                 showlegend=False, legendgroup=kind))
    kinds: dict[str, list[str]] = {}
    for n in nodes:
        kinds.setdefault(str(attrs[n].get("kind", "?")), []).append(n)
    for kind, members in kinds.items():
        fig.add_trace(go.Scatter(
            x=[pos[n][0] for n in members], y=[pos[n][1] for n in members], mode="markers",
            name=kind, marker={"size": 11, "color": NODE_COLORS.get(kind, "#555"),
                               "line": {"width": 1, "color": "#fff"}},
            text=[html.escape(n) for n in members], hovertemplate="%{text}<extra></extra>",
        ))
    note = ""
    if shown < cluster.num_servers:
        note = f" — showing {shown} of {cluster.num_servers} servers (first and last)"
    fig.update_layout(
        title={"text": html.escape((title or "Topology") + note)}, template="plotly_white",
        height=460, margin={"l": 10, "r": 10, "t": 60, "b": 30}, hovermode="closest",
        xaxis={"visible": False}, yaxis={"visible": False},
    )
    return fig

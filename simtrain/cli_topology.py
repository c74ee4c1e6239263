"""``simtrain topology`` and ``simtrain presets``: a cluster, and the names a scenario can use."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from simtrain.cli_errors import fail as _fail
from simtrain.cli_options import JsonOption, QuietOption, SetOption
from simtrain.errors import ScenarioError
from simtrain.report.rows import plural

TOPOLOGY_EPILOG = (
    "Examples:\n\n"
    "  simtrain topology dgx-h100 --nodes 4\n\n"
    "  simtrain topology scenarios/custom_topology.yaml --report topo.html\n\n"
    "  simtrain topology pcie-a100 --json"
)


def topology(
    target: Annotated[str, typer.Argument(help="cluster preset name or scenario YAML file")],
    nodes: Annotated[int, typer.Option(help="servers, for a preset")] = 1,
    set_: SetOption = None,
    report: Annotated[
        Path | None, typer.Option(help="also draw the topology into this HTML file")
    ] = None,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Print a cluster's topology: link classes, bandwidths, latencies and totals."""
    from simtrain.hardware.topology import CLUSTER_PRESETS, ClusterConfig, build_cluster
    from simtrain.report.html import PLOTLY_CONFIG, page, write_report
    from simtrain.report.topology import (
        topology_figure,
        topology_rows,
        topology_table_html,
        topology_totals,
    )
    from simtrain.scenario import load_scenario

    path = Path(target)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        try:
            cluster = build_cluster(load_scenario(path, set_ or []).cluster)
        except ScenarioError as exc:
            raise _fail(str(exc), 2) from None
        title = f"topology · {path.name}"
    else:
        if target.lower() not in CLUSTER_PRESETS:
            raise _fail(f"{target!r} is neither a scenario file nor a cluster preset; presets: "
                        f"{', '.join(CLUSTER_PRESETS)}", 2)
        if nodes < 1:
            raise _fail(f"--nodes must be >= 1, got {nodes}", 2)
        from simtrain.limits import cluster_problems

        try:
            config = ClusterConfig(preset=target, nodes=nodes)
            too_big = cluster_problems(config)
            if too_big:
                raise _fail(f"--nodes {nodes}: {too_big[0][1]}", 2)
            cluster = build_cluster(config)
        except ValueError as exc:
            raise _fail(f"{target}: {str(exc).splitlines()[-1].strip()}", 2) from None
        title = f"topology · {target.lower()} × {nodes}"
    rows = topology_rows(cluster)
    totals = topology_totals(cluster)
    result: dict[str, Any] = {"totals": totals, "links": rows}
    if report is not None:
        fig = topology_figure(cluster, title=title)
        body = (f"<header><h1>{title}</h1></header>"
                + fig.to_html(full_html=False, include_plotlyjs=True, config=PLOTLY_CONFIG,
                              div_id="topology-chart")
                + topology_table_html(cluster))
        result["report"] = str(write_report(report, page(title, body)))
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return
    if quiet:
        return
    table = Table(title=title)
    for col, justify in (("kind", "left"), ("between", "left"), ("links", "right"),
                         ("bandwidth / direction", "right"), ("latency", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        table.add_row(r["kind"], r["between"], f"{r['links']:,}", r["bandwidth"], r["latency"])
    out = Console()
    out.print(table)
    by_kind = ", ".join(f"{n:,} {k}" for k, n in totals["nodes_by_kind"].items())
    out.print(f"{totals['gpus']:,} × {totals['gpu']} in {plural(totals['servers'], 'server')} "
              f"({totals['gpus_per_server']} per server); nodes: {by_kind}; "
              f"{totals['directed_links']:,} directed links")
    if "report" in result:
        out.print(f"report: {result['report']}")


PRESETS_EPILOG = (
    "Examples:\n\n"
    "  simtrain presets\n\n"
    "  simtrain presets --json"
)


def presets(as_json: JsonOption = False, quiet: QuietOption = False) -> None:
    """List the cluster, model and GPU presets a scenario can name."""
    from simtrain.hardware.gpus import GPUS
    from simtrain.hardware.topology import CLUSTER_PRESETS
    from simtrain.workload.model import MODEL_PRESETS

    lists = {"clusters": sorted(CLUSTER_PRESETS), "models": sorted(MODEL_PRESETS),
             "gpus": sorted(GPUS)}
    if as_json:
        sys.stdout.write(json.dumps(lists, indent=2) + "\n")
        return
    if quiet:
        return
    out = Console()
    for title, key in (("cluster presets", "clusters"), ("model presets", "models"),
                       ("GPUs", "gpus")):
        out.print(f"[bold]{title}:[/] {', '.join(lists[key])}")


def register(app: typer.Typer) -> None:
    """Add ``topology`` and ``presets`` to the ``simtrain`` app."""
    app.command("topology", epilog=TOPOLOGY_EPILOG)(topology)
    app.command("presets", epilog=PRESETS_EPILOG)(presets)

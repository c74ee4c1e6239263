"""``simtrain compare-trace``: print and render a measured step beside the simulated one."""

from __future__ import annotations

import html
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from simtrain.cli_errors import fail
from simtrain.errors import ScenarioError
from simtrain.ingest import IngestError
from simtrain.units import fmt_bytes, fmt_seconds

TOP = 10


def run_compare_trace(trace: Path, scenario: Path, *, step: int | None, rank: int,
                      overrides: list[str], report: Path | None, as_json: bool,
                      quiet: bool = False) -> None:
    """Read, simulate, compare; see ``simtrain.ingest.compare_trace``."""
    from simtrain.ingest.compare_trace import (
        collective_diffs,
        kind_times,
        measured_timeline,
        op_diffs,
        op_sizes,
        simulated_ops,
    )
    from simtrain.ingest.kineto import read_trace
    from simtrain.ingest.measure import measure
    from simtrain.report.compare import differences
    from simtrain.report.metrics import summarize
    from simtrain.simulate import build_plan, simulate, step_breakdown
    from simtrain.workload.model import model_flops_per_step

    try:
        data = read_trace(trace)
        chosen = step if step is not None else (max(data.steps) if data.steps else None)
        kernels = data.step_kernels(chosen)
        if not kernels:
            raise IngestError(trace, f"no GPU kernels were launched in ProfilerStep#{chosen}")
        sim = simulate(_load(scenario, overrides))
    except (IngestError, ScenarioError) as exc:
        raise fail(str(exc)) from None
    spans = [s for s in sim.timeline.spans if s.rank == rank]
    if not spans:
        have = sorted({s.rank for s in sim.timeline.spans})
        raise fail(f"--rank {rank} is not in the simulated timeline (ranks {have[:8]}...); "
                   f"pick one of them or set sim.fidelity: explicit")
    measured_tl = measured_timeline(kernels, data.ops, rank)
    sc = sim.scenario
    tokens = sc.training.global_batch_size * sc.seq_len
    msum: dict[str, Any] = {
        **summarize(measured_tl, num_gpus=sim.cluster.num_gpus, tokens_per_step=tokens,
                    model_flops_per_step=model_flops_per_step(sc.model, tokens, sc.seq_len),
                    peak_flops_per_gpu=sim.cluster.gpu_spec.flops(sc.training.dtype)),
        **step_breakdown(measured_tl)}
    measured = measure(kernels, data.ops, sim.cluster.gpu_spec.name, sc.training.dtype)
    plan = build_plan(sc, sim.cluster)
    sizes = op_sizes([u for chunks in plan.units for units in chunks for u in units])
    kind_of = {name: kind for name, (kind, _) in sizes.items()}
    diffs = differences([msum, sim.summary])
    payload: dict[str, Any] = {
        "trace": str(trace), "scenario": str(scenario), "step": chosen, "rank": rank,
        "metrics": {k: {"measured": d[0].value, "simulated": d[1].value,
                        "relative": d[1].relative} for k, d in diffs.items()},
        "time_by_kind_s": {"measured": kind_times(measured_tl.spans, {}),
                           "simulated": kind_times(spans, kind_of)},
        "ops": [vars(d) | {"relative": d.relative} for d in op_diffs(
            measured, simulated_ops(spans, sizes))[:TOP]],
        "collectives": collective_diffs(measured, spans)[:TOP],
    }
    if report is not None:
        payload["report"] = str(_write_report(report, payload, msum, measured_tl, sim))
    if as_json:
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
        return
    if not quiet:
        _print(payload)


def _load(path: Path, overrides: list[str]) -> Any:
    from simtrain.scenario import load_scenario

    return load_scenario(path, overrides)


def _write_report(path: Path, payload: dict[str, Any], msum: dict[str, Any],
                  measured_tl: Any, sim: Any) -> Path:
    from simtrain.report.compare import ComparedRun, render_compare
    from simtrain.report.html import write_report

    runs = [ComparedRun("measured (trace)", msum, measured_tl),
            ComparedRun("simulated", sim.summary, sim.timeline, sim.cluster.server_of,
                        sim.graph)]
    page = render_compare(runs, title=f"simtrain · compare-trace · {Path(payload['trace']).name}")
    section = f'<section id="ops"><h2>Ops that differ most</h2>{_ops_html(payload)}</section>\n'
    marker = '<section id="gantts">'
    page = page.replace(marker, section + marker, 1) if marker in page else page
    return write_report(path, page)


def _ops_html(payload: dict[str, Any]) -> str:
    esc = html.escape
    rows = "".join(
        f"<tr><td>{esc(o['kind'])}</td><td>{esc(str(tuple(int(v) for v in o['size'])))}</td>"
        f'<td class="num">{esc(fmt_seconds(o["measured_s"]))}</td>'
        f'<td class="num">{esc(fmt_seconds(o["simulated_s"]))}</td>'
        f'<td class="num">{o["relative"]:+.1%}</td><td>{esc(o["name"][:60])}</td></tr>'
        for o in payload["ops"])
    for c in payload["collectives"]:
        sim = esc(fmt_seconds(c["simulated_s"])) if c["simulated_s"] else "—"
        rel = "" if c["relative"] is None else f"{c['relative']:+.1%}"
        rows += (f"<tr><td>{esc(c['op'])}</td><td>{esc(fmt_bytes(c['bytes']))}</td>"
                 f'<td class="num">{esc(fmt_seconds(c["measured_s"]))}</td>'
                 f'<td class="num">{sim}</td><td class="num">{rel}</td>'
                 f"<td>group of {c['group_size']}</td></tr>")
    return ('<table class="summary"><thead><tr><th>kind</th><th>size</th><th>measured</th>'
            f"<th>simulated</th><th>Δ</th><th>kernel</th></tr></thead><tbody>{rows}"
            "</tbody></table>")


def _print(payload: dict[str, Any]) -> None:
    out = Console() if Console().is_terminal else Console(width=140)
    table = Table(title=f"compare-trace · step {payload['step']} · rank {payload['rank']}")
    for column in ("metric", "measured", "simulated", "Δ"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    from simtrain.report.html import fmt_value

    for key, m in payload["metrics"].items():
        show = [fmt_value(key, v) if v is not None else "n/a"
                for v in (m["measured"], m["simulated"])]
        rel = f"{m['relative']:+.1%}" if m["relative"] is not None else ""
        table.add_row(key, *show, rel)
    out.print(table)
    kinds = Table(title="busy time by kind (this rank)")
    for column in ("kind", "measured", "simulated"):
        kinds.add_column(column, justify="left" if column == "kind" else "right")
    mk, sk = payload["time_by_kind_s"]["measured"], payload["time_by_kind_s"]["simulated"]
    for kind in sorted(set(mk) | set(sk), key=lambda k: -max(mk.get(k, 0), sk.get(k, 0))):
        kinds.add_row(kind, fmt_seconds(mk.get(kind, 0.0)), fmt_seconds(sk.get(kind, 0.0)))
    out.print(kinds)
    ops = Table(title="ops that differ most (matched by size)")
    for column in ("kind", "size", "measured", "simulated", "Δ"):
        ops.add_column(column, justify="left" if column in ("kind", "size") else "right")
    for o in payload["ops"]:
        ops.add_row(o["kind"], str(tuple(int(v) for v in o["size"])),
                    fmt_seconds(o["measured_s"]), fmt_seconds(o["simulated_s"]),
                    f"{o['relative']:+.1%}")
    if payload["ops"]:
        out.print(ops)
    else:
        out.print("no op of the trace matches a simulated op by size (GEMM m, n, k; attention "
                  "FLOPs; bytes): is the scenario the traced run?")
    if "report" in payload:
        out.print(f"report: {payload['report']}")

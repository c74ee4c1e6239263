"""What a user waits for, 8 to 16,384 GPUs, dense and MoE, in every fidelity (not a test).

For each point of the ladder: the fault-free step in symmetric fidelity; one straggler and
one hung rank in hybrid fidelity (``sim.fidelity: auto`` picks it); and, up to
``--explicit-max-gpus``, the straggler in explicit fidelity, the ground truth hybrid must
match. Each run is a fresh process (peak RSS is per run) and records its wall time, SimPy
events, tasks, events per task, peak RSS, step time, the fidelity that ran, and the time
to render its HTML report. The straggler (5 ms late, 1.1x slower compute) and the hung
rank sit at rank 12,345 modulo the GPU count (the issue's 16k example); the hang comes at
40% of the fault-free step.

``--json OUT`` writes the rows for tracking; ``--baseline OLD.json`` prints, in the same
run, each row's wall time, RSS and events against that file's matching row.

Usage: python benchmarks/bench_ladder.py [--json OUT] [--baseline OLD.json] [--quick]
           [--explicit-max-gpus N] [--limit SECONDS] [--no-report] [--points NAME ...]
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path
from typing import Any

from bench_scale import LADDER as SCALE_LADDER  # run from the repository root or benchmarks/
from bench_scale import run_forked

ROOT = Path(__file__).resolve().parents[1]
FAULT_RANK = 12_345
STRAGGLER = "{delay: 5ms, slowdown: 1.1}"
HANG_AT = 0.4  # of the fault-free step

_DENSE_70B = {"model": {"preset": "llama3-70b"},
              "parallelism": {"tp": 8, "sp": True, "pp": 8, "zero": 1},
              "sim": {"granularity": "stage"}}
_MOE = {"model": {"preset": "mixtral-8x7b"},
        "parallelism": {"tp": 2, "ep": 8, "pp": 4, "zero": 1},
        "sim": {"granularity": "stage"}}

# name -> (GPUs, scenario). Dense: Llama 3 shapes (the 16k point is the bundled Llama 3
# 405B job); MoE: Mixtral-like with EP 8.
LADDER: list[tuple[str, int, dict[str, Any]]] = [
    # the small dense points are bench_scale's own
    *(point for point in SCALE_LADDER if point[0] in ("dense-8", "dense-64")),
    # Stage granularity from 512 GPUs keeps the explicit runs short: at layer granularity
    # explicit dense-512 has 3.66M tasks (about 7,100 per rank); bench_scale runs that one.
    ("dense-512", 512, {"cluster": {"preset": "dgx-h100", "nodes": 64},
                        "training": {"global_batch_size": 512, "seq_len": 8192},
                        **_DENSE_70B, "parallelism": {"tp": 8, "sp": True, "pp": 4, "zero": 1}}),
    ("dense-4096", 4096, {"cluster": {"preset": "dgx-h100", "nodes": 512},
                          "training": {"global_batch_size": 1024, "seq_len": 8192},
                          **_DENSE_70B}),
    ("dense-16384", 16384, {"base": "scenarios/large/llama3_405b_16k_h100.yaml"}),
    ("moe-64", 64, {"cluster": {"preset": "dgx-h100", "nodes": 8},
                    "model": {"preset": "mixtral-8x7b"},
                    "training": {"global_batch_size": 64, "seq_len": 4096},
                    "parallelism": {"tp": 2, "ep": 8, "zero": 1},
                    "sim": {"granularity": "layer"}}),
    ("moe-512", 512, {"cluster": {"preset": "dgx-h100", "nodes": 64},
                      "training": {"global_batch_size": 512, "seq_len": 4096}, **_MOE}),
    ("moe-4096", 4096, {"cluster": {"preset": "dgx-h100", "nodes": 512},
                        "training": {"global_batch_size": 1024, "seq_len": 4096}, **_MOE}),
    ("moe-16384", 16384, {"cluster": {"preset": "dgx-h100", "nodes": 2048},
                          "training": {"global_batch_size": 4096, "seq_len": 4096},
                          "sim": {"granularity": "stage", "network": "analytic"},
                          **{k: v for k, v in _MOE.items() if k != "sim"}}),
]
# mode -> (fidelity requested, fault)
MODES: dict[str, tuple[str, str | None]] = {
    "symmetric": ("symmetric", None),
    "hybrid-straggler": ("auto", "straggler"),
    "hybrid-hang": ("auto", "hang"),
    "explicit-straggler": ("explicit", "straggler"),
}


def overrides(gpus: int, fidelity: str, fault: str | None, step_s: float) -> list[str]:
    """The ``--set`` list of one run."""
    out = [f"sim.fidelity={fidelity}", "sim.ignore_memory=true"]
    rank = FAULT_RANK % gpus
    if fault == "straggler":
        out.append(f"sim.stragglers={{{rank}: {STRAGGLER}}}")
    elif fault == "hang":
        out.append(f"sim.hangs={{{rank}: {HANG_AT * step_s!r}}}")
    return out


def _point(spec: dict[str, Any], sets: list[str], report: bool, queue: Any) -> None:
    from simtrain import load_scenario, simulate
    from simtrain.engine.sim import SimulationDeadlock
    from simtrain.report.html import render_report

    source = ROOT / spec["base"] if "base" in spec else spec
    scenario = load_scenario(source, sets)
    start, cpu = time.perf_counter(), time.process_time()
    hang = None
    try:
        result = simulate(scenario)
    except SimulationDeadlock as exc:
        result, hang = exc.result, str(exc)
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu
    rss_sim = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    events = result.timeline.events if hang is None else None
    row: dict[str, Any] = {
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),  # on a shared machine wall time is mostly the others' load
        "events": events,
        "tasks": len(result.graph.tasks),
        "events_per_task": round(events / len(result.graph.tasks), 2) if events else None,
        "peak_rss_mib": round(rss_sim),
        "step_time_s": result.summary["step_time_s"],
        "fidelity": result.summary["fidelity"],
        "simulated_ranks": len({s.rank for s in result.timeline.spans}),
    }
    if hang is not None:
        row["hang"] = hang.split(";")[0][:200]
    if report:
        start = time.perf_counter()
        render_report(result.summary, result.timeline, title=scenario.name,
                      server_of=result.cluster.server_of, graph=result.graph,
                      links=result.cluster.links, hbm_bytes=result.cluster.gpu_spec.hbm_bytes)
        row["report_s"] = round(time.perf_counter() - start, 3)
        row["peak_rss_with_report_mib"] = round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    queue.put(row)


def run_point(spec: dict[str, Any], sets: list[str], limit: float,
              report: bool) -> dict[str, Any]:
    """One run in a fresh process; ``{"skipped": why}`` past ``limit`` seconds or on failure."""
    return run_forked(_point, (spec, sets, report), limit)


def _fmt(value: Any, width: int) -> str:
    if value is None:
        return f"{'-':>{width}}"
    if isinstance(value, float):
        return f"{value:>{width}.3g}" if value < 1000 else f"{value:>{width},.0f}"
    if isinstance(value, int):
        return f"{value:>{width},}"
    return f"{value:>{width}}"


COLUMNS = (("wall_s", 8), ("cpu_s", 8), ("events", 11), ("tasks", 9), ("events_per_task", 7),
           ("peak_rss_mib", 8), ("report_s", 8), ("step_time_s", 9), ("simulated_ranks", 7))


def print_header() -> None:
    names = {"wall_s": "wall s", "cpu_s": "CPU s", "events": "events", "tasks": "tasks",
             "events_per_task": "ev/task", "peak_rss_mib": "RSS MiB", "report_s": "report",
             "step_time_s": "step s", "simulated_ranks": "ranks"}
    print(f"{'point':<12}{'mode':<20}{'ran':<10}"
          + "".join(f"{names[k]:>{w}}" for k, w in COLUMNS))


def print_row(row: dict[str, Any]) -> None:
    head = f"{row['point']:<12}{row['mode']:<20}"
    if "skipped" in row:
        print(head + row["skipped"])
        return
    print(head + f"{row['fidelity']:<10}" + "".join(_fmt(row.get(k), w) for k, w in COLUMNS),
          flush=True)


def compare(rows: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> None:
    """Each row against the baseline row of the same point and mode (new / old)."""
    old = {(r["point"], r["mode"]): r for r in baseline}
    print(f"\nagainst the baseline (new / old)\n{'point':<12}{'mode':<20}{'wall':>16}"
          f"{'CPU':>16}{'RSS MiB':>16}{'events':>22}{'step s':>12}")
    for row in rows:
        base = old.get((row["point"], row["mode"]))
        if base is None or "skipped" in row or "skipped" in base:
            why = "no baseline" if base is None else row.get("skipped") or base["skipped"]
            print(f"{row['point']:<12}{row['mode']:<20}{why:>16}")
            continue

        def pair(key: str, fmt: str, row: dict[str, Any] = row,
                 base: dict[str, Any] = base) -> str:
            a, b = row.get(key), base.get(key)
            if a is None or b is None:
                return "-"
            ratio = f" {a / b:.2f}x" if b else ""
            return f"{a:{fmt}}/{b:{fmt}}{ratio}"

        print(f"{row['point']:<12}{row['mode']:<20}{pair('wall_s', '.2f'):>16}"
              f"{pair('cpu_s', '.2f'):>16}{pair('peak_rss_mib', '.0f'):>16}"
              f"{pair('events', ',.0f'):>22}"
              f"{row['step_time_s'] / base['step_time_s'] - 1:>+12.2%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--baseline", type=Path, help="a previous --json to compare against")
    parser.add_argument("--explicit-max-gpus", type=int, default=512)
    parser.add_argument("--limit", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--quick", action="store_true", help="no explicit runs")
    parser.add_argument("--no-report", action="store_true", help="skip report timing")
    parser.add_argument("--points", nargs="*", help="only these ladder points")
    args = parser.parse_args()
    baseline = json.loads(args.baseline.read_text())["rows"] if args.baseline else None
    print_header()
    rows: list[dict[str, Any]] = []
    for name, gpus, spec in LADDER:
        if args.points and name not in args.points:
            continue
        step_s = 1.0
        for mode, (fidelity, fault) in MODES.items():
            if mode.startswith("explicit") and (args.quick or gpus > args.explicit_max_gpus):
                continue
            sets = overrides(gpus, fidelity, fault, step_s)
            row = {"point": name, "gpus": gpus, "mode": mode,
                   **run_point(spec, sets, args.limit, not args.no_report)}
            if mode == "symmetric" and "step_time_s" in row:
                step_s = row["step_time_s"]
            rows.append(row)
            print_row(row)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    if baseline is not None:
        compare(rows, baseline)


if __name__ == "__main__":
    main()

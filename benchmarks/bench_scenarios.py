"""Wall time and throughput of the simulator on the bundled scenarios (not part of the tests).

Prints, per scenario: tasks in the graph, spans recorded, build and run wall time, and
spans per second; and the raw SimPy event rate of a null model on this machine, so the
engine's overhead reads as a ratio. Usage: python benchmarks/bench_scenarios.py [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

from bench_scale import null_simpy_rate  # same folder: run as a script

from simtrain import load_scenario
from simtrain.engine.sim import execute
from simtrain.hardware.topology import build_cluster
from simtrain.simulate import build_graph

ROOT = Path(__file__).resolve().parents[1]


def bench(path: Path) -> dict[str, float | int | str]:
    scenario = load_scenario(path)
    t0 = time.perf_counter()
    cluster = build_cluster(scenario.cluster)
    graph = build_graph(scenario, cluster)
    t1 = time.perf_counter()
    timeline = execute(graph, cluster, collective_latency=scenario.comm.collective_latency)
    t2 = time.perf_counter()
    return {
        "scenario": path.stem,
        "gpus": cluster.num_gpus,
        "tasks": len(graph.tasks),
        "spans": len(timeline),
        "build_s": round(t1 - t0, 4),
        "run_s": round(t2 - t1, 4),
        "spans_per_s": round(len(timeline) / (t2 - t1)),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    rate = null_simpy_rate()
    print(f"raw SimPy null-model rate: {rate:,.0f} events/s")
    rows = [bench(p) for p in sorted((ROOT / "scenarios").glob("*.yaml"))]
    header = f"{'scenario':<22}{'gpus':>6}{'tasks':>9}{'spans':>9}{'build s':>9}{'run s':>8}"
    print(header + f"{'spans/s':>11}{'RSS MiB':>9}")
    for r in rows:
        print(f"{r['scenario']:<22}{r['gpus']:>6}{r['tasks']:>9}{r['spans']:>9}"
              f"{r['build_s']:>9}{r['run_s']:>8}{r['spans_per_s']:>11,}{r['peak_rss_mib']:>9}")
    if args.json:
        args.json.write_text(json.dumps({"simpy_null_events_per_s": rate, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()

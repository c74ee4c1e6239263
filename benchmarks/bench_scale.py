"""Simulator cost across cluster sizes: events, wall time, events/s and peak RSS.

A ladder of dense and MoE scenarios at 8 to 16,384 GPUs, each in symmetric fidelity and,
where it finishes within the time limit, explicit fidelity; plus the raw SimPy event rate of
a null model on this machine, so the engine's overhead reads as a ratio. Each point runs in
its own process (peak RSS is per point). Not part of the test run.

With --dp-sweep it instead holds the model and plan fixed (Llama-3-70B, TP8 PP8, stage
granularity, symmetric) and grows only data parallelism, 8 to 512 replicas (512 to 32,768
GPUs), in both network modes: the event count must stay flat; the wall time shows what
still grows with the cluster (the link table, and the flows of ever wider DP rings).

Each point also splits its CPU seconds into setup (scenario, cluster, fidelity, plan, task
graph, host issue times), engine (``execute``) and post-processing (the summary).

Usage: python benchmarks/bench_scale.py [--json OUT] [--explicit-limit SECONDS] [--quick]
                                        [--only POINT ...] [--fidelity symmetric|explicit]
       python benchmarks/bench_scale.py --dp-sweep [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import time
from pathlib import Path
from typing import Any

import simpy

ROOT = Path(__file__).resolve().parents[1]

# name -> (gpus, scenario dict). Dense: Llama 3 shapes; MoE: Mixtral-like with EP.
LADDER: list[tuple[str, int, dict[str, Any]]] = [
    ("dense-8", 8, {"cluster": {"preset": "dgx-h100", "nodes": 1},
                    "model": {"preset": "llama3-8b"},
                    "training": {"global_batch_size": 8, "seq_len": 4096},
                    "parallelism": {"tp": 8}}),
    ("dense-64", 64, {"cluster": {"preset": "dgx-h100", "nodes": 8},
                      "model": {"preset": "llama3-8b"},
                      "training": {"global_batch_size": 64, "seq_len": 8192},
                      "parallelism": {"tp": 8, "sp": True}}),
    ("dense-512", 512, {"cluster": {"preset": "dgx-h100", "nodes": 64},
                        "model": {"preset": "llama3-70b"},
                        "training": {"global_batch_size": 512, "seq_len": 8192},
                        "parallelism": {"tp": 8, "sp": True, "pp": 4, "zero": 1},
                        "sim": {"granularity": "layer"}}),
    ("dense-4096", 4096, {"cluster": {"preset": "dgx-h100", "nodes": 512},
                          "model": {"preset": "llama3-70b"},
                          "training": {"global_batch_size": 1024, "seq_len": 8192},
                          "parallelism": {"tp": 8, "sp": True, "pp": 8, "zero": 1},
                          "sim": {"granularity": "stage"}}),
    ("dense-16384", 16384, {"base": "scenarios/large/llama3_405b_16k_h100.yaml"}),
    ("moe-64", 64, {"cluster": {"preset": "dgx-h100", "nodes": 8},
                    "model": {"preset": "mixtral-8x7b"},
                    "training": {"global_batch_size": 64, "seq_len": 4096},
                    "parallelism": {"tp": 2, "ep": 8, "zero": 1},
                    "sim": {"granularity": "layer"}}),
    ("moe-512", 512, {"cluster": {"preset": "dgx-h100", "nodes": 64},
                      "model": {"preset": "mixtral-8x7b"},
                      "training": {"global_batch_size": 512, "seq_len": 4096},
                      "parallelism": {"tp": 2, "ep": 8, "pp": 4, "zero": 1},
                      "sim": {"granularity": "stage"}}),
]


def null_simpy_rate(events: int = 300_000) -> float:
    """Timeouts per second SimPy processes when the model does nothing else."""
    env = simpy.Environment()

    def proc(n: int):  # type: ignore[no-untyped-def]
        for _ in range(n):
            yield env.timeout(1.0)

    env.process(proc(events))
    start = time.perf_counter()
    env.run()
    return events / (time.perf_counter() - start)


def _timed(module: Any, name: str, spent: dict[str, float]) -> None:
    """Wrap ``module.name`` so the CPU seconds of its calls add up in ``spent[name]``."""
    inner = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.process_time() - start
    setattr(module, name, wrapper)


def _point(spec: dict[str, Any], fidelity: str, queue: Any) -> None:
    import importlib

    from simtrain import load_scenario, simulate

    run = importlib.import_module("simtrain.simulate")  # the module (the package exports
    spent: dict[str, float] = {}                        # the function of the same name)
    for name in ("execute", "_summary"):  # this forked process only
        _timed(run, name, spent)
    overrides = [f"sim.fidelity={fidelity}", "sim.ignore_memory=true"]
    source = ROOT / spec["base"] if "base" in spec else spec
    start, cpu = time.perf_counter(), time.process_time()
    result = simulate(load_scenario(source, overrides))
    wall = time.perf_counter() - start
    cpu_s = time.process_time() - cpu
    queue.put({
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu_s, 2),  # wall on a shared machine is noise
        "setup_cpu_s": round(cpu_s - spent.get("execute", 0.0) - spent.get("_summary", 0.0), 2),
        "engine_cpu_s": round(spent.get("execute", 0.0), 2),
        "post_cpu_s": round(spent.get("_summary", 0.0), 2),
        "events": result.timeline.events,
        "events_per_s": round(result.timeline.events / wall),
        "tasks": len(result.graph.tasks),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "step_time_s": round(result.summary["step_time_s"], 4),
        "fidelity": result.summary["fidelity"],
    })


def run_point(spec: dict[str, Any], fidelity: str, limit: float) -> dict[str, Any]:
    return run_forked(_point, (spec, fidelity), limit)


def run_forked(target: Any, args: tuple[Any, ...], limit: float) -> dict[str, Any]:
    """``target(*args, queue)`` in a fresh forked process (its own RSS peak); the dict it
    puts on the queue, or ``{"skipped": why}`` past ``limit`` seconds or on failure."""
    ctx = mp.get_context("fork")
    queue: Any = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue))
    proc.start()
    proc.join(limit)
    if proc.is_alive():
        proc.kill()
        proc.join()
        return {"skipped": f"over {limit:.0f} s"}
    if proc.exitcode != 0:
        return {"skipped": f"failed (exit {proc.exitcode})"}
    return dict(queue.get())


def dp_sweep_spec(dp: int, network: str) -> dict[str, Any]:
    """Llama-3-70B, TP8 PP8, 8 sequences of 4,096 per replica, ``dp`` replicas."""
    return {"cluster": {"preset": "dgx-h100", "nodes": 8 * dp},
            "model": {"preset": "llama3-70b"},
            "training": {"global_batch_size": 8 * dp, "seq_len": 4096},
            "parallelism": {"tp": 8, "sp": True, "pp": 8, "zero": 1, "dp": dp},
            "sim": {"granularity": "stage", "network": network}}


def dp_sweep(limit: float) -> list[dict[str, Any]]:
    print(f"{'network':<10}{'dp':>5}{'GPUs':>8}{'tasks':>8}{'events':>9}{'wall s':>9}"
          f"{'RSS MiB':>9}{'step s':>9}")
    rows = []
    for network in ("analytic", "flow"):
        for dp in (8, 32, 128, 512):
            row = {"network": network, "dp": dp, "gpus": 64 * dp,
                   **run_point(dp_sweep_spec(dp, network), "symmetric", limit)}
            rows.append(row)
            if "skipped" in row:
                print(f"{network:<10}{dp:>5}{64 * dp:>8,}{row['skipped']:>30}")
                continue
            print(f"{network:<10}{dp:>5}{64 * dp:>8,}{row['tasks']:>8,}{row['events']:>9,}"
                  f"{row['wall_s']:>9}{row['peak_rss_mib']:>9}{row['step_time_s']:>9}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--explicit-limit", type=float, default=180.0)
    parser.add_argument("--quick", action="store_true", help="symmetric only, up to 4,096")
    parser.add_argument("--dp-sweep", action="store_true",
                        help="grow only data parallelism at a fixed model and plan")
    parser.add_argument("--only", nargs="+", metavar="POINT",
                        help=f"run only these points ({', '.join(n for n, _, _ in LADDER)})")
    parser.add_argument("--fidelity", choices=("symmetric", "explicit"),
                        help="run only this fidelity")
    args = parser.parse_args()
    if args.only and not set(args.only) <= {n for n, _, _ in LADDER}:
        parser.error(f"--only: unknown point(s) "
                     f"{', '.join(sorted(set(args.only) - {n for n, _, _ in LADDER}))}")
    if args.dp_sweep:
        rows = dp_sweep(args.explicit_limit)
        if args.json:
            args.json.write_text(json.dumps({"dp_sweep": rows}, indent=2))
        return
    rate = null_simpy_rate()
    print(f"raw SimPy null-model rate: {rate:,.0f} events/s")
    print(f"{'point':<13}{'fidelity':<11}{'tasks':>9}{'events':>11}{'wall s':>9}{'CPU s':>9}"
          f"{'setup':>7}{'engine':>8}{'post':>7}"
          f"{'events/s':>11}{'vs SimPy':>9}{'RSS MiB':>9}{'step s':>9}")
    rows = []
    for name, gpus, spec in LADDER:
        if args.quick and gpus > 4096 or args.only and name not in args.only:
            continue
        fidelities = ("symmetric",) if args.quick else ("symmetric", "explicit")
        for fidelity in (args.fidelity,) if args.fidelity else fidelities:
            row = {"point": name, "gpus": gpus, "requested": fidelity,
                   **run_point(spec, fidelity, args.explicit_limit)}
            rows.append(row)
            if "skipped" in row:
                print(f"{name:<13}{fidelity:<11}{row['skipped']:>40}")
                continue
            print(f"{name:<13}{row['fidelity']:<11}{row['tasks']:>9,}{row['events']:>11,}"
                  f"{row['wall_s']:>9}{row['cpu_s']:>9}{row['setup_cpu_s']:>7}"
                  f"{row['engine_cpu_s']:>8}{row['post_cpu_s']:>7}{row['events_per_s']:>11,}"
                  f"{row['events_per_s'] / rate:>9.0%}{row['peak_rss_mib']:>9}"
                  f"{row['step_time_s']:>9}")
    if args.json:
        args.json.write_text(json.dumps({"simpy_null_events_per_s": rate, "rows": rows},
                                        indent=2))


if __name__ == "__main__":
    main()

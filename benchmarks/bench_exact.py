"""Exactness check for engine changes: dump every case's span table, then compare two dumps.

An engine change meant to make the simulator cheaper must not move a single span: run
``dump`` on the old tree and on the new one, then ``compare``. Cases: every bundled
scenario as shipped, plus explicit runs with a straggler (late start and slow compute),
a hung rank (the deadlock message and the partial timeline), a slow cable, jitter over
several steps, and MoE routing imbalance. Each case records its spans (rank, stream, kind,
name, start, end, bytes, FLOPs, meta) sorted, its flows sorted, its summary and its event
count (reported, not compared: fewer events is the point). Not part of the test run.

Usage: PYTHONPATH=OLD python benchmarks/bench_exact.py dump old.pkl
       PYTHONPATH=NEW python benchmarks/bench_exact.py dump new.pkl
       python benchmarks/bench_exact.py compare old.pkl new.pkl
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_PP = "scenarios/pp_1f1b.yaml"
_DENSE = {"cluster": {"preset": "dgx-h100", "nodes": 2},
          "model": {"preset": "llama3-8b", "num_layers": 4},
          "training": {"global_batch_size": 8, "seq_len": 4096},
          "parallelism": {"tp": 8, "sp": True, "pp": 2},
          "sim": {"granularity": "layer"}}
_DENSE64 = {"cluster": {"preset": "dgx-h100", "nodes": 8},
            "model": {"preset": "llama3-70b", "num_layers": 8},
            "training": {"global_batch_size": 16, "seq_len": 8192},
            "parallelism": {"tp": 8, "sp": True, "pp": 4, "zero": 1},
            "sim": {"granularity": "layer"}}
_EXPLICIT = ["sim.fidelity=explicit", "sim.ignore_memory=true"]

# name -> (scenario path or dict, overrides)
EXTRA: dict[str, tuple[Any, list[str]]] = {
    "pp_1f1b-straggler": (_PP, [*_EXPLICIT, "sim.stragglers={5: {delay: 2ms, slowdown: 1.3}}"]),
    "pp_1f1b-hang": (_PP, [*_EXPLICIT, "sim.hangs={6: 20ms}"]),
    "pp_1f1b-hang0": (_PP, [*_EXPLICIT, "sim.hangs={0: 0}"]),
    "pp_1f1b-slowlink": (_PP, [*_EXPLICIT,
                               "sim.link_slowdowns=[{between: [n0.nic0, leaf0.rail0], "
                               "slowdown: 3}]"]),
    "pp_1f1b-jitter": (_PP, [*_EXPLICIT, "sim.variability={sigma: 0.05, delay_s: 0.0005, "
                                         "link_sigma: 0.1, steps: 3}"]),
    "dense-tp8pp2-straggler": (_DENSE, [*_EXPLICIT,
                                        "sim.stragglers={3: {slowdown: 1.1}}"]),
    "dense-tp8pp2-late": (_DENSE, [*_EXPLICIT, "sim.stragglers={9: {delay: 1ms}}"]),
    "dense-tp8pp2-hang": (_DENSE, [*_EXPLICIT, "sim.hangs={12: 5ms}"]),
    "dense-tp8pp2": (_DENSE, _EXPLICIT),
    "dense64-straggler": (_DENSE64, [*_EXPLICIT, "sim.stragglers={17: {slowdown: 1.05}}"]),
    "dense64-hang": (_DENSE64, [*_EXPLICIT, "sim.hangs={40: 30ms}"]),
    "dense64-slowlink": (_DENSE64, [*_EXPLICIT,
                                    "sim.link_slowdowns=[{between: [n3.nic2, leaf0.rail2], "
                                    "slowdown: 2}]"]),
    "moe_mixtral-explicit": ("scenarios/moe_mixtral.yaml", _EXPLICIT),
    "ddp_buckets-straggler": ("scenarios/ddp_buckets.yaml",
                              [*_EXPLICIT, "sim.stragglers={1: {delay: 3ms, slowdown: 1.05}}"]),
    "fsdp_zero3-hang": ("scenarios/fsdp_zero3.yaml", [*_EXPLICIT, "sim.hangs={2: 1ms}"]),
}


def _cases() -> dict[str, tuple[Any, list[str]]]:
    cases: dict[str, tuple[Any, list[str]]] = {
        path.stem: (str(path.relative_to(ROOT)), []) for path in sorted(
            (ROOT / "scenarios").glob("*.yaml")) if path.stem != "two_jobs"}  # jobs: simtrain run
    cases.update(EXTRA)
    return cases


def _record(timeline: Any) -> dict[str, Any]:
    spans = sorted((s.rank, s.stream, s.kind, s.name, s.start, s.end, s.bytes, s.flops,
                    repr(sorted(s.meta.items()))) for s in timeline.spans)
    flows = sorted((f.start, f.end, f.nbytes, f.route, f.task) for f in timeline.flows)
    return {"spans": spans, "flows": flows}


def run_case(source: Any, overrides: list[str]) -> dict[str, Any]:
    from simtrain import load_scenario, simulate
    from simtrain.engine.sim import SimulationDeadlock

    if isinstance(source, str):
        source = ROOT / source
    start = time.process_time()
    try:
        result = simulate(load_scenario(source, overrides))
    except SimulationDeadlock as exc:
        partial = exc.result
        return {"deadlock": str(exc), **_record(partial.timeline),
                "summary": json.dumps(partial.summary, sort_keys=True, default=str),
                "cpu_s": time.process_time() - start, "events": None}
    return {**_record(result.timeline),
            "summary": json.dumps(result.summary, sort_keys=True, default=str),
            "cpu_s": time.process_time() - start, "events": result.timeline.events}


def dump(out: Path, only: list[str]) -> None:
    sys.path.insert(0, str(ROOT))
    rows = {}
    for name, (source, overrides) in _cases().items():
        if only and name not in only:
            continue
        rows[name] = run_case(source, overrides)
        row = rows[name]
        print(f"{name:<28}{len(row['spans']):>9} spans{row['cpu_s']:>8.2f} s"
              f"{'' if row['events'] is None else format(row['events'], ','):>12} events"
              f"{'  deadlock' if 'deadlock' in row else ''}")
    out.write_bytes(pickle.dumps(rows))


def compare(old_path: Path, new_path: Path) -> int:
    old, new = pickle.loads(old_path.read_bytes()), pickle.loads(new_path.read_bytes())
    bad = 0
    for name in old:
        a, b = old[name], new.get(name)
        if b is None:
            print(f"{name}: missing in {new_path}")
            bad += 1
            continue
        diffs = [key for key in ("spans", "flows", "summary", "deadlock")
                 if a.get(key) != b.get(key)]
        events = f"events {a['events']} -> {b['events']}" if a["events"] else "deadlock"
        print(f"{name:<28}{'IDENTICAL' if not diffs else 'DIFFERS in ' + ', '.join(diffs):<28}"
              f"cpu {a['cpu_s']:.2f} -> {b['cpu_s']:.2f} s, {events}")
        bad += bool(diffs)
    print(f"{len(old) - bad} of {len(old)} cases identical")
    return 1 if bad else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    d.add_argument("--only", nargs="*", default=[])
    c = sub.add_parser("compare")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    args = parser.parse_args()
    if args.cmd == "dump":
        dump(args.out, args.only)
    else:
        raise SystemExit(compare(args.old, args.new))


if __name__ == "__main__":
    main()

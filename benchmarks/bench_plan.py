"""Plan search speed: wall time, candidates checked and bounded per second, RSS.

    python benchmarks/bench_plan.py                 # Llama-3-70B on 1,024 H100s (issue #16)
    python benchmarks/bench_plan.py --case 405b     # Llama-3-405B on 16,384 H100s (issue #19)
    python benchmarks/bench_plan.py --case moe      # Mixtral 8x7B, 1,024 GPUs, batch 512
    python benchmarks/bench_plan.py --workers 2 --top 5

Targets (issue #16): >= 200 candidate evaluations per second by the bound; a 5,000-candidate
search of the 70B case in <= 30 s on 2 cores including the final top-5 runs. Issue #19: the
405B search in under 60 s on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from typing import Any

CASES: dict[str, dict[str, Any]] = {
    "70b": {"model": {"preset": "llama3-70b"}, "cluster": {"preset": "dgx-h100", "nodes": 128},
            "training": {"tokens": "15T", "seq_len": 8192, "global_batch": 1024},
            # vpp 2 and 4, every ZeRO stage, GPipe too: 6,720 candidates
            "search": {"vpp": [2, 4], "zero": [0, 1, 2, 3],
                       "schedule": ["1f1b", "interleaved", "gpipe"]}},
    "405b": {"model": {"preset": "llama3-405b"},
             "cluster": {"preset": "dgx-h100", "nodes": 2048},
             "training": {"tokens": "15.6T", "seq_len": 8192, "global_batch": 2048}},
    "moe": {"model": {"preset": "mixtral-8x7b"}, "cluster": {"preset": "dgx-h100", "nodes": 128},
            "training": {"tokens": "2T", "seq_len": 4096, "global_batch": 512}},
}


def main() -> None:
    from simtrain.study.executors import make_executor
    from simtrain.study.plan import plan_spec, search

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", choices=sorted(CASES), default="70b")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--top", type=int, default=5)
    args = parser.parse_args()
    data = {**CASES[args.case]}
    data["search"] = {**data.get("search", {}), "top": args.top}
    spec = plan_spec(data, name=args.case)
    runner = make_executor("local" if args.workers > 1 else "serial", workers=args.workers)
    t0 = time.perf_counter()

    def progress(phase: str, done: int, total: int) -> None:
        if phase != "check" and (done % 10 == 0 or done == total) or \
                phase == "check" and done == total:
            print(f"  {time.perf_counter() - t0:7.1f} s  {phase} {done:,} / {total:,}",
                  flush=True)

    try:
        result = search(spec, executor=runner, progress=progress)
    finally:
        runner.close()
    wall = time.perf_counter() - t0
    c = result.counts
    me, kids_use = (resource.getrusage(w) for w in (resource.RUSAGE_SELF,
                                                     resource.RUSAGE_CHILDREN))
    rss = me.ru_maxrss / 1024
    cpu = me.ru_utime + me.ru_stime + kids_use.ru_utime + kids_use.ru_stime
    print(f"case {args.case}: {c['enumerated']:,} candidates ({c['invalid']:,} invalid, "
          f"{c['oom']:,} oom, {c['feasible']:,} feasible: {c['simulated']:,} simulated, "
          f"{c['pruned']:,} pruned)")
    # on a shared machine CPU time says more than wall time; the pool's workers are the
    # forkserver's children, not ours, so their CPU is not in it
    print(f"wall {wall:.1f} s, CPU of this process {cpu:.1f} s, load average "
          f"{os.getloadavg()[0]:.1f}; "
          f"check+bound {result.check_s:.1f} s = "
          f"{c['enumerated'] / max(result.check_s, 1e-9):,.0f} candidates/s "
          f"({c['enumerated'] / max(result.check_cpu_s, 1e-9):,.0f} per CPU second); "
          f"max RSS {rss:,.0f} MiB")
    for row in result.rows():
        print(f"  #{row['rank']} {row['plan']}: search {row['search_step_time_s']:.3f} s, "
              f"final {row['step_time_s']:.3f} s, goodput {row['goodput']:.1%}")


if __name__ == "__main__":
    main()

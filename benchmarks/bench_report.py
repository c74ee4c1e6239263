"""Report size and time to open in a browser, per bundled scenario (not part of the tests).

For each scenario (default: all of scenarios/*.yaml): simulate, render the HTML report as
``simtrain run`` does, then open it in headless Chromium (Debian's, via Playwright) and time
until the Gantt has drawn its bars. Also a synthetic 16,384-GPU timeline (8 pipeline stages
x 2,048 replicas), which is what the representative-rank view exists for.

Usage: python benchmarks/bench_report.py [SCENARIO.yaml ...] [--json OUT]

``--scale [--baseline TREE]`` instead times report generation alone (no browser) for the
16k-GPU scenario (scenarios/large/llama3_405b_16k_h100.yaml), each case in a fresh process:
wall time of rendering + writing the report, peak RSS before and after it, report size, in
both asset modes, and the same for the source tree TREE (e.g. a checkout of main) in the
same run, so the baseline sees the same machine load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from simtrain.engine.timeline import Span, Timeline
from simtrain.report.html import GANTT_DIV_ID, render_report, write_report

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def synthetic_16k() -> Timeline:
    n, stages = 16_384, 8
    tl = Timeline(num_ranks=n)
    for r in range(n):
        t = (r % stages) * 1e-3
        for mb in range(8):
            tl.add(Span(r, "compute", "forward", f"fwd stage{r % stages} mb{mb}", t, t + 1e-3))
            t += 1.1e-3
        for mb in range(8):
            tl.add(Span(r, "compute", "backward", f"bwd stage{r % stages} mb{mb}", t, t + 2e-3))
            t += 2.1e-3
        tl.add(Span(r, "dp", "dp_comm", "grad all-reduce", t - 4e-3, t + 3e-3, bytes=2e9,
                    meta={"op": "all_reduce", "algorithm": "ring", "group_size": n // stages}))
    return tl


SCALE_SCENARIO = ROOT / "scenarios/large/llama3_405b_16k_h100.yaml"
# Runs inside a fresh interpreter whose PYTHONPATH is the tree under test; prints one JSON.
_SCALE_CHILD = """
import inspect, json, resource, sys, time
from pathlib import Path
from simtrain.cli import _report_html
from simtrain.report.html import write_report
from simtrain.scenario import load_scenario
from simtrain.simulate import simulate
path, out, assets = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
result = simulate(load_scenario(path))
rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
before = rss()
kw = {"assets": assets} if "assets" in inspect.signature(_report_html).parameters else {}
if assets != "inline" and not kw:
    print(json.dumps(None)); sys.exit(0)
t0 = time.perf_counter()
doc = _report_html(result, path.stem, path.read_text(), **kw)
written = write_report(out, doc)
wall = time.perf_counter() - t0
folder = sum(p.stat().st_size for p in written.parent.iterdir())
print(json.dumps({"report_s": round(wall, 3), "rss_before_mb": round(before),
                  "rss_peak_mb": round(rss()), "html_mb": round(written.stat().st_size / 1e6, 2),
                  "folder_mb": round(folder / 1e6, 2)}))
"""


def scale_rows(baseline: Path | None) -> list[dict[str, Any]]:
    """Report time and RSS for the 16k scenario: this tree (both asset modes) and
    ``baseline`` (its asset modes), alternating trees so both see the same load."""
    trees = [("this tree", ROOT)] + ([("baseline", baseline.resolve())] if baseline else [])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for assets in ("inline", "external"):
            for label, tree in trees:
                out = Path(tmp) / f"{label.replace(' ', '_')}_{assets}" / "r.html"
                env = {**os.environ, "PYTHONPATH": str(tree)}
                proc = subprocess.run(
                    [sys.executable, "-c", _SCALE_CHILD, str(SCALE_SCENARIO), str(out), assets],
                    env=env, cwd=tree, capture_output=True, text=True, check=True)
                got = json.loads(proc.stdout.strip().splitlines()[-1])
                if got is None:
                    continue  # the baseline has no such asset mode
                row = {"tree": label, "assets": assets, **got}
                rows.append(row)
                print(json.dumps(row))
    return rows


def open_time(page: Any, path: Path) -> float:
    start = time.perf_counter()
    page.goto(path.as_uri(), wait_until="load")
    page.wait_for_function(
        f"() => document.getElementById('{GANTT_DIV_ID}')?.querySelector('g.point')",
        timeout=120_000)
    return time.perf_counter() - start


def main() -> None:
    from playwright.sync_api import sync_playwright

    from simtrain.cli import _report_html
    from simtrain.scenario import load_scenario
    from simtrain.simulate import simulate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--scale", action="store_true",
                        help="time the 16k-GPU report alone (no browser)")
    parser.add_argument("--baseline", type=Path,
                        help="with --scale: also time this source tree (e.g. a main checkout)")
    args = parser.parse_args()
    if args.scale:
        rows = scale_rows(args.baseline)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2))
        return
    paths = args.scenarios or sorted((ROOT / "scenarios").glob("*.yaml"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        jobs: list[tuple[str, Any]] = [(p.stem, p) for p in paths] + [("synthetic-16k", None)]
        for name, path in jobs:
            t0 = time.perf_counter()
            if path is None:
                tl = synthetic_16k()
                sim_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                doc = render_report({"step_time_s": tl.end, "num_gpus": tl.num_ranks}, tl,
                                    title=name)
                gpus, spans = tl.num_ranks, len(tl)
            else:
                result = simulate(load_scenario(path))
                sim_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                doc = _report_html(result, name, path.read_text())
                gpus, spans = result.cluster.num_gpus, len(result.timeline)
            render_s = time.perf_counter() - t0
            out = write_report(Path(tmp) / f"{name}.html", doc)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            opened = open_time(page, out)
            page.close()
            row = {"scenario": name, "gpus": gpus, "spans": spans, "simulate_s": round(sim_s, 3),
                   "render_s": round(render_s, 3), "size_mb": round(out.stat().st_size / 1e6, 2),
                   "open_s": round(opened, 2)}
            rows.append(row)
            print(json.dumps(row))
        browser.close()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

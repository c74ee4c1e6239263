"""Report size and time to open in a browser, per bundled scenario (not part of the tests).

For each scenario (default: all of scenarios/*.yaml): simulate, render the HTML report as
``simtrain run`` does, then open it in headless Chromium (Debian's, via Playwright) and time
until the Gantt has drawn its bars. Also a synthetic 16,384-GPU timeline (8 pipeline stages
x 2,048 replicas), which is what the representative-rank view exists for.

Usage: python benchmarks/bench_report.py [SCENARIO.yaml ...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
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
    args = parser.parse_args()
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

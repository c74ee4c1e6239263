"""The report in a real browser: headless Chromium renders every Gantt bar, logs no errors.

Uses Debian's ``chromium`` through Playwright (no browser download). Skips, saying why,
only when /usr/bin/chromium is absent; ``.ci/run`` installs it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import simtrain
from simtrain.engine.timeline import Span, Timeline
from simtrain.report.gantt import CRITICAL_PATH_NAME
from simtrain.report.html import GANTT_DIV_ID, render_report, write_report

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="browser test needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)",
)

_COUNT_BARS = """
(id) => {
  const gd = document.getElementById(id);
  if (!gd || !gd.data) { return null; }
  const out = {kinds: 0, outline: 0, traces: gd.data.length};
  for (const tr of gd.data) {
    if (tr.visible === false) { continue; }
    const n = Array.isArray(tr.y) ? tr.y.length : 0;  // y is a plain list (x may be base64)
    if (tr.name === 'CRITICAL') { out.outline += n; } else { out.kinds += n; }
  }
  out.rects = gd.querySelectorAll('g.point').length;
  return out;
}
""".replace("CRITICAL", CRITICAL_PATH_NAME)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _open(browser: Any, path: Path, errors: list[str]) -> tuple[Any, float]:
    """Open ``path``; return the page and seconds until the Gantt has drawn its bars."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("request", lambda r: errors.append(f"network request: {r.url}")
            if not r.url.startswith(("file:", "data:", "blob:")) else None)
    start = time.perf_counter()
    page.goto(path.as_uri(), wait_until="load")
    page.wait_for_function(
        f"() => document.getElementById('{GANTT_DIV_ID}')?.querySelector('g.point')",
        timeout=30_000)
    return page, time.perf_counter() - start


def test_report_renders_every_bar_without_console_errors(tmp_path: Path, browser: Any) -> None:
    result = simtrain.simulate(ROOT / "scenarios/quickstart.yaml")
    doc = render_report(result.summary, result.timeline, title="browser test",
                        server_of=result.cluster.server_of, graph=result.graph,
                        links=result.cluster.links)
    path = write_report(tmp_path / "report.html", doc)
    errors: list[str] = []
    page, opened = _open(browser, path, errors)
    counts = page.evaluate(_COUNT_BARS, GANTT_DIV_ID)
    page.close()
    assert errors == []
    # 8 ranks: every span is its own bar (no subset, no aggregation below 5000 spans).
    assert counts["kinds"] == len(result.timeline)
    assert counts["outline"] > 0
    assert counts["rects"] >= counts["kinds"]
    assert opened < 15.0  # about 2.5 s on 2 cores; generous for loaded CI machines


_SHOW_ALL = """
(id) => {
  const gd = document.getElementById(id);
  const args = gd.layout.updatemenus[0].buttons[1].args;
  const before = gd.offsetHeight;
  return Plotly.update(gd, args[0], args[1]).then(() => [before, gd.offsetHeight]);
}
"""


def test_16k_gpu_report_opens_in_seconds_with_representatives(tmp_path: Path,
                                                              browser: Any) -> None:
    # A 16,384-GPU step shaped like 8 pipeline stages x 2,048 data-parallel replicas.
    n, stages = 16_384, 8
    tl = Timeline(num_ranks=n)
    for r in range(n):
        t = (r % stages) * 1e-3
        for mb in range(4):
            tl.add(Span(r, "compute", "forward", f"fwd stage{r % stages} mb{mb}", t, t + 1e-3))
            t += 1.1e-3
        tl.add(Span(r, "dp", "dp_comm", "grad all-reduce", t, t + 4e-3, bytes=2e9,
                    meta={"op": "all_reduce", "algorithm": "ring", "group_size": n // stages}))
    doc = render_report({"step_time_s": tl.end, "num_gpus": n}, tl, title="16k GPUs")
    path = write_report(tmp_path / "big.html", doc)
    errors: list[str] = []
    page, opened = _open(browser, path, errors)
    counts = page.evaluate(_COUNT_BARS, GANTT_DIV_ID)
    before, after = page.evaluate(_SHOW_ALL, GANTT_DIV_ID)
    more = page.evaluate(_COUNT_BARS, GANTT_DIV_ID)
    page.close()
    assert errors == []
    assert counts["kinds"] == stages * 5  # one rank per stage (role), 5 spans each
    assert more["kinds"] > counts["kinds"]
    assert after > before  # the page grows with the rows; nothing overlaps
    assert opened < 20.0, f"16k-GPU report took {opened:.1f} s to open"
    assert path.stat().st_size < 12e6

"""The report in a real browser: headless Chromium renders every Gantt bar, logs no errors.

Uses Debian's ``chromium`` through Playwright (no browser download). Skips, saying why,
only when /usr/bin/chromium is absent; ``.ci/run`` installs it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import simtrain
from simtrain.engine.timeline import COMM_KINDS, Span, Timeline
from simtrain.report.gantt import CRITICAL_PATH_NAME, KIND_COLORS
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
    if (tr.name === 'CRITICAL') { out.outline += n; }
    else if (KINDS.includes(tr.name)) { out.kinds += n; }
  }
  out.rects = gd.querySelectorAll('g.point').length;
  return out;
}
""".replace("CRITICAL", CRITICAL_PATH_NAME).replace(
    "KINDS", json.dumps(sorted(map(str, KIND_COLORS))))

# Legend entries: each one's name and whether it lies inside the chart (not clipped or
# behind the legend's scroll bar).
_LEGEND = """
(id) => {
  const gd = document.getElementById(id);
  const box = gd.querySelector('svg.main-svg').getBoundingClientRect();
  const legend = gd.querySelector('g.legend');
  const clip = legend.querySelector('rect.bg').getBoundingClientRect();
  const shown = [];
  for (const item of legend.querySelectorAll('g.traces')) {
    const r = item.getBoundingClientRect();
    const inside = r.height > 0 && r.top >= box.top - 1 && r.bottom <= box.bottom + 1
      && r.top >= clip.top - 1 && r.bottom <= clip.bottom + 1;
    shown.push([item.querySelector('text.legendtext').textContent, inside]);
  }
  const bar = legend.querySelector('rect.scrollbar');
  const r = bar ? bar.getBoundingClientRect() : null;
  return {entries: shown, scrollbar: r && r.width > 0 ? r.height : 0};
}
"""

# The widest communication bar that lies on the critical path (its strip on the same row
# covers the bar's time), and where its centre is on the page.
_CRITICAL_COLLECTIVE = """
([id, comm]) => {
  const gd = document.getElementById(id), full = gd._fullLayout;
  // _fullData: plotly's decoded copies (gd.data may hold base64 typed arrays)
  const strips = gd._fullData.find((t) => t.name === 'CRITICAL' && t.visible === true);
  const num = (a) => Array.from(a);
  let best = null;
  for (const tr of gd._fullData) {
    if (!comm.includes(tr.name) || tr.visible !== true) { continue; }
    const base = num(tr.base), len = num(tr.x);
    tr.y.forEach((row, i) => {
      const a = base[i], b = base[i] + len[i];
      const covered = strips.y.some((r, k) => r === row && num(strips.base)[k] <= a
        && num(strips.base)[k] + num(strips.x)[k] >= b);
      if (covered && (best === null || len[i] > best.len)) {
        best = {kind: tr.name, name: tr.customdata[i][0], row: row, mid: a + len[i] / 2,
                len: len[i]};
      }
    });
  }
  if (best === null) { return null; }
  const rect = gd.querySelector('svg.main-svg').getBoundingClientRect();
  best.x = rect.left + full._size.l + full.xaxis.l2p(best.mid);
  best.y = rect.top + full._size.t + full.yaxis.l2p(full.yaxis.d2l(best.row));
  return best;
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


def test_moe_legend_is_complete_and_collectives_under_the_critical_path_hover(
        tmp_path: Path, browser: Any) -> None:
    # The MoE job draws the most kinds (tp, ep, dp comm, host, ...) on few rows: its legend
    # used to be cut off (tp_comm, ep_comm hidden) and the critical-path outline used to
    # take the hover of the collectives under it.
    result = simtrain.simulate(ROOT / "scenarios/moe_mixtral.yaml")
    doc = render_report(result.summary, result.timeline, title="moe",
                        server_of=result.cluster.server_of, graph=result.graph)
    path = write_report(tmp_path / "moe.html", doc)
    errors: list[str] = []
    page, _ = _open(browser, path, errors)
    legend = page.evaluate(_LEGEND, GANTT_DIV_ID)
    drawn = page.evaluate("(id) => document.getElementById(id).data.filter("
                          "(t) => t.showlegend !== false && t.visible !== false)"
                          ".map((t) => t.name)", GANTT_DIV_ID)
    names = [name for name, _ in legend["entries"]]
    assert sorted(names) == sorted(drawn) and {"tp_comm", "ep_comm"} <= set(names)
    assert all(inside for _, inside in legend["entries"]), legend
    assert legend["scrollbar"] == 0
    target = page.evaluate(_CRITICAL_COLLECTIVE, [GANTT_DIV_ID, [str(k) for k in COMM_KINDS]])
    assert target is not None, "no collective on the critical path"
    page.mouse.move(target["x"], target["y"])
    page.wait_for_selector(f"#{GANTT_DIV_ID} g.hovertext", timeout=5_000)
    hover = page.text_content(f"#{GANTT_DIV_ID} g.hovertext") or ""
    page.screenshot(path=str(tmp_path / "moe.png"))
    page.close()
    assert errors == []
    assert f"kind: {target['kind']}" in hover and CRITICAL_PATH_NAME not in hover, hover

"""HTML report: self-contained, plotly.js once, section order, escaping, speed."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from simtrain.engine.timeline import COMM_KINDS, COMPUTE_KINDS, Span, Timeline
from simtrain.report.html import (
    BREAKDOWN_DIV_ID,
    GANTT_DIV_ID,
    busy_time_figure,
    fmt_value,
    render_report,
    write_report,
)

SUMMARY = {
    "step_time_s": 0.0123,
    "tokens_per_s": 1_234_567.0,
    "mfu": 0.4123,
    "compute_s": 0.01,
    "comm_s": 0.004,
    "exposed_comm_s": 0.0023,
    "num_gpus": 2,
    "peak_memory_bytes": 40 * 2**30,
    "per_kind": {"forward_s": 0.003},
}


def _timeline() -> Timeline:
    tl = Timeline(num_ranks=2)
    tl.add(Span(0, "compute", "forward", "fwd", 0.0, 0.003, flops=1e12))
    tl.add(Span(0, "compute", "backward", "bwd", 0.003, 0.009, flops=2e12))
    tl.add(Span(0, "dp", "dp_comm", "ar", 0.005, 0.0123, bytes=2**24))
    tl.add(Span(1, "compute", "forward", "fwd", 0.0, 0.003, flops=1e12))
    tl.add(Span(1, "compute", "backward", "bwd", 0.003, 0.01, flops=2e12))
    tl.add(Span(1, "dp", "dp_comm", "ar", 0.005, 0.0123, bytes=2**24))
    return tl


def _render(**kw: object) -> str:
    return render_report(SUMMARY, _timeline(), title="Run <A>", **kw)  # type: ignore[arg-type]


def test_plotly_inlined_exactly_once_and_no_network() -> None:
    doc = _render()
    assert doc.startswith("<!DOCTYPE html>")
    assert len(re.findall(r"plotly\.js v\d", doc)) == 1
    assert "<script src=" not in doc
    assert not re.search(r"<link[^>]+href=", doc)
    # The bundle itself mentions URLs (e.g. geo topojson defaults) that a Gantt never
    # fetches; everything outside it must be free of network references.
    scripts = re.findall(r"<script[^>]*>.*?</script>", doc, re.S)
    bundle = next(s for s in scripts if "plotly.js v" in s)
    rest = doc.replace(bundle, "")
    assert "http://" not in rest and "https://" not in rest
    assert "cdn" not in rest.lower()


def test_gantt_before_breakdown_and_config() -> None:
    doc = _render()
    assert doc.index(f'id="{GANTT_DIV_ID}"') < doc.index(f'id="{BREAKDOWN_DIV_ID}"')
    assert doc.index('id="gantt"') < doc.index('id="breakdown"')
    assert '"scrollZoom": true' in doc
    assert '"displaylogo": false' in doc


def test_header_cards_and_summary_table() -> None:
    doc = _render()
    assert "<title>Run &lt;A&gt;</title>" in doc
    assert "12.30 ms" in doc  # step time
    assert "41.2%" in doc  # MFU
    assert "1.23 M" in doc  # tokens/s
    assert "40.0 GiB" in doc  # *_bytes in the table
    assert "per_kind.forward_s" in doc  # nested keys flattened
    assert "exposed comm" in doc


def test_absent_cards_are_skipped() -> None:
    doc = render_report({"step_time_s": 0.5}, _timeline(), title="x")
    assert "500.00 ms" in doc
    assert ">MFU<" not in doc


def test_scenario_yaml_is_escaped() -> None:
    yaml = "model: <gpt>\nname: a & b\n"
    doc = _render(scenario_yaml=yaml)
    assert "<details>" in doc
    assert "model: &lt;gpt&gt;" in doc
    assert "a &amp; b" in doc
    assert "<gpt>" not in doc
    assert "<details>" not in _render()


def test_fmt_value_by_suffix() -> None:
    assert fmt_value("step_time_s", 0.0012) == "1.20 ms"
    assert fmt_value("tokens_per_s", 2_000_000.0) == "2.00 M/s"
    assert fmt_value("hbm_bytes", 2**30) == "1.0 GiB"
    assert fmt_value("mfu", 0.5) == "50.0%"
    assert fmt_value("num_gpus", 1024) == "1,024"
    assert fmt_value("name", "x") == "x"


def test_busy_time_breakdown() -> None:
    fig = busy_time_figure(_timeline())
    assert fig.layout.barmode == "stack"
    bwd = next(tr for tr in fig.data if tr.name == "backward")
    assert list(bwd.y) == ["node0/gpu0", "node0/gpu1"]
    assert list(bwd.x) == pytest.approx([6.0, 7.0])


def test_busy_time_subset() -> None:
    tl = Timeline(num_ranks=200)
    for r in range(200):
        tl.add(Span(r, "compute", "forward", "f", 0.0, 1e-3))
    fig = busy_time_figure(tl, max_ranks=64)
    ys = list(fig.data[0].y)
    assert len(ys) == 64
    assert ys[0] == "node0/gpu0" and ys[-1] == "node24/gpu7"
    assert "64 of 200" in fig.layout.title.text


def test_write_report_creates_dirs(tmp_path: Path) -> None:
    out = write_report(tmp_path / "a" / "b" / "report.html", "<p>µ</p>")
    assert out.read_text(encoding="utf-8") == "<p>µ</p>"


def test_report_is_deterministic() -> None:
    assert _render() == _render()


def test_50k_spans_render_fast() -> None:
    kinds = COMPUTE_KINDS + COMM_KINDS
    tl = Timeline(num_ranks=64)
    for i in range(50_000):
        rank = i % 64
        kind = kinds[i % len(kinds)]
        stream = "compute" if kind in COMPUTE_KINDS else kind.removesuffix("_comm")
        t = (i // 64) * 1e-4
        tl.add(Span(rank, stream, kind, f"op{i}", t, t + 5e-5, bytes=float(i % 7) * 1e6,
                    flops=float(i % 3) * 1e11, meta={"algorithm": "ring"}))
    start = time.process_time()  # CPU seconds: about the code, not the machine's load
    doc = render_report(SUMMARY, tl, title="big")
    elapsed = time.process_time() - start
    assert elapsed < 5.0, f"rendering 50k spans took {elapsed:.2f} s of CPU"
    assert len(re.findall(r"plotly\.js v\d", doc)) == 1


def test_fmt_value_nested_units() -> None:
    assert fmt_value("peak_memory_gib", 36.389) == "36.39 GiB"
    assert fmt_value("memory_breakdown.weights", 2.45) == "2.45 GiB"
    assert fmt_value("exposed_comm_by_kind.dp_comm", 0.0046) == "4.60 ms"
    assert fmt_value("comm_bytes_per_gpu", 2**30) == "1.0 GiB"


def test_simulated_report_has_every_section() -> None:
    import simtrain
    from simtrain.report.topology import topology_figure

    root = Path(__file__).resolve().parents[2]
    result = simtrain.simulate(root / "scenarios/quickstart.yaml")
    doc = render_report(result.summary, result.timeline, title="q",
                        server_of=result.cluster.server_of, graph=result.graph,
                        links=result.cluster.links, topology=topology_figure(result.cluster))
    order = [doc.index(f'id="{i}"') for i in (GANTT_DIV_ID, BREAKDOWN_DIV_ID,
                                                "comm-overlap-chart", "links-chart",
                                                "critical-path-table", "topology-chart")]
    assert order == sorted(order)
    assert len(re.findall(r"plotly\.js v\d", doc)) == 1
    assert "<script src=" not in doc

"""Comparison: differences against the first run, and one report with aligned Gantts."""

from __future__ import annotations

import re

import pytest

from simtrain.engine.timeline import Span, Timeline
from simtrain.report.compare import (
    ComparedRun,
    differences,
    fmt_delta,
    render_compare,
    unique_names,
)


def _tl(end: float) -> Timeline:
    tl = Timeline(num_ranks=1)
    tl.add(Span(0, "compute", "forward", "f", 0.0, end))
    return tl


def test_differences_against_the_first() -> None:
    diffs = differences([{"step_time_s": 0.2, "mfu": 0.5}, {"step_time_s": 0.25, "mfu": 0.4}])
    assert set(diffs) == {"step_time_s", "mfu"}
    d = diffs["step_time_s"][1]
    assert d.delta == pytest.approx(0.05) and d.relative == pytest.approx(0.25)
    assert diffs["step_time_s"][0].delta == 0.0
    assert fmt_delta("step_time_s", d) == "+50.00 ms (+25.0%)"
    assert fmt_delta("mfu", diffs["mfu"][1]) == "−10.0 pp (-20.0%)"


def test_missing_metric_is_not_available() -> None:
    diffs = differences([{"step_time_s": 1.0}, {"step_time_s": 2.0, "bubble_fraction": 0.1}])
    assert diffs["bubble_fraction"][0].value is None
    assert fmt_delta("bubble_fraction", diffs["bubble_fraction"][1]) == "n/a"


def test_report_has_table_and_aligned_gantts() -> None:
    runs = [ComparedRun("a", {"step_time_s": 0.002}, _tl(0.002)),
            ComparedRun("b", {"step_time_s": 0.004}, _tl(0.004))]
    doc = render_compare(runs)
    assert len(re.findall(r"plotly\.js v\d", doc)) == 1
    assert 'id="gantt-0"' in doc and 'id="gantt-1"' in doc
    assert "+2.00 ms (+100.0%)" in doc
    # Both charts share the x range of the longest run (4 ms, plus a margin).
    ranges = re.findall(r'"range":\[0\.0,([0-9.]+)\]', doc.replace(" ", ""))
    assert len(ranges) == 2 and len(set(ranges)) == 1
    assert float(ranges[0]) == pytest.approx(4.08)


def test_unique_names() -> None:
    assert unique_names(["a", "a", "b"], lambda i: f"f{i}.yaml") == [
        "a (f0.yaml)", "a (f1.yaml)", "b"]


def test_compare_report_is_offline() -> None:
    doc = render_compare([ComparedRun("a", {"step_time_s": 0.002}, _tl(0.002)),
                          ComparedRun("b", {"step_time_s": 0.003}, _tl(0.003))])
    assert "<script src=" not in doc
    scripts = re.findall(r"<script[^>]*>.*?</script>", doc, re.S)
    bundle = next(s for s in scripts if "plotly.js v" in s)
    rest = doc.replace(bundle, "")
    assert "http://" not in rest and "https://" not in rest

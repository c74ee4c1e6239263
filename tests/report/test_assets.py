"""Report assets: plotly.js inlined (default, offline) or written once beside the report."""

from __future__ import annotations

from pathlib import Path

import pytest
from plotly.offline import get_plotlyjs
from typer.testing import CliRunner

from simtrain.cli import app
from simtrain.engine.timeline import Span, Timeline
from simtrain.report.html import (
    check_assets,
    plotly_asset_name,
    render_report,
    write_plotly_asset,
    write_report,
)

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = {"step_time_s": 0.01, "num_gpus": 2}


def _timeline() -> Timeline:
    tl = Timeline(num_ranks=2)
    for r in range(2):
        tl.add(Span(r, "compute", "forward", "fwd", 0.0, 0.003, flops=1e12))
        tl.add(Span(r, "dp", "dp_comm", "ar", 0.003, 0.01, bytes=2**24))
    return tl


def _render(assets: str) -> str:
    return render_report(SUMMARY, _timeline(), title="t", assets=assets)


def test_external_is_the_inline_document_with_a_script_tag_for_plotly() -> None:
    inline, external = _render("inline"), _render("external")
    inlined = f"<script>{get_plotlyjs()}</script>"
    tag = f'<script charset="utf-8" src="{plotly_asset_name()}"></script>'
    assert inline.count(inlined) == 1 and tag not in inline
    assert external.count(tag) == 1 and "plotly.js v" not in external
    # Nothing else differs: same figures, same order, same text.
    assert inline.replace(inlined, tag) == external
    assert len(external) < len(inline) - 3_000_000


def test_write_report_puts_the_asset_beside_an_external_report(tmp_path: Path) -> None:
    out = write_report(tmp_path / "sub" / "r.html", _render("external"))
    asset = out.parent / plotly_asset_name()
    assert asset.read_text(encoding="utf-8") == get_plotlyjs()
    # A second report in the same folder reuses the file (not rewritten).
    before = asset.stat().st_mtime_ns
    write_report(tmp_path / "sub" / "r2.html", _render("external"))
    assert asset.stat().st_mtime_ns == before
    assert sorted(p.name for p in out.parent.iterdir()) == sorted(
        ["r.html", "r2.html", plotly_asset_name()])


def test_inline_report_writes_no_asset(tmp_path: Path) -> None:
    write_report(tmp_path / "r.html", _render("inline"))
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_truncated_asset_is_rewritten(tmp_path: Path) -> None:
    (tmp_path / plotly_asset_name()).write_text("broken", encoding="utf-8")
    assert write_plotly_asset(tmp_path).read_text(encoding="utf-8") == get_plotlyjs()


def test_asset_name_carries_the_plotlyjs_version() -> None:
    # get_plotlyjs() starts with plotly.js's banner "/**\n* plotly.js v<version>".
    version = get_plotlyjs()[:60].split("plotly.js v", 1)[1].split()[0]
    assert plotly_asset_name() == f"plotly-{version}.min.js"


def test_unknown_assets_mode_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="inline, external, got 'cdn'"):
        check_assets("cdn")
    with pytest.raises(ValueError, match="got 'cdn'"):
        _render("cdn")


def test_cli_run_report_assets_external(tmp_path: Path) -> None:
    report = tmp_path / "q.html"
    result = CliRunner().invoke(app, ["run", str(ROOT / "scenarios/quickstart.yaml"), "-q",
                                      "--report", str(report), "--report-assets", "external"])
    assert result.exit_code == 0, result.output
    assert f'src="{plotly_asset_name()}"' in report.read_text(encoding="utf-8")
    assert (tmp_path / plotly_asset_name()).is_file()


def test_cli_run_bad_report_assets_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", str(ROOT / "scenarios/quickstart.yaml"), "-q",
                                      "--report", str(tmp_path / "q.html"),
                                      "--report-assets", "cdn"])
    assert result.exit_code == 2
    assert "--report-assets" in result.output and "got 'cdn'" in result.output
    assert not (tmp_path / "q.html").exists()

"""A genuine torch.profiler trace of a tiny CPU model (skipped where torch is missing)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from simtrain.cli import app
from simtrain.ingest.classify import gemm_shape
from simtrain.ingest.kineto import scan_trace

torch = pytest.importorskip(
    "torch", reason="torch is not installed in the test environment (and is not a "
                    "dependency); this test profiles a real model when it is")


def test_reader_handles_a_real_profiler_trace(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 16))
    x = torch.randn(8, 32)
    trace = tmp_path / "cpu.pt.trace.json"
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                record_shapes=True, schedule=schedule,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(trace))
                                ) as prof:
        for _ in range(3):
            model(x).sum().backward()
            prof.step()
    scanned = scan_trace(trace)
    assert scanned.events > 0 and len(scanned.steps) == 2
    shapes = {gemm_shape(op.name, op.dims) for op in scanned.ops.values()
              if op.name in ("aten::addmm", "aten::mm", "aten::linear")}
    # forward Linear(32, 64) on 8 rows: (m, n, k) = (8, 64, 32); Linear(64, 16): (8, 16, 64)
    assert (8, 64, 32, 1) in shapes and (8, 16, 64, 1) in shapes
    # profiled with CPU activity only: no kernels, which the importer says in one line
    result = CliRunner().invoke(app, ["import-trace", str(trace), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "no GPU kernel events" in result.output

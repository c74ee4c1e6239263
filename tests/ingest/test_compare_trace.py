"""simtrain compare-trace: a synthetic measured step beside its simulation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simtrain.cli import app
from simtrain.hardware.topology import build_cluster
from simtrain.ingest.compare_trace import op_sizes
from simtrain.ingest.synthetic import SynthOp, write_kineto_trace
from simtrain.scenario import load_scenario
from simtrain.simulate import build_plan

SCENARIO = """\
cluster: {preset: dgx-h100, nodes: 1}
model: {preset: tiny-gpt}
training: {global_batch_size: 16, micro_batch_size: 2, seq_len: 512}
sim: {granularity: op}
"""


def _trace(tmp_path: Path) -> tuple[Path, Path, int]:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    sc = load_scenario(scenario)
    plan = build_plan(sc, build_cluster(sc.cluster))
    sizes = op_sizes([u for chunks in plan.units for units in chunks for u in units])
    gemms = sorted({size for kind, size in sizes.values() if kind == "gemm"})
    # every GEMM shape measured at 50 us, far above the roofline's few microseconds
    ops = [SynthOp("aten::mm", [[int(m), int(k)], [int(k), int(n)]], ["c10::BFloat16"] * 2,
                   [("sm90_xmma_gemm_bf16", 50.0)]) for m, n, k, _ in gemms]
    ops.append(SynthOp("record_param_comms", [[1 << 20]], ["c10::BFloat16"],
                       [("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 30.0)],
                       comm={"In msg nelems": 1 << 18, "Out msg nelems": 1 << 18,
                             "Group size": 8, "dtype": "Float"}, stream=20))
    trace = tmp_path / "t.json"
    write_kineto_trace(trace, ops, steps=2)
    return trace, scenario, len(gemms)


def test_compare_trace_reports_metrics_kinds_ops_and_html(tmp_path: Path) -> None:
    trace, scenario, n_gemms = _trace(tmp_path)
    report = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["compare-trace", str(trace), str(scenario), "--json",
                                      "--report", str(report)])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["step"] == 1  # the last profiled step by default
    assert out["metrics"]["step_time_s"]["measured"] > 0
    assert out["metrics"]["step_time_s"]["simulated"] > 0
    measured = out["time_by_kind_s"]["measured"]
    assert measured["gemm"] == pytest.approx(n_gemms * 50e-6)  # one step: each shape once
    assert measured["comm"] == pytest.approx(30e-6)
    # GEMMs: measured 50 us each; the roofline says a few us, so simulated is far below
    assert out["ops"] and all(o["kind"] == "gemm" and o["relative"] < -0.5 for o in out["ops"])
    assert out["collectives"][0]["op"] == "all_reduce"
    page = report.read_text()
    assert page.count('id="gantt-') == 2 and 'id="ops"' in page


def test_with_the_traces_table_the_gemms_agree(tmp_path: Path) -> None:
    trace, scenario, _ = _trace(tmp_path)
    assert CliRunner().invoke(app, ["import-trace", str(trace), "--out",
                                    str(tmp_path / "m")]).exit_code == 0
    result = CliRunner().invoke(app, ["compare-trace", str(trace), str(scenario), "--json",
                                      "--no-report", "--set", "compute.tables=[m.ops.yaml]",
                                      "--set", "compute.launch_overhead=0"])
    assert result.exit_code == 0, result.output
    ops = json.loads(result.output)["ops"]
    assert ops and all(abs(o["relative"]) < 0.03 for o in ops)


def test_bad_inputs_exit_2(tmp_path: Path) -> None:
    trace, scenario, _ = _trace(tmp_path)
    result = CliRunner().invoke(app, ["compare-trace", str(trace), str(scenario), "--step", "9"])
    assert result.exit_code == 2 and "steps: 0, 1" in result.output
    result = CliRunner().invoke(app, ["compare-trace", str(trace), str(scenario),
                                      "--rank", "99", "--no-report"])
    assert result.exit_code == 2 and "--rank 99" in result.output

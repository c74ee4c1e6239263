"""Round trip: a trace's GEMM times -> efficiency table -> simulated GEMM spans (within 3%)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from simtrain.cli import app
from simtrain.hardware.topology import build_cluster
from simtrain.ingest.synthetic import SynthOp, write_kineto_trace
from simtrain.parallel.shard import Compute
from simtrain.scenario import load_scenario
from simtrain.simulate import build_plan, simulate
from simtrain.workload.model import backward_ops

SCENARIO = """\
cluster: {preset: dgx-h100, nodes: 1}
model: {preset: tiny-gpt}
training: {global_batch_size: 16, micro_batch_size: 2, seq_len: 512}
sim: {granularity: op}
compute: {launch_overhead: 0%s}
"""
PEAK = 989.4e12  # H100 SXM dense bf16 (simtrain.hardware.gpus)


def _gemms(path: Path) -> dict[str, tuple[int, int, int]]:
    scenario = load_scenario(path)
    plan = build_plan(scenario, build_cluster(scenario.cluster))
    out = {}
    for unit in (u for chunks in plan.units for units in chunks for u in units):
        for step in unit.steps:
            if isinstance(step, Compute):
                for op in (step.op, *backward_ops(step.op)):
                    if op.kind == "gemm" and op.gemm_shape is not None:
                        out[op.name] = op.gemm_shape
    return out


def test_table_from_a_trace_reproduces_its_gemm_times(tmp_path: Path) -> None:
    plain = tmp_path / "plain.yaml"
    plain.write_text(SCENARIO % "")
    gemms = _gemms(plain)
    shapes = sorted(set(gemms.values()))
    # Known "measured" times: efficiency 0.35, 0.45, 0.55, 0.65 by shape, far from the
    # roofline's, so a span that ignored the table would miss by far more than 3%.
    measured_us = {s: 2.0 * s[0] * s[1] * s[2] / (PEAK * (0.35 + 0.1 * (i % 4))) * 1e6
                   for i, s in enumerate(shapes)}
    ops = [SynthOp("aten::mm", [[m, k], [k, n]], ["c10::BFloat16"] * 2,
                   [("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", measured_us[(m, n, k)])])
           for m, n, k in shapes]
    write_kineto_trace(tmp_path / "trace.json", ops, steps=2)
    result = CliRunner().invoke(app, ["import-trace", str(tmp_path / "trace.json"), "--out",
                                      str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO % ", tables: [m.ops.yaml]")
    sim = simulate(scenario)
    checked = 0
    for span in sim.timeline.spans:
        if span.rank == 0 and span.name.removeprefix("recompute ") in gemms:
            want = measured_us[gemms[span.name]] * 1e-6
            assert abs(span.duration / want - 1) < 0.03, (span.name, span.duration, want)
            checked += 1
    assert checked >= 3 * 4 * 4  # qkv, proj, fc1, fc2 x fwd, dgrad, wgrad x 4 layers
    assert sim.summary["measured_compute"]["measured_ops"] == len(gemms)

"""Efficiency tables: exact lookups, log-space interpolation, fallback, bad files."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from simtrain.cli import app
from simtrain.errors import ScenarioError
from simtrain.hardware.gpus import GPUS
from simtrain.workload.compute import ComputeConfig, op_time
from simtrain.workload.model import Op
from simtrain.workload.tables import Row, load_table, measured_time, write_table

H100 = GPUS["h100-sxm"]  # bf16 dense peak 989.4 TFLOP/s, HBM 3.35 TB/s

TABLE = """\
gpu: h100-sxm
dtype: bf16
rows:
  - {op: gemm, m: 4096, n: 4096, k: 4096, time_s: 200.0e-6}
  - {op: gemm, m: 1024, n: 8192, k: 4096, efficiency: 0.5}
  - {op: gemm, m: 4096, n: 8192, k: 4096, efficiency: 0.8}
  - {op: elementwise, bytes: 1.0e6, efficiency: 0.5}
  - {op: elementwise, bytes: 1.0e8, efficiency: 0.9}
  - {op: elementwise, bytes: 1.0e7, gpu: a100-80gb, efficiency: 0.1}
  - {op: attention, flops: 1.0e12, time_s: 2.0e-3}
"""


def _gemm(m: int, n: int, k: int) -> Op:
    return Op("g", "gemm", 2.0 * m * n * k, 0.0, (m, n, k), (), 0.0)


def _mem(kind: str, nbytes: float) -> Op:
    return Op("e", kind, 0.0, nbytes, None, (), 0.0)


@pytest.fixture()
def table(tmp_path: Path) -> list[str]:
    path = tmp_path / "t.yaml"
    path.write_text(TABLE)
    return [str(path)]


def test_exact_gemm_returns_the_measured_time(table: list[str]) -> None:
    assert measured_time(_gemm(4096, 4096, 4096), H100, table, "bf16") == pytest.approx(
        200e-6, rel=1e-12)


def test_gemm_interpolates_efficiency_in_log_m(table: list[str]) -> None:
    # m = 2048 is halfway between 1024 and 4096 in log2: efficiency (0.5 + 0.8) / 2 = 0.65.
    # time = 2·2048·8192·4096 / (989.4e12 · 0.65) = 1.37438953472e11 / 6.4311e14 = 213.710 us
    t = measured_time(_gemm(2048, 8192, 4096), H100, table, "bf16")
    assert t == pytest.approx(213.7102e-6, rel=1e-5)


def test_outside_the_measured_range_falls_back(table: list[str]) -> None:
    assert measured_time(_gemm(8192, 8192, 4096), H100, table, "bf16") is None
    assert measured_time(_gemm(2048, 1000, 4096), H100, table, "bf16") is None
    assert measured_time(_mem("elementwise", 1e9), H100, table, "bf16") is None
    assert measured_time(_mem("norm", 1e7), H100, table, "bf16") is None
    assert measured_time(_gemm(4096, 4096, 4096), H100, table, "fp8") is None


def test_memory_bound_interpolates_in_log_bytes(table: list[str]) -> None:
    # 1e7 is halfway between 1e6 and 1e8 in log: efficiency 0.7 (the a100 row is ignored).
    # time = 1e7 / (3.35e12 · 0.7) = 1e7 / 2.345e12 = 4.26439 us
    t = measured_time(_mem("elementwise", 1e7), H100, table, "bf16")
    assert t == pytest.approx(4.26439e-6, rel=1e-5)


def test_attention_rows_key_on_op_flops(table: list[str]) -> None:
    op = Op("a", "attention", 1e12, 1e6, None, (), 0.0)
    assert measured_time(op, H100, table, "bf16") == pytest.approx(2e-3, rel=1e-12)


def test_op_time_uses_the_table_then_the_roofline(table: list[str]) -> None:
    cfg = ComputeConfig(tables=table, launch_overhead=3e-6)
    # measured 200 us + 3 us launch
    assert op_time(_gemm(4096, 4096, 4096), H100, cfg) == pytest.approx(203e-6, rel=1e-12)
    plain = ComputeConfig(launch_overhead=3e-6)
    assert op_time(_gemm(8192, 8192, 4096), H100, cfg) == op_time(
        _gemm(8192, 8192, 4096), H100, plain)


@given(st.floats(min_value=1e6, max_value=1e8))
def test_interpolated_efficiency_stays_between_its_neighbours(nbytes: float) -> None:
    rows = [Row("norm", (1e6,), "bf16", "h100-sxm", None, 0.4),
            Row("norm", (1e8,), "bf16", "h100-sxm", None, 0.9)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.yaml"
        write_table(path, rows)
        t = measured_time(_mem("norm", nbytes), H100, [str(path)], "bf16")
    assert t is not None
    eff = nbytes / (t * H100.hbm_bandwidth)
    assert 0.4 - 1e-12 <= eff <= 0.9 + 1e-12


def test_csv_round_trip(tmp_path: Path) -> None:
    rows = [Row("gemm", (128, 256, 512, 1), "bf16", "h100-sxm", 1e-5, None, 3, "sm90_gemm"),
            Row("softmax", (4096.0,), "fp16", "h100-sxm", None, 0.25)]
    path = tmp_path / "t.csv"
    write_table(path, rows)
    assert load_table([path]).rows == rows
    write_table(tmp_path / "t.yaml", rows)
    assert load_table([tmp_path / "t.yaml"]).rows == rows


@pytest.mark.parametrize(("text", "suffix", "where", "what"), [
    ("rows:\n  - {op: gemm, m: 1, n: 1, k: 1, gpu: h100-sxm, time_s: 1}\n"
     "  - {op: conv, gpu: h100-sxm, time_s: 1}\n", ".yaml", ":3: row 2", "op: 'conv'"),
    ("rows:\n  - {op: gemm, m: 1, n: 1, gpu: h100-sxm, time_s: 1}\n", ".yaml", ":2:", "k: "),
    ("rows:\n  - {op: norm, bytes: 10, gpu: h100-sxm, time_s: 1, efficiency: 0.5}\n",
     ".yaml", ":2:", "exactly one of"),
    ("op,bytes,gpu,time_s\nnorm,10,h100-sxm,1\nnorm,10,h999,1\n", ".csv", ":3:", "h999"),
    ("just: text\n", ".yaml", ":1:", "rows"),
])
def test_bad_tables_name_the_file_and_row(tmp_path: Path, text: str, suffix: str,
                                          where: str, what: str) -> None:
    path = tmp_path / f"bad{suffix}"
    path.write_text(text)
    with pytest.raises(ScenarioError) as exc:
        load_table([path])
    assert f"{path}{where}" in str(exc.value) and what in str(exc.value)


def _scenario(tmp_path: Path, table_name: str) -> Path:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: tiny-gpt}\n"
        "training: {global_batch_size: 8, micro_batch_size: 1, seq_len: 512}\n"
        f"compute: {{tables: [{table_name}]}}\n")
    return scenario


def test_scenario_tables_are_relative_and_noted_in_the_summary(tmp_path: Path) -> None:
    from simtrain.simulate import simulate

    # tiny-gpt, mb 1, seq 512, tp 1: the qkv GEMM is (512, 768, 256).
    (tmp_path / "t.yaml").write_text(
        "gpu: h100-sxm\nrows:\n  - {op: gemm, m: 512, n: 768, k: 256, time_s: 1.0e-3}\n")
    summary = simulate(_scenario(tmp_path, "t.yaml")).summary
    note = summary["measured_compute"]
    assert note["measured_ops"] > 0 and note["modelled_ops"] > 0
    assert 0.5 < note["measured_fraction"] < 1.0  # 1 ms GEMMs dwarf the microsecond rest


def test_cli_reports_a_bad_table_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text("rows:\n  - {op: gemm, gpu: h100-sxm, time_s: 1}\n")
    result = CliRunner().invoke(app, ["run", str(_scenario(tmp_path, "t.yaml"))])
    assert result.exit_code == 2
    assert "t.yaml:2: row 1: m: required" in result.output.replace("\n", "")


def test_measured_share_counts_forward_and_backward_ops(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from simtrain.parallel.shard import Compute
    from simtrain.workload.tables import measured_share

    # the table has the GEMM (64, 32, 16), its dgrad (64, 16, 32) and wgrad (32, 16, 64);
    # the norm (forward and backward) is left to the roofline
    (tmp_path / "t.yaml").write_text(
        "gpu: h100-sxm\nrows:\n" + "".join(
            f"  - {{op: gemm, m: {m}, n: {n}, k: {k}, time_s: 1.0e-6}}\n"
            for m, n, k in ((64, 32, 16), (64, 16, 32), (32, 16, 64))))
    units = [SimpleNamespace(steps=[Compute(_gemm(64, 32, 16)), Compute(_mem("norm", 1e3))])]
    # time_of: 3 s per GEMM, 1 s per norm -> measured 3·3 = 9 s of 9 + 2·1 = 11 s: 9/11
    note = measured_share(units, H100, [str(tmp_path / "t.yaml")], "bf16",
                          lambda op: 3.0 if op.kind == "gemm" else 1.0)
    assert note["measured_fraction"] == pytest.approx(9 / 11)
    assert (note["measured_ops"], note["modelled_ops"]) == (3, 2)

"""simtrain import-trace on synthetic Kineto traces with known numbers."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from simtrain.cli import app
from simtrain.ingest.synthetic import SynthOp, write_kineto_trace
from simtrain.workload.tables import load_table

BF = "c10::BFloat16"
NCCL_ARGS = {"Collective name": "allreduce", "In msg nelems": 1 << 20,
             "Out msg nelems": 1 << 20, "Group size": 8, "dtype": "BFloat16"}

OPS = [
    # addmm with bias: [[n], [m, k], [k, n]] -> (m, n, k) = (512, 768, 256); 10 us
    SynthOp("aten::addmm", [[768], [512, 256], [256, 768]], [BF, BF, BF],
            [("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 10.0)]),
    # split-K: a GEMM kernel (8 us) plus its reduction (elementwise) under one aten::mm
    SynthOp("aten::mm", [[512, 1024], [1024, 256]], [BF, BF],
            [("cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu>", 8.0),
             ("splitKreduce_kernel", 1.0)]),
    # flash attention forward [b, h, s, d] = [1, 4, 512, 64]: 4·1·512·512·4·64 FLOPs
    SynthOp("aten::_scaled_dot_product_flash_attention",
            [[1, 4, 512, 64], [1, 4, 512, 64], [1, 4, 512, 64], []], [BF, BF, BF, "double"],
            [("flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>", 20.0)]),
    # layer norm over [512, 256] bf16: 3 inputs (x, w, b) plus an output the size of x
    SynthOp("aten::native_layer_norm", [[512, 256], [], [256], [256]], [BF, "", BF, BF],
            [("void at::native::vectorized_layer_norm_kernel<c10::BFloat16>", 3.0)]),
    SynthOp("aten::gelu", [[512, 1024]], [BF],
            [("void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>", 2.0)]),
    SynthOp("record_param_comms", [[1 << 20]], [BF],
            [("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
              50.0)], comm=NCCL_ARGS, stream=20),
    SynthOp("aten::foo", [[4]], [BF], [("mystery_kernel_v2", 4.0)]),
    SynthOp("aten::mm", [[64, 64], [64, 64]], [BF], [("ampere_bf16_s16816gemm_64x64", 1.0)],
            linked=False),
]


def _import(tmp_path: Path, trace: Path, *extra: str) -> tuple[Any, dict[str, Any]]:
    result = CliRunner().invoke(app, ["import-trace", str(trace), "--out",
                                      str(tmp_path / "out"), "--json", *extra])
    return result, (json.loads(result.output) if result.exit_code == 0 else {})


def test_classifies_kernels_and_writes_both_tables(tmp_path: Path) -> None:
    trace = tmp_path / "t.json.gz"
    write_kineto_trace(trace, OPS, steps=2)
    result, summary = _import(tmp_path, trace)
    assert result.exit_code == 0, result.output
    assert summary["gpu"] == "h100-sxm" and summary["steps"] == [0, 1]
    assert summary["count_by_category"] == {"gemm": 8, "elementwise": 2, "attention": 2,
                                            "norm": 2, "nccl": 2, "unknown": 2}
    assert summary["unknown_kernels"] == {"mystery_kernel_v2": pytest.approx(8e-6)}
    assert summary["missing_shapes"] == {"gemm": 2}  # the unlinked 64x64 GEMM, twice
    rows = {(r.op, r.size): r for r in load_table([tmp_path / "out.ops.yaml"]).rows}
    assert rows[("gemm", (512, 768, 256, 1))].time_s == pytest.approx(10e-6)
    assert rows[("gemm", (512, 768, 256, 1))].count == 2
    assert rows[("gemm", (512, 256, 1024, 1))].time_s == pytest.approx(9e-6)  # 8 + 1 split-K
    # 4·b·s_q·s_k·h·d = 4·1·512·512·4·64 = 268,435,456 FLOPs
    assert rows[("attention", (268435456.0,))].time_s == pytest.approx(20e-6)
    # (512·256 + 256 + 256 + 512·256) · 2 B = 525,312 B
    assert rows[("norm", (525312.0,))].time_s == pytest.approx(3e-6)
    # gelu: (512·1024 + 512·1024) · 2 B = 2,097,152 B; the only elementwise row
    assert rows[("elementwise", (2097152.0,))].time_s == pytest.approx(2e-6)
    assert sum(op == "elementwise" for op, _ in rows) == 1
    comm = json.dumps(Path(tmp_path / "out.collectives.yaml").read_text())
    # 2^20 bf16 = 2,097,152 B in 50 us: algbw 41.94 GB/s, busbw x 2·7/8 = 73.40 GB/s
    assert "2097152" in comm and "73.4" in comm and "RING/LL" in comm


def test_step_picks_one_profiled_step(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    write_kineto_trace(trace, OPS, steps=3)
    _, summary = _import(tmp_path, trace, "--step", "1")
    assert summary["kernels"] == 9 and summary["count_by_category"]["gemm"] == 4
    result, _ = _import(tmp_path, trace, "--step", "7")
    assert result.exit_code == 2 and "steps: 0, 1, 2" in result.output


@pytest.mark.parametrize(("content", "expected"), [
    (b'{"foo": 1}', "no 'traceEvents' key"),
    (b"hello", "starts with 'h'"),
    (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1}]}',
     "no GPU kernel events"),
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "a", "ts": 1',
     "truncated or invalid JSON"),
])
def test_bad_traces_fail_in_one_line(tmp_path: Path, content: bytes, expected: str) -> None:
    trace = tmp_path / "bad.json"
    trace.write_bytes(content)
    result, _ = _import(tmp_path, trace)
    assert result.exit_code == 2
    assert expected in result.output and str(trace) in result.output.replace("\n", "")
    assert not (tmp_path / "out.ops.yaml").exists()


def test_truncated_gzip_fails_cleanly(tmp_path: Path) -> None:
    trace = tmp_path / "t.json.gz"
    write_kineto_trace(trace, OPS, steps=20)
    data = trace.read_bytes()
    trace.write_bytes(data[: len(data) // 2])
    result, _ = _import(tmp_path, trace)
    assert result.exit_code == 2 and "truncated gzip" in result.output
    assert not (tmp_path / "out.ops.yaml").exists()


def test_unknown_gpu_needs_the_option(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    write_kineto_trace(trace, OPS, device_name="Some Future GPU")
    result, _ = _import(tmp_path, trace)
    assert result.exit_code == 2 and "pass --gpu" in result.output
    result, summary = _import(tmp_path, trace, "--gpu", "h200-sxm")
    assert result.exit_code == 0 and summary["gpu"] == "h200-sxm"


def test_gzip_and_plain_read_the_same(tmp_path: Path) -> None:
    write_kineto_trace(tmp_path / "a.json", OPS)
    with gzip.open(tmp_path / "b.json.gz", "wb") as fh:
        fh.write((tmp_path / "a.json").read_bytes())
    _, a = _import(tmp_path, tmp_path / "a.json")
    _, b = _import(tmp_path, tmp_path / "b.json.gz")
    assert a["count_by_category"] == b["count_by_category"] and a["rows"] == b["rows"]

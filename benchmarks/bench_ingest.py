"""Import a ~200 MB synthetic Kineto trace: wall time and peak memory (target < 30 s, < 1 GiB).

    python benchmarks/bench_ingest.py [--mb 200] [--gzip]

Generates the trace with simtrain.ingest.synthetic (a transformer-like mix of GEMM,
attention, norm, elementwise and NCCL kernels, many steps), then runs
``simtrain import-trace`` in a child process and reports its wall time and peak RSS
and CPU time (``resource.getrusage(RUSAGE_CHILDREN)``; wall time depends on what else the
machine runs). Not part of the tests.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from simtrain.ingest.synthetic import SynthOp, write_kineto_trace

BF = "c10::BFloat16"


def layer_ops(layer: int) -> list[SynthOp]:
    """One transformer layer's forward and backward kernels (8192 tokens, h 4096)."""
    t, h, f = 8192, 4096, 14336
    mm = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64_warpgroupsize2x1x1"
    ops = []
    for _ in range(2):  # forward, then backward-like repeats
        ops += [
            SynthOp("aten::native_layer_norm", [[t, h], [], [h], [h]], [BF, "", BF, BF],
                    [("void at::native::vectorized_layer_norm_kernel<c10::BFloat16>", 40.0)]),
            SynthOp("aten::mm", [[t, h], [h, 3 * h]], [BF, BF], [(mm, 900.0 + layer % 7)]),
            SynthOp("aten::_scaled_dot_product_flash_attention",
                    [[1, 32, t, 128], [1, 32, t, 128], [1, 32, t, 128]], [BF, BF, BF],
                    [("flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", 1500.0)]),
            SynthOp("aten::mm", [[t, h], [h, h]], [BF, BF], [(mm, 300.0)]),
            SynthOp("aten::add", [[t, h], [t, h]], [BF, BF],
                    [("void at::native::vectorized_elementwise_kernel<4, AddFunctor>", 60.0)]),
            SynthOp("aten::mm", [[t, h], [h, f]], [BF, BF], [(mm, 1050.0)]),
            SynthOp("aten::silu", [[t, f]], [BF],
                    [("void at::native::vectorized_elementwise_kernel<4, SiluFunctor>", 70.0)]),
            SynthOp("aten::mm", [[t, f], [f, h]], [BF, BF], [(mm, 1040.0)]),
        ]
    ops.append(SynthOp("record_param_comms", [[h * h]], [BF],
                       [("ncclDevKernel_AllReduce_Sum_bf16_RING_LL128(ncclDevKernelArgs)",
                         2000.0)],
                       comm={"Collective name": "allreduce", "In msg nelems": h * h,
                             "Out msg nelems": h * h, "Group size": 8, "dtype": "BFloat16"},
                       stream=20))
    return ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200.0, help="trace size to generate")
    parser.add_argument("--gzip", action="store_true", help="write and read .json.gz")
    args = parser.parse_args()
    ops = [op for layer in range(32) for op in layer_ops(layer)]
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / ("bench.json.gz" if args.gzip else "bench.json")
        probe = Path(tmp) / "probe.json"
        write_kineto_trace(probe, ops, steps=1)
        steps = max(1, round(args.mb * 1e6 / probe.stat().st_size))
        t0 = time.perf_counter()
        write_kineto_trace(trace, ops, steps=steps)
        print(f"generated {trace.stat().st_size / 1e6:.0f} MB ({steps} steps) in "
              f"{time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        cli = "from simtrain.cli import main; main()"
        subprocess.run([sys.executable, "-c", cli, "import-trace", str(trace), "--out",
                        str(Path(tmp) / "out"), "--json"], check=True,
                       stdout=subprocess.DEVNULL, env={**os.environ})
        wall = time.perf_counter() - t0
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        print(f"import-trace: {wall:.1f} s wall, {usage.ru_utime + usage.ru_stime:.1f} s CPU, "
              f"peak RSS {usage.ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()

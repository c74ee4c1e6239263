"""Write the ingest fixtures with known numbers into a directory (tests build them too).

    python tests/ingest/make_fixtures.py OUT_DIR

- ``kineto_small.json.gz``: a Kineto trace of two steps of GEMM, attention, norm,
  elementwise and NCCL kernels (the ops of tests/ingest/test_import_trace.py);
- ``all_reduce_perf_*.log``: the 8xH100 and 4x8 H100 all-reduce sweeps of
  tests/ingest/data/voltagepark_h100_allreduce.yaml in nccl-tests' stdout format.
"""

from __future__ import annotations

import sys
from pathlib import Path

from simtrain.ingest.synthetic import SynthOp, write_kineto_trace, write_reference_logs

HERE = Path(__file__).parent
BF = "c10::BFloat16"
OPS = [
    SynthOp("aten::addmm", [[768], [512, 256], [256, 768]], [BF, BF, BF],
            [("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 10.0)]),
    SynthOp("aten::_scaled_dot_product_flash_attention",
            [[1, 4, 512, 64], [1, 4, 512, 64], [1, 4, 512, 64]], [BF, BF, BF],
            [("flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>", 20.0)]),
    SynthOp("aten::native_layer_norm", [[512, 256], [], [256], [256]], [BF, "", BF, BF],
            [("void at::native::vectorized_layer_norm_kernel<c10::BFloat16>", 3.0)]),
    SynthOp("record_param_comms", [[1 << 20]], [BF],
            [("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
              50.0)], comm={"Collective name": "allreduce", "In msg nelems": 1 << 20,
                            "Out msg nelems": 1 << 20, "Group size": 8, "dtype": "BFloat16"},
            stream=20),
]


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_kineto_trace(out / "kineto_small.json.gz", OPS, steps=2)
    for path in write_reference_logs(HERE / "data" / "voltagepark_h100_allreduce.yaml", out):
        print(path)
    print(out / "kineto_small.json.gz")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("fixtures"))

"""Regenerate scenarios/validation/nccl-modern.yaml from ../shared/reference/nccl_modern.yaml.

Run from the repository root: python benchmarks/nccl_modern_suite.py
    scenarios/validation/nccl-modern.yaml
Every series keeps its source; setups simtrain cannot express carry not_expressible.
"""

import io
import sys

from ruamel.yaml import YAML

ref = YAML(typ="safe").load(open("/work/shared/reference/nccl_modern.yaml"))
out = []
# EFA (AWS SRD transport): the aws-ofi-nccl tuner plugin picks Ring (stated for p5en in the
# source), and NCCL's LL/LL128 protocols, which poll flags written inside the data lines,
# need in-order delivery that SRD does not give, so only Simple runs over EFA (aws-ofi-nccl
# documentation; not in ../shared/reference). Consistent with the measured 4-node P6-B200
# times of 358-378 us at 512 KiB-1 MiB: the ring/Simple latency over 32 ranks.
EFA_NOTE = "EFA: Ring (aws-ofi-nccl tuner) and Simple (SRD delivers out of order: no LL/LL128)"


def series(
    id,
    source,
    cluster,
    points,
    op="all_reduce",
    algorithm="auto",
    note="",
    ranks=None,
    skip="",
    protocol=None,
    harness=None,
):
    s = {"id": id, "source": source, "cluster": cluster, "op": op, "algorithm": algorithm}
    if protocol:
        s["protocol"] = protocol
    if harness:
        s["harness"] = harness
    if ranks:
        s["ranks"] = ranks
    if note:
        s["note"] = note
    if skip:
        s["not_expressible"] = skip
    s["points"] = points
    out.append(s)


vp = ref["voltagepark_h100_allreduce_curves"]
src = "Voltage Park nccl-tests logs, ZiyanIshani/vpbenchmarking@b841c5b7"
series(
    "voltagepark-8xh100",
    src + " results/nccl/nccl_singlenode/nccl_allreduce_.txt",
    {"preset": "dgx-h100"},
    [
        {"bytes": r["bytes"], "time_us": r["time_us"], "busbw": r["busbw"]}
        for r in vp["rows"]["single_node_8_gpus"]
    ],
    note="one process driving 8 GPUs (-g 8); NCCL 2.24.3 picks NVLS on large messages",
    harness="nccl-tests-threads",  # reference fixed.launch: "single node: one process, -g 8"
)
series(
    "voltagepark-4x8xh100-ib",
    src + " results/nccl/nccl_multinode/nccl_allreduce_20260224_225706.txt",
    {"preset": "dgx-h100", "nodes": 4},
    [
        {"bytes": r["bytes"], "time_us": r["time_us"], "busbw": r["busbw"]}
        for r in vp["rows"]["four_nodes_32_gpus"]
    ],
    note="DOUBT (source): 3 or 8 active 400G ports per node; modelled with 8 (3.2 Tbps)",
)
cw = ref["coreweave_gb200_nvl72_allreduce"]
src = "CoreWeave nccl-tests README 'Expected Performance', coreweave/nccl-tests@cb865533"
# Protocol Simple: the source names none. NCCL 2.26.2 (stated for these runs) enables LL128
# on a graph only where its GPU-NIC path type is PXB or better, or PXN on sm90+ (read in
# ncclTopoTuneModel of 2.26.2's libnccl.so.2, nvidia-nccl-cu12 2.26.2 wheel: typeInter <= 5
# || (typeInter == 6 && compCap > 89), with 2.26.2's path names LOC NVL NVB C2C PIX PXB PXN
# PHB ... in that order). A GB200 HCA hangs off the Grace CPU that the GPU reaches over
# NVLink-C2C (2.26.2 logs "GPU %d / HCA %lx connected to CPU %d via C2C link"); 2.26.2 has
# no P2C path type, so that path is PHB and LL128 is off for the multi-rack ring and tree
# (2.27+ adds P2C and NCCL_LL128_C2C, default 1 in 2.30.7, which turns it on). LL (capped at
# llMaxBw across nodes) never wins from 512 MiB, the smallest size here, so Simple is what
# runs; on one rack NVLS runs Simple anyway. Across racks 2.26.2 also runs without GPUDirect
# RDMA by default (NCCL_NET_GDR_C2C defaults to 0, 1 in 2.30.7; docs/collectives.md round
# 18): the transfers are staged through Grace memory, which simtrain does not model.
for key, nodes in (
    ("single_rack_72_gpus", 1),
    ("two_racks_144_gpus", 2),
    ("twenty_racks_1440_gpus", 20),
):
    series(
        f"coreweave-gb200-nvl72-{72 * nodes}",
        src,
        {"preset": "gb200-nvl72", "nodes": nodes},
        [
            {"bytes": r["bytes"], "time_us": r["time_us"], "busbw": r["busbw"]}
            for r in cw["rows"][key]
        ],
        note="NCCL 2.26.2: no LL128 over GB200's C2C-attached NICs (Simple); whether IB "
        "SHARP was on is not stated (modelled off)"
        + ("; no GPUDirect RDMA by default (NCCL_NET_GDR_C2C=0), not modelled" if nodes > 1
           else ""),
        protocol="Simple",
    )
h = ref["coreweave_h100_64gpu_example"]
series(
    "coreweave-64xh100-ib-sharp",
    "CoreWeave nccl-tests README, MPI Operator example (h100-64-sharp manifest), "
    "coreweave/nccl-tests@cb865533",
    {"preset": "dgx-h100", "nodes": 8, "ib_sharp": True},
    [{"bytes": r["bytes"], "time_us": r["time_us"], "busbw": r["busbw"]} for r in h["rows"]],
    algorithm="collnet",
    note="NCCL_ALGO=COLLNETCHAIN; example log, not labelled a benchmark (source)",
)
az = ref["azure_nd_vm_allreduce_curves"]
src = "Azure/AI-benchmarking-guide Azure_Results/"
# Inferred: "the benchmark runs one all_reduce_perf on all GPUs of one host" (reference
# hardware.gpus, Azure/AI-benchmarking-guide#7): one process driving every GPU, nccl-tests -g.
AZ_HARNESS = "nccl-tests-threads"
series(
    "azure-nd-h100-v5-nvls",
    src + "ND_H100_v5_results.md@8fd0c6e1",
    {"preset": "dgx-h100"},
    [{"bytes": r["bytes_inf"], "busbw": r["busbw"]} for r in az["rows"]["nd_h100_v5_nvls"]],
    algorithm="nvls",
    note="in-place busbw; NVLS stated; sizes are 1024*2^k (bytes_inf)",
    harness=AZ_HARNESS,
)
series(
    "azure-nd-h200-v5-nvls",
    src + "ND_H200_v5_results.md@8fd0c6e1",
    {"preset": "dgx-h200"},
    [{"bytes": r["bytes_inf"], "busbw": r["busbw"]} for r in az["rows"]["nd_h200_v5_nvls"]],
    algorithm="nvls",
    note="in-place busbw; NVLS stated; sizes are 1024*2^k (bytes_inf)",
    harness=AZ_HARNESS,
)
series(
    "azure-nd-gb200-v6-ring-4gpu",
    src + "ND_GB200_v6_results.md@2a370be6",
    {"preset": "gb200-nvl72"},
    [{"bytes": r["bytes_inf"], "busbw": r["busbw"]} for r in az["rows"]["nd_gb200_v6_ring_4gpu"]],
    algorithm="ring",
    ranks=[0, 1, 2, 3],
    note="one 4-GPU host of the rack; Ring stated",
    harness=AZ_HARNESS,
)
# all_reduce_bench.py (reference fixed.tool): one torch all_reduce timed between CUDA events.
TORCH = "torch-bench"
ml = ref["ml_engineering_h200_b200_allreduce"]
src = "Stas Bekman, ML Engineering, network/benchmarks/README.md, stas00/ml-engineering@744d01e1"
series(
    "mlengineering-8xh200-torch",
    src,
    {"preset": "dgx-h200"},
    [{"bytes": r["bytes"], "busbw": r["busbw"]} for r in ml["rows"]["h200_8gpu_nvls_sweep"]],
    note="torch.distributed all_reduce_bench (Python launch per call); NCCL 2.27.7 switches "
         "Ring/LL to NVLS at 2 MiB",
    harness=TORCH,
)
series(
    "mlengineering-p6-b200-1x8",
    src,
    {"preset": "dgx-b200"},
    [
        {"bytes": r["bytes"], "busbw": r["busbw_1node_8gpu"]}
        for r in ml["rows"]["p6_b200_1_node_vs_4_nodes"]
    ],
    note="torch all_reduce_bench on AWS P6-B200",
    harness=TORCH,
)
series(
    "mlengineering-p6-b200-4x8-efa",
    src,
    {"preset": "dgx-b200", "nodes": 4, "nic_bandwidth": "400Gbps"},
    [
        {"bytes": r["bytes"], "busbw": r["busbw_4node_32gpu"]}
        for r in ml["rows"]["p6_b200_1_node_vs_4_nodes"]
    ],
    algorithm="ring",
    protocol="Simple",
    note=EFA_NOTE + "; 8x 400 Gb/s EFA v4 per node as InfiniBand-class links",
    harness=TORCH,
)
G16 = 16 << 30
t = ml["rows"]["h200_8gpu_16GiB_collectives_nccl_tests"]
series(
    "mlengineering-8xh200-16GiB-nccl-tests",
    src,
    {"preset": "dgx-h200"},
    [{"bytes": G16, "busbw": t[0]["busbw"], "label": "NVLS"}],
    algorithm="nvls",
)
series(
    "mlengineering-8xh200-16GiB-ring",
    src,
    {"preset": "dgx-h200", "nvlink_sharp": False},
    [{"bytes": G16, "busbw": t[1]["busbw"], "label": "Ring, NCCL_NVLS_ENABLE=0"}],
)
series(
    "mlengineering-8xh200-16GiB-all-gather",
    src,
    {"preset": "dgx-h200"},
    [{"bytes": G16, "busbw": t[2]["busbw"]}],
    op="all_gather",
    algorithm="ring",
)
series(
    "mlengineering-8xh200-16GiB-reduce-scatter",
    src,
    {"preset": "dgx-h200"},
    [{"bytes": G16, "busbw": t[3]["busbw"]}],
    op="reduce_scatter",
    algorithm="ring",
)
t = ml["rows"]["h200_8gpu_16GiB_torch"]
series(
    "mlengineering-8xh200-16GiB-torch-nvls",
    src,
    {"preset": "dgx-h200"},
    [{"bytes": G16, "busbw": t[0]["busbw"]}],
    harness=TORCH,
)
series(
    "mlengineering-8xh200-16GiB-torch-ring",
    src,
    {"preset": "dgx-h200", "nvlink_sharp": False},
    [{"bytes": G16, "busbw": t[1]["busbw"]}],
    harness=TORCH,
)
t = ml["rows"]["p5en_h200_4_nodes_32gpu_4GiB"]
p5 = {"preset": "dgx-h200", "nodes": 4, "nic_bandwidth": "400Gbps"}
note5 = EFA_NOTE + "; 16x 200 Gb/s EFA per node as 8x 400 Gb/s (two NICs per GPU aggregated)"
series(
    "mlengineering-p5en-4x8xh200-default",
    src,
    p5,
    [{"bytes": 4 << 30, "busbw": t[0]["busbw"]}],
    algorithm="ring",
    protocol="Simple",
    note=note5,
)
series(
    "mlengineering-p5en-4x8xh200-ring",
    src,
    p5,
    [{"bytes": 4 << 30, "busbw": t[1]["busbw"]}],
    algorithm="ring",
    protocol="Simple",
    note=note5,
)
series(
    "mlengineering-p5en-4x8xh200-nvlstree",
    src,
    p5,
    [{"bytes": 4 << 30, "busbw": t[2]["busbw"]}],
    algorithm="nvls_tree",
    protocol="Simple",
    note="NCCL_ALGO=allreduce:nvlstree (stated); " + note5,
)
G8 = 8 << 30
ISSUE = "https://github.com/NVIDIA/"
series(
    "issue-8xh100-nvls",
    ISSUE + "nccl-tests/issues/290 (user, maintainer: expected range)",
    {"preset": "dgx-h100"},
    [{"bytes": G8, "busbw": 476}],
    algorithm="nvls",
)
series(
    "issue-cx7-ndr-per-nic",
    ISSUE + "nccl-tests/issues/290 (maintainer expected 46-48)",
    {"preset": "dgx-h100", "nodes": 2},
    [{"bytes": G8, "busbw": 47}],
    op="send_recv",
    ranks=[0, 8],
    note="midpoint of 46-48 GB/s",
)
series(
    "issue-2x8xh100-ring",
    ISSUE + "nccl-tests/issues/319 (maintainer expected, ring)",
    {"preset": "dgx-h100", "nodes": 2},
    [{"bytes": G8, "busbw": 396}],
    algorithm="ring",
)
series(
    "issue-xe9680-1x8-nvls",
    ISSUE + "nccl-tests/issues/309 (user, NCCL 2.26.2)",
    {"preset": "dgx-h100"},
    [{"bytes": G8, "busbw": 480}],
)
series(
    "issue-xe9680-1x8-nvls-off",
    ISSUE + "nccl-tests/issues/309 (user, NCCL 2.26.2)",
    {"preset": "dgx-h100", "nvlink_sharp": False},
    [{"bytes": G8, "busbw": 368.76}],
)
series(
    "issue-xe9680-2x8",
    ISSUE + "nccl-tests/issues/309 (user, NCCL 2.26.2)",
    {"preset": "dgx-h100", "nodes": 2},
    [{"bytes": G8, "busbw": 470}],
)
series(
    "issue-xe9680-4x8",
    ISSUE + "nccl-tests/issues/309 (user, NCCL 2.26.2)",
    {"preset": "dgx-h100", "nodes": 4},
    [{"bytes": G8, "busbw": 365.84}],
)
series(
    "issue-8xh100-nvls-off",
    ISSUE + "nccl/issues/2140 (user, NCCL 2.30.4)",
    {"preset": "dgx-h100", "nvlink_sharp": False},
    [{"bytes": G8, "busbw": 370}],
)
series(
    "issue-8xh100-nvls-on",
    ISSUE + "nccl/issues/2140 (user, NCCL 2.30.4)",
    {"preset": "dgx-h100"},
    [{"bytes": G8, "busbw": 480}],
)
series(
    "issue-8xb300-nvls-off",
    ISSUE + "nccl/issues/2140 (user, NCCL 2.30.4)",
    {"preset": "dgx-b300", "nvlink_sharp": False},
    [{"bytes": G8, "busbw": 695}],
)
series(
    "issue-8xb300-nvls-on",
    ISSUE + "nccl/issues/2140 (user, NCCL 2.30.4)",
    {"preset": "dgx-b300"},
    [{"bytes": G8, "busbw": 845}],
)
series(
    "issue-8xb200",
    ISSUE + "nccl/issues/1807 (user, NCCL 2.27.1)",
    {"preset": "dgx-b200"},
    [{"bytes": G8, "busbw": 830}],
    note="published as '830+': a lower bound",
)
roce = {"preset": "dgx-h100", "nodes": 2, "nic_bandwidth": "400Gbps"}
series(
    "issue-roce-2x8xh100-nvls-off",
    ISSUE + "nccl/issues/1221 (user, NCCL 2.19.3, 8x 400G RoCE)",
    {**roce, "nvlink_sharp": False},
    [{"bytes": G8, "busbw": 330}],
    note="'1-2 nodes': modelled on 2; RoCE as InfiniBand-class links",
)
series(
    "issue-roce-2x8xh100-nvls-on",
    ISSUE + "nccl/issues/1221 (user, NCCL 2.19.3, 8x 400G RoCE)",
    roce,
    [{"bytes": G8, "busbw": 430}],
    algorithm="nvls_tree",
    note="NVLSTree inferred: 430 GB/s exceeds what a ring or tree reaches on 2 nodes (8 NICs"
    " x 48 = 384, NVLink 370.8) and RoCE switches do not reduce (no SHARP); '1-2 nodes':"
    " modelled on 2",
)
series(
    "issue-roce-4x8xh100",
    ISSUE + "nccl/issues/1221 (user, NCCL 2.19.3, 8x 400G RoCE)",
    {**roce, "nodes": 4},
    [{"bytes": G8, "busbw": 320}],
)
series(
    "issue-8xh200",
    ISSUE + "nccl-tests/issues/272 (user, NCCL 2.20.3, peak at -e 4G)",
    {"preset": "dgx-h200"},
    [{"bytes": 4 << 30, "busbw": 475}],
)

doc = {
    "suite": "nccl-modern",
    "description": "All-reduce (and a few other) bus bandwidths on H100/H200/B200/B300/GB200 "
    "copied from "
    "../shared/reference/nccl_modern.yaml, one series per source table; busbw in GB/s (1e9 B/s). "
    "Where the source gives time_us the published busbw is recomputed from it (busbw = "
    "factor*bytes/time), "
    "which keeps small sizes whose printed busbw rounds to 0.00.",
    "series": out,
}
y = YAML()
y.default_flow_style = None
y.width = 200
y.indent(mapping=2, sequence=4, offset=2)

buf = io.StringIO()
y.dump(doc, buf)
open(sys.argv[1], "w").write(
    "# Generated from ../shared/reference/nccl_modern.yaml (sources per series); see "
    "docs/collectives.md.\n"
    + buf.getvalue()
)
print(sum(len(s["points"]) for s in out), "points in", len(out), "series")

"""Can a GEMM shape model separate the H100 TP 1-2 rows from the TP 8 rows?

Run from the repository root:
    python benchmarks/gemm_shape_split.py [SUITE [ROW_PATTERN ...]]
(default: mcore-2024-h100, every row).

For each row, one microbatch's kernels averaged over the pipeline stages (every stage's
forward ops and their backward, ``simtrain.workload.ops.backward_ops``) are timed with
the row's own compute model (``simtrain.simulate.op_timer``: BF16 or the row's FP8
recipe), and grouped by kind. The GEMMs' FLOP-weighted efficiency (FLOPs / (time · peak),
launch cost included) is printed under the configured shape model and under the
alternatives a shape explanation would reach for (docs/validation.md, "GEMM efficiency by
shape on the H100 rows"):

- 128x256 and 256x128 output tiles (Hopper cuBLAS/CUTLASS's wide tiles, CUTLASS 3.x
  ``sm90`` kernels; the tile sets tile and wave quantisation over the 132 SMs);
- a 1.0 or 1.5 us tile fill (the top of ``ComputeConfig.tile_fill_latency``'s range:
  small-k GEMMs lose more).

The question it answers is the sign: a shape effect that is to explain why the TP 1-2
rows run slower than simtrain and the TP 8 rows do not must lower the TP 1-2 rows'
efficiency more than the TP 8 rows'. A diagnostic only: simtrain ships its own model.
"""

from __future__ import annotations

import fnmatch
import sys
from collections import Counter

from simtrain.hardware.topology import build_cluster
from simtrain.parallel.shard import Compute
from simtrain.simulate import build_plan, op_timer
from simtrain.validation import row_scenarios
from simtrain.workload.compute import gemm_efficiency
from simtrain.workload.ops import backward_ops

ALTERNATIVES = {  # label: (tile_m, tile_n, tile_fill_latency s)
    "128x256": (128, 256, 0.5e-6),
    "256x128": (256, 128, 0.5e-6),
    "fill 1.0us": (128, 128, 1.0e-6),
    "fill 1.5us": (128, 128, 1.5e-6),
}


def row_table(scenario) -> tuple[str, dict[str, float], float, dict[str, float]]:
    """(degrees, ms per kind per microbatch, FLOP-weighted GEMM efficiency, same under
    each alternative shape model at BF16 peak) for one row's scenario."""
    cluster = build_cluster(scenario.cluster)
    plan = build_plan(scenario, cluster)
    gpu, dims = cluster.gpu_spec, plan.dims
    timer = op_timer(scenario, cluster, plan.micro_batches)
    kinds: Counter[str] = Counter()
    flops = time = 0.0
    alt_time = dict.fromkeys(ALTERNATIVES, 0.0)
    gemms = []
    for chunks in plan.units:
        for units in chunks:
            for unit in units:
                for step in unit.steps:
                    if not isinstance(step, Compute):
                        continue
                    for op in (step.op, *backward_ops(step.op)):
                        t = timer(op) / dims.pp
                        kinds[op.kind] += t
                        if op.kind == "gemm" and op.gemm_shape is not None:
                            flops, time = flops + op.flops / dims.pp, time + t
                            gemms.append(op)
    dtype = scenario.training.dtype
    peak = gpu.flops(dtype)
    for label, (tm, tn, fill) in ALTERNATIVES.items():
        cfg = scenario.compute.model_copy(
            update={"tile_m": tm, "tile_n": tn, "tile_fill_latency": fill})
        for op in gemms:
            eff = gemm_efficiency(*op.gemm_shape, gpu, cfg, "bf16", groups=op.groups)
            alt_time[label] += op.flops / dims.pp / (gpu.flops("bf16") * eff)
    base_cfg = scenario.compute
    base = sum(op.flops / dims.pp / (gpu.flops("bf16") * gemm_efficiency(
        *op.gemm_shape, gpu, base_cfg, "bf16", groups=op.groups)) for op in gemms)
    degrees = f"tp{dims.tp} pp{dims.pp} cp{dims.cp} {dtype}"
    ms = {k: v * 1e3 for k, v in kinds.items()}
    # alternatives as the ratio to the configured model on the same GEMMs (BF16 peak)
    alts = {label: base / t for label, t in alt_time.items()}
    return degrees, ms, flops / time / peak, alts


def main(argv: list[str]) -> None:
    suite = argv[0] if argv else "mcore-2024-h100"
    patterns = argv[1:] or ["*"]
    print(f"{'row':<34} {'degrees':<22} {'ms/mb':>7}  gemm% attn% other%  eff   "
          + "  ".join(f"{k:>10}" for k in ALTERNATIVES))
    for entry, scenario in row_scenarios(suite):
        if not any(fnmatch.fnmatch(entry["id"], p) for p in patterns):
            continue
        scenario = scenario.model_copy(update={"sim": scenario.sim.model_copy(
            update={"ignore_memory": True})})
        degrees, ms, eff, alts = row_table(scenario)
        total = sum(ms.values())
        gemm, attn = ms.get("gemm", 0.0) / total, ms.get("attention", 0.0) / total
        print(f"{entry['id']:<34} {degrees:<22} {total:7.1f}  {100 * gemm:5.1f} "
              f"{100 * attn:5.1f} {100 * (1 - gemm - attn):6.1f}  {eff:.3f} "
              + "  ".join(f"{v:10.3f}" for v in alts.values()))


if __name__ == "__main__":
    main(sys.argv[1:])

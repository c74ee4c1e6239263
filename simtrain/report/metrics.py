"""Step metrics computed from the timeline: step time, throughput, MFU/HFU, exposed comm."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simtrain.engine.spantable import overlaps
from simtrain.engine.timeline import COMM_KINDS, COMPUTE_KINDS, SpanKind, Timeline

# The per-rank unions a run's summary asks for (here, ``simulate.step_breakdown`` and
# ``notes.recompute_share``): computed together, in one pass over the spans.
SUMMARY_UNIONS: tuple[tuple[str, ...] | None, ...] = (
    COMPUTE_KINDS, COMM_KINDS, None, *((k,) for k in COMM_KINDS), (SpanKind.RECOMPUTE,))


def rank_breakdown(timeline: Timeline) -> dict[int, dict[str, float]]:
    """Per rank: busy compute time, busy communication time, and the part of it not hidden.

    Busy time is the union of spans (concurrent streams count once); exposed communication
    is communication time during which the rank computes nothing.
    """
    table = timeline.columns()  # arrays, no span objects (simtrain.engine.spantable)
    table.prepare_unions(SUMMARY_UNIONS)
    is_compute, is_comm = table.mask(COMPUTE_KINDS), table.mask(COMM_KINDS)
    compute, comm = table.unions(COMPUTE_KINDS), table.unions(COMM_KINDS)  # all ranks at once
    comm_s = comm.lengths()
    return {rank: {"compute_s": c, "comm_s": m, "exposed_comm_s": m - o, "flops": f,
                   "comm_bytes": b}
            for rank, c, m, o, f, b in zip(
                table.ranks(), compute.lengths(), comm_s, overlaps(comm, compute),
                table.sums(is_compute, "flops"), table.sums(is_comm, "bytes"),
                strict=True)}


def summarize(
    timeline: Timeline,
    *,
    num_gpus: int,
    tokens_per_step: int,
    model_flops_per_step: float,
    peak_flops_per_gpu: float,
    weights: Mapping[int, int] | None = None,
) -> dict[str, Any]:
    """The run's summary dict (the JSON the CLI prints); times in seconds, rates per second.

    MFU = model FLOPs per step / (step time x GPUs x dense peak) with the model-FLOP
    convention of ``model_flops_per_step``; HFU counts the FLOPs the simulated kernels did.
    Per-rank times are averaged over ranks; ``weights`` (hybrid fidelity) counts each
    simulated rank for the ranks it stands for.
    """
    step = timeline.end
    per_rank = rank_breakdown(timeline)
    if weights:
        n = max(sum(weights.get(r, 1) for r in per_rank), 1)

        def mean(key: str) -> float:
            return sum(weights.get(r, 1) * v[key] for r, v in per_rank.items()) / n
    else:
        n = max(len(per_rank), 1)

        def mean(key: str) -> float:
            return sum(r[key] for r in per_rank.values()) / n

    # Mean over the simulated ranks times every GPU: with symmetric fidelity the timeline
    # holds one data-parallel replica standing for all of them.
    hardware_flops = mean("flops") * num_gpus
    capacity = step * num_gpus * peak_flops_per_gpu
    return {
        "num_gpus": num_gpus,
        "step_time_s": step,
        "tokens_per_step": tokens_per_step,
        "tokens_per_s": tokens_per_step / step if step > 0 else 0.0,
        "model_flops_per_step": model_flops_per_step,
        "hardware_flops_per_step": hardware_flops,
        "mfu": model_flops_per_step / capacity if capacity > 0 else 0.0,
        "hfu": hardware_flops / capacity if capacity > 0 else 0.0,
        "compute_s": mean("compute_s"),
        "comm_s": mean("comm_s"),
        "exposed_comm_s": mean("exposed_comm_s"),
        "comm_bytes_per_gpu": mean("comm_bytes"),
    }

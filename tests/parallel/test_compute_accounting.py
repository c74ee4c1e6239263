"""One accounting: the planner's bound sums the lowering's own templates."""

from __future__ import annotations

import pytest

from simtrain import load_scenario, simulate
from simtrain.study.plan import stage_compute_times, step_time_bound

CHARGED = ("forward", "backward", "recompute")


def _scenario(par, model=None, sim=None, training=None):
    return load_scenario({
        "cluster": {"preset": "dgx-a100", "nodes": 1},
        "model": {"preset": "tiny-gpt", **(model or {})},
        "training": {"global_batch_size": 16, "micro_batch_size": 2, "seq_len": 256,
                     **(training or {})},
        "parallelism": par,
        "sim": sim or {},
        # No interference: a collective beside compute would stretch the charged spans.
        "compute": {"comm_interference": 0},
    })


@pytest.mark.parametrize(("par", "model", "sim"), [
    # The case that drifted: selective recompute recomputes every kernel of standard
    # attention (scores, softmax, dropout, context), not only a fused "attention" kernel.
    ({"pp": 2, "recompute": "selective"}, {"attention_kernel": "standard"}, {}),
    ({"pp": 2, "vpp": 2, "schedule": "interleaved", "recompute": "full"}, {},
     {"granularity": "layer"}),
    ({"tp": 2, "sp": True, "cp": 2, "recompute": "selective", "tp_comm_overlap": True}, {}, {}),
    ({"pp": 2, "zero": 3, "schedule": "gpipe"}, {}, {"granularity": "stage"}),
    ({"ep": 2}, {"preset": "tiny-moe"}, {}),
    # torchtitan's per-op checkpointing: split mm's, re-run all-gathers (op_checkpoint.py).
    ({"tp": 2, "sp": True, "recompute": "op"}, {}, {}),
    ({"ep": 2, "recompute": "op"}, {"preset": "tiny-moe"}, {}),
])
def test_bound_sums_the_charged_compute_and_never_exceeds_the_step(par, model, sim):
    # No compute/communication interference (switched off above), so every rank of a stage
    # runs exactly m x (f + b) of compute: the bound's per-stage work equals what the
    # simulation charges, and the bound (which also counts no communication) is <= step.
    s = _scenario(par, model, sim)
    result = simulate(s)
    from simtrain.simulate import build_plan

    plan = build_plan(s, result.cluster)
    times = stage_compute_times(s, result.cluster, plan)
    m = plan.micro_batches
    for stage, chunks in enumerate(times):
        rank = plan.dims.rank(pp=stage)
        charged = sum(sp.duration for sp in result.timeline.for_rank(rank)
                      if sp.kind in CHARGED)
        assert charged == pytest.approx(m * sum(f + b for f, b in chunks), rel=1e-9)
    assert step_time_bound(times, m) <= result.summary["step_time_s"]


def test_bound_counts_the_recomputed_cudnn_attention():
    # compute.attention_impl cudnn: per-op checkpointing re-runs the attention, and the
    # bound's per-stage work must include it as the simulation charges it.
    from simtrain.simulate import build_plan

    s = _scenario({"tp": 2, "sp": True, "recompute": "op"})
    s = s.model_copy(update={"compute": s.compute.model_copy(
        update={"attention_impl": "cudnn"})})
    result = simulate(s)
    plan = build_plan(s, result.cluster)
    times = stage_compute_times(s, result.cluster, plan)
    charged = sum(sp.duration for sp in result.timeline.for_rank(plan.dims.rank(pp=0))
                  if sp.kind in CHARGED)
    assert charged == pytest.approx(plan.micro_batches * sum(f + b for f, b in times[0]),
                                    rel=1e-9)

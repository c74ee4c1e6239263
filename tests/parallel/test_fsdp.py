"""FSDP2 / HSDP knobs: shard and replicate groups, reshard-after-forward, prefetch depth,
reduce dtype; their traffic, timeline and memory."""

from __future__ import annotations

import pytest

from simtrain import ScenarioError, load_scenario, simulate
from simtrain.hardware.topology import build_cluster
from simtrain.parallel.fsdp import copy_in_bytes, copy_out_bytes, fsdp_traffic, gathered_bytes
from simtrain.simulate import build_graph, build_plan, memory_report

# tiny-gpt (GPT: biases, two LayerNorms) layer, h = 256, ffn 1024: qkv 256·768 + 768 =
# 197,376; proj 65,536 + 256 = 65,792; fc1 262,144 + 1,024 = 263,168; fc2 262,144 + 256 =
# 262,400; norms 2·(256 + 256) = 1,024. Sum 789,760 parameters.
LAYER = 789_760
# Embedding: 1024·256 words + 512·256 positions = 393,216; final norm 512; tied head 0.
EMBEDDING, FINAL_NORM = 393_216, 512


def test_gathered_bytes_holds_the_running_unit_and_prefetch_ahead():
    units = [1.0, 4.0, 2.0, 3.0]  # sum 10, largest 4
    assert gathered_bytes(units, 0, True) == 4.0    # the running unit only
    assert gathered_bytes(units, 1, True) == 8.0    # (1 + 1) x 4
    assert gathered_bytes(units, 3, True) == 10.0   # (1 + 3) x 4 = 16, but only 10 exist
    assert gathered_bytes(units, 1, False) == 10.0  # no reshard: every unit at the turn
    assert gathered_bytes([], 1, True) == 0.0


def test_fsdp_traffic_per_unit_by_hand():
    # P = 2·789,760 = 1,579,520 B (bf16), G = 4·789,760 = 3,159,040 B (fp32); N = 4, R = 2.
    # AG 3/4·P twice (forward and backward) = 2,369,280; RS 3/4·G = 2,369,280; AR of the
    # 1/4 shard over 2 replicas 2·(1/2)·G/4 = 789,760. Without reshard, one AG: 1,184,640.
    t = fsdp_traffic(1_579_520, 3_159_040, shard=4, replicas=2, reshard=True)
    assert (t.all_gather, t.reduce_scatter, t.all_reduce) == (2_369_280, 2_369_280, 789_760)
    assert fsdp_traffic(1_579_520, 3_159_040, shard=4, replicas=2,
                        reshard=False).all_gather == 1_184_640
    assert fsdp_traffic(1.0, 1.0, shard=8, replicas=1, reshard=True).all_reduce == 0.0


def _scenario(fsdp=None, batch=16, fidelity="explicit", **par):
    # 8 GPUs, dp 8, micro-batch 2: 16 sequences = 1 microbatch, 32 = 2.
    return load_scenario({
        "compute": {"host_kernel_issue": 0, "host_microbatch": 0},
        "cluster": {"preset": "dgx-a100", "nodes": 1}, "model": {"preset": "tiny-gpt"},
        "training": {"global_batch_size": batch, "micro_batch_size": 2, "seq_len": 256},
        "parallelism": {"zero": 3, **({"fsdp": fsdp} if fsdp else {}), **par},
        "sim": {"fidelity": fidelity}})


def _graph(s):
    return build_graph(s, build_cluster(s.cluster))


def _named(graph, name):
    return [t for t in graph.tasks if t.name == name]


def test_hsdp_shards_inside_blocks_and_all_reduces_the_shard_across_replicas():
    g = _graph(_scenario({"shard_size": 4}))
    ag, rs, ar = (_named(g, n) for n in ("fsdp ag layers.1", "fsdp rs layers.1",
                                         "hsdp ar layers.1"))
    assert {t.ranks for t in ag} == {t.ranks for t in rs} == {(0, 1, 2, 3), (4, 5, 6, 7)}
    assert {t.ranks for t in ar} == {(0, 4), (1, 5), (2, 6), (3, 7)}
    assert {t.comm.op for t in ar} == {"all_reduce"}
    # Parameters bf16 2·789,760; gradients fp32 4·789,760; the shard 1/4 of that.
    assert {t.bytes for t in ag} == {2 * LAYER}
    assert {t.bytes for t in rs} == {4 * LAYER}
    assert {t.bytes for t in ar} == {4 * LAYER / 4}
    # Each all-reduce follows the reduce-scatters of its members.
    rs_ids = {t.id for t in rs}
    assert all(set(t.deps) <= rs_ids and len(t.deps) == 2 for t in ar)


def test_plain_fsdp_has_no_all_reduce_and_one_shard_group():
    g = _graph(_scenario())
    assert not [t for t in g.tasks if t.name.startswith("hsdp ar")]
    assert {t.ranks for t in _named(g, "fsdp rs layers.1")} == {tuple(range(8))}


def test_hsdp_shards_model_states_over_the_shard_group_only():
    full, hsdp = _scenario(), _scenario({"shard_size": 4})
    mem = [memory_report(s, c := build_cluster(s.cluster), build_plan(s, c)).breakdown
           for s in (full, hsdp)]
    for key in ("weights", "gradients", "optimizer"):
        assert mem[1][key] == pytest.approx(2 * mem[0][key], rel=1e-12)  # /4 instead of /8


def test_no_reshard_after_forward_drops_the_backward_all_gathers_and_holds_every_unit():
    # Two microbatches: forward and backward all-gather each unit per microbatch (4) with
    # reshard; without, only the forward does (2). Memory: 2·largest unit (prefetch 1) =
    # 2·789,760·2 B against every unit: (393,216 + 4·789,760 + 512)·2 B = 7,105,536 B.
    on, off = _scenario(batch=32), _scenario({"reshard_after_forward": False}, batch=32)
    assert len(_named(_graph(on), "fsdp ag layers.1")) == 4
    assert len(_named(_graph(off), "fsdp ag layers.1")) == 2
    buffers = [memory_report(s, c := build_cluster(s.cluster), build_plan(s, c))
               .breakdown["comm_buffers"] for s in (on, off)]
    assert buffers == [2 * LAYER * 2, (EMBEDDING + 4 * LAYER + FINAL_NORM) * 2]


def test_no_reshard_skips_gathers_of_units_still_gathered_in_a_pipeline():
    # 1F1B, 2 stages, 8 microbatches; stage 0 runs F0 F1 B0 F2 B1 ... F7 B6 B7. A unit
    # gathered by a forward stays gathered until a backward reduces its gradients: F1
    # finds it gathered (skips), each Bk finds F(k+1)'s gather (skips) except B7, which
    # follows B6's reshard. All-gathers: F0, F2..F7 and B7 = 8, against 2 x 8 = 16.
    def gathers(fsdp):
        g = _graph(_scenario(fsdp, batch=64, pp=2))
        return [t.meta["microbatch"] for t in _named(g, "fsdp ag layers.0")]
    assert len(gathers(None)) == 16
    assert gathers({"reshard_after_forward": False}) == [0, 2, 3, 4, 5, 6, 7, 7]


def test_gradient_sync_on_the_last_microbatch_only_gathers_and_reduces_once():
    # torch pipelining with FSDP2 (reshard off, gradient sync off until the last
    # backward): 1F1B, 2 stages, 8 microbatches: one all-gather (F0) and one
    # reduce-scatter (after B7) of layers.0, against 8 reduce-scatters per microbatch;
    # the copy-in runs once too (per rank).
    def tasks(fsdp, name):
        g = _graph(_scenario({"copies": True, **fsdp}, batch=64, pp=2))
        return [t.meta["microbatch"] for t in _named(g, name)]
    pipe = {"reshard_after_forward": False, "sync_each_microbatch": False}
    assert tasks(pipe, "fsdp ag layers.0") == [0]
    assert tasks(pipe, "fsdp rs layers.0") == [7]
    assert tasks({}, "fsdp rs layers.0") == list(range(8))
    assert set(tasks(pipe, "layers.0.fsdp_copy_in")) == {7}  # on each rank
    # post_backward runs after the stage's whole last backward: stage 0's first-reduced
    # unit (layers.1) starts its reduce-scatter after rank 0's last backward kernel.
    tl = simulate(_scenario({"copies": True, **pipe}, batch=64, pp=2)).timeline
    mine = [sp for sp in tl.spans if sp.rank == 0]
    last_bwd = max(sp.end for sp in mine if sp.kind == "backward"
                   and "fsdp_copy_in" not in sp.name)
    assert min(sp.start for sp in mine if sp.name == "fsdp rs layers.1") >= last_bwd


@pytest.mark.parametrize("prefetch,prev", [(0, "layers.1."), (1, "layers.0."),
                                           (2, "embedding")])
def test_prefetch_issues_the_all_gather_that_many_units_ahead(prefetch, prev):
    # Units: embedding, layers.0..3, final_norm, lm_head. The forward all-gather of
    # layers.2 waits for the compute before the unit `prefetch` ahead of it: its own
    # predecessor layers.1 (no prefetch), layers.0 (one ahead), the embedding (two).
    g = _graph(_scenario({"prefetch": prefetch}))
    ag = _named(g, "fsdp ag layers.2")[0]  # the forward's (emitted first)
    names = [g.tasks[d].name for d in ag.deps if g.tasks[d].kind == "forward"]
    assert names and all(n.startswith(prev) for n in names)


def test_deeper_prefetch_hides_more_of_the_gathers_and_costs_memory():
    sums = {p: simulate(_scenario({"prefetch": p})).summary for p in (0, 1)}
    assert sums[0]["exposed_comm_by_kind"]["dp_comm"] > \
        sums[1]["exposed_comm_by_kind"]["dp_comm"]
    assert sums[0]["memory_breakdown"]["comm_buffers"] < \
        sums[1]["memory_breakdown"]["comm_buffers"]


def test_reduce_dtype_sets_the_reduce_scatter_bytes_and_its_trace_dtype():
    # Gradients kept fp32 (ddp.grad_dtype); reduced in bf16: 2·789,760 B on the wire.
    g = _graph(_scenario({"reduce_dtype": "bf16", "shard_size": 4}))
    rs, ar = _named(g, "fsdp rs layers.1"), _named(g, "hsdp ar layers.1")
    assert {t.bytes for t in rs} == {2 * LAYER} and {t.bytes for t in ar} == {2 * LAYER / 4}
    assert {t.meta["dtype"] for t in rs + ar} == {"bf16"}


def test_hsdp_symmetric_fidelity_matches_explicit():
    par = {"shard_size": 4, "reshard_after_forward": False}
    exp = simulate(_scenario(par)).summary
    sym = simulate(_scenario(par, fidelity="symmetric")).summary
    assert sym["step_time_s"] == pytest.approx(exp["step_time_s"], rel=1e-6)


def test_fsdp2_copy_bytes_by_hand():
    # One tiny-gpt layer, 789,760 parameters: copy-out reads the flat bf16 all-gather output
    # and writes the parameters, 2·789,760·2 = 3,159,040 B; copy-in reads the bf16 gradients
    # and writes the fp32 reduce buffer, 789,760·(2 + 4) = 4,738,560 B.
    assert copy_out_bytes(LAYER, 2) == 3_159_040
    assert copy_in_bytes(LAYER, 2, 4) == 4_738_560


def test_fsdp2_copies_run_on_the_compute_stream_between_the_collectives():
    # dgx-a100 (A100 80GB, 2.039 TB/s x 0.85 = 1.73315e12 B/s), launch 3 us: copy-out
    # 3,159,040 / 1.73315e12 + 3e-6 = 4.82272e-6 s, copy-in (fp32 reduce, ddp.grad_dtype's
    # default) 4,738,560 / 1.73315e12 + 3e-6 = 5.73407e-6 s.
    g = _graph(_scenario({"copies": True}))
    outs = [t for t in _named(g, "layers.1.fsdp_copy_out") if t.ranks == (0,)]
    ins = [t for t in _named(g, "layers.1.fsdp_copy_in") if t.ranks == (0,)]
    assert len(outs) == 2 and len(ins) == 1  # forward and backward gathers, one scatter
    assert {t.stream for t in outs + ins} == {"compute"}
    assert outs[0].duration == pytest.approx(4.82272e-6, rel=1e-5)
    assert ins[0].duration == pytest.approx(5.73407e-6, rel=1e-5)
    gathers = {t.id for t in _named(g, "fsdp ag layers.1")}
    assert all(gathers & set(t.deps) for t in outs)  # each copy-out waits for its gather
    rs = [t for t in _named(g, "fsdp rs layers.1") if 0 in t.ranks]
    assert ins[0].id in rs[0].deps  # the reduce-scatter waits for the copy-in
    assert not _named(_graph(_scenario()), "layers.1.fsdp_copy_out")  # off by default


def test_fsdp2_copies_lengthen_the_step():
    on = simulate(_scenario({"copies": True})).summary["step_time_s"]
    assert on > simulate(_scenario()).summary["step_time_s"]


@pytest.mark.parametrize("par,match", [
    ({"zero": 1, "fsdp": {"reshard_after_forward": False}}, "set parallelism.zero: 3"),
    ({"zero": 3, "fsdp": {"shard_size": 3}}, "shard_size=3 must divide"),
])
def test_bad_fsdp_input_is_a_scenario_error(par, match):
    with pytest.raises(ScenarioError, match=match):
        load_scenario({"cluster": {"preset": "dgx-a100"}, "model": {"preset": "tiny-gpt"},
                       "training": {"global_batch_size": 8}, "parallelism": par})


def test_sync_once_per_step_holds_unsharded_units_and_gradients():
    # tiny-gpt, 2 stages: stage 0 holds the embedding and layers 0-1 (393,216 + 2·789,760
    # = 1,972,736 parameters; the tied head is stage 1's). Synced each microbatch: fp32
    # gradients sharded over dp 4 (8 GPUs / pp 2) = 4·1,972,736/4 = 1,972,736 B; gathered
    # units: prefetch 1 → 2 x the largest (789,760·2 B) = 3,159,040 B. Synced once per step
    # (torch pipelining): every gradient unsharded in fp32 = 7,890,944 B, and every unit
    # gathered: 1,972,736·2 = 3,945,472 B (plus the pipeline buffers, equal in both).
    def breakdown(fsdp):
        s = _scenario(fsdp, batch=64, pp=2)
        c = build_cluster(s.cluster)
        return memory_report(s, c, build_plan(s, c)).breakdown
    each, once = breakdown(None), breakdown({"sync_each_microbatch": False})
    stage0 = EMBEDDING + 2 * LAYER
    assert each["gradients"] == pytest.approx(4 * stage0 / 4, rel=1e-12)
    assert once["gradients"] == pytest.approx(4 * stage0, rel=1e-12)
    assert once["comm_buffers"] - each["comm_buffers"] == pytest.approx(
        2 * stage0 - 2 * 2 * LAYER, rel=1e-12)

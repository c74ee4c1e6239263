"""TP, SP, CP, EP, ZeRO and recompute lowered to tasks: volumes, overlap, FLOP accounting."""

from __future__ import annotations

import pytest

from simtrain import ScenarioError, load_scenario, simulate
from simtrain.simulate import build_graph, build_plan


def _scenario(par, model=None, training=None, sim=None, nodes=1):
    return load_scenario({
        # tiny-gpt's kernels are shorter than their host issue cost (launch-bound, see
        # workload.host): these tests are about the GPU side, so the host is free here.
        "compute": {"host_kernel_issue": 0, "host_microbatch": 0},
        "cluster": {"preset": "dgx-a100", "nodes": nodes},
        "model": model or {"preset": "tiny-gpt"},
        "training": {"global_batch_size": 16, "micro_batch_size": 2, "seq_len": 256,
                     **(training or {})},
        "parallelism": par,
        "sim": sim or {},
    })


def _layer_comm(graph, kind, layer=1, group_of=0):
    return [t for t in graph.tasks if t.kind == kind and group_of in t.ranks
            and t.name.startswith(f"layers.{layer}.") and t.meta.get("microbatch") == 0]


@pytest.mark.parametrize("sp", [False, True])
def test_tp_moves_the_textbook_volume_per_layer(sp):
    # tiny-gpt: h = 256; b = 2, s = 256: b·s·h = 131,072 elements, 262,144 bf16 bytes.
    # Megatron TP: all-reduce after attention and after the MLP in forward (g), and before
    # each in backward (f): 4 all-reduces of b·s·h per layer. SP: each becomes a
    # reduce-scatter + all-gather pair of the same b·s·h tensor (same bus volume).
    s = _scenario({"tp": 4, "sp": sp})
    graph = build_graph(s, build_cluster(s))
    tasks = _layer_comm(graph, "tp_comm")
    bsh_bytes = 2 * 256 * 256 * 2
    assert all(t.bytes == bsh_bytes for t in tasks)
    ops = sorted(t.comm.op for t in tasks)
    if sp:
        assert ops == ["all_gather"] * 4 + ["reduce_scatter"] * 4
    else:
        assert ops == ["all_reduce"] * 4
        fwd = [t for t in tasks if not t.name.endswith(".bwd")]
        assert sorted(t.name for t in fwd) == ["layers.1.attn.g", "layers.1.mlp.g"]
    assert all(t.ranks == (0, 1, 2, 3) for t in tasks)  # TP innermost, inside the node


def build_cluster(s):
    from simtrain.hardware.topology import build_cluster as build
    return build(s.cluster)


def test_tp_shards_gemms_and_keeps_parameters():
    s1, s4 = _scenario({}), _scenario({"tp": 4})
    p1 = build_plan(s1, build_cluster(s1))
    p4 = build_plan(s4, build_cluster(s4))
    qkv1 = next(st.op for u in p1.units[0][0] for st in u.steps
                if getattr(st, "op", None) is not None and st.op.name == "layers.0.attn.qkv")
    qkv4 = next(st.op for u in p4.units[0][0] for st in u.steps
                if getattr(st, "op", None) is not None and st.op.name == "layers.0.attn.qkv")
    assert qkv4.gemm_shape == (512, 768 // 4, 256) and qkv4.flops == qkv1.flops / 4


def test_recompute_counts_hardware_flops_not_model_flops():
    base = simulate(_scenario({"tp": 2}, sim={"granularity": "layer"})).summary
    full = simulate(_scenario({"tp": 2, "recompute": "full"},
                              sim={"granularity": "layer"})).summary
    sel = simulate(_scenario({"tp": 2, "recompute": "selective"})).summary
    assert full["model_flops_per_step"] == base["model_flops_per_step"]
    # Full recompute runs every layer's forward again: ~4/3 of the layer FLOPs (the LM head
    # is not recomputed, so a bit less overall).
    ratio = full["hardware_flops_per_step"] / base["hardware_flops_per_step"]
    assert 1.2 < ratio < 4 / 3
    assert base["hardware_flops_per_step"] < sel["hardware_flops_per_step"] < \
        full["hardware_flops_per_step"]
    assert full["hfu"] > full["mfu"]
    assert full["step_time_s"] > base["step_time_s"]


def test_ring_attention_hides_kv_passing_and_allgather_variant_moves_kv():
    # Ring attention hides the K,V passing when a block's attention outlasts its transfer:
    # per block ~s_local/2 causal FLOPs per byte moved, so long sequences (8k per rank).
    long = dict(model={"preset": "tiny-gpt", "max_seq_len": 32768},
                training={"seq_len": 32768, "micro_batch_size": 1, "global_batch_size": 8})
    ring = simulate(_scenario({"cp": 4}, **long)).summary
    ag = simulate(_scenario({"cp": 4, "cp_algorithm": "allgather"}, **long))
    assert ring["comm_s"] > 0
    assert ring["exposed_comm_by_kind"].get("cp_comm", 0.0) < 0.5 * ag.summary[
        "exposed_comm_by_kind"]["cp_comm"]
    # All-gather of K and V: b·s·2·kv·dt = 1·32768·2·256·2 bytes, forward, per layer.
    fwd = [t for t in ag.graph.tasks if t.name == "layers.0.attn.kv_allgather"]
    assert fwd and all(t.bytes == 32768 * 2 * 256 * 2 for t in fwd)


def test_moe_all_to_all_and_imbalance_slow_the_step():
    model = {"preset": "tiny-moe"}
    even = simulate(_scenario({"ep": 4}, model=model)).summary
    skew = simulate(_scenario({"ep": 4}, model={**model, "routing_imbalance": 1.0})).summary
    assert "ep_comm" in even["exposed_comm_by_kind"]
    assert skew["step_time_s"] > even["step_time_s"]
    # Dispatch + combine, forward and backward: 4 all-to-alls per MoE layer per microbatch.
    g = build_graph(_scenario({"ep": 4}, model=model),
                    build_cluster(_scenario({"ep": 4}, model=model)))
    ep = [t.name for t in g.tasks if t.kind == "ep_comm" and 0 in t.ranks
          and t.name.startswith("layers.0.")]
    a2a = [n for n in ep if not n.endswith(".counts")]
    assert len(a2a) == 4  # one microbatch: 16 sequences / (8 dp x 2)
    assert ep.count("layers.0.mlp.counts") == 1  # dropless: the routing counts, forward


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_zero_stages_run_and_shrink_memory(zero):
    s = simulate(_scenario({"zero": zero})).summary
    assert s["step_time_s"] > 0
    assert s["memory_breakdown"]["optimizer"] > 0


def test_zero_memory_ordering_and_fsdp_gathers():
    mem = [simulate(_scenario({"zero": z})).summary["peak_memory_gib"] for z in (0, 1, 3)]
    assert mem[0] > mem[1] > mem[2]
    fsdp = simulate(_scenario({"zero": 3}))
    names = {t.name for t in fsdp.graph.tasks if t.kind == "dp_comm"}
    assert "fsdp ag layers.0" in names and "fsdp rs layers.0" in names


def test_out_of_memory_names_the_breakdown_unless_ignored():
    big = {"cluster": {"preset": "dgx-a100", "nodes": 1}, "model": {"preset": "gpt3-2.7b"},
           "training": {"global_batch_size": 64, "micro_batch_size": 8, "seq_len": 2048}}
    with pytest.raises(ScenarioError, match=r"out of memory: stage 0 needs .* GiB per GPU "
                       r"\(weights .*optimizer .*activations .* but the GPU has 80 GiB"):
        simulate(load_scenario(big))
    ok = simulate(load_scenario({**big, "sim": {"ignore_memory": True,
                                                "granularity": "stage"}})).summary
    assert ok["peak_memory_gib"] > 80


def test_granularities_agree_roughly_and_cut_tasks():
    par = {"tp": 2, "pp": 2}
    op = simulate(_scenario(par)).summary
    layer = simulate(_scenario(par, sim={"granularity": "layer"})).summary
    stage = simulate(_scenario(par, sim={"granularity": "stage"})).summary
    assert op["tasks"] > layer["tasks"] > stage["tasks"]
    for coarse in (layer, stage):
        assert coarse["step_time_s"] == pytest.approx(op["step_time_s"], rel=0.15)
        assert coarse["hardware_flops_per_step"] == pytest.approx(
            op["hardware_flops_per_step"], rel=1e-9)


def test_pipeline_summary_has_bubble_and_pp_comm():
    s = simulate(_scenario({"pp": 4, "schedule": "gpipe"})).summary
    assert s["bubble_fraction"] > 0.2
    assert s["exposed_comm_by_kind"]["pp_comm"] >= 0


@pytest.mark.parametrize("par", [
    {"tp": 2, "pp": 2, "cp": 2},
    {"tp": 2, "sp": True, "pp": 2, "vpp": 2, "schedule": "interleaved", "zero": 3},
    {"pp": 4, "schedule": "gpipe", "zero": 2, "recompute": "full"},
    {"cp": 2, "pp": 2, "cp_algorithm": "allgather", "recompute": "selective"},
    {"tp": 2, "pp": 2, "pp_layers": [1, 3]},
    {"tp": 2, "pp": 2, "order": "tp-pp-cp-dp"},
])
def test_combined_plans_run_without_deadlock_and_deterministically(par):
    a = simulate(_scenario(par, training={"global_batch_size": 16, "micro_batch_size": 1}))
    b = simulate(_scenario(par, training={"global_batch_size": 16, "micro_batch_size": 1}))
    assert a.timeline.signature() == b.timeline.signature()
    assert a.summary["step_time_s"] > 0


def test_moe_with_tp_pp_and_expert_gradients_over_expert_data_parallel_group():
    r = simulate(_scenario({"ep": 2, "tp": 2, "pp": 2}, model={"preset": "tiny-moe"}))
    expert = [t for t in r.graph.tasks if t.name.startswith("expert ddp bucket")]
    # tp2 pp2 -> dp 2, ep 2: each expert is held by one rank of the dp x cp group, so
    # expert gradients need no data-parallel reduction at all.
    assert expert == []
    r4 = simulate(_scenario({"ep": 2}, model={"preset": "tiny-moe"}))
    expert4 = [t for t in r4.graph.tasks if t.name.startswith("expert ddp bucket")]
    assert expert4 and all(len(t.ranks) == 4 for t in expert4)  # dp 8 / ep 2


@pytest.mark.parametrize("preset", ["tiny-gpt", "llama3-8b", "tiny-moe"])
def test_unsharded_program_is_exactly_lower_model(preset):
    from simtrain.parallel.shard import Compute, ShardSpec, chunk_units
    from simtrain.workload.model import ModelConfig, lower_model

    cfg = ModelConfig.from_preset(preset, num_layers=2)
    units = chunk_units(cfg, range(2), first=True, last=True, b=2, s=256, dt=2,
                        spec=ShardSpec())
    ops = [st.op for u in units for st in u.steps if isinstance(st, Compute)]
    assert ops == [op for layer in lower_model(cfg, 2, 256) for op in layer.ops]


def test_analytic_network_matches_flows_without_contention_and_is_cheaper_with_it():
    par = {"tp": 2, "pp": 2, "cp": 2}
    flow = simulate(_scenario(par, nodes=2)).summary
    analytic = simulate(_scenario(par, nodes=2, sim={"network": "analytic"})).summary
    # TP/CP inside a node and PP p2p do not share links here: the same step either way.
    assert analytic["step_time_s"] == pytest.approx(flow["step_time_s"], rel=0.02)
    moe = dict(model={"preset": "tiny-moe", "num_experts": 8},
               training={"global_batch_size": 32})
    flow_moe = simulate(_scenario({"ep": 8}, nodes=2, **moe)).summary
    an_moe = simulate(_scenario({"ep": 8}, nodes=2, sim={"network": "analytic"}, **moe)).summary
    # All-to-alls across two servers contend for the NICs only in the flow model.
    assert an_moe["step_time_s"] <= flow_moe["step_time_s"] * 1.001

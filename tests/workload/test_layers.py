"""The layer builder's MoE kernels: how many GEMMs the host issues per grouped GEMM."""

from __future__ import annotations

import pytest

from simtrain import load_scenario
from simtrain.hardware.topology import build_cluster
from simtrain.simulate import build_graph
from simtrain.workload.layers import expert_launches, moe_ops
from simtrain.workload.model import ModelConfig, backward_ops

MOE = {"family": "llama", "activation": "swiglu", "norm": "rmsnorm", "bias": False,
       "position_embedding": "rope", "dropout_masks": False, "vocab_size": 100,
       "max_seq_len": 64, "num_layers": 1, "hidden_size": 64, "num_heads": 4,
       "num_kv_heads": 2, "ffn_hidden_size": 128, "num_experts": 8, "experts_per_token": 2}


def test_expert_launches_by_hand():
    # A grouped kernel is one launch whatever the experts; TE's GroupedLinear one cuBLAS
    # GEMM per local expert: Qwen3-30B-A3B on EP 8 holds 128 / 8 = 16.
    assert expert_launches("grouped", 16) == 1
    assert expert_launches("per-expert", 16) == 16
    assert expert_launches("per-expert", 1) == 1
    with pytest.raises(ValueError, match="at least one local expert"):
        expert_launches("per-expert", 0)
    with pytest.raises(ValueError, match="grouped or per-expert"):
        expert_launches("cutlass", 4)


@pytest.mark.parametrize(("expert_gemm", "launches"), [("grouped", 1), ("per-expert", 4)])
def test_grouped_gemms_and_their_backward_carry_the_launches(expert_gemm, launches):
    cfg = ModelConfig(**MOE, expert_gemm=expert_gemm)
    router, experts = moe_ops(cfg, "layers.0", 16, 2, 4, 1)
    gemms = {op.name: op for op in experts if op.kind == "gemm"}
    assert set(gemms) == {"layers.0.mlp.fc1", "layers.0.mlp.fc2"}
    for op in gemms.values():
        assert op.groups == 4 and op.launches == launches
        assert [b.launches for b in backward_ops(op)] == [launches, launches]  # dgrad, wgrad
    assert router.launches == 1  # the router is one GEMM either way
    assert all(op.launches == 1 for op in experts if op.kind != "gemm")


def _kernels(expert_gemm: str) -> int:
    s = load_scenario({
        "cluster": {"preset": "dgx-a100", "nodes": 1},
        "model": {"preset": "tiny-moe", "num_layers": 2, "expert_gemm": expert_gemm},
        "training": {"global_batch_size": 8, "micro_batch_size": 1, "seq_len": 512},
        "parallelism": {"ep": 2, "dp": 8},
        "sim": {"fidelity": "explicit", "granularity": "op"}})
    graph = build_graph(s, build_cluster(s.cluster))
    return sum(t.meta.get("kernels", 1) for t in graph.tasks
               if t.kind != "ep_comm" and 0 in t.ranks and t.meta.get("microbatch") == 0)


def test_the_host_issues_one_gemm_per_local_expert():
    # tiny-moe: 4 experts on EP 2, 2 local experts. Each of the 2 layers runs fc1 and fc2
    # forward, dgrad and wgrad: 6 grouped GEMMs, each 2 launches instead of 1, so one
    # micro-batch of rank 0 issues 2 x 6 x (2 - 1) = 12 kernels more.
    assert _kernels("per-expert") - _kernels("grouped") == 12

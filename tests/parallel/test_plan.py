"""ParallelDims: rank layout, process groups, and plan errors that name the numbers and a fix."""

from __future__ import annotations

import pytest

from simtrain import ScenarioError, load_scenario
from simtrain.parallel.plan import ParallelDims


def test_default_order_keeps_tp_innermost_then_cp_pp_dp():
    d = ParallelDims(tp=2, cp=2, pp=2, dp=2)
    # rank = tp + 2·(cp + 2·(pp + 2·dp)): rank 13 = 1 + 2·(0 + 2·(1 + 2·1)).
    assert d.coords(13) == {"tp": 1, "cp": 0, "pp": 1, "dp": 1}
    assert d.rank(tp=1, cp=0, pp=1, dp=1) == 13
    assert all(d.rank(**d.coords(r)) == r for r in range(16))
    assert d.group(13, "tp") == (12, 13)
    assert d.group(13, "cp") == (13, 15)
    assert d.group(13, "pp") == (9, 13)
    assert d.group(13, "dp") == (5, 13)
    assert d.group(13, ("dp", "cp")) == (5, 7, 13, 15)
    assert d.groups("tp") == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11), (12, 13),
                              (14, 15)]
    assert d.stage_ranks(1) == [4, 5, 6, 7, 12, 13, 14, 15]


def test_custom_order_moves_dp_inside():
    d = ParallelDims(tp=2, pp=2, dp=2, order="dp-tp-pp-cp")
    assert d.group(0, "dp") == (0, 1)
    assert d.group(0, "tp") == (0, 2)


def test_expert_groups_are_carved_from_data_parallelism():
    d = ParallelDims(tp=2, dp=4, ep=2)
    # dp index = rank // 2; EP pairs dp replicas (0, 1) and (2, 3).
    assert d.ep_group(0) == (0, 2)
    assert d.ep_group(5) == (5, 7)
    assert d.expert_dp_group(0) == (0, 4)


@pytest.mark.parametrize(("kwargs", "says"), [
    (dict(tp=2, pp=2, dp=3, world_size=16), "tp x cp x pp x dp = 2 x 1 x 2 x 3 = 12 does not "
                                            "match the world size 16"),
    (dict(tp=1, sp=True), "needs tp > 1"),
    (dict(dp=4, ep=3, world_size=4), "etp x ep = 1 x 3 = 3 does not divide the 4 ranks"),
    (dict(order="tp-pp-dp"), "must name each of tp, cp, pp, dp"),
])
def test_impossible_dims_raise_value_errors(kwargs, says):
    with pytest.raises(ValueError, match=says):
        ParallelDims(**kwargs)


def _load(par, model=None, training=None, nodes=2):
    return load_scenario({
        "cluster": {"preset": "dgx-a100", "nodes": nodes},
        "model": model or {"preset": "gpt3-1.3b"},
        "training": {"global_batch_size": 64, "seq_len": 2048, **(training or {})},
        "parallelism": par,
    })


@pytest.mark.parametrize(("par", "extra", "says"), [
    ({"tp": 3}, {}, "tp x cp x pp = 3 x 1 x 1 = 3 does not divide the cluster's 16 GPUs"),
    ({"tp": 8, "pp": 2, "dp": 1}, {"model": {"preset": "gpt3-1.3b", "num_heads": 4}},
     "num_heads=4 is not divisible by tp=8"),
    ({"tp": 4}, {"model": {"preset": "llama3-8b", "num_layers": 4, "hidden_size": 3072,
                           "num_heads": 24, "num_kv_heads": 6, "max_seq_len": 2048}},
     "num_kv_heads=6 and tp=4"),
    ({"pp": 16}, {}, "num_layers=24 is not divisible by pp x vpp = 16 x 1 = 16"),
    ({"pp": 4, "vpp": 4, "schedule": "interleaved"}, {},
     "num_layers=24 is not divisible by pp x vpp = 4 x 4 = 16"),
    ({"pp": 2, "pp_layers": [10, 10]}, {}, "summing to num_layers=24"),
    ({"ep": 2}, {}, "needs a mixture-of-experts model"),
    ({"ep": 16}, {"model": {"preset": "tiny-moe", "max_seq_len": 2048}},
     "num_experts=4 is not divisible by ep=16"),
    ({"cp": 2}, {"training": {"seq_len": 2046}}, "not divisible by 2 x cp = 4"),
    ({"tp": 2, "sp": True, "cp": 1}, {"training": {"seq_len": 2047}},
     "seq_len divisible by cp x tp = 2"),
    ({"tp": 8, "pp": 2}, {"training": {"global_batch_size": 12, "micro_batch_size": 5}},
     "global_batch_size=12 is not divisible by dp x micro_batch_size = 1 x 5 = 5"),
    ({"pp": 2, "vpp": 2, "schedule": "interleaved", "tp": 8}, {"training": {
        "global_batch_size": 3}}, "microbatches (3) divisible by pp=2"),
    ({"tp": 16}, {}, "TP groups would straddle servers"),
    ({"pp": 2, "vpp": 2}, {}, "vpp=2 virtual stages need schedule: interleaved"),
])
def test_impossible_plans_are_scenario_errors_with_numbers(par, extra, says):
    with pytest.raises(ScenarioError) as err:
        _load(par, **extra)
    assert says in str(err.value)


def test_dp_is_what_is_left_and_an_explicit_dp_still_works():
    s = _load({"tp": 2, "pp": 2})
    assert s.parallelism.dims(16).dp == 4
    assert _load({"dp": 16}).parallelism.dims(16).dp == 16


def test_stride_is_the_rank_distance_along_a_dimension():
    # Order tp-cp-pp-dp with tp=2, cp=1, pp=4, dp=3: rank = tp + 2*(cp + 1*(pp + 4*dp)),
    # so strides are tp 1, cp 2, pp 2, dp 8.
    from simtrain.parallel.plan import ParallelDims

    d = ParallelDims(tp=2, pp=4, dp=3)
    assert [d.stride(x) for x in ("tp", "cp", "pp", "dp")] == [1, 2, 2, 8]
    assert d.rank(tp=1, pp=2, dp=1) == 1 + 2 * 2 + 8

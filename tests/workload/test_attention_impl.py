"""FlashAttention-2 efficiency (``compute.attention_impl: fa2``) from Dao 2023's figures."""

from __future__ import annotations

import pytest

from simtrain.workload.attention_impl import fa2_efficiency
from simtrain.workload.compute import ATTENTION_EFFICIENCY, ComputeConfig


def test_fa2_on_hopper_by_hand():
    # 0.60 (Ampere at training shapes) x (335/989.4) / (225/312) = 0.60 x 0.338589 / 0.721154
    # = 0.28171.
    assert fa2_efficiency("hopper") == pytest.approx(0.28171, rel=1e-4)
    assert fa2_efficiency("ampere") == pytest.approx(0.60)


def test_unknown_architecture_names_the_fix():
    with pytest.raises(ValueError, match="attention_efficiency"):
        fa2_efficiency("blackwell")


def test_config_picks_the_impl_and_an_explicit_efficiency_wins():
    assert ComputeConfig().max_attention_efficiency("hopper") == ATTENTION_EFFICIENCY["hopper"]
    fa2 = ComputeConfig(attention_impl="fa2")
    assert fa2.max_attention_efficiency("hopper") == pytest.approx(fa2_efficiency("hopper"))
    assert ComputeConfig(attention_impl="fa2", attention_efficiency=0.5
                         ).max_attention_efficiency("hopper") == 0.5
    # FA2 is slower than the default (cuDNN/FA3-class) kernel on Hopper.
    assert fa2.max_attention_efficiency("hopper") < ATTENTION_EFFICIENCY["hopper"]


def test_cudnn_runs_at_the_default_rate_but_per_op_checkpointing_recomputes_it():
    from simtrain.workload.attention_impl import op_sac_saves_attention

    cudnn = ComputeConfig(attention_impl="cudnn")
    assert cudnn.max_attention_efficiency("blackwell") == ATTENTION_EFFICIENCY["blackwell"]
    assert not cudnn.op_sac_saves_attention
    assert ComputeConfig().op_sac_saves_attention and op_sac_saves_attention("fa2")
    with pytest.raises(ValueError, match="default, fa2, cudnn"):
        op_sac_saves_attention("flex")

"""The nemo2-docs suite's transcription of NeMo's performance settings (docs/blackwell.md,
Round 15): gradients kept and reduced in bf16, as NeMo 2.2-2.4's performance recipes set
``grad_reduce_in_fp32 = False``."""

from __future__ import annotations

import pytest

from simtrain.validation_suites import row_bodies
from simtrain.workload.memory import model_state_bytes


def test_every_nemo2_row_reduces_gradients_in_bf16() -> None:
    rows = row_bodies("nemo2-docs")
    assert rows, "nemo2-docs has rows"
    for entry, body in rows:
        assert body["parallelism"]["ddp"]["grad_dtype"] == "bf16", entry["id"]


def test_bf16_gradients_fit_the_405b_cp_layout_on_gb200() -> None:
    # 25.04-gb200-llama3-405b-128gpu: TP 4 x PP 8 hold 405.85e9 / 32 = 12.68e9 parameters per
    # GPU (the transformer layers; the embedding and output layer add ~0.5e9 to the end
    # stages). Distributed optimizer over DP x CP = 4: gradient buffers unsharded (zero 1).
    # fp32: 12.68e9 * 4 B = 50.7e9 B = 47.2 GiB; bf16: 25.4e9 B = 23.6 GiB, 23.6 GiB less,
    # the difference between simtrain's 199.2 and 175.5 GiB peaks (GB200: 185 GiB).
    params = 405.85e9 / 32
    fp32 = model_state_bytes(params, zero=1, dp=4, grad_bytes=4.0)["gradients"]
    bf16 = model_state_bytes(params, zero=1, dp=4, grad_bytes=2.0)["gradients"]
    assert (fp32 - bf16) / 2**30 == pytest.approx(23.62, abs=0.01)

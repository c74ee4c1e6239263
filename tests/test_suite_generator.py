"""The validation-suite generator's inferences (benchmarks/suite_sources.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import suite_sources  # noqa: E402  (benchmarks/ is a script folder, not a package)


@pytest.mark.parametrize(("row", "ep"), [
    # The AutoModel rows that print EP, as transcribed: ep = min(GPUs / pp, 64).
    ({"gpus": 8, "pp": 1, "kernels": "TE + DeepEP"}, 8),  # Qwen3 MoE 30B: ep 8
    ({"gpus": 256, "pp": 8, "kernels": "TE + DeepEP"}, 32),  # Kimi K2: ep 32
    ({"gpus": 1024, "pp": 4, "kernels": "TE + DeepEP"}, 64),  # DeepSeek V3: ep 64
    ({"gpus": 128, "pp": 1, "kernels": "TE + DeepEP + torch_mm"}, 64),  # Nemotron Ultra
    # GPT-OSS 120B prints none: 64 GPUs, pp 1 -> 64; no DeepEP, no EP to infer.
    ({"gpus": 64, "pp": 1, "kernels": "TE + DeepEP + FlexAttn"}, 64),
    ({"gpus": 64, "pp": 1, "kernels": "TE + fsdp2_prefetch"}, None),
])
def test_automodel_ep_follows_the_rows_that_print_it(row, ep):
    assert suite_sources.automodel_ep(row) == ep

"""The validation-suite generator's inferences (benchmarks/suite_sources.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import suite_sources  # noqa: E402  (benchmarks/ is a script folder, not a package)
import suite_sources_bridge  # noqa: E402


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


def test_gpt_oss_20b_shape_has_the_published_parameter_count():
    # megatron-bridge 0.3.1 GPTOSSProvider20B; the gpt-oss model card: 20.9B parameters.
    from build_validation_suites import EXTRA_SHAPES, model_body  # noqa: E402

    from simtrain.workload.model import ModelConfig, num_parameters
    body, needs = model_body("GPT-OSS-20B", EXTRA_SHAPES["GPT-OSS-20B"], 4096)
    assert not needs and body["sliding_window_pattern"] == 2
    assert num_parameters(ModelConfig(**body)) / 1e9 == pytest.approx(20.9, abs=0.05)


def test_automodel_llama3_70b_needs_its_recompute_to_fit_an_h100():
    # suite_sources.AUTOMODEL_RECOMPUTE: the row runs full recompute because it cannot run
    # without. By hand, the bf16 tensors a Llama 3 70B layer must keep for its backward
    # without recompute are at least (norm out, q, attention out, o-proj in: 4 x 2h; k, v:
    # 2 x 2 x 1,024; w1 out, w3 out, their product: 3 x 2f) = 65,536 + 4,096 + 172,032 =
    # 241,664 B a token; x 4,096 tokens a GPU (8,192 / CP 2) x 80 layers = 79.2e9 B =
    # 73.8 GiB. With the 16 B a parameter of FSDP-sharded weights, fp32 gradients and Adam
    # (70.55e9 x 16 / 64 ranks = 17.6e9 B = 16.4 GiB) that is over 80 GiB; with full
    # recompute only each layer's 2h input stays: 80 x 4,096 x 16,384 B = 5.4e9 B.
    from simtrain.scenario import load_scenario
    from simtrain.simulate import build_cluster, build_plan, memory_report
    from simtrain.validation_suites import row_bodies

    full = load_scenario(next(body for e, body in row_bodies("nemo-automodel-h100")
                              if e["id"] == "llama3-70b-64gpu"))
    assert full.parallelism.recompute == "full"
    none = full.model_copy(update={"parallelism": full.parallelism.model_copy(
        update={"recompute": "none"})})
    gib = 2.0**30
    reports = [memory_report(s, c := build_cluster(s.cluster), build_plan(s, c))
               for s in (none, full)]
    assert reports[0].breakdown["activations"] > 73.8 * gib and not reports[0].fits()
    assert reports[1].fits() and reports[1].breakdown["activations"] < 0.1 * reports[0].total


@pytest.mark.parametrize(("label", "release", "ran"), [
    # 26.02 on prints BF16 / FP8 / MXFP8 / NVFP4, Bridge 0.6.2's four perf precisions
    # (fp8_cs the only FP8 one): its "FP8" is current scaling.
    ("FP8", "26.02", "FP8-CS"), ("FP8", "26.02.01", "FP8-CS"), ("FP8", "26.06", "FP8-CS"),
    # 25.09 prints no label (FP8, recipe unstated) and 25.11 prints FP8-CS / FP8-MX itself.
    ("FP8", "25.09", "FP8"), ("FP8-CS", "25.11", "FP8-CS"), ("FP8-MX", "25.11", "FP8-MX"),
    ("MXFP8", "26.04", "MXFP8"), ("BF16", "26.06", "BF16"),
])
def test_bridge_fp8_label_from_26_02_is_current_scaling(label, release, ran):
    assert suite_sources_bridge.bridge_run_prec(label, release) == ran

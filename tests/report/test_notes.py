"""Notes that explain HFU above MFU and a selective recompute that saves nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

import simtrain
from simtrain.engine.timeline import Span, Timeline
from simtrain.report.notes import recompute_share, run_notes

ROOT = Path(__file__).resolve().parents[2]


def _timeline() -> Timeline:
    # Two ranks; rank 0 recomputes 1 TFLOP over 2 ms (two overlapping spans: 1.5 ms busy),
    # rank 1 recomputes nothing: means 0.5 TFLOP and 0.75 ms.
    tl = Timeline(num_ranks=2)
    tl.add(Span(0, "compute", "recompute", "a", 0.0, 1e-3, flops=0.5e12))
    tl.add(Span(0, "compute2", "recompute", "b", 0.5e-3, 1.5e-3, flops=0.5e12))
    tl.add(Span(1, "compute", "forward", "f", 0.0, 1e-3, flops=1e12))
    return tl


def test_recompute_share_is_a_rank_mean() -> None:
    flops, busy = recompute_share(_timeline())
    assert flops == pytest.approx(0.5e12) and busy == pytest.approx(0.75e-3)


def test_hfu_note_splits_recompute_from_convention() -> None:
    # 2 GPUs, model 100 TFLOP: recompute 2 x 0.5 = 1 TFLOP = 1%. HFU/MFU = 0.53/0.50 = 1.06:
    # 1% recompute, 5% beyond the convention.
    summary = {"mfu": 0.50, "hfu": 0.53, "model_flops_per_step": 100e12, "num_gpus": 2,
               "step_time_s": 0.01}
    (note,) = run_notes(_timeline(), summary, recompute="none", attention_kernel="flash")
    assert note.startswith("HFU is 3.0 pp above MFU")
    assert "recompute re-runs 1.0% of the model FLOPs" in note
    assert "5.0% more than the model-FLOP convention" in note and "QK^T" in note
    equal = {**summary, "hfu": 0.50}
    assert run_notes(Timeline(num_ranks=1), equal, recompute="none",
                     attention_kernel="flash") == []


def test_selective_with_flash_says_it_saves_nothing() -> None:
    summary = {"mfu": 0.5, "hfu": 0.5, "model_flops_per_step": 1.0, "num_gpus": 2,
               "step_time_s": 0.01}
    (note,) = run_notes(_timeline(), summary, recompute="selective", attention_kernel="flash")
    assert "saves no memory" in note and "0.75 ms per GPU, 7.5% of the step" in note
    assert run_notes(_timeline(), summary, recompute="selective",
                     attention_kernel="standard") == []


def test_quickstart_selective_recompute_costs_time_and_no_memory() -> None:
    # The finding behind the note, end to end: same activation memory, a longer step.
    base = simtrain.simulate(ROOT / "scenarios/quickstart.yaml").summary
    sel = simtrain.simulate(simtrain.load_scenario(
        ROOT / "scenarios/quickstart.yaml", ["parallelism.recompute=selective"])).summary
    assert sel["memory_breakdown"]["activations"] == base["memory_breakdown"]["activations"]
    assert sel["step_time_s"] > base["step_time_s"]
    assert any("Selective recompute saves no memory" in n for n in sel["notes"])
    # No recompute: HFU above MFU only by FlashAttention's backward and the small ops.
    (hfu_note,) = base["notes"]
    assert "recompute re-runs" not in hfu_note and "QK^T" in hfu_note


def test_quickstart_hfu_excess_is_flash_attention_backward_by_hand() -> None:
    # GPT-2 small (h = 768, s = 1024, L = 12, V = 50257). Per layer and token, forward
    # FLOPs in the model convention: GEMMs 24h^2 = 14,155,776, attention 4sh = 3,145,728,
    # logits 2hV/L = 6,432,896; total 23,734,400, and the model counts 3x that. Flash's
    # backward does 2.5x attention instead of 2x: + 0.5 x 3,145,728 = 1,572,864, i.e.
    # 1,572,864 / 71,203,200 = 2.209%. Norms, activations and the loss add a little more.
    s = simtrain.simulate(ROOT / "scenarios/quickstart.yaml").summary
    excess = s["hardware_flops_per_step"] / s["model_flops_per_step"] - 1
    assert 0.02209 < excess < 0.02209 + 0.003

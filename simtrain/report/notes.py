"""Plain-language notes on a run's numbers that would otherwise puzzle a reader.

Two today, both found by asking why a number moved:

- **HFU above MFU without recompute.** MFU's numerator is the model-FLOP convention
  (Megatron-Core: forward + 2x backward of the GEMMs and attention, no recompute). HFU counts
  what the simulated kernels execute, which adds recomputed forwards and FlashAttention's
  backward: it recomputes QK^T, five matmuls against the forward's two, so attention's
  backward is 2.5x its forward where the convention counts 2x (Dao 2023, FlashAttention-2,
  Sec. 3.1). On GPT-2 small at s = 1024 that alone puts HFU 2.4% above MFU.
- **Selective recompute with flash attention.** Selective recompute (Korthikanti et al.
  2022) drops the s x s attention scores and recomputes them in the backward. A fused
  (flash) attention kernel never stores them, so there is nothing to drop: memory is the
  same and the attention forward runs once more per microbatch (as Megatron-Core's
  ``core_attn`` recompute module does with a fused kernel).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simtrain.engine.timeline import SpanKind, Timeline


def recompute_share(timeline: Timeline) -> tuple[float, float]:
    """(recompute FLOPs, recompute busy seconds), each a mean over the timeline's ranks."""
    table = timeline.columns()  # arrays, no span objects (simtrain.engine.spantable)
    is_redo = table.mask((SpanKind.RECOMPUTE,))
    redo = table.unions((SpanKind.RECOMPUTE,))  # every rank at once
    some = [c > 0 for c in redo.counts()]  # ranks that recompute
    flops = [f for f, yes in zip(table.sums(is_redo, "flops"), some, strict=True) if yes]
    busy = [b for b, yes in zip(redo.lengths(), some, strict=True) if yes]
    n = max(len(some), 1)
    return (sum(flops) / n, sum(busy) / n)


def run_notes(timeline: Timeline, summary: Mapping[str, Any], *, recompute: str,
              attention_kernel: str) -> list[str]:
    """The notes for one run (see the module docstring); empty when nothing needs one."""
    notes: list[str] = []
    mfu, hfu = float(summary.get("mfu", 0.0)), float(summary.get("hfu", 0.0))
    model = float(summary.get("model_flops_per_step", 0.0))
    gpus = int(summary.get("num_gpus", 1))
    step = float(summary.get("step_time_s", 0.0))
    redo_flops, redo_s = recompute_share(timeline)
    if mfu > 0 and model > 0 and hfu > mfu * 1.001:
        redo = redo_flops * gpus / model  # share of the model FLOPs run again
        rest = hfu / mfu - 1.0 - redo
        parts = []
        if redo > 0.0005:
            parts.append(f"recompute re-runs {redo:.1%} of the model FLOPs")
        if rest > 0.0005:
            why = ("FlashAttention's backward recomputes QK^T, 2.5x its forward where the "
                   "convention counts 2x; norms, activations and the loss are not in it "
                   "either") if attention_kernel == "flash" else (
                   "softmax, norms, activations and the loss are not in it")
            parts.append(f"the kernels do {rest:.1%} more than the model-FLOP convention "
                         f"counts ({why})")
        notes.append(f"HFU is {(hfu - mfu) * 100:.1f} pp above MFU: HFU counts the FLOPs the "
                     f"kernels execute, MFU the model's; " + "; ".join(parts) + ".")
    if recompute == "selective" and attention_kernel == "flash":
        cost = f" ({redo_s * 1e3:.2f} ms per GPU, {redo_s / step:.1%} of the step)" \
            if step > 0 and redo_s > 0 else ""
        notes.append("Selective recompute saves no memory here: flash attention never stores "
                     "the s x s attention scores that selective recompute drops, yet the "
                     f"attention forward runs again in the backward{cost}. Use recompute: "
                     "none, or full to save activation memory.")
    return notes

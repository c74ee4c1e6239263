"""The Megatron Bridge performance summary as a suite: its rows' precisions, fused loss,
MoE-module recompute and gradient settings, read from megatron_bridge's recipes.

Used by build_validation_suites.py (split from suite_sources.py, which holds the shared
row builder).
"""

from __future__ import annotations

from typing import Any

from suite_sources import (
    MEGATRON_CHOICES_BF16,
    Shapes,
    SuiteSpec,
    make_row,
    slug,
    unique,
    variants,
)

# From 26.02 the Bridge tables print four labels, BF16, FP8, MXFP8, NVFP4 (25.11: FP8-CS,
# FP8-MX), the four of megatron_bridge 0.6.2's ``perf_recipes/_common.py`` ``_perf_precision``
# (bf16, fp8_cs, fp8_mx, nvfp4; all 85 FP8 recipes are fp8_cs): "FP8" is current scaling.
BRIDGE_FP8_IS_CS_FROM = (26, 2)


def bridge_run_prec(label: str, release: str) -> str:
    """The precision a Bridge row ran, from its printed label and release (ids keep it)."""
    if label == "FP8" and tuple(int(x) for x in release.split(".")[:2]) >= BRIDGE_FP8_IS_CS_FROM:
        return "FP8-CS"
    return label


def _bridge_prec(cfg: dict[str, Any], alt: bool) -> str:
    prec = cfg.get("prec")
    if prec is not None:
        return str(prec)
    # 25.09 prints no precision: FP8; the parenthesised run uses another granularity
    # (H100: 128x128 weight / 1x128 activation blocks; Blackwell: 32-element MX blocks).
    if not alt:
        return "FP8"
    return "fp8 blockwise" if cfg["sys"] == "DGX-H100" else "MXFP8"


def megatron_bridge(source: dict[str, Any], shapes: Shapes) -> list[dict[str, Any]]:
    rows = []
    for r, variant, cfg in variants(source["rows"]):
        prec = _bridge_prec(cfg, bool(variant))
        needs, training, extra = [], {}, {}
        if cfg.get("task") == "lora":  # 26.06 LoRA rows: frozen base weights, no wgrad
            training["finetune"] = "lora"
            needs.append("LoRA fine-tuning (frozen base weights)")
        if "Kimi" in cfg["model"]:
            training["optimizer"] = "muon"
            needs.append("Muon optimizer")
        if "w/ MTP" in cfg["model"]:
            extra["mtp_layers"] = 1
            needs.append("multi-token prediction")
        tag = "superseded" if r.get("superseded") else ""
        rows.append(make_row(
            rid=slug(cfg["rel"], cfg["sys"].replace("DGX-", ""), cfg["model"], prec,
                     f"{cfg['gpus']}gpu", variant, tag),
            src=r if not variant else {"alt_of": slug(r["rel"], r["sys"], r["model"]),
                                       **r["alt"]},
            published={"tokens_per_s_per_gpu": cfg["tok_s_gpu"]}, model=cfg["model"],
            shapes=shapes, seq=cfg["seq"], system=cfg["sys"], gpus=cfg["gpus"],
            gbs=cfg["gbs"], mbs=cfg["mbs"], tp=cfg["tp"], pp=cfg["pp"], cp=cfg["cp"],
            vp=cfg.get("vp"), ep=cfg.get("ep"), fsdp=bool(cfg.get("fsdp")),
            prec=bridge_run_prec(prec, str(cfg["rel"])),
            training=training, model_extra=extra, needs=needs,
            par={**BRIDGE_DDP, **bridge_recompute(cfg, prec)},
            compute={"cross_entropy": bridge_loss(cfg)}))
        if rows[-1]["scenario"]["model"].get("num_experts"):
            rows[-1]["scenario"]["model"]["expert_gemm"] = BRIDGE_EXPERT_GEMM
    return unique(rows)


# Megatron Bridge's MoE recipes build Megatron-Core's Transformer Engine spec, whose experts
# are TEGroupedMLP (``moe_grouped_gemm = True``; megatron-core 0.16.1 ``transformer/moe/
# experts.py``): TE's GroupedLinear, one cuBLAS GEMM per local expert
# (``simtrain.workload.layers.expert_launches``).
BRIDGE_EXPERT_GEMM = "per-expert"


def bridge_loss(cfg: dict[str, Any]) -> str:
    """A Megatron Bridge row's cross-entropy kernels, from megatron_bridge 0.3.1's recipes:
    every pretrain recipe sets ``cross_entropy_loss_fusion = True``, with
    ``cross_entropy_fusion_impl = "te"`` (llama3.py, qwen3.py, qwen3_moe.py, deepseek_v3.py,
    kimi_k2.py) or "native" (gpt_oss.py: "GPT-OSS uses native"; nemotronh.py); the LoRA
    recipes (``*_peft_config``) set it False."""
    if cfg.get("task") == "lora":
        return "unfused"
    return "native" if cfg["model"].startswith(("GPT OSS", "Nemotron")) else "te"


# megatron-bridge 0.6.2 (pip wheel), megatron/bridge/perf_recipes/gpt_oss/{gb200,b200,h100}/
# gpt_oss.py, gpt_oss_120b_pretrain_64gpu_<sys>_bf16_config: recompute_granularity
# "selective" with recompute_modules ["layernorm", "moe_act"] (core_attn not listed, so
# attention is not recomputed); (ep, pp, mbs, gbs) of each recipe. The GB300 and B300 BF16
# recipes recompute nothing, and rows of another layout ran another recipe (not published).
GPT_OSS_BF16_RECOMPUTE = {"DGX-GB200": (64, 1, 4, 1280), "DGX-B200": (8, 1, 4, 1280),
                          "DGX-H100": (8, 4, 1, 1280)}


def bridge_recompute(cfg: dict[str, Any], prec: str) -> dict[str, Any]:
    """The recipe's MoE-module recompute for a Megatron Bridge row (empty if none)."""
    layout = (cfg.get("ep"), cfg["pp"], cfg["mbs"], cfg["gbs"])
    if (cfg["model"] == "GPT OSS 120B" and prec == "BF16"
            and GPT_OSS_BF16_RECOMPUTE.get(cfg["sys"]) == layout):
        return {"recompute_modules": ["layernorm", "moe_act"]}
    return {}


# Bridge's benchmark runs reduce gradients in bf16 without the NaN check: megatron_bridge
# 0.6.2 ``perf_recipes/_common.py`` ``_benchmark_common`` (grad_reduce_in_fp32 False,
# check_for_nan_in_grad False), as NeMo 2.2-2.4's performance scripts (NEMO2_BASE).
BRIDGE_DDP: dict[str, Any] = {"ddp": {"check_for_nan_in_grad": False, "grad_dtype": "bf16"}}


SPECS_BRIDGE = [
    SuiteSpec("megatron-bridge", "megatron_bridge_perf_summary", "", megatron_bridge,
              choices=MEGATRON_CHOICES_BF16 + [
                  "Compared in tokens/s/GPU (the published TFLOP/s count causal attention).",
                  "FP8 from 26.02 is current scaling (Bridge 0.6.2's perf precisions).",
                  "25.09 rows print no precision: FP8, their parenthesised run a finer",
                  "granularity (H100 blockwise, Blackwell MXFP8); alt runs are rows ...-alt;",
                  "superseded rows (published, later replaced) are kept as ...-superseded.",
                  "tokendrop rows: capacity_factor 1.0; dropless otherwise.",
                  "Gradients in bf16, no NaN check (Bridge 0.6.2's _benchmark_common).",
                  "The loss runs the recipe's fused cross-entropy (compute.cross_entropy:",
                  "te, native for GPT-OSS and Nemotron-H, unfused for LoRA; 0.3.1 recipes)."]),
]

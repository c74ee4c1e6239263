"""Write scenarios/validation/<suite>.yaml, one file per source of measured_runs.yaml.

Usage: python benchmarks/build_validation_suites.py [--reference ../shared/reference]

Every row of every source becomes a suite row with its real configuration: the model shape
inline (from the file's model_shapes), GPUs, global and micro batch, sequence, tp/pp/cp/vp/
ep/dp/FSDP, precision, and the system as a cluster preset. A row whose configuration uses
something simtrain lacks lists it under ``needs`` and is written as it *would* be expressed
(``training: {dtype: fp8}``, ``cluster: {preset: gb200-nvl72}``, ``model: {attention:
mla}``): ``simtrain validate`` reports it as "not expressible: ..." until the feature
exists, then compares it with no edit. The choices this script makes where a source is
silent are written into each file's header. Run it again after editing the mapping; the
output is deterministic. Tests and ``simtrain validate`` read only the files it writes.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from simtrain.workload.fp8 import FP8_RECIPES

OUT = Path(__file__).resolve().parent.parent / "scenarios" / "validation"
REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"


# --- models -------------------------------------------------------------------------------

# Row model names -> model_shapes keys (None: the source gives no shape).
MODEL_ALIASES: dict[str, str | None] = {
    "gpt3-5b": "GPT3-5B", "gpt3-20b": "GPT3-20B", "gpt3-175b": "GPT3-175B",
    "llama2-7b": "LLAMA2-7B", "llama2-13b": "LLAMA2-13B", "llama2-70b": "LLAMA2-70B",
    "llama 2 13b": "LLAMA2-13B", "llama 2 70b": "LLAMA2-70B",
    "llama3-8b": "LLAMA3-8B", "llama3_8b": "LLAMA3-8B", "llama3 8b": "LLAMA3-8B",
    "llama 3 8b": "LLAMA3-8B", "llama 3.1 8b": "LLAMA3-8B",
    "llama3-70b": "LLAMA3-70B", "llama3_70b": "LLAMA3-70B", "llama3 70b": "LLAMA3-70B",
    "llama 3 70b": "LLAMA3-70B", "llama 3.1 70b": "LLAMA3-70B",
    "llama3-405b": "LLAMA3.1-405B", "llama3.1-405b": "LLAMA3.1-405B",
    "llama3.1_405b": "LLAMA3.1-405B", "llama 3.1 405b": "LLAMA3.1-405B",
    "nemotron-8b": "Nemotron-8B", "nemotron-22b": "Nemotron-22B",
    "nemotron-15b": "Nemotron-15B", "nemotron-340b": "Nemotron-340B",
    "mixtral-8x7b": "Mixtral-8x7B", "mixtral 8x7b": "Mixtral-8x7B",
    "mixtral-8x22b": "Mixtral-8x22B",
    "deepseekv3": "DeepSeek-V3", "deepseek v3 671b": "DeepSeek-V3",
    "deepseek-v3 671b (37b active)": "DeepSeek-V3", "deepseekv2": "DeepSeek-V2",
    "qwen3_30b_a3b": "Qwen3-30B-A3B", "qwen3 moe 30b": "Qwen3-30B-A3B",
    "qwen3_235b_a22b": "Qwen3-235B-A22B",
    "gpt oss 120b": "GPT-OSS-120B", "gpt-oss 120b": "GPT-OSS-120B",
    "gpt-oss 20b": "GPT-OSS-20B",
    "llama4-scout-llm": "LLAMA4-Scout", "llama4 scout": "LLAMA4-Scout",
}
# Vocabularies the shapes do not list (model_shapes notes: from the tokenizer).
VOCAB = {"GPT3": 50257, "LLAMA2": 32000, "LLAMA3": 128256, "Nemotron": 256000,
         "Mixtral-8x7B": 32000, "Mixtral-8x22B": 32768, "DeepSeek": 129280}


# Shapes model_shapes does not list. GPT-OSS 20B: megatron-bridge 0.3.1 (pip wheel),
# megatron/bridge/models/gpt_oss/gpt_oss_provider.py: GPTOSSProvider20B num_layers 24,
# num_moe_experts 32 over GPTOSSProvider's hidden 2880, 64 heads, 8 query groups,
# kv_channels 64, ffn and moe_ffn 2880, top 4, vocab 201088, window (128, 0) with
# window_attn_skip_freq 2, as GPT-OSS-120B's entry writes them.
EXTRA_SHAPES: dict[str, dict[str, Any]] = {
    "GPT-OSS-20B": {"layers": 24, "hidden": 2880, "heads": 64, "kv_heads": 8,
                    "head_dim": 64, "experts": 32, "topk": 4, "moe_ffn": 2880,
                    "vocab": 201088,
                    "attention": "sliding window 128 on alternate layers"}}


# MLA head widths model_shapes does not list. DeepSeek-V2 (arXiv:2405.04434, Sec. 3.1.1):
# "the per-head dimension d_h to 128 ... the per-head dimension d_h^R to 64"; values are
# d_h wide (v_head_dim 128), as in its config.json.
MLA_HEAD_DIMS: dict[str, dict[str, int]] = {
    "DeepSeek-V2": {"qk_head_dim": 128, "qk_rope_dim": 64, "v_head_dim": 128}}


def shape_key(name: str) -> str | None:
    """The model_shapes key of a row's model name (variants like '(tokendrop)' stripped)."""
    base = re.sub(r"\s*\((tokendrop|dropless|w/o MTP|w/ MTP)\)\s*$", "", name.strip())
    return MODEL_ALIASES.get(base.lower())


def _vocab(key: str, shape: dict[str, Any]) -> int:
    if "vocab" in shape:
        return int(shape["vocab"])
    for prefix, vocab in VOCAB.items():
        if key.startswith(prefix):
            return vocab
    raise KeyError(f"no vocabulary for {key}")


def model_body(key: str, shape: dict[str, Any], seq: int, *, layers: int | None = None,
               kv_heads: int | None = None, tokendrop: bool = False
               ) -> tuple[dict[str, Any], list[str]]:
    """(model section, needs) of a model_shapes entry; unsupported parts become fields
    simtrain rejects (so the row says what it needs) plus a needs label each."""
    needs: list[str] = []
    # Every MoE model here has gated (SwiGLU) experts, GPT-OSS included: its published
    # 116.8B parameters need 3·h·f per expert (OpenAI gpt-oss model card, 2025; NeMo
    # gpt_oss.py gated_linear_unit=True), as simtrain's gpt-oss-120b preset checks.
    gated = bool(shape.get("gated")) or "experts" in shape
    body: dict[str, Any] = {
        "name": key, "family": "gpt" if key.startswith("GPT3") else "llama",
        "num_layers": layers or shape["layers"], "hidden_size": shape["hidden"],
        "num_heads": shape["heads"], "vocab_size": _vocab(key, shape),
        "max_seq_len": max(seq, 4096)}
    if not key.startswith("GPT3"):
        body["activation"] = "swiglu" if gated else "gelu"
    kv = kv_heads or shape.get("kv_heads")
    if kv:
        body["num_kv_heads"] = kv
    if "ffn" in shape:
        body["ffn_hidden_size"] = shape["ffn"]
    if key.startswith("Qwen3"):  # QK-norm (arXiv:2505.09388 Sec. 2; Bridge qk_layernorm)
        body["qk_norm"] = True
    if key.startswith("GPT-OSS"):
        body["bias"] = True  # biases in attention and experts (the model card; NeMo)
        # GLU inputs clamped at 7 (the model card; Megatron Bridge GPTOSSProvider
        # activation_func_clamp_value = 7.0)
        body["activation_clamp"] = 7.0
    if "experts" in shape:
        body.update(num_experts=shape["experts"], experts_per_token=shape["topk"])
        if "moe_ffn" in shape:
            body["moe_ffn_hidden_size"] = shape["moe_ffn"]
            body.setdefault("ffn_hidden_size", shape.get("dense_ffn", shape["moe_ffn"]))
        if tokendrop:
            body["capacity_factor"] = 1.0
    if "head_dim" in shape and shape["head_dim"] * shape["heads"] != shape["hidden"]:
        body["head_dim"] = shape["head_dim"]
    if "kv_lora_rank" in shape:
        body["attention"] = "mla"
        dims = {**MLA_HEAD_DIMS.get(key, {}), **shape}
        body.update({k: dims[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_head_dim",
                                          "qk_rope_dim", "v_head_dim") if k in dims})
    if shape.get("dense_layers"):
        body["dense_layers"] = shape["dense_layers"]
        body["ffn_hidden_size"] = shape["dense_ffn"]
    if shape.get("shared_expert_ffn"):
        body["shared_expert_ffn_size"] = shape["shared_expert_ffn"]
    if "attention" in shape and "sliding" in str(shape["attention"]):
        body["sliding_window"] = 128
        if "alternate" in str(shape["attention"]):  # window_attn_skip_freq 2: every 2nd full
            body["sliding_window_pattern"] = 2
    return body, needs


def unknown_model(name: str) -> tuple[dict[str, Any], list[str]]:
    """A model the source gives no shape for: a preset simtrain does not have."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return {"preset": slug}, [f"model shape of {name} (not given in the source)"]


# --- precision and systems ----------------------------------------------------------------

def precision(prec: str | None) -> tuple[dict[str, Any], list[str]]:
    """(training overlay, needs) of a precision label as the sources print it."""
    p = (prec or "bf16").strip().lower()
    if p in ("bf16", "bfloat16", "none (bfloat16)"):
        return {}, []
    if p in ("nvfp4",):
        return {"dtype": "fp4"}, ["NVFP4 training"]
    # "FP8-CS" is per-tensor current scaling (Megatron Bridge 25.11 legend, measured_runs
    # precision_25_11: "FP8-CS = FP8 current scaling"; NeMo 25.04/25.07 "FP8 with per-tensor
    # current-step scaling"): TE Float8CurrentScaling, simtrain recipe ``current``. A bare
    # "FP8" states no recipe and keeps the default (delayed).
    recipes = {"mxfp8": "mxfp8", "fp8-mx": "mxfp8", "mxfp8_cublas": "mxfp8",
               "mxfp8_cublas_rceil": "mxfp8", "fp8-cs": "current",
               "float8 rowwise": "rowwise", "fp8 blockwise": "blockwise"}
    for label, recipe in recipes.items():
        if p == label:  # simtrain models FP8_RECIPES (workload/fp8.py); no label for those
            needs = [] if recipe in FP8_RECIPES else [f"FP8 training ({recipe})"]
            return {"dtype": "fp8", "fp8": {"recipe": recipe}}, needs
    if p.startswith(("fp8", "float8")):
        return {"dtype": "fp8"}, []
    raise KeyError(f"unknown precision {prec!r}")


# System name -> (cluster preset, GPUs per node, needs label or "").
SYSTEMS: dict[str, tuple[str, int, str]] = {
    "DGX-H100": ("dgx-h100", 8, ""),
    "DGX-H200": ("dgx-h200", 8, ""),
    "DGX-A100": ("dgx-a100", 8, ""),
    "DGX-B200": ("dgx-b200", 8, ""),
    "DGX-B300": ("dgx-b300", 8, ""),
    # GB200/GB300 NVL72: a node is a rack, one NVLink domain of 72 GPUs (18 trays of 4).
    # A job of up to 72 GPUs sits in one rack; larger (power-of-two) jobs use 64 GPUs,
    # 16 trays, per rack: the largest power of two a rack holds (not stated by sources).
    "DGX-GB200": ("gb200-nvl72", 64, ""),
    "DGX-GB300": ("gb300-nvl72", 64, ""),
}
RACK = 72


def cluster(system: str, gpus: int, gpu: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """(cluster section, needs) for ``gpus`` GPUs of ``system``."""
    preset, per_node, need = SYSTEMS[system]
    body: dict[str, Any] = {"preset": preset}
    if preset.endswith("nvl72") and gpus > RACK:
        body.update(nodes=gpus // per_node, gpus_per_node=per_node)
    elif gpus < per_node or preset.endswith("nvl72"):
        body.update(nodes=1, gpus_per_node=gpus)
    else:
        body["nodes"] = gpus // per_node
    if gpu:
        body["gpu"] = gpu
    return body, [need] if need else []


# --- parallelism --------------------------------------------------------------------------

def parallelism(tp: int, pp: int, cp: int, dp: int, *, vp: int | None = None, ep: int | None = None,
                fsdp: bool = False, sp: bool | None = None, num_layers: int | None = None
                ) -> dict[str, Any]:
    """The parallelism section: vp > 1 is the interleaved schedule; FSDP is zero 3 over dp;
    sequence parallelism with every tp > 1 (NeMo/Megatron/torchtitan default); etp 1 where
    ep exceeds cp x dp; uneven model chunks lighter at both ends (``interleaved_layers``)."""
    body: dict[str, Any] = {"tp": tp, "pp": pp, "cp": cp, "dp": dp, "sp": tp > 1 if sp is None
                            else sp}
    if ep and ep > 1:
        body["ep"] = ep
        if (cp * dp) % ep and (tp * cp * dp) % ep == 0:
            # EP larger than cp x dp only fits by folding the TP ranks into EP: expert
            # tensor parallelism 1 (Megatron-Core MoE parallel folding; the sources do
            # not print ETP, and their MoE recipes set expert_tensor_parallel_size 1).
            body["etp"] = 1
    if vp and vp > 1:
        body.update(vpp=vp, schedule="interleaved")
    if fsdp:
        body["zero"] = 3
        body["ddp"] = {"overlap_param_gather": False}
    if num_layers and pp > 1 and num_layers % (pp * (vp or 1)) and (vp or 1) == 1:
        base, extra = divmod(num_layers, pp)
        body["pp_layers"] = [base + (1 if i < extra else 0) for i in range(pp)]
    elif num_layers and pp > 1 and vp and num_layers % (pp * vp):
        body["pp_layers"] = interleaved_layers(num_layers, pp * vp)
    if tp == 1:
        body["tp_comm_overlap"] = False
    return body


def interleaved_layers(layers: int, chunks: int) -> list[int]:
    """Layers per model chunk when ``chunks`` does not divide them: every chunk takes
    ceil(layers/chunks) but the first and last chunks (then the second and second-to-last,
    ...) take one fewer until the count adds up, as Megatron-Core's
    account_for_embedding/loss_in_pipeline_split lighten the chunks holding the embedding
    and the loss (Qwen3-235B, 94 layers in 48 chunks: 1, 2, ..., 2, 1)."""
    per = -(-layers // chunks)
    counts = [per] * chunks
    order = [i for pair in zip(range(chunks), reversed(range(chunks)), strict=True)
             for i in pair]
    for i in dict.fromkeys(order).keys():
        if sum(counts) == layers:
            break
        counts[i] -= 1
    return counts


def flow(value: Any) -> str:
    """``value`` as one-line YAML flow style."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-/ ]*", text) and text.lower() not in (
            "yes", "no", "on", "off", "true", "false", "null") and not text.endswith(" "):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_suite(spec: Any, rows: list[dict[str, Any]], directory: Path) -> Path:
    """Write one suite file: header comments, suite, flops, base, rows (one flow line each)."""
    lines = [f"# {line}" if line else "#" for line in spec.header]
    lines += [f"suite: {spec.name}", f"flops: {spec.flops or 'none'}", "base:"]
    for key, value in spec.base.items():
        lines.append(f"  {key}: {flow(value)}")
    lines.append("rows:")
    for row in rows:
        lines.append(f"  # {flow(row['source'])}")
        lines.append(f"  - id: {flow(row['id'])}")
        lines.append(f"    published: {flow(row['published'])}")
        if row.get("needs"):
            lines.append(f"    needs: {flow(row['needs'])}")
        lines.append(f"    scenario: {flow(row['scenario'])}")
    path = directory / f"{spec.name}.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _problem(base: dict[str, Any], row: dict[str, Any]) -> str:
    """simtrain's validation error for the row's scenario ("" if it validates)."""
    from simtrain.errors import ScenarioError
    from simtrain.scenario import load_scenario
    from simtrain.validation_suites import merge

    try:
        load_scenario(merge(base, row["scenario"]))
    except ScenarioError as exc:
        return f"{exc.field}: {exc.message}"
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, default=REFERENCE)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    from suite_sources import SPECS_MEGATRON  # benchmarks/ is the script's folder
    from suite_sources_bridge import SPECS_BRIDGE
    from suite_sources_other import SPECS_OTHER

    data = YAML(typ="safe").load((args.reference / "measured_runs.yaml").read_text())
    shapes = {k.split(" (")[0]: v for k, v in data["model_shapes"]["models"].items()}
    shapes = {**EXTRA_SHAPES, **shapes}
    by_name = {s["suite"]: s for s in data["suites"]}
    for spec in [*SPECS_MEGATRON, *SPECS_BRIDGE, *SPECS_OTHER]:
        source = by_name[spec.source]
        rows = spec.rows(source, shapes)
        for row in rows:
            problem = _problem(spec.base, row)
            if problem and not row["needs"]:
                print(f"  {spec.name}/{row['id']}: does not validate: {problem}")
        ids = [r["id"] for r in rows]
        assert len(ids) == len(set(ids)), f"duplicate ids in {spec.name}"
        path = write_suite(spec, rows, args.out)
        print(f"{path}: {len(rows)} rows")


if __name__ == "__main__":
    main()

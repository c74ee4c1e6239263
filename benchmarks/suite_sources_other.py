"""SuiteSpecs of the torchtitan, SimuMax and DeepSeek-V3 sources (see suite_sources.py)."""

from __future__ import annotations

from typing import Any

from suite_sources import ORDER, Shapes, SuiteSpec, make_row, slug, unique

# torchtitan's Grand Teton H100: 96 GB HBM2e at 2.4 TB/s, 500 W (not the 80 GB SXM5 part).
GRAND_TETON_GPU = "h100-96gb-hbm2e-500w"
# In the catalogue since 1 Dec 2026 (simtrain/hardware/gpus.py), so no longer a need.
TITAN_CHOICES = [
    "Not stated, chosen: FSDP2 is zero 3 over the data-parallel group; global batch = local",
    "batch x FSDP degree where not stated; with PP the local batch splits into pp",
    "microbatches (torchtitan's default count); selective (op) AC is recompute: op",
    "(torchtitan's per-op policy: every second mm recomputed, SDPA saved), full AC full;",
    "TP is sequence parallel; AsyncTP is tp_comm_overlap with PyTorch's symmetric-memory",
    "pipeline (tp_comm_overlap_impl symm_mem: only the matmuls inductor fuses); rows",
    "stated without torch.compile run model.elementwise eager (RMSNorm, RoPE, SwiGLU as",
    "aten ops), the others simtrain's fused kernels; Float8 is training.dtype fp8 with recipe",
    "current (tensorwise dynamic scaling, torchao's default); attention is PyTorch SDPA's",
    "FlashAttention-2 (compute.attention_impl fa2) on H100/H200/A100; sim.granularity layer;",
    "FSDP2's copy-out after each all-gather and gradient copy-in before each reduce-scatter",
    "run on the compute stream (parallelism.fsdp.copies, torch fully_shard); activations are",
    "batch-first (model.layout bsh: copies around SP collectives, simtrain/parallel/sp_layout.py).",
    "With PP, blocks are not resharded after forward and gradients are reduce-scattered once,",
    "after each stage's last backward (torchtitan's default reshard policy, torch pipelining).",
    "torchtitan's linears are separate nn.Linear GEMMs (wq, wk, wv; w1, w3: compute.linears",
    "separate, simtrain/workload/linears.py); up to torchtitan 0.2.0 (Oct 2025) GQA models copy",
    "K and V out to every query head before SDPA (repeat_kv: model.gqa repeat).",
]
# Fused attention torchtitan runs: PyTorch SDPA's flash backend, FlashAttention-2
# (simtrain/workload/attention_impl.py), on Hopper and Ampere; on Blackwell it puts SDPA's
# cuDNN backend first (torchtitan 0.1.0 models/attention.py, "Add CuDNN on B200 w/ highest
# priority"), attention_impl cudnn in the B200 MXFP8 rows (torchtitan_mxfp8).
FA2_GPUS = ("h100", "h200", "a100")
# torchtitan's device mesh is (pp, dp, cp, tp): pipeline outermost, as ORDER.
# torchtitan shards with FSDP2 (fully_shard): its per-parameter copy-out and copy-in kernels
# run on the compute stream (simtrain/parallel/fsdp.py, ``copies``).
# Its Llama keeps activations [b, s, h] and shards the sequence on dim 1 (model.layout bsh).
# Its async TP is PyTorch's (torch.compile's micro-pipeline pass over symmetric memory,
# ``tp_comm_overlap_impl: symm_mem``: simtrain/parallel/tensor.py).
# Its Llama (torchtitan/models/llama3/model/model.py, 0.1.0 and 0.2.0 wheels; the Dec 2024
# torchtitan/models/llama/model.py the same) runs Attention's wq, wk, wv and FeedForward's
# w1, w3 as separate nn.Linear GEMMs (compute.linears: separate, simtrain/workload/linears.py).
TITAN_BASE: dict[str, Any] = {"model": {"layout": "bsh"},
                              "parallelism": {"order": ORDER,
                                              "ddp": {"overlap_param_gather": False},
                                              "fsdp": {"copies": True},
                                              "tp_comm_overlap_impl": "symm_mem"},
                              "compute": {"linears": "separate"},
                              "sim": {"granularity": "layer"}}
# Up to 0.2.0 (built 18 Oct 2025) Attention.forward expands K and V to every query head
# with repeat_kv before SDPA (llama3 in 0.1.0 and 0.2.0, llama4 in 0.1.0 experiments/ and
# 0.2.0 models/); 0.3.0's GQAttention passes enable_gqa instead (models/common/attention.py).
# Every GQA suite here ran before 0.3.0 (Aug 2024 to torchtitan 6fc499f6, Aug 2025); the
# DeepSeek-V3 suite (MLA, no KV heads to repeat) keeps TITAN_BASE.
TITAN_GQA_BASE: dict[str, Any] = {**TITAN_BASE, "model": {"layout": "bsh", "gqa": "repeat"}}
# With PP, torchtitan's apply_fsdp ("default" reshard policy) keeps each block unsharded
# after forward ("to avoid per-microbatch all-gathers"; read in the torchtitan 0.1.0
# wheel, models/llama3/infra/parallelize.py), and torch.distributed.pipelining turns
# FSDP2's gradient sync off until each stage's last backward (one reduce-scatter per unit
# and step; simtrain/parallel/fsdp.py sync_each_microbatch).
PIPE_FSDP = {"reshard_after_forward": False, "sync_each_microbatch": False}
# torchtitan's "selective" AC of its Llama 3 configs is the op policy (llama3_8b.toml:
# mode = 'selective', selective_ac_option = 'op'; the MXFP8 doc says "per-op SAC").
AC = {"selective": "op", "selective op": "op", "per-op sac": "op",
      "full": "full", "none": "none", "disabled": "none"}


def _compiled(techniques: str) -> dict[str, Any]:
    """The model overlay of a row run with or without torch.compile (stated per row in the
    2024-12 tables): without it, norms, RoPE and SwiGLU run as eager aten ops."""
    return {} if "torch.compile" in techniques else {"elementwise": "eager"}


def _stack(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with torchtitan's software stack: torchao's tensorwise dynamic Float8
    (``Float8LinearConfig`` default: each cast scaled by its tensor's current amax, the
    FP8 ``current`` recipe) and SDPA's FlashAttention-2 on the GPUs it has a figure for."""
    sc = row["scenario"]
    tr = sc["training"]
    if tr.get("dtype") == "fp8" and "fp8" not in tr:
        tr["fp8"] = {"recipe": "current"}
    if str(sc["cluster"].get("gpu") or sc["cluster"]["preset"]).startswith(
            ("dgx-h100", "dgx-h200", "dgx-a100", *FA2_GPUS)):
        sc["compute"] = {"attention_impl": "fa2"}
    return row


def _ac(ac: str) -> tuple[dict[str, Any], list[str]]:
    key = ac.strip().lower()
    if key in AC:
        return {"recompute": AC[key]}, []
    return {"recompute": "selective-layer"}, ["layer-wise selective activation checkpointing"]


def _titan_prec(text: str) -> str | None:
    t = text.lower()
    if "float8" in t:
        return "float8 rowwise" if "rowwise" in t else "float8"
    return None


def torchtitan_2024_12(source: dict[str, Any], shapes: Shapes) -> list[dict[str, Any]]:
    rows = []
    for r in source["rows"]:
        seq = r.get("seq") or r["seq_inf"]
        fsdp, tp, pp, cp = r["fsdp"], r.get("tp", 1), r.get("pp", 1), r.get("cp", 1)
        gbs = r.get("gbs") or r["lbs"] * fsdp
        mbs = r["lbs"] // pp if pp > 1 else r["lbs"]
        par, needs = _ac(r["ac"])
        if "AsyncTP" in r["techniques"]:
            par["tp_comm_overlap"] = True
        vp = 2 if r.get("pp_schedule") == "Interleaved 1F1B" else None
        if pp > 1:  # torchtitan's apply_fsdp "default" policy and torch pipelining (PIPE_FSDP)
            par["fsdp"] = PIPE_FSDP
        rows.append(_stack(make_row(
            rid=slug(f"t{r['table']}", r["model"], f"{r['gpus']}gpu", r["techniques"],
                     f"seq{seq // 1024}k"), src=r,
            published={"tokens_per_s_per_gpu": r["tok_s_gpu"]}, model=r["model"],
            shapes=shapes, seq=seq, system="DGX-H100", gpus=r["gpus"], gbs=gbs, mbs=mbs,
            tp=tp, pp=pp, cp=cp, vp=vp, dp=fsdp, fsdp=True, prec=_titan_prec(r["techniques"]),
            gpu=GRAND_TETON_GPU, par=par, needs=needs, model_extra=_compiled(r["techniques"]))))
    return unique(rows)


def torchtitan_async_tp(source: dict[str, Any], shapes: Shapes) -> list[dict[str, Any]]:
    rows = []
    for r in source["rows"]:
        for mode, overlap in (("vanilla_tp", False), ("async_tp", True)):
            par, needs = _ac(r["ac"])
            par["tp_comm_overlap"] = overlap
            rows.append(_stack(make_row(
                rid=slug(r["model"], r["prec"], mode.replace("_", "-")), src=r,
                published={"tokens_per_s_per_gpu": r[f"tok_s_{mode}"]}, model=r["model"],
                shapes=shapes, seq=r["seq_inf"], system="DGX-H100", gpus=r["gpus"],
                gbs=r["lbs"] * r["fsdp"], mbs=r["lbs"], tp=r["tp"], dp=r["fsdp"], fsdp=True,
                prec=_titan_prec(r["prec"]), gpu=GRAND_TETON_GPU, par=par,
                needs=needs)))
    return unique(rows)


def torchtitan_h200(source: dict[str, Any], shapes: Shapes) -> list[dict[str, Any]]:
    return unique([_stack(make_row(
        rid=slug("llama3.1-8b", f"{r['gpus']}gpu"), src=r,
        published={"tokens_per_s_per_gpu": r["tok_s_gpu"]}, model="Llama 3.1 8B",
        shapes=shapes, seq=8192, system="DGX-H200", gpus=r["gpus"], gbs=r["gbs_inf"],
        mbs=r["lbs"], dp=r["gpus"], fsdp=True, prec="float8", par={"recompute": "op"}))
        for r in source["rows"]])


def torchtitan_docs(source: dict[str, Any], shapes: Shapes) -> list[dict[str, Any]]:
    rows = []
    for r in source["rows"]:
        seq = r.get("seq") or r["seq_inf"]
        h100 = r["gpu"].startswith("H100")
        par, needs = _ac(r["ac"])
        optim = r.get("optim") or ""
        if "Async TP" in optim:
            par["tp_comm_overlap"] = True
        rows.append(_stack(make_row(
            rid=slug(r["model"], r["gpu"].split(" ")[0], f"{r['gpus']}gpu", r["ac"], optim,
                     f"lbs{r['lbs']}"), src=r,
            published={"tokens_per_s_per_gpu": r["tok_s_gpu"]}, model=r["model"],
            shapes=shapes, seq=seq, system="DGX-H100" if h100 else "DGX-A100", gpus=r["gpus"],
            gbs=r["gbs"], mbs=r["lbs"], tp=r.get("tp", 1), dp=r["fsdp"], fsdp=True,
            prec=_titan_prec(optim), gpu=GRAND_TETON_GPU if h100 else "a100-80gb", par=par,
            needs=needs)))
    return unique(rows)


def torchtitan_dsv3(source: dict[str, Any], shapes: Shapes) -> list[dict[str, Any]]:
    rows = []
    for r in source["rows"]:
        pp, vp, fsdp = r["pp"], r.get("vp"), r["fsdp"]
        extra, needs = {}, ["whole-step CUDA graph"] if r["impl"] == "GraphTrainer" else []
        if "MTP1" in r["config"]:
            extra["mtp_layers"] = 1
            needs.append("multi-token prediction")
        rows.append(make_row(
            rid=slug(r["config"].replace("MTP disabled", "no-MTP"), r["impl"]), src=r,
            published={"tokens_per_s_per_gpu": r["tok_s_gpu"]}, model="DeepSeekV3",
            shapes=shapes, seq=4096, system="DGX-GB300", gpus=256, gbs=4096,
            mbs=4096 // (fsdp * r["microbatches"]), pp=pp, vp=vp, ep=r["ep"], dp=fsdp,
            fsdp=True, prec="MXFP8", model_extra=extra, needs=needs,
            # fixed fsdp_reshard_after_forward: never (source)
            # (with PP also torch pipelining's one gradient sync per step, PIPE_FSDP)
            par={"fsdp": PIPE_FSDP if pp > 1 else {"reshard_after_forward": False}}))
    return unique(rows)


def torchtitan_mxfp8(source: dict[str, Any], shapes: Shapes) -> list[dict[str, Any]]:
    rows = []
    for r in source["rows"]:
        scaling = r["scaling"]
        prec = None if "bfloat16" in scaling else (
            "MXFP8" if scaling.startswith("mxfp8") else _titan_prec(scaling))
        if r["model"].startswith("Llama3"):
            row = make_row(rid=slug("llama3-8b-b200", scaling), src=r,
                           published={"tokens_per_s_per_gpu": r["tok_s_gpu"]},
                           model="Llama3-8B", shapes=shapes, seq=8192, system="DGX-B200",
                           gpus=8, gbs=8, mbs=1, dp=8, fsdp=True, prec=prec,
                           par={"recompute": "op"})
            # torchtitan runs SDPA's cuDNN backend first on Blackwell, which its per-op
            # save list does not name: the attention is recomputed (attention_impl.py).
            row["scenario"]["compute"] = {"attention_impl": "cudnn"}
        else:
            row = make_row(rid=slug("llama4-scout-gb200", scaling), src=r,
                           published={"tokens_per_s_per_gpu": r["tok_s_gpu"]},
                           model="Llama4 Scout", shapes=shapes, seq=8192, system="DGX-GB200",
                           gpus=256, gbs=2560, mbs=10, ep=16, dp=256, fsdp=True, prec=prec,
                           needs=["expert FSDP degree (64) != FSDP degree (256)"])
        rows.append(_stack(row))
    return unique(rows)


def simumax(source: dict[str, Any], shapes: Shapes) -> list[dict[str, Any]]:
    rows = []
    for r in source["rows"]:
        par: dict[str, Any] = {}
        needs: list[str] = []
        if r["cp"] > 1:  # the source's cp_comm_type a2a: Ulysses all-to-all over the CP group
            par["cp_algorithm"] = "a2a"
        model = r["model"]
        extra = {}
        if model == "deepseekv3":
            extra["dense_layers"] = 1
        if model == "deepseekv2":
            extra["capacity_factor"] = 1.0
        rows.append(make_row(
            rid=r["case"], src=r, published={"iteration_time_ms": r["step_ms"]}, model=model,
            shapes=shapes, seq=r["seq"], system="DGX-B200", gpus=8, gbs=r["gbs_inf"],
            mbs=r["mbs"], tp=r["tp"], pp=r["pp"], cp=r["cp"], ep=r.get("ep"), dp=r["dp"],
            layers=r["layers"], kv_heads=16 if model == "llama3-405b" else None,
            par=par, model_extra=extra, needs=needs,
            # "case suffix _cef = TE fused cross-entropy" (the source's legend)
            compute={"cross_entropy": "te"} if "_cef" in r["case"] else None))
    return unique(rows)


def deepseek_v3(source: dict[str, Any], shapes: Shapes) -> list[dict[str, Any]]:
    return [make_row(
        rid="deepseek-v3-pretraining-2048-h800", src=r,
        published={"tokens_per_s_per_gpu": r["tok_s_gpu_derived"]}, model="DeepSeekV3",
        # "16-way PP (DualPipe)" (source): DualPipe holds two model chunks per rank, one
        # per direction (vpp 2), each copy's 61 layers over the 16 stages (4 x 13, 3 x 3).
        shapes=shapes, seq=4096, system="DGX-H100", gpus=2048, gbs=15360, mbs=1, pp=16,
        vp=2, ep=64, dp=128, prec="fp8 blockwise", gpu="h800",
        par={"schedule": "dualpipe", "moe_dispatcher": "deepep",
             "pp_layers": [4] * 13 + [3] * 3},
        model_extra={"routing_node_limit": 4})  # "each token ... to at most 4 nodes"
        for r in source["rows"]]


SPECS_OTHER = [
    SuiteSpec("torchtitan-llama31-h100", "torchtitan_llama31_h100_2024_12", "",
              torchtitan_2024_12, choices=TITAN_CHOICES, base=TITAN_GQA_BASE),
    SuiteSpec("torchtitan-async-tp-h100", "torchtitan_async_tp_h100_2025_06", "",
              torchtitan_async_tp, choices=TITAN_CHOICES + [
                  "Each row is two rows: vanilla TP and async TP (tp_comm_overlap)."],
              base=TITAN_GQA_BASE),
    SuiteSpec("torchtitan-h200", "torchtitan_h200_trainy_2025_06", "", torchtitan_h200,
              choices=TITAN_CHOICES, base=TITAN_GQA_BASE),
    SuiteSpec("torchtitan-docs-2024-08", "torchtitan_docs_performance_2024_08", "",
              torchtitan_docs, choices=TITAN_CHOICES + [
                  "A100 rows on the dgx-a100 preset (8x A100 80GB, 8x HDR per node; the",
                  "source does not state the fabric)."], base=TITAN_GQA_BASE),
    SuiteSpec("torchtitan-dsv3-gb300", "torchtitan_dsv3_gb300_2026_10", "", torchtitan_dsv3,
              choices=TITAN_CHOICES, base=TITAN_BASE),
    SuiteSpec("torchtitan-mxfp8-blackwell", "torchtitan_mxfp8_blackwell", "",
              torchtitan_mxfp8, choices=TITAN_CHOICES + [
                  "The B200s of the dense rows were power limited (source); simtrain's b200 is",
                  "the 1000 W part, so those rows read optimistic by the clock ratio.",
                  "On the B200 rows attention is SDPA's cuDNN backend (torchtitan's first",
                  "choice on Blackwell; compute.attention_impl cudnn), which per-op AC",
                  "recomputes: its save list names only the flash and efficient SDPA ops."],
              base=TITAN_GQA_BASE),
    SuiteSpec("simumax-b200", "simumax_b200_release_v1_2_real", "", simumax, choices=[
        "Compared: the real iteration time (step_ms), not SimuMax's prediction. Launcher",
        "flags as stated: distributed optimizer (zero 1) without --overlap-grad-reduce or",
        "--overlap-param-gather (gradients reduced after backward), sequence parallel,",
        "flash attention, no TP comm overlap, no recompute; layer-truncated models as",
        "published (llama3-405b with 16 KV heads, the source's config)."],
        base={"parallelism": {"zero": 1, "order": ORDER, "ddp": {"overlap": False}},
              "sim": {"granularity": "layer"}}),
    SuiteSpec("deepseek-v3-report", "deepseek_v3_report_pretraining", "", deepseek_v3,
              choices=["Compared: the aggregate tokens/s/GPU derived from 180K H800 GPU hours",
                       "per trillion tokens (all overheads included). Stage granularity: at",
                       "layer granularity the 2,048-GPU step costs over 15 CPU-minutes; stage",
                       "sums each pipeline step's all-to-alls after its compute (exposed)."],
              base={"parallelism": {"zero": 1, "order": ORDER},
                    "sim": {"granularity": "stage"}}),
]

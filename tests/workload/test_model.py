"""Tests for the transformer description, its parameter count and its lowering to ops."""

from __future__ import annotations

from typing import Any

import pytest

from simtrain.workload.model import (
    MODEL_PRESETS,
    Layer,
    ModelConfig,
    Op,
    backward_ops,
    lower_model,
    model_flops_per_step,
    num_parameters,
)

GEMM_LIKE = ("gemm", "attention")


def _small_gpt(**overrides: Any) -> ModelConfig:
    base: dict[str, Any] = dict(family="gpt", num_layers=2, hidden_size=64, num_heads=4,
                                   vocab_size=1000, max_seq_len=16)
    return ModelConfig(**{**base, **overrides})


def _ops(layers: list[Layer]) -> list[Op]:
    return [op for layer in layers for op in layer.ops]


# Published parameter counts: GPT-3 (Brown et al. 2020), Llama 3 (Meta 2024, Table 3),
# Megatron-LM 2020 (calibration.yaml params_b).
@pytest.mark.parametrize(("preset", "published"), [
    ("gpt3-175b", 175e9), ("llama3-8b", 8.03e9), ("llama3-70b", 70.6e9),
    ("llama3-405b", 405e9), ("megatron-1b", 1.16e9), ("megatron-2b", 2.03e9),
    ("megatron-4b", 4.24e9), ("megatron-8b", 8.67e9), ("gpt2-small", 124e6),
])
def test_preset_parameter_counts_match_published(preset: str, published: float) -> None:
    assert num_parameters(ModelConfig.from_preset(preset)) == pytest.approx(published, rel=0.01)


# Megatron-Core 2024 names are rounded: 12·l·h² + 2·V·h gives 1.745B for "1.7B" and 31.5B for
# "32B" (learned positions and biases add 0.5% more to 1.7B). We check the count against that
# formula to 1% and against the name to 3.5%.
@pytest.mark.parametrize("preset", [p for p in MODEL_PRESETS if p.startswith("mcore-")])
def test_mcore_parameter_counts(preset: str) -> None:
    cfg = ModelConfig.from_preset(preset)
    h, layers, v = cfg.hidden_size, cfg.num_layers, cfg.vocab_size
    n = num_parameters(cfg)
    assert n == pytest.approx(12 * layers * h * h + 2 * v * h, rel=0.01)
    named = float(preset.removeprefix("mcore-").removesuffix("b")) * 1e9
    assert n == pytest.approx(named, rel=0.035)


@pytest.mark.parametrize(("preset", "named"), [("gpt3-1.3b", 1.3e9), ("gpt3-2.7b", 2.7e9)])
def test_small_gpt3_counts_round_to_their_names(preset: str, named: float) -> None:
    # The paper's names are rounded: exact counts are 1.316B and 2.652B.
    assert num_parameters(ModelConfig.from_preset(preset)) == pytest.approx(named, rel=0.02)


def test_all_presets_validate_and_params_match_lowering() -> None:
    for preset in MODEL_PRESETS:
        cfg = ModelConfig.from_preset(preset)
        if cfg.num_layers > 40:
            continue  # the lowering is linear in layers; spare the suite the big ones
        owned = sum(p.numel for op in _ops(lower_model(cfg, 1, 128)) for p in op.params)
        assert owned == num_parameters(cfg), preset


def test_gpt2_small_exact_count() -> None:
    # HuggingFace gpt2 reports 124,439,808 parameters.
    assert num_parameters(ModelConfig.from_preset("gpt2-small")) == 124_439_808


def test_gpt_layer_forward_flops_hand_derived() -> None:
    # GPT layer, m = b·s tokens: qkv 2·m·3h·h + proj 2·m·h·h + fc1 2·m·4h·h + fc2 2·m·h·4h
    # = 24·m·h², attention QKᵀ + AV = 2·b·s²·h + 2·b·s²·h = 4·b·s²·h.
    # b=2, s=16, h=64: 24·32·4096 + 4·2·256·64 = 3,145,728 + 131,072 = 3,276,800.
    layer = lower_model(_small_gpt(), micro_batch_size=2, seq_len=16)[1]
    assert layer.name == "layers.0"
    assert sum(op.flops for op in layer.ops if op.kind in GEMM_LIKE) == 3_276_800
    # Nominal memory-bound FLOPs: 2 norms·5 + 2 residuals·1 per m·h, gelu 8 per m·4h = 44·m·h.
    extra = sum(op.flops for op in layer.ops if op.kind not in GEMM_LIKE)
    assert extra == 44 * 32 * 64


def test_model_flops_hand_computed() -> None:
    # 72·T·l·h²·(1 + s/(6h) + V/(12·l·h)), T=64 tokens, l=2, h=64, s=16, V=1000:
    # 72·64·2·4096 = 37,748,736; ·(1 + 16/384 + 1000/1536)
    # = 37,748,736 + 1,572,864 + 24,576,000 = 63,897,600.
    assert model_flops_per_step(_small_gpt(), tokens=64, seq_len=16) == pytest.approx(63_897_600)


@pytest.mark.parametrize("preset", ["gpt3-175b", "llama3-8b", "tiny-gpt"])
def test_forward_ops_are_a_third_of_model_flops(preset: str) -> None:
    # The MFU formula counts exactly the GEMMs and attention (non-causal) ×3 (forward +
    # 2× backward); it does not count the nominal norm/residual/activation/loss FLOPs, which
    # add well under 1% on top.
    cfg = ModelConfig.from_preset(preset)
    b, s = 2, min(2048, cfg.max_seq_len)
    ops = _ops(lower_model(cfg, b, s))
    mfu = model_flops_per_step(cfg, tokens=b * s, seq_len=s)
    assert 3 * sum(op.flops for op in ops if op.kind in GEMM_LIKE) == pytest.approx(mfu, rel=1e-12)
    assert 3 * sum(op.flops for op in ops) == pytest.approx(mfu, rel=0.01)


def test_param_registration_order_follows_modules() -> None:
    names = [p.name for op in _ops(lower_model(_small_gpt(), 1, 16)) for p in op.params]
    assert names[:6] == ["embedding.word.weight", "embedding.position.weight",
                         "layers.0.input_norm.weight", "layers.0.input_norm.bias",
                         "layers.0.attn.qkv.weight", "layers.0.attn.qkv.bias"]
    assert names[-2:] == ["final_norm.weight", "final_norm.bias"]  # tied: no lm_head weight
    layer_ids = [int(n.split(".")[1]) for n in names if n.startswith("layers.")]
    assert layer_ids == sorted(layer_ids) and layer_ids[-1] == 1
    llama = lower_model(ModelConfig.from_preset("llama3-8b", num_layers=1), 1, 16)
    llama_names = [p.name for op in _ops(llama) for p in op.params]
    assert llama_names[-1] == "lm_head.weight"
    assert not any(n.endswith(".bias") for n in llama_names)


def test_layer_structure() -> None:
    layers = lower_model(_small_gpt(), 1, 16)
    assert [layer.name for layer in layers] == [
        "embedding", "layers.0", "layers.1", "final_norm", "lm_head"]
    kinds = [op.kind for op in layers[1].ops]
    assert kinds == ["norm", "gemm", "attention", "gemm", "elementwise", "norm", "gemm",
                     "elementwise", "gemm", "elementwise"]
    assert [op.kind for op in layers[-1].ops] == ["gemm", "loss"]
    assert layers[-1].ops[0].gemm_shape == (16, 1000, 64)
    assert layers[-1].ops[0].params == ()  # tied: the embedding owns the weight


def test_gqa_reduces_qkv_width() -> None:
    mha = ModelConfig.from_preset("llama3-8b", num_kv_heads=32, num_layers=1)
    gqa = ModelConfig.from_preset("llama3-8b", num_layers=1)
    assert gqa.qkv_width == (32 + 2 * 8) * 128 == 6144
    assert mha.qkv_width == 3 * 4096
    qkv = next(op for op in lower_model(gqa, 1, 8)[1].ops if op.name.endswith("attn.qkv"))
    assert qkv.gemm_shape == (8, 6144, 4096)
    assert num_parameters(mha) - num_parameters(gqa) == 2 * 4096 * (4096 - 1024)


def test_swiglu_fuses_gate_and_up() -> None:
    cfg = ModelConfig.from_preset("llama3-8b", num_layers=1)
    fc1 = next(op for op in lower_model(cfg, 1, 8)[1].ops if op.name.endswith("mlp.fc1"))
    assert fc1.gemm_shape == (8, 2 * 14336, 4096)


def test_family_defaults_and_fills() -> None:
    cfg = ModelConfig(family="llama", num_layers=1, hidden_size=4096, num_heads=32,
                      vocab_size=32000, max_seq_len=4096)
    assert (cfg.activation, cfg.norm, cfg.bias, cfg.tied_embeddings) == (
        "swiglu", "rmsnorm", False, False)
    assert cfg.ffn_hidden_size == 11008  # Llama rule: ceil((8h/3)/256)·256
    assert cfg.num_kv_heads == 32 and cfg.head_dim == 128
    assert _small_gpt().ffn_hidden_size == 256


def test_activation_bytes_gpt_layer() -> None:
    # Without fp32 norm statistics and attention logsumexp a GPT layer saves 32·s·b·h bytes
    # (bf16): Korthikanti et al. 2022's 34·s·b·h minus the two dropout masks, no s² terms.
    b, s, h, a = 2, 16, 64, 4
    layer = lower_model(_small_gpt(), b, s)[1]
    stats = 2 * (2 * 4 * b * s)  # two layernorms, mean + rstd fp32 per row
    lse = 4 * b * a * s
    assert sum(op.activation_bytes for op in layer.ops) - stats - lse == 32 * s * b * h


def test_backward_ops() -> None:
    ops = lower_model(_small_gpt(), 1, 16)[1].ops
    qkv, attn, norm = ops[1], ops[2], ops[0]
    dgrad, wgrad = backward_ops(qkv)
    assert dgrad.gemm_shape == (16, 64, 192) and wgrad.gemm_shape == (192, 64, 16)
    assert dgrad.flops == wgrad.flops == qkv.flops
    assert dgrad.params == () and wgrad.params == qkv.params
    (attn_bwd,) = backward_ops(attn)
    assert attn_bwd.flops == 2.5 * attn.flops and attn_bwd.bytes == 2 * attn.bytes
    (norm_bwd,) = backward_ops(norm)
    assert norm_bwd.bytes == 2 * norm.bytes and norm_bwd.params == norm.params
    word = lower_model(_small_gpt(), 1, 16)[0].ops[0]
    (word_bwd,) = backward_ops(word)
    # The dense table gradient: 1.5 x the 4,224 B of token traffic (8·16 ids + 2·2·16·64)
    # + (2·dt + 2·fp32)·V·h = 12·1000·64: 6,336 + 768,000 = 774,336 bytes.
    assert word_bwd.kind == "embedding" and word_bwd.bytes == 774_336
    # Roles as fields: the input gradient (zero-bubble B) and the weight gradient (W).
    assert (dgrad.grad, wgrad.grad, attn_bwd.grad, norm_bwd.grad) == (
        "input", "weight", "input", "input")
    assert word_bwd.grad == "weight"  # token ids have no gradient
    assert qkv.grad is None  # a forward op


@pytest.mark.parametrize(("overrides", "match"), [
    (dict(hidden_size=100, num_heads=3), "not divisible by num_heads"),
    (dict(num_kv_heads=3), "not divisible by num_kv_heads"),
    (dict(num_layers=0), "positive"),
    (dict(vocab_size=-5), "positive"),
    (dict(dropout=0.1), "Extra inputs"),
])
def test_validation_errors(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _small_gpt(**overrides)


def test_user_errors_in_lowering_and_presets() -> None:
    with pytest.raises(ValueError, match="max_seq_len"):
        lower_model(_small_gpt(), 1, 32)
    with pytest.raises(ValueError, match="micro_batch_size"):
        lower_model(_small_gpt(), 0, 16)
    with pytest.raises(ValueError, match="unknown model preset"):
        ModelConfig.from_preset("gpt5")
    with pytest.raises(ValueError, match="positive"):
        model_flops_per_step(_small_gpt(), tokens=0, seq_len=16)
    bad = Op("x", "conv", 1.0, 1.0, None, (), 0.0)
    with pytest.raises(ValueError, match="unknown kind"):
        backward_ops(bad)


def test_mixtral_parameter_count_and_moe_flops_by_hand() -> None:
    cfg = ModelConfig.from_preset("mixtral-8x7b")
    # Embedding + untied head: 2 x 32000 x 4096 = 262,144,000. Per layer: QKV 4096 x
    # (4096 + 2 x 1024) + proj 4096² = 41,943,040; 8 experts x 3 x 4096 x 14336 =
    # 1,409,286,144; router 4096 x 8 = 32,768; two RMSNorms 8,192 -> 1,451,270,144.
    # 32 layers + final norm 4096: 46,702,792,704 (Mixtral reports 46.7B).
    assert num_parameters(cfg) == 262_144_000 + 32 * 1_451_270_144 + 4096
    # Model FLOPs count top-2 experts: the MLP term is 2 x 14336/4096 x 3/2 = 10.5.
    dense = ModelConfig.from_preset("mixtral-8x7b", num_experts=0)
    ratio_mlp = 2 * 14336 / 4096 * 1.5
    dense_mlp = 14336 / 4096 * 1.5
    h, s, l_ = 4096, 4096, 32
    attn = (1 + 8 / 32 + s / h)
    logit = 32000 / (2 * l_ * h)
    assert model_flops_per_step(cfg, s, s) / model_flops_per_step(dense, s, s) == \
        pytest.approx((attn + ratio_mlp + logit) / (attn + dense_mlp + logit))


def test_standard_attention_kernels_by_hand() -> None:
    # h = 64, 4 heads of d = 16, b = 2, s = 16: E = b·a·s·s = 2·4·16·16 = 2048 scores.
    cfg = _small_gpt(attention_kernel="standard")
    layer = lower_model(cfg, micro_batch_size=2, seq_len=16)[1]
    ops = {op.name.rsplit(".", 1)[-1]: op for op in layer.ops}
    assert "core" not in ops
    # scores = QKᵀ: b·a = 8 batched problems (s, s, d) = (16, 16, 16): 8·2·16·16·16 =
    # 65,536 FLOPs.
    assert ops["scores"].kind == "gemm" and ops["scores"].gemm_shape == (16, 16, 16)
    assert ops["scores"].groups == 8 and ops["scores"].flops == 65_536
    # reads Q (32·64) and K (2·16·64) and writes E scores, 2 bytes each: 2·(2048+2048+2048).
    assert ops["scores"].bytes == 2 * (2048 + 2048 + 2048)
    # softmax reads and writes E in fp16: 4·2048 bytes; dropout also writes a 1-byte mask.
    assert ops["softmax"].bytes == 4 * 2048 and ops["dropout"].bytes == 5 * 2048
    # context = PV: 8 problems (s, d, s) = (16, 16, 16), the same 65,536 FLOPs.
    assert ops["context"].gemm_shape == (16, 16, 16) and ops["context"].groups == 8
    assert ops["context"].flops == 65_536
    # The backward's second GEMM of each is batched too: 8 problems (sk, d, sq), not one
    # (16, 16, 128) GEMM reducing over every head's queries.
    assert [(g.gemm_shape, g.groups) for g in backward_ops(ops["scores"])] == [
        ((16, 16, 16), 8), ((16, 16, 16), 8)]
    # Same attention FLOPs as the fused kernel: 4·b·s·s·h = 4·2·16·16·64 = 131,072.
    flash = {op.name: op for op in lower_model(_small_gpt(), 2, 16)[1].ops}
    assert flash["layers.0.attn.core"].flops == ops["scores"].flops + ops["context"].flops
    no_dropout = lower_model(_small_gpt(attention_kernel="standard", dropout_masks=False),
                             2, 16)[1]
    assert not any(op.name.endswith(".dropout") for op in no_dropout.ops)


def test_roles_are_fields_not_names() -> None:
    # Expert kernels and parameters, and core attention, are marked as such by the builder.
    cfg = ModelConfig.from_preset("tiny-moe", num_layers=1)
    ops = {op.name: op for layer in lower_model(cfg, 1, 16) for op in layer.ops}
    assert {n for n, op in ops.items() if op.role == "expert"} == {
        "layers.0.mlp.fc1", "layers.0.mlp.act", "layers.0.mlp.fc2"}
    params = [p for op in ops.values() for p in op.params]
    assert {p.name for p in params if p.expert} == {"layers.0.mlp.experts.fc1.weight",
                                                    "layers.0.mlp.experts.fc2.weight"}
    assert ops["layers.0.mlp.router"].role is None
    assert ops["layers.0.attn.core"].role == "core_attention"
    std = lower_model(_small_gpt(attention_kernel="standard"), 1, 16)[1].ops
    assert [op.name.rsplit(".", 1)[-1] for op in std if op.role == "core_attention"] == [
        "scores", "softmax", "dropout", "context"]


def test_head_dim_apart_from_hidden_over_heads_by_hand() -> None:
    # Qwen3-style: h = 64, 2 heads of 48 (q width 96), 1 KV head: QKV 64 -> (2 + 2·1)·48 =
    # 192 features, proj 96 -> 64. m = b·s = 16: qkv 2·16·192·64 = 393,216, proj
    # 2·16·64·96 = 196,608; attention 4·b·s·s·q = 4·1·16·16·96 = 98,304.
    cfg = _small_gpt(num_heads=2, num_kv_heads=1, head_dim=48, hidden_size=64)
    ops = {op.name: op for op in lower_model(cfg, 1, 16)[1].ops}
    assert ops["layers.0.attn.qkv"].gemm_shape == (16, 192, 64)
    assert ops["layers.0.attn.proj"].gemm_shape == (16, 64, 96)
    assert ops["layers.0.attn.qkv"].flops == 393_216
    assert ops["layers.0.attn.proj"].flops == 196_608
    assert ops["layers.0.attn.core"].flops == 98_304
    # Parameters per layer: qkv 64·192 + proj 96·64 + biases 192 + 64 = 18,688 of attention.
    owned = sum(p.numel for op in _ops(lower_model(cfg, 1, 16)) for p in op.params)
    assert owned == num_parameters(cfg)
    attn = sum(p.numel for op in ops.values() if op.name.startswith("layers.0.attn")
               for p in op.params)
    assert attn == 64 * 192 + 96 * 64 + 192 + 64
    # The MFU formula stays 3x the forward GEMM and attention FLOPs with head_dim set.
    b, s = 2, 16
    mfu = model_flops_per_step(cfg, tokens=b * s, seq_len=s)
    fwd = sum(op.flops for op in _ops(lower_model(cfg, b, s)) if op.kind in GEMM_LIKE)
    assert 3 * fwd == pytest.approx(mfu, rel=1e-12)
    # head_dim set: hidden need not divide by heads (64 / 3 is not whole).
    assert _small_gpt(num_heads=3, head_dim=32).q_width == 96


def test_attended_keys_by_hand() -> None:
    from simtrain.workload.layers import attended_keys

    # 2w - w²/s: s = 4096, w = 128 -> 256 - 4 = 252; w = s or beyond -> s; no window -> s.
    assert attended_keys(4096, 128) == 252.0
    assert attended_keys(4096, 4096) == attended_keys(4096, 8192) == 4096.0
    assert attended_keys(16, None) == 16.0
    # causal pairs: w·s - w²/2 = 4·16 - 8 = 56 = (2w - w²/s)·s/2 = 7·8.
    assert attended_keys(16, 4) * 16 / 2 == 56.0


def test_sliding_window_layers_and_flops_by_hand() -> None:
    # GPT-OSS pattern 2: layer 0 slides, layer 1 full. s = 16, w = 4: attended 2·4 - 16/16 = 7
    # keys, so layer 0's attention is 4·b·s·7·h = 4·1·16·7·64 = 28,672; layer 1's 4·16·16·64
    # = 65,536.
    cfg = _small_gpt(sliding_window=4, sliding_window_pattern=2)
    layers = lower_model(cfg, 1, 16)
    core = [op.flops for layer in layers for op in layer.ops if op.kind == "attention"]
    assert core == [28_672, 65_536]
    mfu = model_flops_per_step(cfg, tokens=16, seq_len=16)
    fwd = sum(op.flops for op in _ops(layers) if op.kind in GEMM_LIKE)
    assert 3 * fwd == pytest.approx(mfu, rel=1e-12)
    # Pattern 1 (Mistral): every layer slides.
    all_slide = _small_gpt(sliding_window=4)
    assert [op.flops for layer in lower_model(all_slide, 1, 16) for op in layer.ops
            if op.kind == "attention"] == [28_672, 28_672]
    with pytest.raises(ValueError, match="positive"):
        _small_gpt(sliding_window=0)


def test_cross_entropy_passes_by_hand() -> None:
    from simtrain.workload.ops import cross_entropy

    # m = 4 tokens, v = 10 logits, bf16: E = 40. Forward 2 + 9·4 = 38 B per logit + 8 B per
    # target: 1,520 + 32 = 1,552; backward (3·4 + 2)·40 + 32 = 592; saves the fp32 softmax
    # 160 B + targets 32. fp32 logits: (8·4)·40 + 32 = 1,312 and (2·4)·40 + 32 = 352.
    loss = cross_entropy("loss", 4, 10, 2)
    assert (loss.bytes, loss.backward_bytes, loss.activation_bytes) == (1552, 592, 192)
    (bwd,) = backward_ops(loss)
    assert bwd.bytes == 592 and bwd.grad == "input"
    fp32 = cross_entropy("loss", 4, 10, 4)
    assert (fp32.bytes, fp32.backward_bytes) == (1312, 352)

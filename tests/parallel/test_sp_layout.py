"""Copies a batch-first activation layout adds around sequence-parallel collectives."""

from __future__ import annotations

import pytest

from simtrain.parallel.shard import Comm, Compute, ShardSpec, block_unit
from simtrain.parallel.sp_layout import async_copy_bytes, layout_copies, vanilla_copy_bytes
from simtrain.workload.model import ModelConfig
from simtrain.workload.ops import backward_ops

# Llama 3 8B under TP 8, local batch 12 x 8192 tokens: the gathered activation is
# 12·8192·4096·2 B = 805,306,368 B.
N = 12 * 8192 * 4096 * 2


def test_copy_bytes_by_hand():
    # Vanilla chunk-cat: read and write the gathered tensor, 2·805,306,368 = 1,610,612,736.
    assert vanilla_copy_bytes(N) == 1_610_612_736
    # Async TP: the shard copy 2·N/8 = 201,326,592; the partials' sum N·(1 + 1/8) =
    # 905,969,664.
    assert async_copy_bytes(N, 8) == (201_326_592, 905_969_664)


def test_vanilla_copies_follow_the_all_gather_and_precede_the_reduce_scatter():
    before, after = layout_copies("x", "f", N, 8, overlap=False)
    assert not before and [op.bytes for op in after] == [2 * N]
    before, after = layout_copies("x", "g", N, 8, overlap=False)
    assert [op.bytes for op in before] == [2 * N] and not after
    assert backward_ops(before[0])[0].bytes == 2 * N  # backward copies the same bytes


def test_async_copies_keep_the_gemm_pipeline_next_to_the_collective():
    # f: the shard copy before the all-gather (its backward: the sum after the RS it becomes).
    before, after = layout_copies("x", "f", N, 8, overlap=True)
    assert not after and before[0].bytes == 201_326_592
    assert backward_ops(before[0])[0].bytes == 905_969_664
    before, after = layout_copies("x", "g", N, 8, overlap=True)
    assert not before and after[0].bytes == 905_969_664
    assert backward_ops(after[0])[0].bytes == 201_326_592


def test_unfused_backward_reduce_scatter_copies_like_vanilla():
    # PyTorch's async TP leaves f's backward RS plain when several linears' dgrads are
    # summed: its copy is the chunk-cat 2·N = 1,610,612,736 B, not the sum 905,969,664;
    # the forward shard copy stays 2·N/8 = 201,326,592.
    before, after = layout_copies("x", "f", N, 8, overlap=True, fused_bwd=False)
    assert not after and before[0].bytes == 201_326_592
    assert backward_ops(before[0])[0].bytes == 1_610_612_736


def test_symm_mem_f_sites_of_separate_linears_copy_like_vanilla_in_backward():
    # QKV (3 linears) and SwiGLU's w1/w3 (2) both sum dgrads: both f sites' backward
    # copies are vanilla's 2·n under symm_mem, the sums n·(1 + 1/tp) under userbuffers.
    spec = dict(tp=2, sp=True, tp_overlap=True, layout="bsh")
    ub = block_unit(CFG, 0, 2, 64, 2, ShardSpec(**spec))
    sm = block_unit(CFG, 0, 2, 64, 2, ShardSpec(**spec, tp_overlap_impl="symm_mem"))

    def f_copies(unit):
        return [backward_ops(s.op)[0].bytes for s in unit.steps
                if isinstance(s, Compute) and s.op.name.endswith(("attn.f.sp_copy",
                                                                    "mlp.f.sp_copy"))]
    n = 2 * 64 * 256 * 2  # b·s·h·2 B gathered
    assert f_copies(ub) == [n * 1.5, n * 1.5] and f_copies(sm) == [2 * n, 2 * n]


CFG = ModelConfig(name="t", family="llama", num_layers=1, hidden_size=256, num_heads=4,
                  num_kv_heads=2, ffn_hidden_size=512, vocab_size=1000, max_seq_len=64,
                  activation="swiglu")


@pytest.mark.parametrize("overlap", [False, True])
def test_batch_first_blocks_get_one_copy_per_sp_collective(overlap):
    sbh = block_unit(CFG, 0, 2, 64, 2, ShardSpec(tp=2, sp=True, tp_overlap=overlap))
    bsh = block_unit(CFG, 0, 2, 64, 2, ShardSpec(tp=2, sp=True, tp_overlap=overlap,
                                                 layout="bsh"))
    comms = [s for s in bsh.steps if isinstance(s, Comm)]
    copies = [s for s in bsh.steps if isinstance(s, Compute) and "sp_copy" in s.op.name]
    assert len(comms) == 4 and len(copies) == 4  # two all-gathers, two reduce-scatters
    assert not any("sp_copy" in s.op.name for s in sbh.steps if isinstance(s, Compute))
    assert len(bsh.steps) == len(sbh.steps) + 4
    # Vanilla: each all-gather is followed by its copy; async: preceded by the shard copy.
    names = [s.op.name if isinstance(s, Compute) else s.fwd for s in bsh.steps]
    first = names.index("all_gather")
    assert "sp_copy" in names[first - 1 if overlap else first + 1]


def test_tp1_or_no_sp_has_no_copies():
    for spec in (ShardSpec(layout="bsh"), ShardSpec(tp=2, sp=False, layout="bsh")):
        unit = block_unit(CFG, 0, 2, 64, 2, spec)
        assert not any("sp_copy" in s.op.name for s in unit.steps if isinstance(s, Compute))


def test_scenario_layout_reaches_the_step():
    from simtrain import load_scenario, simulate

    def step(layout: str) -> float:
        return simulate(load_scenario({
            "cluster": {"preset": "dgx-a100", "nodes": 1}, "model": {
                "preset": "tiny-gpt", "layout": layout},
            "training": {"global_batch_size": 8, "micro_batch_size": 2, "seq_len": 256},
            "parallelism": {"tp": 2, "sp": True}})).summary["step_time_s"]

    assert step("bsh") > step("sbh")


def test_fp8_gathers_copy_fp8_bytes():
    # An f site whose forward all-gather moves FP8 (N/2) and whose backward reduce-scatter
    # moves BF16 (N): the forward chunk-cat copies 2·N/2 = N, the backward 2·N.
    before, after = layout_copies("x", "f", N / 2, 8, overlap=False, bwd_nbytes=N)
    assert after[0].bytes == N and backward_ops(after[0])[0].bytes == 2 * N
    # Async g: forward sum of BF16 partials N·9/8 = 905,969,664; backward shard copy of the
    # FP8 all-gather 2·(N/2)/8 = 100,663,296.
    before, after = layout_copies("x", "g", N, 8, overlap=True, bwd_nbytes=N / 2)
    assert after[0].bytes == 905_969_664
    assert backward_ops(after[0])[0].bytes == 100_663_296
    # In a block: a bsh block under FP8 gathers copies half the bytes after its f gathers.
    plain = block_unit(CFG, 0, 2, 64, 2, ShardSpec(tp=2, sp=True, layout="bsh"))
    fp8 = block_unit(CFG, 0, 2, 64, 2, ShardSpec(tp=2, sp=True, layout="bsh",
                                                 fp8_gathers=True))
    copy = {s.op.name: s.op.bytes for s in plain.steps
            if isinstance(s, Compute) and "sp_copy" in s.op.name}
    copy8 = {s.op.name: s.op.bytes for s in fp8.steps
             if isinstance(s, Compute) and "sp_copy" in s.op.name}
    assert copy.keys() == copy8.keys()
    halved = [k for k in copy if copy8[k] == copy[k] / 2]
    assert len(halved) == 2 and all(copy8[k] == copy[k] for k in copy if k not in halved)

"""Kernel classification and op sizes from profiler shapes, against hand-read values."""

from __future__ import annotations

import pytest

from simtrain.ingest.classify import (
    attention_flops,
    gemm_shape,
    gpu_from_device_name,
    kernel_category,
    nccl_op,
    sim_dtype,
    tensor_bytes,
)


@pytest.mark.parametrize(("name", "cpu_op", "category"), [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64", "", "gemm"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "", "gemm"),
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT", "", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32>", "", "gemm"),
    ("some_vendor_kernel", "aten::mm", "gemm"),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", "", "attention"),
    ("fmha_cutlassB_bf16_aligned_64x64_k64_sm80", "", "attention"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "", "nccl"),
    ("ncclKernel_AllReduce_RING_LL_Sum_bfloat16(ncclWorkElem)", "", "nccl"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>", "",
     "norm"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", "", "softmax"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add>", "",
     "elementwise"),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<float>", "",
     "embedding"),
    ("Memcpy HtoD (Pageable -> Device)", "", "memcpy"),
    ("totally_new_kernel", "aten::foo", "unknown"),
])
def test_kernel_category(name: str, cpu_op: str, category: str) -> None:
    assert kernel_category(name, cpu_op) == category


@pytest.mark.parametrize(("op", "dims", "shape"), [
    ("aten::mm", [[512, 256], [256, 768]], (512, 768, 256, 1)),
    ("aten::addmm", [[768], [512, 256], [256, 768]], (512, 768, 256, 1)),
    ("aten::addmm", [[512, 768], [512, 256], [256, 768]], (512, 768, 256, 1)),
    ("aten::bmm", [[8, 64, 32], [8, 32, 16]], (64, 16, 32, 8)),
    ("aten::baddbmm", [[8, 64, 16], [8, 64, 32], [8, 32, 16]], (64, 16, 32, 8)),
    # linear [[b, s, k], [n, k], [n]]: m = b·s = 2·512
    ("aten::linear", [[2, 512, 256], [768, 256], [768]], (1024, 768, 256, 1)),
    ("aten::matmul", [[2, 512, 256], [256, 768]], (1024, 768, 256, 1)),
    ("aten::mm", [[512, 256]], None),
    ("aten::mm", [[], []], None),
])
def test_gemm_shape(op: str, dims: list[list[int]], shape: tuple[int, ...] | None) -> None:
    assert gemm_shape(op, dims) == shape


def test_attention_flops_by_layout() -> None:
    # [b, h, s, d] = [2, 8, 1024, 64]: 4·2·1024·1024·8·64 = 4,294,967,296
    bhsd = [[2, 8, 1024, 64]] * 3
    assert attention_flops("aten::_scaled_dot_product_flash_attention", bhsd, False) == 4294967296
    # the same call as [b, s, h, d] for _flash_attention_forward, and its backward x2.5
    bshd = [[2, 1024, 8, 64]] * 3
    assert attention_flops("aten::_flash_attention_forward", bshd, False) == 4294967296
    assert attention_flops("aten::_flash_attention_backward", bshd, True) == 2.5 * 4294967296
    # GQA: k has 2 heads, FLOPs go by q's 8; s_k from k: 4·1·128·256·8·64 = 67,108,864
    q, k = [1, 8, 128, 64], [1, 2, 256, 64]
    assert attention_flops("aten::_scaled_dot_product_efficient_attention", [q, k, k],
                           False) == 67108864
    assert attention_flops("aten::softmax", bhsd, False) is None


def test_tensor_bytes_and_dtype() -> None:
    # [512, 256] bf16 + [256] bf16 inputs, output like the first: (131072 + 256 + 131072)·2
    assert tensor_bytes([[512, 256], [256]], ["c10::BFloat16", "c10::BFloat16"]) == 524800
    assert tensor_bytes([[]], ["Scalar"]) is None
    assert sim_dtype(["Scalar", "c10::Half"]) == "fp16"
    assert sim_dtype(["long int"]) is None


@pytest.mark.parametrize(("name", "op", "algo"), [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     "all_reduce", "RING/LL"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_SIMPLE", "reduce_scatter", "RING/SIMPLE"),
    ("ncclKernel_AllReduce_TREE_LL128_Sum_float(ncclWorkElem)", "all_reduce", "TREE/LL128"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "send_recv", ""),
])
def test_nccl_op(name: str, op: str, algo: str) -> None:
    assert nccl_op(name) == (op, algo)


@pytest.mark.parametrize(("device", "gpu"), [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H200", "h200-sxm"), ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie"),
    ("NVIDIA B200", "b200"), ("AMD Instinct MI300X", "mi300x"), ("GeForce RTX 4090", None),
])
def test_gpu_from_device_name(device: str, gpu: str | None) -> None:
    assert gpu_from_device_name(device) == gpu

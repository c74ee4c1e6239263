"""What a GPU kernel is, from its name and the shapes of the CPU op that launched it.

Kernel names (the strings CUDA libraries give their kernels): cuBLAS/cuBLASLt
(``sm90_xmma_gemm_*``, ``ampere_bf16_s16816gemm_*``, ``nvjet_*``, ``*gemm*``), CUTLASS
(``cutlass::Kernel*``), TorchInductor's template matmuls (``triton_tem_*``; its other
``triton_*`` kernels count as elementwise), FlashAttention (``flash_fwd_*``,
``flash_bwd_*``), cuDNN/PyTorch fused attention (``fmha_*``, ``*sdpa*``), NCCL
(``ncclDevKernel_AllReduce_Sum_bf16_RING_LL`` from NCCL 2.19,
``ncclKernel_AllReduce_RING_LL_Sum_bfloat16`` before), and PyTorch's ATen kernels for
memory-bound work. A kernel no rule knows is "unknown": counted and listed by the
importer, never an error.

Sizes follow simtrain.workload.model's conventions, so a table row matches the op the
simulator asks for: GEMM (m, n, k, batch) with C[m, n] = A[m, k]·B[k, n]; attention as
``Op.flops`` counts it (4·b·s_q·s_k·heads·d non-causal, backward 2.5x); memory-bound ops by
the bytes of their input tensors plus one output the size of the first input.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

CATEGORIES = ("gemm", "attention", "nccl", "elementwise", "norm", "softmax", "embedding",
              "loss", "memcpy", "unknown")

# First match wins; patterns are matched against the lower-cased kernel name.
_NAME_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (cat, re.compile(pattern)) for cat, pattern in (
        ("nccl", r"^nccl"),
        ("attention", r"flash|fmha|sdpa|attention|fort_native_sdpa"),
        ("gemm", r"gemm|cutlass|xmma|nvjet|cublas|s16816|s1688|wgmma|triton_tem"),
        ("norm", r"layer_?norm|rms_?norm|batch_?norm|group_?norm"),
        ("softmax", r"softmax"),
        ("loss", r"nll_loss|cross_entropy|log_softmax"),
        ("embedding", r"embedding|index_select|indexselect|indexing_backward"),
        ("elementwise", r"elementwise|reduce_kernel|fill|copy|cat_|catarray|dropout|"
                        r"gelu|silu|adam|foreach|multi_tensor|scatter|gather|where|"
                        r"triton_"),
    ))

# CPU ops whose kernels are GEMMs, and how their "Input Dims" read (see gemm_shape).
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul",
            "aten::linear", "aten::_scaled_mm", "aten::addmm_", "aten::_addmm_activation")
_ATTN_BHSD = ("aten::_scaled_dot_product", "aten::scaled_dot_product")  # [b, h, s, d]
_ATTN_BSHD = ("aten::_flash_attention", "aten::_efficient_attention")  # [b, s, h, d]

_NCCL_OPS = {"allreduce": "all_reduce", "allgather": "all_gather",
             "reducescatter": "reduce_scatter", "broadcast": "broadcast", "reduce": "reduce",
             "sendrecv": "send_recv", "send": "send_recv", "recv": "send_recv",
             "alltoall": "all_to_all"}
_NCCL_NAME = re.compile(r"^nccl(?:dev)?kernel_([a-z]+)", re.IGNORECASE)
_NCCL_ALGO = re.compile(r"_(ring|tree|collnet\w*|nvls\w*|pat)_(ll128|ll|simple)", re.IGNORECASE)

DTYPE_BYTES = {"c10::bfloat16": 2, "c10::half": 2, "float": 4, "double": 8, "long int": 8,
               "int": 4, "bool": 1, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
               "bfloat16": 2, "half": 2, "float16": 2, "float32": 4}
_SIM_DTYPE = {"c10::bfloat16": "bf16", "c10::half": "fp16", "float": "fp32",
              "c10::float8_e4m3fn": "fp8", "c10::float8_e5m2": "fp8"}

Dims = Sequence[Sequence[int]]


def kernel_category(name: str, cpu_op: str = "") -> str:
    """One of CATEGORIES for a kernel ``name`` launched by CPU op ``cpu_op`` (may be '')."""
    low = name.lower()
    if low.startswith(("memcpy", "memset")):
        return "memcpy"
    for cat, pattern in _NAME_RULES:
        if pattern.search(low):
            return cat
    if cpu_op in GEMM_OPS:  # e.g. a vendor kernel with an opaque name
        return "gemm"
    return "unknown"


def gemm_shape(op: str, dims: Dims) -> tuple[int, int, int, int] | None:
    """(m, n, k, batch) of a GEMM CPU op from its input dims, or None if they don't say.

    mm [[m,k],[k,n]]; addmm [[bias],[m,k],[k,n]]; bmm [[b,m,k],[b,k,n]]; baddbmm
    [[b,m,n],[b,m,k],[b,k,n]]; linear [[..., k],[n,k],...] (leading dims fold into m);
    matmul [[..., m, k],[k, n]] folds, [[b, m, k],[b, k, n]] batches.
    """
    mats = [tuple(d) for d in dims if isinstance(d, list | tuple) and len(d) >= 2]
    try:
        if op == "aten::linear" and len(mats) >= 2:
            x, w = mats[0], mats[1]
            return math.prod(x[:-1]), w[0], x[-1], 1
        if op in ("aten::addmm", "aten::addmm_", "aten::baddbmm", "aten::_addmm_activation"):
            mats = mats[-2:]  # the bias (1-D or [m, n]) comes first
        if len(mats) < 2:
            return None
        a, b = mats[0], mats[1]
        if len(b) == 2:  # folded leading dims
            return math.prod(a[:-1]), b[1], a[-1], 1
        if len(a) == len(b) == 3 and a[0] == b[0]:
            return a[1], b[2], a[2], a[0]
    except (TypeError, IndexError):
        return None
    return None


def attention_flops(op: str, dims: Dims, backward: bool) -> float | None:
    """``Op.flops`` of a fused attention call: 4·b·s_q·s_k·heads·d, x2.5 for backward."""
    four = [tuple(d) for d in dims if isinstance(d, list | tuple) and len(d) == 4]
    if len(four) < 2:
        return None
    if op.startswith(_ATTN_BHSD):
        (b, h, sq, d), sk = four[0], four[1][2]
    elif op.startswith(_ATTN_BSHD):
        (b, sq, h, d), sk = four[0], four[1][1]
    else:
        return None
    flops = 4.0 * b * sq * sk * h * d
    return 2.5 * flops if backward else flops


def tensor_bytes(dims: Dims, types: Sequence[str]) -> float | None:
    """Bytes read and written by a memory-bound op: its tensor inputs plus an output the
    size of the first; None when no input is a tensor of known dtype."""
    sizes = [math.prod(d) * DTYPE_BYTES[t.lower()]
             for d, t in zip(dims, types, strict=False)
             if isinstance(d, list | tuple) and d and t.lower() in DTYPE_BYTES]
    if not sizes:
        return None
    return float(sum(sizes) + sizes[0])


def sim_dtype(types: Sequence[str]) -> str | None:
    """The simulator's dtype name for the first floating input type, or None."""
    for t in types:
        if t.lower() in _SIM_DTYPE:
            return _SIM_DTYPE[t.lower()]
    return None


def nccl_op(name: str) -> tuple[str, str]:
    """(collective, "ALGO/PROTO" or "") of an NCCL kernel name."""
    m = _NCCL_NAME.match(name)
    op = _NCCL_OPS.get(m.group(1).lower(), m.group(1).lower()) if m else "unknown"
    algo = _NCCL_ALGO.search(name)
    return op, f"{algo.group(1).upper()}/{algo.group(2).upper()}" if algo else ""


def gpu_from_device_name(name: str) -> str | None:
    """simtrain GPU catalogue name of a CUDA device name ("NVIDIA H100 80GB HBM3")."""
    low = name.lower()
    for token, pcie, sxm in (("h100", "h100-pcie", "h100-sxm"), ("h200", "h200-sxm", "h200-sxm"),
                             ("b200", "b200", "b200"), ("mi300x", "mi300x", "mi300x"),
                             ("v100", "v100-32gb", "v100-32gb")):
        if token in low:
            return pcie if "pcie" in low else sxm
    if "a100" in low:
        if "pcie" in low:
            return "a100-80gb-pcie"
        return "a100-40gb" if "40gb" in low else "a100-80gb"
    return None

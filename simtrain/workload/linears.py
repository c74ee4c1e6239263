"""Separate linears: a fused GEMM run as the ``nn.Linear`` calls a PyTorch-native model makes.

simtrain builds Q, K and V as one GEMM and SwiGLU's gate and up as another (Megatron-Core's
``linear_qkv`` and ``linear_fc1``, ``compute.linears: fused``, the default), and ``Op.parts``
names the linears such a GEMM stands for. torchtitan's Llama does not fuse them:
``Attention`` holds ``wq``, ``wk``, ``wv`` and ``wo`` and ``FeedForward`` holds ``w1``,
``w2``, ``w3``, each its own ``nn.Linear``, and ``Attention.forward`` runs
``self.wq(x), self.wk(x), self.wv(x)``, ``FeedForward.forward`` ``self.w2(F.silu(self.w1(x))
* self.w3(x))`` (torchtitan 0.1.0 and 0.2.0, ``torchtitan/models/llama3/model/model.py``,
read in the PyPI wheels; the Dec 2024 ``torchtitan/models/llama/model.py`` has the same
classes). NeMo AutoModel's Llama, Qwen3 and GPT-OSS recipes run the Hugging Face modules,
whose ``q_proj``, ``k_proj``, ``v_proj`` and ``gate_proj``, ``up_proj`` are separate
``nn.Linear`` too. With ``compute.linears: separate`` such a GEMM runs as its parts:

- forward (m, n, k) with parts (w1, ..., wj), Σ wi = n: j GEMMs (m, wi, k);
- dgrad (m, k, n): j GEMMs (m, k, wi), each writing a full m x k input gradient, which
  autograd then sums (``summed_gradient``): one kernel reading the j gradients and
  writing their sum, dt·(j + 1)·m·k bytes (the sum inductor fuses under torch.compile;
  eager autograd adds them pairwise in j - 1 in-place kernels, 2·(j - 2)·m·k·dt bytes
  more for QKV, not modelled);
- wgrad (n, k, m): j GEMMs (wi, k, m), one per weight.

Each GEMM touches its own operands and output once: dt·(a·b + b·c + a·c) bytes for a GEMM
(a, b, c), dt the fused op's bytes per element (``ops.gemm``); FLOPs 2·a·b·c. Smaller N
pads and quantises worse (``compute.gemm_efficiency``: tiles, waves), and each GEMM pays a
launch: that is the cost of not fusing. FP8 casts stay the fused op's: torchao casts each
``Float8Linear``'s input, but the three casts of one x are the same graph nodes and
torch.compile's AOTAutograd CSE merges them.
"""

from __future__ import annotations

from simtrain.workload.ops import Op


def _split_axis(op: Op) -> int:
    """The gemm_shape axis the parts split: n of a forward GEMM (m, n, k), the reduction
    of its dgrad (m, k, n), the rows of its wgrad (n, k, m)."""
    return {None: 1, "input": 2, "weight": 0}[op.grad]


def separate_gemms(op: Op) -> list[Op]:
    """The GEMMs a fused GEMM ``op`` with ``parts`` runs as separate linears (module
    docstring), forward, dgrad or wgrad alike; ``[op]`` for an op without parts.

    Each piece keeps the op's role, grad and groups and owns no parameters (their times
    are what matters; the op keeps its parameters). Raises ValueError when the parts do
    not add up to the split axis.
    """
    if op.kind != "gemm" or len(op.parts) < 2:
        return [op]
    if op.gemm_shape is None:
        raise ValueError(f"gemm op {op.name!r} has no gemm_shape; give it (m, n, k)")
    shape = op.gemm_shape
    axis = _split_axis(op)
    if sum(op.parts) != shape[axis]:
        raise ValueError(f"op {op.name!r}: parts {op.parts} do not sum to its "
                         f"{shape[axis]} (axis {axis} of {shape})")
    a, b, c = shape
    dt = op.bytes / (op.groups * (a * b + b * c + a * c))
    pieces = []
    for i, w in enumerate(op.parts):
        s = list(shape)
        s[axis] = w
        x, y, z = s
        pieces.append(Op(f"{op.name}.part{i}", "gemm", 2.0 * x * y * z * op.groups,
                         dt * op.groups * (x * y + y * z + x * z), (x, y, z), (), 0.0,
                         op.grad, op.role, op.groups))
    return pieces


def summed_gradient(op: Op) -> Op | None:
    """The sum of the separate linears' input gradients after a dgrad ``op`` with j > 1
    parts: one kernel reading j m x k gradients and writing one, dt·(j + 1)·m·k bytes
    (module docstring); None for any other op."""
    if op.kind != "gemm" or op.grad != "input" or len(op.parts) < 2:
        return None
    assert op.gemm_shape is not None, "separate_gemms checks the shape first"
    m, k, n = op.gemm_shape
    dt = op.bytes / (op.groups * (m * k + k * n + m * n))
    j = len(op.parts)
    return Op(f"{op.name}.sum", "elementwise", float((j - 1) * m * k * op.groups),
              dt * (j + 1) * m * k * op.groups, None, (), 0.0, "input", op.role)


def separate_kernels(op: Op) -> list[Op]:
    """Every kernel ``op`` runs as separate linears: its GEMMs, then the gradient sum."""
    out = separate_gemms(op)
    total = summed_gradient(op)
    return out if total is None else [*out, total]

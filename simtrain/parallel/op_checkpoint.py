"""Per-op selective activation checkpointing as torchtitan runs it (``recompute: op``).

torchtitan's "selective op" AC (``activation_checkpoint.mode = "selective"``,
``selective_ac_option = "op"``: the default of its Llama 3 8B config, and the "per-op SAC"
of its benchmarks) wraps every transformer block in PyTorch's selective checkpoint with
this policy (``torchtitan/models/llama/parallelize_llama.py`` ``_apply_ac_to_transformer_
block``, moved to ``torchtitan/distributed/activation_checkpoint.py`` in 2025):

- ``_save_list`` = {``aten.mm``, the flash and memory-efficient SDPA kernels,
  ``_c10d_functional.reduce_scatter_tensor`` (as the list reads in 2025; it matters only
  with TP, and the Dec 2024 rows have none), ``aten.max``}: these outputs are saved
  (MUST_SAVE); every other op of the block is PREFER_RECOMPUTE (read from the code as
  recalled, not re-checked at the cited commits: no network on this machine);
- "Saves output of all compute ops, except every second mm": a per-block counter of
  ``aten.mm`` calls in forward order; the 2nd, 4th, ... mm's are recomputed.

torchtitan's Llama block runs seven mm's in this order: wq, wk, wv (separate linears,
``Attention.forward``), wo, then w1, w3, w2 (``FeedForward.forward``: ``w2(silu(w1(x)) *
w3(x))``), so wk, wo and w3 are recomputed and wq, wv, w1, w2 and the attention output
saved. simtrain fuses QKV and SwiGLU's gate/up into one GEMM each; ``Op.parts`` names the
separate linears, and the recomputed ones run as their own GEMMs.

The recompute (non-reentrant checkpoint: on the first unpack, the block's forward re-runs
with the saved outputs taken from the cache) runs, before the block's backward: the
recomputed mm's, every memory-bound kernel (norms, RoPE, SwiGLU, residual adds), the
grouped expert GEMMs (``aten._grouped_mm`` is not in the save list) and the collectives
whose outputs were not saved: the TP all-gathers (SP) and all-reduces, and EP all-to-alls.
Reduce-scatters are saved. CP attention (SDPA, saved) and its K,V exchange are not re-run.
The fused attention is saved only when it runs as a flash or memory-efficient SDPA kernel;
torchtitan's cuDNN SDPA on Blackwell is re-run (``compute.attention_impl: cudnn``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from simtrain.parallel.shard import Comm, Compute, Ring, Step
from simtrain.parallel.templates import unhandled
from simtrain.workload.ops import Op

# Collectives whose output the policy saves (``_c10d_functional.reduce_scatter_tensor``).
SAVED_COLLECTIVES = ("reduce_scatter",)
# Groups whose collectives belong to a saved kernel (CP: ring/all-gather SDPA).
SAVED_GROUPS = ("cp", "cp_a2a", "cp_ring")


def linears(op: Op) -> list[Op]:
    """The separate linears (``aten.mm`` calls) a GEMM ``op`` stands for, in forward order.

    A GEMM (m, n, k) with ``parts`` (w1, ..., wj) summing to n is j GEMMs (m, wi, k) of
    2·m·wi·k FLOPs each, touching X, their own weight rows and their output: dt·(m·k +
    wi·k + m·wi) bytes, dt the op's bytes per element (dt·(m·k + n·k + m·n) for the fused
    one). Without parts, the op itself. The pieces own no parameters (recompute only).
    """
    if op.kind != "gemm" or not op.parts:
        return [op]
    assert op.gemm_shape is not None, "gemm() gives every GEMM its shape"
    m, n, k = op.gemm_shape
    if sum(op.parts) != n:
        raise ValueError(f"op {op.name!r}: parts {op.parts} do not sum to its {n} outputs")
    dt = op.bytes / (m * k + n * k + m * n)
    return [Op(f"{op.name}.part{i}", "gemm", 2.0 * m * w * k, dt * (m * k + w * k + m * w),
               (m, w, k), (), 0.0, role=op.role, groups=op.groups)
            for i, w in enumerate(op.parts)]


def counts_as_mm(op: Op) -> bool:
    """Whether ``op`` is an ``aten.mm`` of the policy: a dense linear (not a grouped expert
    GEMM, ``aten._grouped_mm``, nor a standard attention kernel's batched GEMM)."""
    return op.kind == "gemm" and op.groups == 1 and op.role is None


def recomputed_steps(steps: Sequence[Step], attention_saved: bool = True) -> tuple[Step, ...]:
    """The steps of a transformer block (forward order) that per-op checkpointing re-runs
    before the block's backward (module docstring): every second mm, every other kernel
    but the fused attention, and the collectives whose outputs are not saved.
    ``attention_saved`` False: the fused attention is re-run too (SDPA's cuDNN backend is
    not in the save list, ``simtrain.workload.attention_impl.op_sac_saves_attention``)."""
    out: list[Step] = []
    mm = 0
    for step in steps:
        match step:
            case Compute(op=op) if counts_as_mm(op):
                for piece in linears(op):
                    mm += 1
                    if mm % 2 == 0:
                        out.append(Compute(replace(piece, params=())))
            case Compute(op=op) if op.kind == "attention":
                if not attention_saved:  # cuDNN SDPA: re-run
                    out.append(Compute(replace(op, params=())))
            case Compute(op=op):
                out.append(Compute(replace(op, params=())))
            case Comm():
                if (step.fwd is not None and step.fwd not in SAVED_COLLECTIVES
                        and step.group not in SAVED_GROUPS):
                    out.append(step)
            case Ring():
                pass  # SDPA over the CP ring: saved
            case _:
                raise unhandled(step)
    return tuple(out)


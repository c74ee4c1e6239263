"""SMs Transformer Engine's userbuffers hold beside their GEMMs (``--tp-comm-overlap``).

Megatron-Core's ``--tp-comm-overlap`` hands the sequence-parallel all-gathers and
reduce-scatters to Transformer Engine's userbuffers (``initialize_ub``), not to NCCL. They do
not hold NCCL's channels while they run: TE gives each overlapped site its own SM count.
TE 1.9 (``transformer_engine/pytorch/module/base.py``, ``initialize_ub`` ``get_default_config``,
used when no ``ub_cfgs`` are given, as Megatron-LM's ``--tp-comm-overlap`` without
``--tp-comm-overlap-cfg`` does):

- ``ring_exchange`` (``qkv_fprop``, ``fc1_fprop``, ``proj_dgrad``, ``fc2_dgrad``: every
  all-gather simtrain pipelines, forward input and backward output gradient):
  ``num_sm = 1``, ``use_ce = True``: the chunks move by copy engine, and one SM runs the
  signalling kernel;
- ``pipeline`` (``proj_fprop``, ``fc2_fprop``: the forward reduce-scatters) and ``bulk``
  (``qkv_wgrad``, ``fc1_wgrad``: the backward reduce-scatter of the input gradient beside the
  wgrad GEMM): ``num_sm = 16``, ``set_sm_margin = False``.

TE 2.14 keeps the same defaults in C++ (``comm_gemm_overlap.h``: ``CommOverlapBase``
``num_comm_sm = 16``; ``CommOverlapP2PBase`` ``num_comm_sm = 1``, ``use_ce = true``). NeMo's
tuned configs (nemo_toolkit 2.4.0 ``recipes/tp_overlap_configs/userbuffers.py``) use 1 SM
ring exchanges for every FP8 all-gather and reduce-scatter in the forward, and 2-32 SMs for
the bulk and pipeline sites; the defaults above are what simtrain charges (range 1-32 SMs).
The copy engines still move the bytes through HBM: the HBM share stays as for any collective
(``interference.py``). PyTorch's symmetric-memory async TP is not userbuffers and keeps the
NCCL-channel charge.
"""

from __future__ import annotations

# SMs a userbuffers site holds while it runs, by the collective simtrain pipelines there.
UB_COMM_SMS: dict[str, int] = {"all_gather": 1, "reduce_scatter": 16}


def userbuffers_sms(op: str) -> int:
    """SMs TE's userbuffers hold for a pipelined TP ``op`` (all_gather: ring exchange on the
    copy engines, 1; reduce_scatter: pipeline / bulk, 16)."""
    if op not in UB_COMM_SMS:
        raise ValueError(f"userbuffers overlap TP all_gather and reduce_scatter only, got {op!r}")
    return UB_COMM_SMS[op]

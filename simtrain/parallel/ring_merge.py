"""PyTorch ring attention's per-step merge and accumulation kernels.

PyTorch's context parallelism (``torch.distributed.tensor.experimental.context_parallel``,
``_context_parallel/_attention.py``) runs ring attention as one SDPA call per ring step and
combines the steps' partial results with separate PyTorch ops, in fp32 by default
(``_ContextParallelOptions.convert_to_f32 = True``), with the head-tail load balancing
(``enable_load_balance = True``): a rank's steps after the first use half of its queries
(``partial``) or half of the received keys. Bytes per element of the rank's attention
output (E elements, bf16 SDPA tensors) and of the K,V it holds (E_kv, K and V together):

Forward (``_templated_ring_attention``, ``_SDPAMerger``): the first step's output is cast
to fp32 (read 2, write 4: 6 B); each later step casts its output (6 B) and merges it into
the running output, ``out - sigmoid(lse_i - lse)·(out - out_i)``: three unfused passes
(12 + 8 + 12 B), 38 B in all; on the partial half 19 B plus ``_partial_update``'s
``torch.cat`` of the whole output (8 B), 27 B; over the ranks each kind is half of the
steps after the first: 32.5 B. The K,V for the next rank are copied into one buffer
(``torch.cat``: read and write, 4 B per E_kv) on every step but the last; the result is
cast back (6 B).

Backward (``_templated_ring_attention_backward``): fp32 zero accumulators (4 B per E and
E_kv); each step adds its bf16 gradients into them (read 4 + 2, write 4: 10 B), on the
half-chunk steps through ``_partial_update``'s add and cat (5 + 8 = 13 B): 11.5 B on
average, for dQ and dK,dV; copies dK,dV into the fp32 send buffer (8 B per E_kv) every
step and K,V into theirs (4 B) every step but the last; casts dQ and dK,dV back (6 B).

Only the steps' kernels of memory traffic are counted here; the SDPA blocks and the K,V
and dK,dV passes are ``context.py``'s. Transformer Engine's context parallelism (NeMo,
Megatron) corrects its outputs in fused kernels and is not costed this way.
"""

from __future__ import annotations

FP32_CAST = 6.0  # read bf16 (2), write fp32 (4); also the cast back (read 4, write 2)
FWD_STEP = (38.0 + 27.0) / 2  # a later step's cast and merge: full query, partial half
KV_CAT = 4.0  # torch.cat of K,V into the send buffer: read 2, write 2 per element
ACCUMULATE = (10.0 + 13.0) / 2  # fp32 += bf16, plain or through _partial_update
DKV_CAT = 8.0  # torch.cat of the fp32 dK,dV accumulators into the send buffer
ZEROS = 4.0  # fp32 zero-initialised accumulators


def forward_merge_bytes(out_elems: float, kv_elems: float, steps: int) -> float:
    """HBM bytes of one forward ring attention's merges over ``steps`` ring steps:
    E·(6 + 32.5·(steps - 1) + 6) + E_kv·4·(steps - 1)."""
    e, k, n = out_elems, kv_elems, steps
    return e * (FP32_CAST + FWD_STEP * (n - 1) + FP32_CAST) + k * KV_CAT * (n - 1)


def backward_merge_bytes(out_elems: float, kv_elems: float, steps: int) -> float:
    """HBM bytes of one backward ring attention's accumulations over ``steps`` steps:
    E·(4 + 11.5·steps + 6) + E_kv·(4 + (11.5 + 8)·steps + 4·(steps - 1) + 6)."""
    e, k, n = out_elems, kv_elems, steps
    return (e * (ZEROS + ACCUMULATE * n + FP32_CAST)
            + k * (ZEROS + (ACCUMULATE + DKV_CAT) * n + KV_CAT * (n - 1) + FP32_CAST))

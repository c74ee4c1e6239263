"""Copies around sequence-parallel collectives when the sequence is not the outer dimension.

Megatron-Core keeps activations sequence-first, [s, b, h] (``model.layout: sbh``): SP's
all-gather and reduce-scatter split dimension 0, so NCCL reads and writes the tensors in
place. PyTorch-native models (torchtitan's Llama) keep them batch-first, [b, s, h]
(``bsh``), and shard the sequence on dimension 1 (``SequenceParallel``, ``Shard(1)``).
NCCL gathers and scatters along dimension 0 only, so PyTorch's functional collectives
(``torch.distributed._functional_collectives``, which DTensor's redistribute calls)
reorder around them: ``all_gather_single`` with ``gather_dim != 0`` gathers into a
[tp·b, s/tp, h] buffer and then ``torch.cat(torch.chunk(out, tp, 0), dim=gather_dim)``;
``reduce_scatter_single`` with ``scatter_dim != 0`` first copies its input into chunk
order (``_chunk_or_narrow_cat``). Each is one copy kernel of the full tensor on the compute
stream, read and written: 2·n bytes for an n-byte gathered activation
(``vanilla_copy_bytes``), before a reduce-scatter and after an all-gather, forward and
backward alike.

With async TP (``tp_comm_overlap``: torch's symmetric-memory micro-pipeline, ``torch.
distributed._symmetric_memory``, which inductor substitutes for all-gather + matmul and
matmul + reduce-scatter) the reorder disappears into the pipelined loop, which has its
own serial copies: ``_pipelined_multi_all_gather_and_consume`` copies the local shard
into the symmetric buffer before the first matmul ("mv"; the source gives up overlapping
it), 2·n/tp bytes; ``_fused_matmul_reduce_scatter_impl`` sums the tp stacked partial
outputs it received after the loop (``torch.sum(dim=0)``): n bytes read, n/tp written
(``async_copy_bytes``). The shard copy precedes the all-gather (and, in backward, the
sum follows the reduce-scatter it becomes), so the GEMM pipeline next to the collective
stays intact. Newer PyTorch skips the forward cat when b = 1 (``_maybe_view_chunk_cat``);
the suites' runs predate it, so ``bsh`` always copies.
"""

from __future__ import annotations

from typing import Literal

from simtrain.workload.ops import Op


def vanilla_copy_bytes(nbytes: float) -> float:
    """HBM bytes of the chunk-cat copy beside an SP collective of ``nbytes``: 2·n."""
    return 2.0 * nbytes


def async_copy_bytes(nbytes: float, tp: int) -> tuple[float, float]:
    """(all-gather side, reduce-scatter side) HBM bytes of async TP's serial copies around
    a collective of ``nbytes``: the local shard's copy 2·n/tp, the partials' sum n·(1 + 1/tp).
    """
    return 2.0 * nbytes / tp, nbytes * (1.0 + 1.0 / tp)


def layout_copies(name: str, site: Literal["f", "g"], nbytes: float, tp: int,
                  overlap: bool, bwd_nbytes: float | None = None, fused_bwd: bool = True
                  ) -> tuple[list[Op], list[Op]]:
    """(ops before, ops after) the SP collective at ``site`` under the batch-first layout;
    ``nbytes`` / ``bwd_nbytes`` (default: the same) are what the forward / backward
    collective moves (an FP8 all-gather moves, and its copy reorders, FP8 bytes).

    Vanilla: f (all-gather forward, reduce-scatter backward) copies after the collective,
    g (reduce-scatter forward, all-gather backward) before it; backward reverses the order,
    so the same op sits before the backward reduce-scatter and after the backward
    all-gather. Async TP: f copies the shard before the all-gather (backward: the sum
    after its reduce-scatter), g sums after the reduce-scatter (backward: the shard copy
    before its all-gather). ``fused_bwd`` false: f's backward reduce-scatter stays a plain
    one (PyTorch's pass fuses no sum of several linears' dgrads, ``tensor.py``), so its
    copy is the vanilla chunk-cat, 2·n; the kernel then sits after that exposed
    reduce-scatter instead of before it, the same serial time.
    """
    back = nbytes if bwd_nbytes is None else bwd_nbytes
    if overlap:
        if site == "f":  # forward: the all-gather's shard copy; backward: the RS's sum
            fwd, bwd = async_copy_bytes(nbytes, tp)[0], async_copy_bytes(back, tp)[1]
            if not fused_bwd:  # backward: the plain reduce-scatter's chunk-cat
                bwd = vanilla_copy_bytes(back)
        else:  # forward: the reduce-scatter's sum; backward: the all-gather's shard copy
            fwd, bwd = async_copy_bytes(nbytes, tp)[1], async_copy_bytes(back, tp)[0]
        op = _copy(f"{name}.sp_copy", fwd, bwd)
        return ([op], []) if site == "f" else ([], [op])
    op = _copy(f"{name}.sp_copy", vanilla_copy_bytes(nbytes), vanilla_copy_bytes(back))
    return ([], [op]) if site == "f" else ([op], [])


def _copy(name: str, fwd_bytes: float, bwd_bytes: float) -> Op:
    """A memory-bound copy kernel whose backward moves ``bwd_bytes``."""
    return Op(name, "elementwise", 0.0, fwd_bytes, None, (), 0.0, backward_bytes=bwd_bytes)

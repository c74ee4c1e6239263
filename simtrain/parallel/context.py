"""Context parallelism: ring attention's blocks and K,V passes around the CP ring.

Every CP rank holds s/cp tokens (``shard.py``). Ring attention (Liu et al. 2023; Megatron-
Core's context parallelism) runs one blockwise attention step per ring member; between
them each rank passes the K,V block it holds to the next rank of the ring (steps - 1
passes), so each pass overlaps the block computed meanwhile. The backward passes K,V and
dK,dV (twice the bytes). PyTorch's ring adds its merge kernels to each block (``ring_merge.py``).
Each pass uses its own stream per ring link ("cp a>b"). The ring
is the CP group, or under a2a+p2p each group of CP ranks holding the same heads. The
all-gather and all-to-all (Ulysses) variants are plain collectives (``shard.py``; their
traffic in ``context_volume.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simtrain.parallel.emit import Emitter
from simtrain.parallel.shard import Ring
from simtrain.parallel.templates import RingAttention
from simtrain.workload.model import Op, backward_ops


def ring_block(op: Op, steps: int) -> Op:
    """One of the ``steps`` attention blocks of ``op``: 1/steps of its FLOPs and bytes."""
    return Op(f"{op.name}.block", op.kind, op.flops / steps, op.bytes / steps, None, (), 0.0)


def merge_time(ring: Ring, nbytes: float, duration: Callable[[Op], float]) -> float:
    """Seconds per ring step of ``nbytes`` of merge kernels over the ring's steps (PyTorch's
    ring, ``ring_merge.py``; memory-bound), 0 without them."""
    if nbytes <= 0:
        return 0.0
    op = Op(f"{ring.op.name}.merge", "elementwise", 0.0, nbytes / ring.steps, None, (), 0.0)
    return duration(op)


def ring_forward(ring: Ring, kind: str, layer: int,
                 duration: Callable[[Op], float]) -> RingAttention:
    """The forward (or, with ``kind`` "recompute", recomputed) ring attention of ``ring``;
    each block carries its share of the merge kernels."""
    blk = ring_block(ring.op, ring.steps)
    base = duration(blk) + merge_time(ring, ring.merge_bytes[0], duration)
    return RingAttention(ring.op.name, kind, base, blk.flops, ring.kv_bytes,
                         ring.steps, layer, ring.group)


def ring_backward(ring: Ring, layer: int,
                  duration: Callable[[Op], float]) -> RingAttention:
    """The backward: blocks of the attention backward (with their share of the
    accumulation kernels); K,V and dK,dV passed on."""
    bwd = backward_ops(ring.op)[0]
    blk = ring_block(bwd, ring.steps)
    base = duration(blk) + merge_time(ring, ring.merge_bytes[1], duration)
    return RingAttention(bwd.name, "backward", base, blk.flops, 2 * ring.kv_bytes,
                         ring.steps, layer, ring.group)


def emit_ring(em: Emitter, stage: int, t: RingAttention, meta: dict[str, Any]) -> None:
    """``t`` on every ring of ``stage``: block j waits for the K,V pass j - 1 received."""
    st, g = em.state, em.graph
    for grp in em.groups(stage, t.group):
        n = len(grp)
        nxt = {grp[i]: grp[(i + 1) % n] for i in range(n)}
        have = {r: em.dep(r) for r in grp}  # what each rank forwards next
        recv: dict[int, int] = {}
        for j in range(t.steps):
            sends: dict[int, int] = {}
            if j < t.steps - 1:
                for r in grp:
                    dst = nxt[r]
                    sends[dst] = em.p2p(r, dst, t.nbytes, f"{t.name} kv {j}", kind="cp_comm",
                                        stream=f"cp {r}>{dst}", deps=have[r], meta=meta)
            for r in grp:
                deps = em.dep(r) + ([recv[r]] if r in recv else [])
                st.frontier[r] = [g.compute(r, f"{t.name} block {j}", t.base, kind=t.kind,
                                            deps=deps, flops=t.flops, meta=meta)]
            recv = sends
            have = {r: [sends[r]] for r in sends}

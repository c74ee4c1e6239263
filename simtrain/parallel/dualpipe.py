"""DualPipe (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", Sec. 3.2.1, Fig. 5, Table 2):
a bidirectional pipeline fed from both ends, overlapping one chunk's forward with another
chunk's backward.

Each of the p ranks holds two model chunks, each a p-th of the model: rank i holds stage i
of a copy fed from rank 0 (direction 0) and stage p - 1 - i of a second copy fed from rank
p - 1 (direction 1), so the parameters are held twice. In simtrain's terms that is the V
placement (``v_shape``: chunk 0 of rank i is model chunk i, chunk 1 is 2p - 1 - i) with
two routes: the first m/2 microbatches pass model chunks 0..p-1 (ranks 0 -> p - 1), the
other m/2 pass p..2p-1 (ranks p - 1 -> 0); each route's p chunks cut the whole model.

The order is DeepSeek's (``dualpipe.py`` of deepseek-ai/DualPipe, eight steps per rank;
h = min(i, p - 1 - i) the rank's distance from its nearer end, P = p/2, M = m/2; "phase 0"
is the direction fed from the rank's own half, phase 1 the other):

1. 2(P - h - 1) forwards of phase 0;
2. h + 1 pairs: forward phase 0, forward phase 1;
3. P - h - 1 times: backward phase 1 (input gradients only), its weight gradients, forward
   phase 1;
4. M - p + h + 1 times: forward phase 0 overlapped with backward phase 1, then forward
   phase 1 overlapped with backward phase 0 (the middle ranks run the very first pair one
   after the other);
5. P - h - 1 times: backward phase 1, then forward phase 1 overlapped with backward
   phase 0;
6. h + 1 pairs of backward phase 1, backward phase 0, the second half of them input
   gradients only (zero bubble), their weight gradients deferred;
7. P - h - 1 times: the oldest deferred weight gradients, backward phase 0 (input only);
8. h + 1 times: the oldest deferred weight gradients.

A full backward is B then W at once; an overlapped pair is marked ``Step.overlap`` on its
forward and its backward: the lowering interleaves the forward's and the backward's tasks
(``lower.py``), so one's compute runs while the other's collectives (EP all-to-alls, TP)
do, as DeepSeek's chunk pairs do.

Table 2 (F, B a chunk's forward and full backward, W its weight gradients, F&B an
overlapped pair): bubble (P - 1)(F&B + B - 3W) against 1F1B's (p - 1)(F + B); parameters
2x; activations p + 1 chunk-microbatches against 1F1B's p. Needs p even and m >= 2p, m even.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache

from simtrain.parallel.pipeline_schedule import Phase, Step


def dualpipe_problems(p: int, m: int | None, v: int) -> list[tuple[str, str]]:
    """Why DualPipe cannot run p ranks, m microbatches, v chunks per rank."""
    if p < 2 or p % 2:
        return [("parallelism.pp", f"schedule: dualpipe feeds the pipeline from both ends, "
                 f"so it needs an even number of stages >= 2, got pp={p}; use an even pp")]
    if v != 2:
        return [("parallelism.vpp", f"schedule: dualpipe holds two model chunks per rank "
                 f"(one per direction), so it needs vpp: 2, got vpp={v}; set vpp: 2")]
    if m is not None and (m < 2 * p or m % 2):
        return [("training.global_batch_size", f"schedule: dualpipe needs an even number of "
                 f"microbatches >= 2 x pp = {2 * p}, got {m}; raise the global batch (or "
                 f"lower micro_batch_size) to give at least {2 * p}, an even number")]
    return []


def dualpipe_routes(p: int, m: int) -> tuple[tuple[int, ...], ...]:
    """Microbatches 0..m/2-1 pass model chunks 0..p-1, the rest p..2p-1 (the second copy,
    ranks p - 1 down to 0)."""
    return tuple(tuple(range(p)) if mb < m // 2 else tuple(range(p, 2 * p))
                 for mb in range(m))


def dualpipe(p: int, m: int, v: int) -> list[list[Step]]:
    """Per rank, DualPipe's steps in execution order (V placement, two routes)."""
    return [list(steps) for steps in _build(p, m)]


@lru_cache(maxsize=64)
def _build(p: int, m: int) -> tuple[tuple[Step, ...], ...]:
    return tuple(tuple(_rank(i, p, m)) for i in range(p))


def _rank(i: int, p: int, m: int) -> list[Step]:
    half, big_m = p // 2, m // 2
    h = min(i, p - 1 - i)
    second = int(i >= half)
    middle = h == half - 1
    out: list[Step] = []
    nf, nb = [0, 0], [0, 0]  # next microbatch index per direction (chunk)
    deferred: deque[tuple[int, int]] = deque()  # (chunk, microbatch) whose W waits

    def mb(chunk: int, k: int) -> int:
        return k if chunk == 0 else big_m + k

    def add(phase: Phase, ph: int, overlap: bool = False) -> tuple[int, int]:
        chunk = ph ^ second  # phase 0 is the direction fed from this rank's half
        counter = nf if phase == "F" else nb
        k = counter[chunk]
        counter[chunk] += 1
        out.append(Step(i, mb(chunk, k), phase, chunk, overlap))
        return chunk, mb(chunk, k)

    def full_backward(ph: int, overlap: bool = False) -> None:
        chunk, micro = add("B", ph, overlap)
        out.append(Step(i, micro, "W", chunk))

    def zb_backward(ph: int, overlap: bool = False) -> None:
        deferred.append(add("B", ph))

    def weight() -> None:
        chunk, micro = deferred.popleft()
        out.append(Step(i, micro, "W", chunk))

    def pair(f_ph: int, b_ph: int) -> None:
        add("F", f_ph, overlap=True)
        full_backward(b_ph, overlap=True)

    for _ in range(2 * (half - h - 1)):  # 1: nF0
        add("F", 0)
    for _ in range(h + 1):  # 2: nF0F1
        add("F", 0)
        add("F", 1)
    for _ in range(half - h - 1):  # 3: nB1W1F1
        zb_backward(1)
        weight()
        add("F", 1)
    for k in range(big_m - p + h + 1):  # 4: nF0B1F1B0
        if k == 0 and middle:  # not overlapped, to shorten the bubble (DeepSeek's note)
            add("F", 0)
            full_backward(1)
        else:
            pair(0, 1)
        pair(1, 0)
    for _ in range(half - h - 1):  # 5: nB1F1B0
        full_backward(1)
        pair(1, 0)
    zb = False
    steps_6 = h + 1
    for k in range(steps_6):  # 6: nB1B0, the second half zero-bubble
        if k == steps_6 // 2 and h % 2 == 1:
            zb = True
        (zb_backward if zb else full_backward)(1)
        if k == steps_6 // 2 and h % 2 == 0:
            zb = True
        (zb_backward if zb else full_backward)(0)
    for _ in range(half - h - 1):  # 7: nWB0
        weight()
        zb_backward(0)
    while deferred:  # 8: nW
        weight()
    return out

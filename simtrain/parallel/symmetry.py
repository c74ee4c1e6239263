"""Symmetric and hybrid fidelity: simulate one rank per role, and load the network with the others.

Data-parallel replicas are identical, and so are the ranks of a tensor-parallel group
(Megatron splits evenly), so under ``symmetric`` fidelity only tp = dp = 0 of each
pipeline stage (every CP rank of it) is emitted; every other rank is virtual. A collective
among simulated ranks stands for its images under the shifts along dp and tp; the images
that hold no simulated rank are nobody's task, yet their traffic shares the links, so each
collective carries them as ``copies`` (``engine/taskgraph.py``).

A ``Symmetry`` says this per coordinate: ``mirror_dp[d]`` is the data-parallel index whose
rank rank ``d`` behaves like (itself when it is simulated), ``mirror_tp`` the same along
tp; pp and cp are always simulated in full. Symmetric fidelity mirrors everything onto
dp = tp = 0; hybrid fidelity (``hybrid.py``) keeps some replicas and tp indices as
themselves. A virtual rank's mirror must sit in every group the virtual rank is in, so a
collective that waits for its simulated members waits for the virtual ones too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simtrain.parallel.plan import ParallelDims


@dataclass(frozen=True)
class Symmetry:
    """Which ranks are simulated, and which simulated rank every other rank mirrors."""

    mirror_dp: tuple[int, ...]  # dp index -> the dp index it behaves like
    mirror_tp: tuple[int, ...]  # tp index -> the tp index it behaves like

    @classmethod
    def symmetric(cls, dims: ParallelDims) -> Symmetry:
        """Every replica mirrors dp = 0 and every TP rank tp = 0."""
        return cls((0,) * dims.dp, (0,) * dims.tp)

    def __post_init__(self) -> None:
        for mirror in (self.mirror_dp, self.mirror_tp):
            assert all(mirror[m] == m for m in mirror), f"a mirror must mirror itself: {mirror}"

    @property
    def dp_indices(self) -> list[int]:
        """Simulated data-parallel indices, ascending."""
        return [d for d, m in enumerate(self.mirror_dp) if m == d]

    @property
    def tp_indices(self) -> list[int]:
        """Simulated tensor-parallel indices, ascending."""
        return [t for t, m in enumerate(self.mirror_tp) if m == t]

    def stage_ranks(self, dims: ParallelDims, stage: int) -> list[int]:
        """Simulated ranks of ``stage`` ordered by (dp, cp, tp), as ``dims.stage_ranks``."""
        return [dims.rank(tp=t, cp=c, pp=stage, dp=d) for d in self.dp_indices
                for c in range(dims.cp) for t in self.tp_indices]

    def weights(self, dims: ParallelDims) -> dict[int, int]:
        """Simulated rank -> how many ranks it stands for (itself and its mirrors)."""
        ranks = np.arange(dims.world_size)
        dp = ranks // dims.stride("dp") % dims.dp
        tp = ranks // dims.stride("tp") % dims.tp
        md, mt = np.asarray(self.mirror_dp), np.asarray(self.mirror_tp)
        mirrors = ranks + (md[dp] - dp) * dims.stride("dp") + (mt[tp] - tp) * dims.stride("tp")
        found, counts = np.unique(mirrors, return_counts=True)
        return dict(zip(found.tolist(), counts.tolist(), strict=True))


def simulated_stage_ranks(dims: ParallelDims, symmetry: Symmetry | None) -> list[list[int]]:
    """Per pipeline stage, the ranks whose tasks are emitted (index k of every stage is the
    p2p partner of index k of its neighbours); every rank when ``symmetry`` is None."""
    if symmetry is not None:
        return [symmetry.stage_ranks(dims, s) for s in range(dims.pp)]
    return [dims.stage_ranks(s) for s in range(dims.pp)]


class Images:
    """The unsimulated copies of each group, computed once per group."""

    def __init__(self, dims: ParallelDims, symmetry: Symmetry | None):
        self.dims = dims
        self.symmetry = symmetry
        self._copies: dict[tuple[int, ...], tuple[tuple[int, ...], ...]] = {}

    def copies(self, group: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """The images of ``group`` under the symmetries (shifts along dp and tp) made only of
        ranks that mirror ``group``'s simulated members — identical collectives nobody emits,
        whose traffic must still load the network. Images that touch a simulated rank are
        the group itself or groups emitted in their own right. Empty outside symmetric and
        hybrid fidelity."""
        if self.symmetry is None:
            return ()
        found = self._copies.get(group)
        if found is None:
            found = self._copies[group] = images(self.dims, group, self.symmetry)
        return found


def images(d: ParallelDims, group: tuple[int, ...],
           symmetry: Symmetry) -> tuple[tuple[int, ...], ...]:
    """``Images.copies`` without the cache."""
    coords = [d.coords(r) for r in group]
    dp_i = np.array([c["dp"] for c in coords])
    tp_i = np.array([c["tp"] for c in coords])
    base = np.array(group) - dp_i * d.stride("dp") - tp_i * d.stride("tp")
    # A group that a shift by k along an axis maps onto itself has only k distinct images
    # along it: a DP group (k = 1 along dp) has only tp images, not dp x tp, and an
    # expert-data-parallel group (every ep-th replica) only ep images along dp. Shifts
    # s and s + k give the same set; the first in shift order is the one kept below.
    members = set(group)
    dp_range = range(_period(members, base + tp_i * d.stride("tp"), dp_i, d.dp,
                             d.stride("dp")))
    tp_range = range(_period(members, base + dp_i * d.stride("dp"), tp_i, d.tp,
                             d.stride("tp")))
    # Every remaining (dp, tp) shift at once: images[shift, member].
    dp_s, tp_s = np.meshgrid(np.asarray(dp_range), np.asarray(tp_range), indexing="ij")
    dp_new = (dp_i[None, :] + dp_s.reshape(-1, 1)) % d.dp
    tp_new = (tp_i[None, :] + tp_s.reshape(-1, 1)) % d.tp
    shifted = base[None, :] + dp_new * d.stride("dp") + tp_new * d.stride("tp")
    md, mt = np.asarray(symmetry.mirror_dp), np.asarray(symmetry.mirror_tp)
    # An image is a copy of this group when none of its ranks is simulated (those that
    # touch one are the group or emitted in their own right) and every simulated member's
    # image mirrors that member: the image of a simulated replica's TP group in another
    # replica is a copy only if that replica mirrors it (not a separately simulated one).
    simulated = (md[dp_new] == dp_new) & (mt[tp_new] == tp_new)
    own = (md[dp_i] == dp_i) & (mt[tp_i] == tp_i)
    mirrors = (md[dp_new] == dp_i[None, :]) & (mt[tp_new] == tp_i[None, :])
    free = ~simulated.any(axis=1) & (mirrors | ~own[None, :]).all(axis=1)
    # Real groups partition the ranks: keep images disjoint from the group and from each
    # other (a shift that cuts across blocks, e.g. an expert-parallel block moved by one
    # replica, is not a group that exists).
    candidates = shifted[free]
    # Shifts that only permute the members give the same set: keep one per set, in shift
    # order. When the distinct sets are disjoint from the group and from each other (the
    # usual case: dp shifts of a TP group, tp shifts of a DP group), they are the answer
    # without a Python loop over every shift.
    if len(candidates):
        _, first = np.unique(np.sort(candidates, axis=1), axis=0, return_index=True)
        candidates = candidates[np.sort(first)]
    flat = np.concatenate([np.asarray(group), candidates.ravel()])
    rows: list[tuple[int, ...]] = list(map(tuple, candidates.tolist()))
    if len(np.unique(flat)) == len(flat):
        return tuple(rows)
    taken = set(group)
    found = []
    for image in rows:
        if taken.isdisjoint(image):
            taken.update(image)
            found.append(image)
    return tuple(found)


def _period(members: set[int], rest: np.ndarray, index: np.ndarray, size: int,
            stride: int) -> int:
    """The smallest k dividing ``size`` such that moving every member ``k`` along the axis
    (``rest`` + index x stride, index mod size) gives the same set of ranks."""
    for k in range(1, size + 1):
        if size % k == 0 and members == set((rest + (index + k) % size * stride).tolist()):
            return k
    return size  # unreachable: k = size maps every member onto itself

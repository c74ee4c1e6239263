"""Symmetric fidelity: simulate one rank per role, and load the network with the others.

Data-parallel replicas are identical, and so are the ranks of a tensor-parallel group
(Megatron splits evenly), so under ``symmetric`` fidelity only tp = dp = 0 of each
pipeline stage (every CP rank of it) is emitted; every other rank is virtual. A collective
among simulated ranks stands for its images under the shifts along dp and tp; the images
that hold no simulated rank are nobody's task, yet their traffic shares the links, so each
collective carries them as ``copies`` (``engine/taskgraph.py``).
"""

from __future__ import annotations

import numpy as np

from simtrain.parallel.plan import ParallelDims


def simulated_stage_ranks(dims: ParallelDims, symmetric: bool) -> list[list[int]]:
    """Per pipeline stage, the ranks whose tasks are emitted (index k of every stage is the
    p2p partner of index k of its neighbours)."""
    if symmetric:
        return [[dims.rank(pp=s, cp=c) for c in range(dims.cp)] for s in range(dims.pp)]
    return [dims.stage_ranks(s) for s in range(dims.pp)]


class Images:
    """The unsimulated copies of each group, computed once per group."""

    def __init__(self, dims: ParallelDims, symmetric: bool):
        self.dims = dims
        self.symmetric = symmetric
        self._copies: dict[tuple[int, ...], tuple[tuple[int, ...], ...]] = {}

    def copies(self, group: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """The images of ``group`` under the symmetries (shifts along dp and tp) that hold no
        simulated rank — identical collectives nobody emits, whose traffic must still load
        the network. Images that touch a simulated rank are the group itself or groups
        emitted in their own right. Empty outside symmetric fidelity."""
        if not self.symmetric:
            return ()
        found = self._copies.get(group)
        if found is None:
            found = self._copies[group] = images(self.dims, group)
        return found


def images(d: ParallelDims, group: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """``Images.copies`` without the cache."""
    coords = [d.coords(r) for r in group]
    dp_i = np.array([c["dp"] for c in coords])
    tp_i = np.array([c["tp"] for c in coords])
    base = np.array(group) - dp_i * d.stride("dp") - tp_i * d.stride("tp")
    # A group closed under a unit shift along an axis (a DP group along dp, a TP group
    # along tp) maps onto itself under every shift along it: only the other axis makes new
    # images, so a 512-way DP group has tp images, not dp x tp.
    members = set(group)
    dp_range = [0] if members == set((base + (dp_i + 1) % d.dp * d.stride("dp")
                                      + tp_i * d.stride("tp")).tolist()) else range(d.dp)
    tp_range = [0] if members == set((base + dp_i * d.stride("dp")
                                      + (tp_i + 1) % d.tp * d.stride("tp")).tolist()) \
        else range(d.tp)
    # Every remaining (dp, tp) shift at once: images[shift, member].
    dp_s, tp_s = np.meshgrid(np.asarray(dp_range), np.asarray(tp_range), indexing="ij")
    dp_new = (dp_i[None, :] + dp_s.reshape(-1, 1)) % d.dp
    tp_new = (tp_i[None, :] + tp_s.reshape(-1, 1)) % d.tp
    shifted = base[None, :] + dp_new * d.stride("dp") + tp_new * d.stride("tp")
    # Images holding a simulated rank (dp = tp = 0) are the group or emitted.
    free = ~((dp_new == 0) & (tp_new == 0)).any(axis=1)
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
    if len(np.unique(flat)) == len(flat):
        return tuple(tuple(int(r) for r in row) for row in candidates)
    taken = set(group)
    found = []
    for row in candidates:
        image = tuple(int(r) for r in row)
        if taken.isdisjoint(image):
            taken.update(image)
            found.append(image)
    return tuple(found)

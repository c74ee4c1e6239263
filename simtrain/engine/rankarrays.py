"""Array helpers of the span table's per-rank algebra (``spantable.py``): the rank order
of rows, first use of codes, and the search of one rank's intervals in another's."""

from __future__ import annotations

import numpy as np


def rank_order(rank: np.ndarray) -> np.ndarray:
    """int32 positions of ``rank`` (ranks >= 0) sorted by rank, ties in their order: the
    stable argsort, by radix (numpy's stable sort of 16-bit keys) where the ranks fit in
    16 bits, as they do up to 65,536 GPUs."""
    if len(rank) and int(rank.max()) <= np.iinfo(np.uint16).max:
        rank = rank.astype(np.uint16)
    return np.argsort(rank, kind="stable").astype(np.int32)


def first_use(codes: np.ndarray) -> list[int]:
    """The distinct values of ``codes`` in order of first occurrence (found among the
    places where the value changes: a task graph's kinds come in runs)."""
    if not len(codes):
        return []
    runs = codes[np.r_[0, np.flatnonzero(codes[1:] != codes[:-1]) + 1]].tolist()
    return list(dict.fromkeys(runs))


# Intervals per rank above which ``search_by_rank`` looks rank by rank (a few calls per rank, on
# floats) rather than once over all ranks (complex keys: 16 bytes per interval, twice).
PER_RANK_SEARCH = 64


def search_by_rank(a_starts: np.ndarray, a_ends: np.ndarray, na: np.ndarray,
                   b_starts: np.ndarray, b_ends: np.ndarray,
                   nb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two sets of sorted, disjoint intervals per rank, rank k's the k-th ``na[k]`` of a
    and ``nb[k]`` of b: for each interval of a, the position in b of the first interval of
    its rank that ends after it starts, and of the first that starts at or after it ends
    (the rank's end if none). A search by (rank, time): the same indices either way."""
    k = len(na)
    if len(a_starts) < PER_RANK_SEARCH * max(k, 1):
        ra = np.repeat(np.arange(k), na)  # each interval's rank index: the real part
        rb = np.repeat(np.arange(k), nb)
        return (np.searchsorted(rb + 1j * b_ends, ra + 1j * a_starts, side="right"),
                np.searchsorted(rb + 1j * b_starts, ra + 1j * a_ends, side="left"))
    lo = np.empty(len(a_starts), dtype=np.int64)
    hi = np.empty(len(a_starts), dtype=np.int64)
    ab = np.r_[0, np.cumsum(na)].tolist()
    bb = np.r_[0, np.cumsum(nb)].tolist()
    for j in range(k):
        a0, a1, b0, b1 = ab[j], ab[j + 1], bb[j], bb[j + 1]
        if a1 > a0:
            lo[a0:a1] = np.searchsorted(b_ends[b0:b1], a_starts[a0:a1], side="right") + b0
            hi[a0:a1] = np.searchsorted(b_starts[b0:b1], a_ends[a0:a1], side="left") + b0
    return lo, hi

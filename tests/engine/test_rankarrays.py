"""Array helpers of the per-rank algebra: the rank order, first use, the rank search."""

from __future__ import annotations

import numpy as np

from simtrain.engine import rankarrays


def test_rank_order_is_the_stable_sort_by_rank() -> None:
    rank = np.array([3, 1, 3, 0, 1], dtype=np.int32)
    assert rankarrays.rank_order(rank).tolist() == [3, 1, 4, 0, 2]  # ties in their order
    big = np.array([70_000, 2, 70_000, 1], dtype=np.int32)  # past 16 bits: the plain sort
    assert rankarrays.rank_order(big).tolist() == [3, 1, 0, 2]


def test_first_use_keeps_the_order_of_first_occurrence() -> None:
    assert rankarrays.first_use(np.array([4, 4, 1, 4, 2, 1])) == [4, 1, 2]
    assert rankarrays.first_use(np.array([], dtype=np.int64)) == []


def test_search_by_rank_by_hand_both_ways() -> None:
    # rank 0: a = [0,4); b = [1,2), [3,5): lo = first b ending after 0 -> 0, hi = first b
    # starting at or after 4 -> 2 (the rank's end). rank 1: a = [2,3); b = [0,1), [3,4):
    # lo = 3 (b[2] ends at 1 <= 2), hi = 3 (b[3] starts at 3 >= 3).
    a_s, a_e, na = np.array([0.0, 2.0]), np.array([4.0, 3.0]), np.array([1, 1])
    b_s, b_e, nb = np.array([1.0, 3.0, 0.0, 3.0]), np.array([2.0, 5.0, 1.0, 4.0]), np.array([2, 2])
    for per_rank in (0, 1 << 30):  # rank by rank, and all at once (complex keys)
        old = rankarrays.PER_RANK_SEARCH
        rankarrays.PER_RANK_SEARCH = per_rank
        try:
            lo, hi = rankarrays.search_by_rank(a_s, a_e, na, b_s, b_e, nb)
        finally:
            rankarrays.PER_RANK_SEARCH = old
        assert lo.tolist() == [0, 3] and hi.tolist() == [2, 3]

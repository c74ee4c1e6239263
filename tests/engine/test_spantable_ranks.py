"""Per-rank interval algebra: every rank at once gives what rank by rank gives, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.engine import rankarrays, spantable
from simtrain.engine.spantable import (
    RankIntervals,
    blocks,
    merge_by_rank,
    overlaps,
)
from simtrain.engine.timeline import (
    Span,
    Timeline,
    merge_intervals,
    overlap_length,
    union_length,
)


def test_merge_by_rank_by_hand() -> None:
    # rank 0: [0,2) and [1,3) overlap -> [0,3); [3,4) touches it -> [0,4); rank 2: [5,6).
    # Rank 1 has none. The ranks are interleaved on input.
    rank = np.array([2, 0, 0, 0], dtype=np.int32)
    got = merge_by_rank(rank, np.array([5.0, 1.0, 0.0, 3.0]), np.array([6.0, 3.0, 2.0, 4.0]),
                        np.array([0, 1, 2]))
    assert got.bounds.tolist() == [0, 1, 1, 2]
    assert got.starts.tolist() == [0.0, 5.0] and got.ends.tolist() == [4.0, 6.0]
    assert got.lengths() == [4.0, 0, 1.0]  # sum([]) is 0, as union_length's
    assert got.counts() == [1, 0, 1]


def test_running_min_does_not_cross_ranks() -> None:
    # In end order: rank 0's [1,2) and [3,4) must stay apart, though rank 1's [0,10) starts
    # before rank 0's gap (the running minimum of starts from the right stops at a rank).
    got = merge_by_rank(np.array([0, 0, 1], dtype=np.int32), np.array([1.0, 3.0, 0.0]),
                        np.array([2.0, 4.0, 10.0]), np.array([0, 1]))
    assert got.starts.tolist() == [1.0, 3.0, 0.0] and got.bounds.tolist() == [0, 2, 3]
    assert got.ends.tolist() == [2.0, 4.0, 10.0]


def test_overlaps_by_hand() -> None:
    # rank 0: a = [0,4), b = [1,2) and [3,5): overlap 1 + 1 = 2. rank 1: a = [0,1),
    # b = [1,2) touches it only: 0 (no positive piece). rank 2: b empty: 0.0.
    a = RankIntervals(np.array([0, 1, 2]), np.array([0.0, 0.0, 7.0]),
                      np.array([4.0, 1.0, 8.0]), np.array([0, 1, 2, 3]))
    b = RankIntervals(np.array([0, 1, 2]), np.array([1.0, 3.0, 1.0]),
                      np.array([2.0, 5.0, 2.0]), np.array([0, 2, 3, 3]))
    assert overlaps(a, b) == [2.0, 0.0, 0.0]


def test_blocks_split_segments_without_cutting_one() -> None:
    # segments of 3, 1, 5, 2 elements in runs of at most 4: [3,1], [5] alone, [2]
    assert blocks(np.array([0, 3, 4, 9, 11]), 4) == [(0, 2), (2, 3), (3, 4)]
    assert blocks(np.array([0]), 4) == []


_spans = st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["forward", "tp_comm", "host"]),
                            st.integers(0, 20), st.integers(0, 6), st.floats(0.0, 8.0)),
                  max_size=40)


def _timeline(spans: list[tuple[int, str, int, int, float]]) -> Timeline:
    t = Timeline(num_ranks=4)
    for rank, kind, start, width, flops in spans:
        t.add(Span(rank, "s", kind, "x", start / 4, (start + width) / 4, flops, flops))
    return t


@settings(max_examples=60, deadline=None)
@given(_spans, st.sampled_from([1, 3, 1 << 20]), st.booleans(), st.sampled_from([0, 1 << 30]))
def test_per_rank_forms_equal_the_rank_by_rank_ones(spans: list[tuple[int, str, int, int, float]],
                                                    block: int, by_end: bool,
                                                    per_rank: int) -> None:
    old, old_search = spantable.BLOCK_ROWS, rankarrays.PER_RANK_SEARCH
    spantable.BLOCK_ROWS = block  # small blocks: runs split between ranks
    rankarrays.PER_RANK_SEARCH = per_rank  # overlaps searched rank by rank (0), or all at once
    try:
        timeline = _timeline(spans)
        if by_end:  # the engine's order (rows by end): no sort in merge_by_rank
            timeline.sort_by_end()
        table = timeline.columns()
        comp, comm = table.mask(("forward",)), table.mask(("tp_comm",))
        a, b = table.unions(("tp_comm",)), table.unions(("forward",))
        assert table.unions(("forward",)) is b  # kept
        by_rank = table.by_rank()
        assert table.ranks() == list(by_rank)
        # the oracle: the timeline's pure-Python interval functions, rank by rank
        start, end = table.start.tolist(), table.end.tolist()

        def pairs(rows: np.ndarray) -> list[tuple[float, float]]:
            return [(start[i], end[i]) for i in rows.tolist()]

        want_len = [union_length(pairs(rows[comm[rows]])) for rows in by_rank.values()]
        want_ov = [overlap_length(merge_intervals(pairs(rows[comm[rows]])),
                                  merge_intervals(pairs(rows[comp[rows]])))
                   for rows in by_rank.values()]
        want_sum = [sum(table.flops[rows[comp[rows]]].tolist()) for rows in by_rank.values()]
        got_len, got_ov = a.lengths(), overlaps(a, b)
        assert [repr(x) for x in got_len] == [repr(x) for x in want_len]  # types too
        assert [repr(x) for x in got_ov] == [repr(x) for x in want_ov]
        assert table.sums(comp, "flops") == want_sum
        for k, rows in enumerate(by_rank.values()):
            want = merge_intervals(pairs(rows[comm[rows]]))
            assert a.of(k)[0].tolist() == [w[0] for w in want]
            assert a.of(k)[1].tolist() == [w[1] for w in want]
        # several unions in one pass: the same intervals as one at a time
        fresh = _timeline(spans)
        if by_end:
            fresh.sort_by_end()
        again = fresh.columns()
        again.prepare_unions([("forward",), None, ("tp_comm",), ("forward",), ("hung",)])
        for key in (("forward",), None, ("tp_comm",), ("hung",)):
            one, many = table.unions(key), again.unions(key)
            assert one.starts.tolist() == many.starts.tolist()
            assert one.ends.tolist() == many.ends.tolist()
            assert one.bounds.tolist() == many.bounds.tolist()
    finally:
        spantable.BLOCK_ROWS, rankarrays.PER_RANK_SEARCH = old, old_search


def test_merge_by_rank_with_rising_starts_by_hand() -> None:
    # One stream per rank (starts rise with the ends): rank 0's [0,1), [1,2) touch -> [0,2),
    # [3,4) apart; rank 1's [0,5). Each piece starts at its first interval's own start.
    got = merge_by_rank(np.array([0, 0, 0, 1], dtype=np.int32), np.array([0.0, 1.0, 3.0, 0.0]),
                        np.array([1.0, 2.0, 4.0, 5.0]), np.array([0, 1]))
    assert got.starts.tolist() == [0.0, 3.0, 0.0] and got.ends.tolist() == [2.0, 4.0, 5.0]
    assert got.bounds.tolist() == [0, 2, 3]


def test_empty_table_has_no_ranks() -> None:
    table = Timeline(num_ranks=2).columns()
    assert table.ranks() == [] and table.unions(("forward",)).lengths() == []
    assert table.sums(table.mask(("forward",)), "flops") == []


@pytest.mark.parametrize("block", [1, 1 << 20])
def test_sums_take_a_function_of_rows(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spantable, "BLOCK_ROWS", block)
    table = _timeline([(1, "host", 0, 4, 0.0), (0, "host", 0, 2, 0.0), (1, "host", 8, 2, 0.0),
                       (1, "forward", 0, 8, 1.0)]).columns()
    # rank 0: one 0.5 s wait; rank 1: 1.0 + 0.5 s (the forward is not a host span)
    got = table.sums(table.mask(("host",)), lambda r: table.end[r] - table.start[r])
    assert got == [0.5, 1.5]

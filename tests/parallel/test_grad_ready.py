"""GradReady: a batch of (rank, param) entries reads as the dict of them would."""

from __future__ import annotations

from itertools import product

from simtrain.parallel.grad_ready import GradReady


def test_a_batch_reads_as_its_entries() -> None:
    ready = GradReady()
    # ranks 4, 6 at places 0, 1; tasks 10 and 11 produce both params
    ready.batch({4: 0, 6: 1}, 10, ["w", "b"])
    assert ready.get((4, "w")) == 10 and ready.get((6, "b")) == 11
    assert ready.get((5, "w")) is None and ready.get((4, "x"), -1) == -1
    assert ready.tasks([4, 6], ["w", "b"]) == {10, 11}
    assert ready.tasks([4, 5], ["w"]) == {10, None}  # rank 5 has no entry


def test_the_latest_write_wins() -> None:
    ready = GradReady()
    ready[(4, "w")] = 3  # a single entry, then a batch over it: the batch's
    ready.batch({4: 0, 6: 1}, 10, ["w"])
    assert ready.get((4, "w")) == 10
    ready[(6, "w")] = 20  # then a single one over the batch: the single one's
    assert ready.get((6, "w")) == 20 and ready.get((4, "w")) == 10
    ready.batch({6: 0}, 30, ["w"])  # a later batch covering rank 6 only
    assert ready.get((6, "w")) == 30 and ready.get((4, "w")) == 10
    assert ready.tasks([4, 6], ["w"]) == {10, 30}


def test_tasks_equal_the_dict_of_every_write() -> None:
    ready, oracle = GradReady(), dict[tuple[int, str], int]()
    writes = [("batch", {0: 0, 1: 1, 2: 2}, 100, ["a", "b"]), ("single", 1, "a", 7),
              ("batch", {2: 0, 3: 1}, 200, ["b", "c"]), ("single", 3, "c", 9),
              ("batch", {0: 0, 1: 1, 2: 2, 3: 3}, 300, ["d"])]
    for w in writes:
        if w[0] == "batch":
            _, place, first, params = w
            ready.batch(place, first, params)
            oracle.update({(r, p): first + i for (r, i), p in product(place.items(), params)})
        else:
            _, r, p, t = w
            ready[(r, p)] = t
            oracle[(r, p)] = t
    ranks, params = [0, 1, 2, 3], ["a", "b", "c", "d", "e"]
    for key in product(ranks, params):
        assert ready.get(key) == oracle.get(key)
    for group in ([0, 1], [2, 3], [0, 1, 2, 3]):
        for names in (["a"], ["b", "c"], ["d"], ["a", "b", "c", "d", "e"]):
            assert ready.tasks(group, names) == {oracle.get(k) for k in product(group, names)}

"""Placement of jobs on a cluster: explicit GPU lists, pack, spread, and every bad case."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simtrain.jobs.placement import (
    Request,
    fmt_gpus,
    parse_gpus,
    parse_request,
    resolve,
    servers_used,
)

# 4 servers of 8 GPUs: GPU r sits in server r // 8.
SERVERS = [r // 8 for r in range(32)]


def test_parse_gpus_keeps_the_written_order_and_expands_ranges():
    assert parse_gpus("0-3,8") == (0, 1, 2, 3, 8)
    assert parse_gpus([9, "0-1"]) == (9, 0, 1)
    assert parse_gpus("5") == (5,)


@pytest.mark.parametrize("value, fragment", [
    ("3-1", "ends before it starts"), ("a-b", "range such as 0-7"), ([], "expected pack"),
    ([True], "GPU number"), ({"x": 1}, "expected pack"), ([1.5], "GPU number"),
    ("0-999999999999", "more than the 131,072 a cluster may have")])
def test_parse_gpus_rejects(value, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_gpus(value)


def test_parse_request_policy_needs_a_size_and_explicit_sizes_must_agree():
    assert parse_request("a", " Pack ", 8) == Request("a", "pack", (), 8)
    assert parse_request("a", "0-3", None) == Request("a", None, (0, 1, 2, 3), 4)
    with pytest.raises(ValueError, match="needs the job's size"):
        parse_request("a", "spread", None)
    with pytest.raises(ValueError, match="lists 4 GPUs but gpus is 8"):
        parse_request("a", "0-3", 8)


def test_pack_takes_the_lowest_free_gpus_after_explicit_ones():
    # b holds server 0 explicitly, so a (pack, 16) fills servers 1 and 2.
    placed = resolve([Request("a", "pack", (), 16), Request("b", None, tuple(range(8)), 8)],
                     SERVERS)
    assert placed == {"a": tuple(range(8, 24)), "b": tuple(range(8))}


def test_spread_takes_one_gpu_per_server_in_turn():
    # 16 GPUs over 4 servers: 4 each, the first four of every server, ascending.
    a = resolve([Request("a", "spread", (), 16)], SERVERS)["a"]
    assert a == (0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27)
    assert servers_used(a, SERVERS) == {0: 4, 1: 4, 2: 4, 3: 4}
    # A second spread job gets the other half of every server.
    both = resolve([Request("a", "spread", (), 16), Request("b", "spread", (), 6)], SERVERS)
    assert both["b"] == (4, 5, 12, 13, 20, 28)


@pytest.mark.parametrize("requests, fragment", [
    ([Request("a", None, (0, 32), 2)], "a: GPU 32 is not in the cluster; accepted: GPUs 0..31"),
    ([Request("a", None, (-1,), 1)], "GPU -1 is not in the cluster"),
    ([Request("a", None, (3, 3), 2)], "a: GPU 3 is listed twice"),
    ([Request("a", None, (0, 1), 2), Request("b", None, (1, 2), 2)],
     "b: GPU 1 is already taken by job 'a'; placements may not overlap"),
    ([Request("a", None, tuple(range(24)), 24), Request("b", "pack", (), 16)],
     "b: needs 16 GPUs but only 8 of the cluster's 32 are free (placed before it: a 24)"),
    ([Request("a", "spread", (), 33)], "a: needs 33 GPUs but only 32"),
])
def test_impossible_placements_name_the_job_and_the_numbers(requests, fragment):
    with pytest.raises(ValueError) as info:
        resolve(requests, SERVERS)
    assert fragment in str(info.value)


def test_fmt_gpus_compacts_runs():
    assert fmt_gpus((0, 1, 2, 3, 8, 10, 11)) == "0-3,8,10-11"
    assert fmt_gpus((9, 8)) == "9,8"


@given(st.lists(st.tuples(st.sampled_from(["pack", "spread"]), st.integers(1, 12)),
                min_size=1, max_size=5))
def test_policies_give_disjoint_gpus_of_the_asked_sizes_or_refuse(jobs):
    requests = [Request(f"j{i}", policy, (), n) for i, (policy, n) in enumerate(jobs)]
    total = sum(n for _, n in jobs)
    if total > len(SERVERS):
        with pytest.raises(ValueError, match="free"):
            resolve(requests, SERVERS)
        return
    placed = resolve(requests, SERVERS)
    every = [g for gpus in placed.values() for g in gpus]
    assert len(every) == len(set(every)) == total
    assert all(0 <= g < len(SERVERS) for g in every)
    assert [len(placed[r.job]) for r in requests] == [n for _, n in jobs]

"""`simtrain collective`: nccl-tests-style rows, JSON output and clear errors."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from simtrain.cli import app

runner = CliRunner()


def test_json_rows_follow_nccl_tests_definitions():
    result = runner.invoke(app, ["collective", "all_reduce", "--cluster", "dgx-a100",
                                 "--nodes", "2", "-b", "8", "-e", "8G", "-f", "4", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["size_bytes"] for r in rows[:3]] == [8, 32, 128]
    assert rows[-1]["size_bytes"] == 8 << 30  # "8G" is 8 GiB, as in nccl-tests
    for r in rows:
        assert set(r) == {"size_bytes", "time_s", "algbw_gbps", "busbw_gbps", "algorithm",
                          "protocol"}
        # busbw = algbw x 2(n-1)/n for all-reduce over n = 16 ranks
        assert r["busbw_gbps"] == r["algbw_gbps"] * 2 * 15 / 16
    assert rows[0]["time_s"] > 5e-6  # latency-bound
    assert 170 < rows[-1]["busbw_gbps"] < 200  # 8 NICs x 24 GB/s


def test_gpus_forced_algorithm_and_backend():
    result = runner.invoke(app, ["collective", "all_gather", "--cluster", "dgx-h100",
                                 "--gpus", "4", "-b", "1M", "-e", "1M", "--algorithm",
                                 "recursive_doubling", "--backend", "mpi", "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert row["algorithm"] == "recursive_doubling" and row["protocol"] == "Simple"


def test_bad_requests_exit_2_with_one_line():
    for args, says in [
        (["allreduce", "--cluster", "dgx-a100"], "unknown collective 'allreduce'"),
        (["all_reduce"], "give exactly one of --cluster PRESET or --scenario FILE"),
        (["all_reduce", "--cluster", "dgx-a100", "--gpus", "3", "--algorithm",
          "halving_doubling"], "power-of-two group"),
        (["all_reduce", "--cluster", "dgx-a100", "--gpus", "99"], "between 2 and"),
    ]:
        result = runner.invoke(app, ["collective", *args])
        assert result.exit_code == 2, (args, result.output)
        assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_quiet_prints_nothing_but_still_checks_input():
    ok = runner.invoke(app, ["collective", "all_reduce", "--cluster", "dgx-a100", "-b", "1M",
                             "-e", "1M", "--quiet"])
    assert ok.exit_code == 0 and ok.stdout == ""
    bad = runner.invoke(app, ["collective", "allreduce", "--cluster", "dgx-a100", "-q"])
    assert bad.exit_code == 2 and "unknown collective" in bad.stderr

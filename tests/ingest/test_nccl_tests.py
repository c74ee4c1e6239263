"""nccl-tests logs: parsing, the per-range alpha-beta fit, calibrate --nccl-tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from simtrain.cli import app
from simtrain.ingest import IngestError
from simtrain.ingest.nccl_fit import fit_range, fit_sweep
from simtrain.ingest.nccl_tests import parse_log
from simtrain.ingest.synthetic import write_nccl_tests_log, write_reference_logs

DATA = Path(__file__).parent / "data" / "voltagepark_h100_allreduce.yaml"


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("nccl")
    return {p.stem.removeprefix("all_reduce_perf_"): p for p in write_reference_logs(DATA, out)}


def test_parse_reads_sizes_times_ranks_and_nodes(logs: dict[str, Path]) -> None:
    sweep = parse_log(logs["four_nodes_32_gpus"])
    assert (sweep.op, sweep.nranks, sweep.nodes, len(sweep.sizes)) == ("all_reduce", 32, 4, 31)
    i = sweep.sizes.index(2**30)
    assert sweep.time_oop[i] == pytest.approx(6411.42e-6)  # the source's 1 GiB row
    # busbw = S / t · 2·31/32 = 1073741824 / 6411.42e-6 · 1.9375 = 324.48 GB/s
    assert sweep.busbw_oop[i] == pytest.approx(324.48e9, rel=1e-4)
    assert sweep.busbw_ip[i] == pytest.approx(323.69e9, rel=1e-4)


def test_fit_range_recovers_alpha_and_beta() -> None:
    # t = 20 us + x / 400 GB/s exactly: the fit returns alpha 20e-6 and beta 1/400e9
    x = np.array([1e6, 1e7, 1e8, 1e9])
    alpha, beta = fit_range(x, 20e-6 + x / 400e9)
    assert alpha == pytest.approx(20e-6, rel=1e-9) and beta == pytest.approx(1 / 400e9)


def test_fit_of_a_pure_alpha_beta_sweep_is_one_range(tmp_path: Path) -> None:
    # all_gather over 8 ranks, F = 7/8: t(S) = 10 us + S · 7/8 / 200 GB/s
    rows = [(float(2**e), 10.0 + 2**e * 7 / 8 / 200e9 * 1e6) for e in range(20, 31)]
    log = tmp_path / "all_gather_perf.log"
    write_nccl_tests_log(log, "all_gather_perf", rows, nranks=8)
    fit = fit_sweep(parse_log(log), max_segments=1)
    (seg,) = fit.segments
    assert seg.latency == pytest.approx(10e-6, rel=1e-3)
    assert seg.busbw == pytest.approx(200e9, rel=1e-3)
    assert fit.max_error() < 1e-3  # only nccl-tests' 2-decimal rounding of times remains


@pytest.mark.parametrize("name", ["single_node_8_gpus", "four_nodes_32_gpus"])
def test_h100_sweeps_fit_within_ten_percent_from_one_mib(logs: dict[str, Path],
                                                         name: str) -> None:
    fit = fit_sweep(parse_log(logs[name]))
    assert fit.sizes[0] == 2**20 and fit.sizes[-1] == 8 * 2**30
    assert fit.max_error() < 0.10
    assert max(abs(e) for e in fit.check_errors) < 0.15  # in-place column, not fitted
    assert fit.level == ("intra-node" if name.startswith("single") else "inter-node")


def test_calibrate_nccl_tests_cli(logs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "fit.yaml"
    result = CliRunner().invoke(app, ["calibrate", "--nccl-tests",
                                      str(logs["single_node_8_gpus"]), "--json", "--write",
                                      str(out)])
    assert result.exit_code == 0, result.output
    (fit,) = json.loads(result.output)
    assert fit["ranks"] == 8 and fit["max_busbw_error"] < 0.10
    assert "fitted:" in out.read_text()  # the scenario comm: block (test_nccl_fit_scenario)


@pytest.mark.parametrize(("text", "name", "expected"), [
    ("# nThread 1\n#  size count type time algbw busbw\n", "all_reduce_perf.log",
     "unexpected nccl-tests header"),
    ("hello\n", "all_reduce_perf.log", "no nccl-tests results table"),
    ("#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
     "1048576 262144 float sum -1 10.0 104.86 183.50 0 10.0 104.86 183.50 0\n",
     "mystery.log", "cannot tell the collective"),
])
def test_bad_logs_fail_in_one_line(tmp_path: Path, text: str, name: str,
                                   expected: str) -> None:
    log = tmp_path / name
    log.write_text(text)
    with pytest.raises(IngestError, match=expected):
        parse_log(log)
    result = CliRunner().invoke(app, ["calibrate", "--nccl-tests", str(log)])
    assert result.exit_code == 2 and expected in result.output


def test_group_size_from_busbw_when_rank_lines_are_missing(tmp_path: Path) -> None:
    # all-reduce busbw / algbw = 2(n-1)/n = 1.75 -> n = 8
    log = tmp_path / "all_reduce_perf.log"
    log.write_text("#  size count type redop root time algbw busbw #wrong time algbw busbw "
                   "#wrong\n1048576 262144 float sum -1 10.0 100.00 175.00 0 10.0 100.00 "
                   "175.00 0\n")
    assert parse_log(log).nranks == 8

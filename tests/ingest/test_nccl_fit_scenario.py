"""calibrate --nccl-tests --write: the comm: block it writes makes a scenario reproduce the
log (the round trip of issue 15 item 3), and the block's lookup rules by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ruamel.yaml import YAML
from typer.testing import CliRunner

from simtrain.cli import app
from simtrain.comm.fitted import FittedLevel, lookup
from simtrain.errors import ScenarioError
from simtrain.ingest.nccl_tests import parse_log
from simtrain.ingest.synthetic import write_reference_logs
from simtrain.scenario import load_scenario

DATA = Path(__file__).parent / "data" / "voltagepark_h100_allreduce.yaml"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], Path]:
    out = tmp_path_factory.mktemp("fit")
    logs = {p.stem.removeprefix("all_reduce_perf_"): p for p in write_reference_logs(DATA, out)}
    block = out / "comm.yaml"
    result = CliRunner().invoke(app, ["calibrate", "--nccl-tests", str(logs["single_node_8_gpus"]),
                                      "--nccl-tests", str(logs["four_nodes_32_gpus"]),
                                      "--write", str(block), "--json"])
    assert result.exit_code == 0, result.output
    return logs, block


def _scenario(tmp: Path, block: Path, nodes: int) -> Path:
    data = {"name": f"h100x{nodes}", "cluster": {"preset": "dgx-h100", "nodes": nodes},
            "model": {"preset": "gpt2-small"},
            "training": {"global_batch_size": 64, "micro_batch_size": 2, "seq_len": 1024},
            **YAML(typ="safe").load(block.read_text())}
    path = tmp / f"h100x{nodes}.yaml"
    YAML(typ="safe").dump(data, path)
    return path


@pytest.mark.parametrize(("name", "nodes"), [("single_node_8_gpus", 1),
                                              ("four_nodes_32_gpus", 4)])
def test_scenario_with_the_written_block_reproduces_the_log(
        written: tuple[dict[str, Path], Path], tmp_path: Path, name: str, nodes: int) -> None:
    logs, block = written
    sweep = parse_log(logs[name])
    scenario = _scenario(tmp_path, block, nodes)
    load_scenario(scenario)  # the block validates as part of a scenario
    result = CliRunner().invoke(app, ["collective", "all_reduce", "--scenario", str(scenario),
                                      "-b", "1M", "-e", "8G", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    measured = dict(zip(sweep.sizes, sweep.busbw_oop, strict=True))
    assert len(rows) == 14
    for row in rows:  # every size from 1 MiB to 8 GiB within 10% busbw
        assert row["busbw_gbps"] * 1e9 == pytest.approx(measured[row["size_bytes"]], rel=0.10)


def test_the_block_is_yaml_with_units_and_a_header(written: tuple[dict[str, Path], Path]):
    _, block = written
    text = block.read_text()
    assert text.startswith("# simtrain calibrate --nccl-tests")
    entries = YAML(typ="safe").load(text)["comm"]["fitted"]
    assert [(e["level"], e["ranks"], e["nodes"]) for e in entries] == [
        ("intra-node", 8, 1), ("inter-node", 32, 4)]
    assert entries[0]["ranges"][0]["latency"].endswith("us")
    assert entries[0]["ranges"][0]["busbw"].endswith("GB/s")


LEVEL = FittedLevel(op="all_reduce", level="intra-node", ranks=8, ranges=[
    {"from_bytes": "1MiB", "to_bytes": "4MiB", "latency": "30us", "busbw": "300GB/s"},
    {"from_bytes": "8MiB", "to_bytes": "8GiB", "latency": "100us", "busbw": "480GB/s"}])


def test_lookup_by_hand():
    # Below 1 MiB: not measured -> the model. 6 MiB: between the ranges -> the lower one.
    # 16 GiB: above the last -> the last. Across servers or another op: no entry.
    assert lookup([LEVEL], "all_reduce", 8, 1, 512 << 10) is None
    assert lookup([LEVEL], "all_reduce", 8, 1, 6 << 20).busbw == 300e9
    assert lookup([LEVEL], "all_reduce", 8, 1, 16 << 30).latency == pytest.approx(100e-6)
    assert lookup([LEVEL], "all_reduce", 16, 2, 1 << 30) is None
    assert lookup([LEVEL], "all_gather", 8, 1, 1 << 30) is None
    # 1 GiB over 8 ranks: 100 us + 2^30 x 1.75 / 480e9 = 100 + 3914.5 = 4014.5 us
    seg = lookup([LEVEL], "all_reduce", 8, 1, 1 << 30)
    assert seg.time(1 << 30, 1.75) == pytest.approx(4014.5e-6, rel=1e-4)


def test_a_bad_block_is_a_one_line_scenario_error(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text("cluster: {preset: dgx-h100}\nmodel: {preset: gpt2-small}\n"
                    "training: {global_batch_size: 64, micro_batch_size: 2, seq_len: 1024}\n"
                    "comm:\n  fitted:\n  - {op: all_reduce, level: inter-node, ranks: 8, "
                    "nodes: 1, ranges: [{from_bytes: 1M, to_bytes: 2M, latency: 1us, "
                    "busbw: 1GB/s}]}\n")
    with pytest.raises(ScenarioError, match="level inter-node does not match nodes: 1"):
        load_scenario(path)

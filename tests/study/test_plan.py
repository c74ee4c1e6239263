"""``simtrain plan``: the search (validity, ranking, pruning, bound), its input and the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import simtrain
from simtrain.cli_plan import register
from simtrain.study.plan import PlanResult, PlanSpec, parse_count, plan_spec, search

app = typer.Typer()
register(app)


@app.callback()
def _root() -> None:
    """Keep ``plan`` a subcommand, as on the main app."""


def _spec(**search_opts: Any) -> PlanSpec:
    return plan_spec({
        "name": "tiny",
        "model": {"preset": "tiny-gpt"},
        "cluster": {"preset": "dgx-a100", "nodes": 1},
        "training": {"tokens": "1G", "seq_len": 512, "global_batch": 32},
        "search": {"micro_batch": [1, 2, 4], "zero": [0, 1], "final_network": "analytic",
                   **search_opts},
    })


@pytest.fixture(scope="module")
def result() -> PlanResult:
    return search(_spec(top=3))


def test_counts_add_up_and_pruning_happens(result: PlanResult) -> None:
    c = result.counts
    assert c["enumerated"] == len(result.candidates) > 100
    assert c["invalid"] + c["oom"] + c["feasible"] == c["enumerated"]
    assert c["pruned"] + c["simulated"] + c["failed"] == c["feasible"]
    assert c["failed"] == 0
    assert 3 <= c["simulated"] < c["feasible"] and c["pruned"] > 0
    # everything pruned has a bound no better than the third best simulated step time
    third = float(result.ranked[2].summary["step_time_s"])  # type: ignore[index]
    assert all(x.bound_s >= third or x.parallelism["order"] != "tp-cp-pp-dp"
               for x in result.candidates if x.status == "pruned")


def test_ranked_plans_fit_and_are_sorted_by_throughput(result: PlanResult) -> None:
    rows = result.rows()
    assert [r["rank"] for r in rows] == [1, 2, 3]
    assert all(r["peak_memory_gib"] <= 80.0 for r in rows)  # A100 80GB
    steps = [r["step_time_s"] for r in rows]
    assert steps == sorted(steps)
    assert [r["tokens_per_s"] for r in rows] == sorted((r["tokens_per_s"] for r in rows),
                                                        reverse=True)
    for r in rows:
        assert r["time_to_train_s"] == pytest.approx(1e9 / r["tokens_per_s"])
        assert r["gpu_hours"] == pytest.approx(8 * r["time_to_train_s"] / 3600)
        assert r["bound_s"] <= r["step_time_s"]


def test_bound_never_exceeds_the_simulated_step(result: PlanResult) -> None:
    simulated = [c for c in result.candidates if c.status == "simulated"]
    assert simulated
    for c in simulated:
        assert 0 < c.bound_s <= float(c.summary["step_time_s"])  # type: ignore[index]


def test_best_plan_matches_a_direct_simulation(result: PlanResult) -> None:
    best = result.rows()[0]
    direct = simtrain.simulate(simtrain.load_scenario(best["scenario"]))
    assert direct.summary["step_time_s"] == best["step_time_s"]
    assert direct.summary["parallelism"]["tp"] == best["parallelism"]["tp"]


def test_branch_and_bound_finds_the_exhaustive_top() -> None:
    # one rank order: the bound search is exact, the retry of other orders a heuristic
    spec = _spec(top=2, micro_batch=[1, 2], recompute=["none", "full"],
                 order=["tp-cp-pp-dp"])
    pruned = search(spec)
    spec.top = 10_000  # nothing can be pruned
    exhaustive = search(spec)
    assert exhaustive.counts["pruned"] == 0
    assert pruned.counts["simulated"] < exhaustive.counts["simulated"]
    assert [r["step_time_s"] for r in pruned.rows()] == \
        [r["step_time_s"] for r in exhaustive.rows()[:2]]
    bounds = [c for c in exhaustive.candidates if c.status == "simulated"]
    assert all(c.bound_s <= float(c.summary["step_time_s"]) for c in bounds)  # type: ignore


def test_pipeline_plans_and_several_node_counts() -> None:
    spec = plan_spec({
        "model": {"preset": "tiny-gpt"}, "cluster": {"preset": "dgx-a100", "nodes": [1, 2]},
        "training": {"tokens": 1e9, "global_batch_tokens": "32k", "seq_len": 512},
        "search": {"top": 2, "micro_batch": 1, "zero": 1, "recompute": "none",
                   "final_network": "flow"},
    })
    assert spec.global_batch == 64 and spec.nodes == [1, 2]
    res = search(spec)
    assert {c.nodes for c in res.candidates} == {1, 2}
    assert any(c.parallelism["schedule"] == "interleaved" for c in res.candidates)
    rows = res.rows()
    assert len(rows) == 2 and all(r["network"] == "flow" for r in rows)
    direct = simtrain.simulate(simtrain.load_scenario(rows[0]["scenario"]))
    assert direct.summary["step_time_s"] == rows[0]["step_time_s"]


def test_out_of_memory_plans_are_rejected_without_simulating() -> None:
    spec = plan_spec({
        "model": {"preset": "gpt3-175b"}, "cluster": {"preset": "dgx-a100", "nodes": 1},
        "training": {"tokens": "1T", "seq_len": 2048, "global_batch": 8},
        "search": {"top": 1, "micro_batch": [1], "zero": [0, 1], "recompute": ["full"],
                   "final_network": "analytic", "max_tp": 2},
    })
    res = search(spec)
    assert res.counts["oom"] > 0 and res.counts["feasible"] == 0
    assert res.counts["simulated"] == 0 and res.ranked == []
    assert all("GiB" in c.reason for c in res.candidates if c.status == "oom")


def test_cli_no_plan_fits_exits_1() -> None:
    res = CliRunner().invoke(app, ["plan", "--model", "gpt3-175b", "--cluster", "dgx-a100",
                                   "--nodes", "1", "--tokens", "1T", "--seq-len", "2048",
                                   "--global-batch", "8", "--executor", "serial"])
    assert res.exit_code == 1
    assert "no plan fits" in res.output.replace("\n", "")


@pytest.mark.parametrize("data, message", [
    ({"model": {"preset": "tiny-gpt"}, "cluster": {"preset": "dgx-a100"},
      "training": {"tokens": "lots", "seq_len": 512, "global_batch": 8}}, "training.tokens"),
    ({"model": {"preset": "tiny-gpt"}, "cluster": {"preset": "dgx-a100"},
      "training": {"tokens": "1T", "seq_len": 512}}, "global_batch"),
    ({"model": {"preset": "tiny-gpt"}, "cluster": {"preset": "dgx-a100", "nodes": [0]},
      "training": {"tokens": "1T", "seq_len": 512, "global_batch": 8}}, "cluster.nodes"),
    ({"model": {"preset": "tiny-gpt"}, "cluster": {"preset": "dgx-a100"},
      "training": {"tokens": "1T", "seq_len": 512, "global_batch": 8},
      "search": {"zero": [5]}}, "search.zero"),
    ({"model": {"preset": "tiny-gpt"}, "cluster": {"preset": "dgx-a100"},
      "training": {"tokens": "1T", "seq_len": 512, "global_batch": 8},
      "serach": {}}, "unknown key 'serach'"),
    ({"cluster": {"preset": "dgx-a100"},
      "training": {"tokens": "1T", "seq_len": 512, "global_batch": 8}}, "model"),
])
def test_bad_plan_input_is_a_value_error(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan_spec(data)


def test_parse_count() -> None:
    assert parse_count("2T", "x") == 2e12
    assert parse_count("8M", "x") == 8e6
    assert parse_count(1024, "x") == 1024.0
    with pytest.raises(ValueError):
        parse_count("-1", "x")


TINY = ["plan", "--model", "tiny-gpt", "--cluster", "dgx-a100", "--nodes", "1",
        "--tokens", "1G", "--seq-len", "512", "--global-batch", "16", "--top", "2",
        "--final-network", "analytic", "--executor", "serial"]


def test_cli_json(tmp_path: Path) -> None:
    report = tmp_path / "plan.html"
    res = CliRunner().invoke(app, [*TINY, "--json", "--report", str(report), "--charts", "1"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["global_batch_tokens"] == 16 * 512
    assert len(doc["ranked"]) == 2 and doc["counts"]["simulated"] >= 2
    assert doc["ranked"][0]["time_to_train_s"] > 0
    text = report.read_text()
    assert "Ranking" in text and "gantt-plan-1" in text and "gantt-plan-2" not in text


def test_cli_table_and_plan_file(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("model: {preset: tiny-gpt}\ncluster: {preset: dgx-a100, nodes: 1}\n"
                    "training: {tokens: 1G, seq_len: 512, global_batch: 16}\n"
                    "search: {top: 1, final_network: analytic, zero: [1], "
                    "recompute: [none]}\n")
    res = CliRunner().invoke(app, ["plan", str(path), "--executor", "serial"])
    assert res.exit_code == 0, res.output
    assert "simtrain plan" in res.stdout and "candidates" in res.stdout
    res = CliRunner().invoke(app, ["plan", str(path), "--executor", "serial", "--top", "2",
                                   "--json"])
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout)["ranked"]) == 2


@pytest.mark.parametrize("args, message", [
    (["plan"], "give a plan file"),
    ([*TINY[:2], "no-such-model", *TINY[3:]], "unknown model preset"),
    ([*TINY, "--nodes", "two"], "--nodes"),
    ([*TINY, "--tokens", "0"], "training.tokens"),
    ([*TINY, "--final-network", "magic"], "final_network"),
    (["plan", "missing.yaml"], "cannot read plan file"),
])
def test_cli_bad_input_exits_2(args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert message in res.output.replace("\n", "")

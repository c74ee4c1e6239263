"""`simtrain validate`: FLOP formulas, suite scenarios, error arithmetic, CLI (fast)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ruamel.yaml import YAML
from typer.testing import CliRunner

from simtrain.cli import app
from simtrain.cli_validate import wall_line
from simtrain.errors import ScenarioError
from simtrain.validation import (
    PUBLISHED_METRICS,
    Row,
    count_rows,
    formula_flops,
    load_suite,
    mape,
    mcore_2024_model_flops,
    megatron_2020_hardware_flops,
    nemo_full_attention_flops,
    row_cost,
    row_scenarios,
    run_suite,
    run_suites,
    scenario_suites,
    signed_error,
    summarize,
)

runner = CliRunner()
# The two published tables these tests check, copied from ../shared/reference/calibration.yaml.
CALIBRATION = Path(__file__).resolve().parent / "data" / "calibration_published.yaml"


# --- FLOP formulas against hand-derived numbers ----------------------------------------

def test_megatron_2020_formula_1b_row():
    # 1B row: B=8, s=1024, l=24, h=1920, V=51200.
    # 96*8*1024*24 = 18,874,368; x h^2 = 3,686,400 -> 69,578,470,195,200.
    # 1 + s/(6h) + V/(16lh) = 1 + 1024/11520 + 51200/737280 = 1 + 4/45 + 5/72 = 139/120.
    flops = megatron_2020_hardware_flops(8, 1024, 24, 1920, 51200)
    assert flops == pytest.approx(69_578_470_195_200 * 139 / 120, rel=1e-12)
    # ... and with the published 1,121 ms on one V100 it gives the published 71.9 TFLOP/s.
    assert flops / 1.121 / 1e12 == pytest.approx(71.9, abs=0.05)


def test_mcore_formula_1_7b_row():
    # 1.7B row: B=192, s=4096, l=24, h=2048, a=16 (MHA: g=a), ffn=4h, GELU, V=131072.
    # 12*B*s*l*h^2*[(1 + 1 + s/h) + 4 + V/(2lh)] = 12*B*s*l*h^2*(6 + 2 + 4/3)
    # = 72*B*s*l*h^2*(1 + 1/3 + 2/9) = 72*B*s*l*h^2*14/9.
    # 72*192*4096*24 = 1,358,954,496; x 2048^2 = 5,699,868,278,390,784.
    flops = mcore_2024_model_flops(192, 4096, 24, 2048, 131072, heads=16)
    assert flops == pytest.approx(5_699_868_278_390_784 * 14 / 9, rel=1e-12)
    # The README's 408.8 TFLOP/s/GPU on 48 GPUs then means a step of ~0.45 s, and MFU 0.41.
    assert 408.8 / 989 == pytest.approx(0.41, abs=0.005)


def test_mcore_formula_reduces_to_72_form_and_handles_gqa_swiglu():
    b, s, layers, h, v = 4, 2048, 32, 4096, 32000
    gpt = mcore_2024_model_flops(b, s, layers, h, v, heads=32)
    assert gpt == pytest.approx(72 * b * s * layers * h * h
                                * (1 + s / (6 * h) + v / (12 * layers * h)), rel=1e-12)
    # GQA (8 groups of 32 heads) and SwiGLU ffn 14336: by the bracket written out by hand.
    gqa = mcore_2024_model_flops(b, s, layers, h, v, heads=32, query_groups=8,
                                 ffn_hidden=14336, swiglu=True)
    bracket = (1 + 8 / 32 + s / h) + (14336 / h) * 1.5 + v / (2 * layers * h)
    assert gqa == pytest.approx(12 * b * s * layers * h * h * bracket, rel=1e-12)


def test_published_megatron_tflops_follow_the_96_formula():
    """Every 2020 row's TFLOP/s is the formula over its own iteration time (within 1%):
    the formula and the transcribed numbers agree, so predictions use the same yardstick."""
    for entry, scenario in row_scenarios("megatron-2020"):
        m = scenario.model
        flops = megatron_2020_hardware_flops(scenario.training.global_batch_size,
                                             scenario.seq_len, m.num_layers, m.hidden_size,
                                             m.vocab_size)
        gpus = scenario.parallelism.tp * (scenario.parallelism.dp or 1)
        pub = entry["published"]
        implied = flops / (pub["iteration_time_ms"] / 1e3) / gpus / 1e12
        assert implied == pytest.approx(pub["tflops_per_gpu"], rel=0.01), entry["id"]


# --- suites map to the published rows ---------------------------------------------------

def _calibration() -> dict:
    return YAML(typ="safe").load(CALIBRATION.read_text())


def test_megatron_2020_scenarios_match_published_rows():
    rows = _calibration()["megatron_readme_2020_tensor_parallel_scaling"]["rows"]
    loaded = row_scenarios("megatron-2020")
    assert len(loaded) == len(rows) == 12
    gpu = {"dgx2_v100": "v100-32gb", "dgx_a100": "a100-40gb", "dgx_a100_cluster": "a100-40gb"}
    for pub, (entry, sc) in zip(rows, loaded, strict=True):
        p = sc.parallelism
        dp = pub.get("data_parallel_size", 1)
        assert sc.model.preset == f"megatron-{pub['case'].lower()}"
        assert sc.cluster.gpu == gpu[pub["system"]]
        assert sc.cluster.nodes * sc.cluster.gpus_per_node == pub["num_gpus"]
        assert (p.tp, p.pp, p.dp) == (pub["num_gpus"] // dp, 1, dp)
        assert sc.training.global_batch_size == pub["global_batch_size"]
        assert sc.seq_len == 1024 and sc.model.vocab_size == 51200
        assert p.recompute == "full" and sc.training.dtype == "fp16"
        assert entry["published"] == {"iteration_time_ms": pub["iteration_time_ms"],
                                      "tflops_per_gpu": pub["tflops_per_gpu"]}


def test_mcore_scenarios_match_published_rows():
    rows = _calibration()["megatron_core_readme_2024_h100_weak_scaling"]["rows"]
    loaded = row_scenarios("mcore-2024-h100")
    assert len(loaded) == len(rows) == 9
    for pub, (entry, sc) in zip(rows, loaded, strict=True):
        p, m = sc.parallelism, sc.model
        assert (m.num_layers, m.hidden_size, m.num_heads) == (
            pub["num_layers"], pub["hidden_size"], pub["attention_heads"])
        assert (p.tp, p.pp, p.dp) == (pub["tensor_parallel_size"],
                                      pub["pipeline_parallel_size"], pub["data_parallel_size"])
        assert sc.cluster.nodes * sc.cluster.gpus_per_node == pub["num_gpus"]
        assert sc.cluster.gpu == "h100-sxm"
        assert sc.training.global_batch_size == pub["global_batch_size"]
        assert sc.seq_len == 4096 and m.vocab_size == 131072
        assert p.sp == (p.tp > 1) and p.zero == 1 and p.schedule == "1f1b"
        assert not sc.sim.ignore_memory
        assert entry["published"] == {"tflops_per_gpu": pub["tflops_per_gpu"]}


# --- error arithmetic -------------------------------------------------------------------

def test_signed_error_mape_and_summary():
    assert signed_error(110.0, 100.0) == pytest.approx(0.10)
    assert signed_error(80.0, 100.0) == pytest.approx(-0.20)
    assert mape([0.10, -0.20, 0.0]) == pytest.approx(0.10)
    with pytest.raises(ValueError):
        mape([])
    rows = [Row("s", "a", "m", 100.0, 110.0, 0.10), Row("s", "b", "m", 100.0, 70.0, -0.30),
            Row("s", "c", "m", 50.0, None, None, skipped="not modelled"),
            Row("t", "x", "n", 1.0, 1.0, 0.0)]
    s, t = summarize(rows)
    assert (s["suite"], s["metric"], s["rows"], s["skipped"]) == ("s", "m", 2, 1)
    assert s["mape"] == pytest.approx(0.20)
    assert s["mean_error"] == pytest.approx(-0.10)
    assert (s["worst"], s["worst_error"]) == ("b", -0.30)
    assert t["mape"] == 0.0


# --- end to end: one cheap row, the CLI --------------------------------------------------

@pytest.fixture
def one_row_dir(tmp_path: Path) -> Path:
    """The megatron-2020 suite cut down to its cheapest row (1B on one V100)."""
    data = load_suite("megatron-2020")
    data["rows"] = [r for r in data["rows"] if r["id"] == "1B-dgx2-1gpu"]
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    with (tmp_path / "megatron-2020.yaml").open("w") as f:
        yaml.dump(data, f)
    return tmp_path


def test_one_row_end_to_end(one_row_dir: Path):
    rows = run_suite("megatron-2020", one_row_dir)
    step, tflops = rows
    assert (step.metric, tflops.metric) == ("iteration_time_ms", "tflops_per_gpu")
    assert step.published == 1121 and tflops.published == 71.9
    assert step.predicted is not None and tflops.predicted is not None
    assert step.error == pytest.approx(step.predicted / 1121 - 1)
    # TFLOP/s come from the 96 formula over the simulated step, not from simtrain's HFU.
    flops = megatron_2020_hardware_flops(8, 1024, 24, 1920, 51200)
    assert tflops.predicted == pytest.approx(flops / (step.predicted / 1e3) / 1e12)
    assert 0.3 < step.predicted / 1121 < 3  # a sane step; accuracy is docs/validation.md's


def test_cli_json_shape(one_row_dir: Path):
    result = runner.invoke(app, ["validate", "--suite", "megatron-2020", "--suite", "nccl",
                                 "--dir", str(one_row_dir), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert set(payload) == {"rows", "summary", "wall_s"} and payload["wall_s"] > 0
    row = payload["rows"][0]
    assert {"suite", "id", "metric", "published", "predicted", "error", "unit", "note",
            "skipped", "extra"} <= set(row)
    assert {r["suite"] for r in payload["rows"]} == {"megatron-2020", "nccl"}
    assert any(r["skipped"] for r in payload["rows"] if r["suite"] == "nccl")
    summary = {(s["suite"], s["metric"]): s for s in payload["summary"]}
    assert set(summary) == {("megatron-2020", "iteration_time_ms"),
                            ("megatron-2020", "tflops_per_gpu"), ("nccl", "busbw_gbps")}
    assert summary[("megatron-2020", "iteration_time_ms")]["worst"] == "1B-dgx2-1gpu"
    for s in summary.values():
        assert {"rows", "skipped", "mape", "mean_error", "worst", "worst_error"} <= set(s)


def test_cli_table_and_exit_codes(one_row_dir: Path):
    result = runner.invoke(app, ["validate", "-s", "megatron-2020", "--dir", str(one_row_dir)])
    assert result.exit_code == 0, result.output
    assert "1B-dgx2-1gpu" in result.stdout and "MAPE" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("wall time ")
    bad = runner.invoke(app, ["validate", "--suite", "bogus"])
    assert bad.exit_code == 2 and "unknown suite" in bad.output
    missing = runner.invoke(app, ["validate", "-s", "megatron-2020", "--dir",
                                  str(one_row_dir / "nowhere")])
    assert missing.exit_code == 2 and "cannot read" in missing.output


# --- the measured-runs suites ------------------------------------------------------------

def test_nemo_flop_count_of_llama3_8b_is_the_published_57_9_gflop_per_token():
    # LLAMA3-8B: h 4096, a 32, g 8, d 128, ffn 14336 (SwiGLU), 32 layers, V 128256.
    # Attention per layer h(a+2g)d + a·d·h = 4096·48·128 + 32·128·4096 = 41,943,040;
    # MLP 3·4096·14336 = 176,160,768; x 32 = 6,979,321,856; output 4096·128256 =
    # 525,336,576 -> N_matmul = 7,504,658,432. 6N = 45,027,950,592; 12·l·s·h at s = 8192:
    # 12·32·8192·4096 = 12,884,901,888 -> 57,912,852,480 FLOP/token (source: 57.9e9).
    from simtrain.scenario import load_scenario
    from simtrain.validation_flops import matmul_params

    sc = load_scenario({"cluster": {"preset": "dgx-h100"}, "model": {"preset": "llama3-8b"},
                        "training": {"global_batch_size": 8, "seq_len": 8192}})
    assert matmul_params(sc.model) == 7_504_658_432
    assert nemo_full_attention_flops(sc.model, 1.0, 8192) == 57_912_852_480
    assert formula_flops("nemo-full-attention", sc) == 57_912_852_480 * 8 * 8192


def test_every_suite_row_validates_or_says_what_it_needs():
    """Every bundled suite file is well formed (ids, metrics, needs); every row without needs
    is a valid scenario, and the first row with needs of each suite is reported as not
    expressible (validating all 500 is `simtrain validate`'s job; this keeps the test fast)."""
    from simtrain.validation import expressible
    from simtrain.validation_suites import row_bodies

    total = compared = 0
    for suite in scenario_suites():
        first_needing = True
        for entry, body in row_bodies(suite):
            total += 1
            assert set(entry["published"]) <= set(PUBLISHED_METRICS)
            if entry.get("needs") and not first_needing:
                continue
            scenario, reason = expressible(suite, entry, body)
            if entry.get("needs"):
                first_needing = False
                assert scenario is not None or reason.startswith("not expressible: ")
            else:
                assert scenario is not None
                compared += 1
    assert total > 500 and compared >= 50
    for suite in ("simumax-b200", "torchtitan-docs-2024-08"):
        for _entry, sc in row_scenarios(suite):
            p = sc.parallelism
            assert sc.cluster.nodes * sc.cluster.gpus_per_node == p.tp * p.pp * p.cp * (p.dp or 0)


def _write(tmp_path: Path, rows: list[dict], base: dict | None = None) -> Path:
    suite = {"suite": "mine", "base": base or {
        "cluster": {"preset": "dgx-a100", "nodes": 1},
        "model": {"preset": "tiny-gpt", "max_seq_len": 1024},
        "training": {"global_batch_size": 16, "seq_len": 256}, "sim": {"granularity": "layer"}},
        "rows": rows}
    (tmp_path / "mine.yaml").write_text(json.dumps(suite))
    return tmp_path


def test_rows_with_needs_are_listed_not_dropped_and_light_up_when_expressible(tmp_path):
    directory = _write(tmp_path, [
        {"id": "fp4", "published": {"tokens_per_s_per_gpu": 1000}, "needs": ["FP4 training"],
         "scenario": {"training": {"dtype": "fp4"}}},
        # Lists a need, but simtrain accepts it: compared like any other row.
        {"id": "ok", "published": {"tokens_per_s_per_gpu": 1000}, "needs": ["something"]},
        # The same scenario twice (one config published twice): simulated once.
        {"id": "ok-again", "published": {"tokens_per_s_per_gpu": 2000}}])
    fp4, ok, again = run_suite("mine", directory)
    assert fp4.predicted is None and fp4.error is None
    assert fp4.skipped.startswith("not expressible: FP4 training (training.dtype: ")
    # tokens/s/GPU = 16 sequences x 256 tokens / step / 8 GPUs.
    step = ok.extra["step_time_s"]
    assert ok.predicted == pytest.approx(16 * 256 / step / 8)
    assert "listed needs (something) but validates" in ok.note
    assert again.predicted == ok.predicted and again.error == pytest.approx(
        ok.predicted / 2000 - 1)
    summary = {s["metric"]: s for s in summarize([fp4, ok, again])}["tokens_per_s_per_gpu"]
    assert (summary["total"], summary["rows"], summary["skipped"]) == (3, 2, 1)
    table = runner.invoke(app, ["validate", "-s", "mine", "--dir", str(directory), "-j", "1"])
    assert table.exit_code == 0 and "not expressible: FP4 training" in table.stdout


def test_a_row_that_does_not_validate_without_needs_is_bad_input(tmp_path):
    directory = _write(tmp_path, [{"id": "typo", "published": {"iteration_time_ms": 5},
                                   "scenario": {"training": {"dtype": "fp4"}}}])
    with pytest.raises(ScenarioError, match=r"mine\.yaml: row typo: training\.dtype"):
        run_suite("mine", directory)
    result = runner.invoke(app, ["validate", "-s", "mine", "--dir", str(directory)])
    assert result.exit_code == 2 and "row typo" in result.output
    assert "Traceback" not in result.output


def test_parallel_rows_and_granularity_override(tmp_path):
    directory = _write(tmp_path, [
        {"id": "a", "published": {"iteration_time_ms": 5}},
        {"id": "b", "published": {"iteration_time_ms": 5},
         "scenario": {"training": {"seq_len": 512}}}])
    serial = run_suite("mine", directory, jobs=1)
    parallel = run_suite("mine", directory, jobs=2)
    assert [(r.id, r.predicted) for r in serial] == [(r.id, r.predicted) for r in parallel]
    seen: list[str] = []
    staged = run_suites(["mine"], directory, granularity="stage",
                        progress=lambda s, r: seen.append(f"{s}/{r}"))
    assert sorted(seen) == ["mine/a", "mine/b"] and len(staged) == 2
    bad = runner.invoke(app, ["validate", "-s", "mine", "--dir", str(directory),
                              "--granularity", "kernel"])
    assert bad.exit_code == 2 and "--granularity 'kernel'" in bad.output


def test_suite_files_of_another_format_run_through_their_module(tmp_path, monkeypatch):
    # e.g. nccl-modern.yaml (collective sweeps): listed only where its file exists, run by
    # its own module's suite_rows(path, progress), never parsed as a scenario suite.
    from simtrain import validation

    (tmp_path / "sweepmod.py").write_text(
        "from simtrain.validation import Row\n"
        "def rows(path, progress):\n"
        "    out = [Row('sweep', 'p1', 'busbw_gbps', 10.0, 11.0, 0.1)]\n"
        "    if progress: progress('p1')\n"
        "    return out\n"
        "def count(path):\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(validation.FILE_SUITES, "sweep", ("sweepmod", "rows", "count"))
    directory = _write(tmp_path, [{"id": "a", "published": {"iteration_time_ms": 5}}])
    assert "sweep" not in scenario_suites(directory)
    assert validation.all_suites(directory) == ["mine", "nccl"]
    (tmp_path / "sweep.yaml").write_text("series: []\n")
    assert validation.all_suites(directory) == ["mine", "sweep", "nccl"]
    seen: list[str] = []
    (row,) = run_suites(["sweep"], directory, progress=lambda s, r: seen.append(f"{s}/{r}"))
    assert row.id == "p1" and seen == ["sweep/p1"]
    assert validation.count_rows("sweep", directory) == 1
    # With a pool the file suite runs in a worker beside the scenario rows: same rows,
    # suite order kept, one progress step per row.
    seen.clear()
    both = run_suites(["sweep", "mine"], directory, jobs=2,
                      progress=lambda s, r: seen.append(f"{s}/{r}"))
    assert [(r.suite, r.id) for r in both][:1] == [("sweep", "p1")]
    assert {r.suite for r in both} == {"sweep", "mine"}
    assert sorted(seen) == ["mine/a", "sweep/p1"]


def test_row_patterns_select_rows_of_every_kind_of_suite(tmp_path):
    directory = _write(tmp_path, [
        {"id": "dense-a", "published": {"iteration_time_ms": 5}},
        {"id": "moe-b", "published": {"iteration_time_ms": 5}},
        {"id": "dense-c", "published": {"iteration_time_ms": 5}}])
    assert count_rows("mine", directory, ["dense-*"]) == 2
    rows = run_suites(["mine", "nccl"], directory, only=["dense-*", "*NVLS*"])
    assert [r.id for r in rows if r.suite == "mine"] == ["dense-a", "dense-c"]
    nccl = [r.id for r in rows if r.suite == "nccl"]
    assert nccl and all("NVLS" in i for i in nccl)
    result = runner.invoke(app, ["validate", "-s", "mine", "--dir", str(directory),
                                 "--row", "moe-?", "--json"])
    assert result.exit_code == 0, result.output
    assert [r["id"] for r in json.loads(result.stdout)["rows"]] == ["moe-b"]


def test_wall_line_reads_minutes_and_seconds():
    assert wall_line(12.34, 3, 1) == "wall time 12.3 s (3 rows, 1 worker process)"
    # 185.2 s = 3 min 5.2 s
    assert wall_line(185.2, 400, 2) == "wall time 3 min 5.2 s (400 rows, 2 worker processes)"


def test_row_cost_counts_microbatches_layers_and_collective_flows():
    # megatron-2020's 8B row on 1024 GPUs, by hand: tp 8, dp 128, cp 1; gbs 2048, mbs 16
    # -> m = 2048 / (128 * 16) = 1 microbatch; 42 layers; per layer 1 + 1 (tp > 1) = 2:
    # cost = 1 * 42 * 1 * 2 = 84.
    scenario = next(s for e, s in row_scenarios("megatron-2020")
                    if e["id"] == "8B-dgxa100-dp-1024gpu")
    par, train = scenario.parallelism, scenario.training
    assert (par.tp, par.dp, train.global_batch_size, train.micro_batch_size,
            scenario.model.num_layers) == (8, 128, 2048, 16, 42)
    assert row_cost(scenario) == 84.0
    # EP 8 and ZeRO-3 on top (hand): per layer 1 + 1 + 8 * 8 / 16 = 6 -> 42 * 6 = 252,
    # plus the gathers 1 * 42 * 128 * 1 / 4 = 1344: cost = 1596.
    moe = scenario.model_copy(update={
        "parallelism": par.model_copy(update={"ep": 8, "zero": 3})})
    assert row_cost(moe) == 1596.0

"""`simtrain calibrate`: the fit recovers known parameters, splits by suite, gives honest
standard errors, and refuses bad input and failed fits."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ruamel.yaml import YAML
from typer.testing import CliRunner

from simtrain.calibration import (
    PARAMS,
    available_params,
    current_params,
    edge_problems,
    fit,
    least_squares_fit,
    observations,
    simulated_steps,
    split,
    with_params,
)
from simtrain.calibration_data import Observation
from simtrain.cli import app

runner = CliRunner()

BASE: dict[str, Any] = {
    "cluster": {"preset": "dgx-a100", "nodes": 1},
    "model": {"preset": "tiny-gpt", "max_seq_len": 1024},
    "training": {"global_batch_size": 32, "micro_batch_size": 2, "dtype": "bf16"},
    "sim": {"granularity": "layer"},
    # The host is free: the fit is about GPU-side parameters (tiny-gpt is launch-bound).
    "compute": {"host_kernel_issue": 0, "host_microbatch": 0},
}
# Rows that weigh GEMMs and memory-bound kernels differently (sequence length and TP).
ROWS = [
    {"id": "dp8-s256", "scenario": {"training": {"seq_len": 256}}},
    {"id": "dp8-s1024", "scenario": {"training": {"seq_len": 1024}}},
    {"id": "tp2-dp4", "scenario": {"training": {"seq_len": 512},
                                   "parallelism": {"tp": 2, "dp": 4}}},
]
TRUE = {"gemm_efficiency": 0.55, "memory_efficiency": 0.7}


def _suite(tmp_path: Path, truth: dict[str, float], name: str = "synthetic",
           rows: list[dict[str, Any]] | None = None) -> Path:
    """A suite whose 'published' step times are simtrain's own with ``truth``."""
    draft = {"suite": name, "flops": "mcore-2024-model", "base": BASE,
             "rows": [{**r, "published": {"iteration_time_ms": 1.0}} for r in rows or ROWS]}
    (tmp_path / f"{name}.yaml").write_text(json.dumps(draft))
    obs = observations([name], tmp_path)
    steps = simulated_steps(obs, truth)
    for row, step in zip(draft["rows"], steps, strict=True):
        row["published"] = {"iteration_time_ms": float(step) * 1e3}
    with (tmp_path / f"{name}.yaml").open("w") as fh:
        YAML().dump(draft, fh)
    return tmp_path


# --- the least-squares core on problems with a known answer ------------------------------

def test_standard_errors_of_a_straight_line_fit():
    # y = a + b*x at x = 0..4 with residual noise e = (+.1, -.1, -.1, +.1, 0):
    # y = 1+0*2+.1, 1+1*2-.1, ... = 1.1, 2.9, 4.9, 7.1, 9.0 with a = 1, b = 2.
    # OLS: x̄ = 2, Sxx = 10, Sxy = Σ(x-2)(y-ȳ) with ȳ = 5: (-2)(-3.9)+(-1)(-2.1)+0+1(2.1)+2(4)
    # = 7.8+2.1+2.1+8 = 20 -> b = 2.0, a = ȳ - b·x̄ = 1.0; residuals e; Σe² = 0.04.
    # s² = 0.04/(5-2) = 0.01333; σ_b = sqrt(s²/Sxx) = sqrt(0.001333) = 0.036515;
    # σ_a = sqrt(s²·(1/5 + x̄²/Sxx)) = sqrt(0.01333·0.6) = 0.089443.
    x = np.arange(5.0)
    y = np.array([1.1, 2.9, 4.9, 7.1, 9.0])
    res = least_squares_fit(lambda p: p[0] + p[1] * x - y, [0.5, 1.0], [-10, -10], [10, 10],
                            max_evaluations=50)
    assert res.converged
    assert res.x == pytest.approx([1.0, 2.0], abs=1e-4)
    assert res.sigma == pytest.approx([0.089443, 0.036515], rel=0.02)
    assert res.rms == pytest.approx(math.sqrt(0.04 / 5), rel=1e-3)


def test_standard_error_in_log_space_maps_back_by_the_delta_method():
    # r_i = log(p) - log(2) + e_i, e = (+.1, -.1, +.2, -.2): p̂ = 2·exp(-mean(e)) = 2;
    # Σe² = .01+.01+.04+.04 = 0.1, s² = 0.1/3, σ_logp = sqrt(s²/4) = 0.091287;
    # σ_p = p̂·σ_logp = 0.182574.
    e = np.array([0.1, -0.1, 0.2, -0.2])
    res = least_squares_fit(lambda p: np.log(p[0]) - math.log(2.0) + e, [1.0], [0.1], [10.0],
                            log=[True], max_evaluations=50)
    assert res.x[0] == pytest.approx(2.0, rel=1e-3)
    assert res.sigma[0] == pytest.approx(0.182574, rel=0.02)


def test_unidentifiable_and_exactly_determined_parameters():
    # The residuals ignore p[1]: its standard error is infinite, not a small number.
    res = least_squares_fit(lambda p: np.array([p[0] - 1.0, p[0] - 1.2, p[0] - 0.8]),
                            [0.5, 0.5], [0, 0], [2, 2], max_evaluations=30)
    assert math.isinf(res.sigma[1])
    # One residual, one parameter: no degrees of freedom left for an error estimate.
    one = least_squares_fit(lambda p: np.array([p[0] - 1.0]), [0.5], [0], [2])
    assert math.isnan(one.sigma[0])


def test_non_convergence_and_edges_are_reported():
    slow = least_squares_fit(lambda p: np.array([p[0] ** 3 - 8.0, p[0] - 2.0, p[0] - 2.1]),
                             [0.1], [0.0], [10.0], max_evaluations=2)
    assert not slow.converged
    assert edge_problems({"gemm_efficiency": 0.5}) and edge_problems({"gemm_efficiency": 0.95})
    assert not edge_problems({"gemm_efficiency": 0.8})


# --- parameter table and defaults ----------------------------------------------------------

def test_parameter_table_matches_the_compute_config():
    from simtrain.workload.compute import ComputeConfig

    table = available_params()
    assert set(table) <= set(ComputeConfig.model_fields)
    assert "gemm_efficiency" in table
    for p in PARAMS.values():
        assert p.lo < p.hi and p.cause and p.source
    # Per-architecture defaults come from compute.py's table of the same name.
    from simtrain.workload.compute import GEMM_EFFICIENCY

    assert current_params("ampere", ["gemm_efficiency"]) == {
        "gemm_efficiency": GEMM_EFFICIENCY["ampere"]}


# --- the split ------------------------------------------------------------------------------

def _obs(suite: str, arch: str, n: int) -> list[Observation]:
    return [Observation(suite, f"{suite}-{k}", arch, {}, 1.0) for k in range(n)]


def test_split_is_by_suite_and_never_by_row():
    obs = [*_obs("a", "hopper", 5), *_obs("b", "hopper", 2), *_obs("c", "hopper", 1),
           *_obs("d", "ampere", 3)]
    parts = split(obs)
    train, held = parts["hopper"]
    # Default: train on the suite with most rows, hold out the others, per architecture.
    assert {o.suite for o in train} == {"a"} and {o.suite for o in held} == {"b", "c"}
    assert parts["ampere"] == (obs[8:], [])
    explicit = split(obs, holdout=["a"])
    assert {o.suite for o in explicit["hopper"][0]} == {"b", "c"}
    for tr, he in explicit.values():
        assert not {o.suite for o in tr} & {o.suite for o in he}
    with pytest.raises(ValueError, match="every suite with ampere rows is held out"):
        split(obs, holdout=["d"])


# --- fits on synthetic measurements -----------------------------------------------------------

def test_fit_recovers_the_parameters_that_made_the_measurements(tmp_path: Path) -> None:
    directory = _suite(tmp_path, TRUE)
    obs = observations(["synthetic"], directory)
    assert {o.arch for o in obs} == {"ampere"}
    (result,) = fit(obs, ["gemm_efficiency", "memory_efficiency"], max_evaluations=30)
    # Defaults (0.6971, 0.85) are off by 27% and 21%; the fit lands on the truth.
    assert result.start == {"gemm_efficiency": 0.6971, "memory_efficiency": 0.85}
    assert result.params["gemm_efficiency"] == pytest.approx(0.55, abs=0.01)
    # These rows constrain HBM efficiency loosely (sigma ~0.026): the truth within 2 sigma.
    assert abs(result.params["memory_efficiency"] - 0.7) <= 2 * result.sigma[
        "memory_efficiency"]
    assert (result.mape("before") or 0) > 0.1
    assert (result.mape("after") or 1) < 0.005
    assert result.ok and result.held_out == []
    assert all(s >= 0 for s in result.sigma.values())


def test_held_out_suite_is_tested_with_the_fitted_values(tmp_path: Path) -> None:
    truth = {"gemm_efficiency": 0.6}
    _suite(tmp_path, truth, "train", ROWS[:2])
    _suite(tmp_path, truth, "held", ROWS[2:])
    obs = observations(["train", "held"], tmp_path)
    (result,) = fit(obs, ["gemm_efficiency"], max_evaluations=20)
    assert [r["suite"] for r in result.train] == ["train", "train"]
    assert [r["suite"] for r in result.held_out] == ["held"]
    assert result.params["gemm_efficiency"] == pytest.approx(0.6, abs=0.01)
    assert abs(result.held_out[0]["before"]) > 0.05  # 0.8 default: too fast
    assert abs(result.held_out[0]["after"]) < 0.01


def test_tflops_and_tokens_rows_become_step_times(tmp_path: Path) -> None:
    # mcore formula for tiny-gpt at the row's shape, divided by TFLOP/s x GPUs = step;
    # tokens/s/GPU: 32 sequences x 256 tokens / (1000 tokens/s x 8 GPUs) = 1.024 s.
    from simtrain.scenario import load_scenario
    from simtrain.validation import formula_flops

    body = {**BASE, "training": {**BASE["training"], "seq_len": 256}}
    flops = formula_flops("mcore-2024-model", load_scenario(body))
    suite = {"suite": "t", "flops": "mcore-2024-model", "base": BASE,
             "rows": [{"id": "r", "published": {"tflops_per_gpu": 100.0},
                       "scenario": {"training": {"seq_len": 256}}},
                      {"id": "k", "published": {"tokens_per_s_per_gpu": 1000.0},
                       "scenario": {"training": {"seq_len": 256}}}]}
    (tmp_path / "t.yaml").write_text(json.dumps(suite))
    tflops, tokens = observations(["t"], tmp_path)
    assert tflops.measured_step_s == pytest.approx(flops / (100e12 * 8), rel=1e-12)
    assert tokens.measured_step_s == pytest.approx(1.024, rel=1e-12)


def test_with_params_keeps_other_compute_settings() -> None:
    body = {"compute": {"launch_overhead": 1e-6}}
    assert with_params(body, {"gemm_efficiency": 0.5})["compute"] == {
        "launch_overhead": 1e-6, "gemm_efficiency": 0.5}
    assert body == {"compute": {"launch_overhead": 1e-6}}


# --- the command -------------------------------------------------------------------------------

def test_cli_calibrate_writes_yaml_and_json(tmp_path: Path) -> None:
    directory = _suite(tmp_path, {"gemm_efficiency": 0.6})
    out = tmp_path / "fit.yaml"
    result = runner.invoke(app, ["calibrate", "--dir", str(directory), "--suite", "synthetic",
                                 "--param", "gemm_efficiency", "--write", str(out), "--json",
                                 "-j", "1"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    (f,) = payload["fits"]
    assert f["params"]["gemm_efficiency"] == pytest.approx(0.6, abs=0.01)
    assert f["ok"] and f["train_suites"] == ["synthetic"] and f["held_out_suites"] == []
    assert f["sigma"]["gemm_efficiency"] >= 0
    written = YAML(typ="safe").load(out.read_text())
    assert written["ampere"]["compute"]["gemm_efficiency"] == pytest.approx(0.6, abs=0.01)


def test_cli_calibrate_failed_fit_writes_nothing(tmp_path: Path) -> None:
    # Measurements made with a GEMM efficiency of 0.4, below its physical range [0.5, 0.95]:
    # the optimum sits on the edge, so the fit is refused and no file is written.
    directory = _suite(tmp_path, {"gemm_efficiency": 0.4})
    out = tmp_path / "fit.yaml"
    result = runner.invoke(app, ["calibrate", "--dir", str(directory), "--suite", "synthetic",
                                 "--write", str(out), "-q", "-j", "1"])
    assert result.exit_code == 1, result.output
    assert "fit failed, nothing written" in result.output and "edge" in result.output
    assert not out.exists()


def test_cli_calibrate_fits_only_the_rows_named_by_row(tmp_path: Path) -> None:
    # Of the three rows only the two dp8-* rows (shell pattern, as in validate) are fitted.
    directory = _suite(tmp_path, {"gemm_efficiency": 0.6})
    result = runner.invoke(app, ["calibrate", "--dir", str(directory), "--suite", "synthetic",
                                 "--row", "dp8-*", "--json", "-j", "1"])
    assert result.exit_code == 0, result.output
    (f,) = json.loads(result.stdout)["fits"]
    assert sorted(r["id"] for r in f["train"]) == ["dp8-s1024", "dp8-s256"]
    assert f["params"]["gemm_efficiency"] == pytest.approx(0.6, abs=0.01)


@pytest.mark.parametrize(("args", "message"), [
    (["--param", "warp_speed"], "cannot fit or fix 'warp_speed'"),
    (["--fix", "warp_speed=2"], "cannot fit or fix 'warp_speed'"),
    (["-p", "gemm_efficiency", "--fix", "gemm_efficiency=0.7"],
     "'gemm_efficiency' is both fitted and fixed"),
    (["--fix", "memory_efficiency=0.2"], "outside its physical range"),
    (["--suite", "nope"], "no suite file"),
    (["--suite", "nccl"], "calibrate the network"),
    (["--suite", "ok", "--holdout", "other"], "--holdout 'other' is not among the suites"),
    (["--suite", "ok", "--row", "nothing-*"], "no expressible rows in ok match --row nothing-*"),
])
def test_cli_calibrate_bad_input(args: list[str], message: str, tmp_path: Path) -> None:
    (tmp_path / "ok.yaml").write_text("suite: ok\nrows: []\n")
    (tmp_path / "other.yaml").write_text("suite: other\nrows: []\n")
    result = runner.invoke(app, ["calibrate", "--dir", str(tmp_path), *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


UNEXPRESSIBLE = ("suite: bad\nbase: {model: {preset: tiny-gpt}, cluster: {preset: dgx-a100}}\n"
                 "rows:\n  - id: r1\n    published: {iteration_time_ms: 10}\n"
                 "    needs: [FP4 training]\n"
                 "    scenario: {training: {global_batch_size: 8, dtype: fp4}}\n")


@pytest.mark.parametrize(("text", "message"), [
    # A typo in a row's scenario names the file, the row and the field.
    ("suite: bad\nflops: mcore-2024-model\nbase: {model: {preset: tiny-gpt}}\nrows:\n"
     "  - id: r1\n    published: {iteration_time_ms: 10}\n"
     "    scenario: {training: {micro_batchsize: 4}}\n",
     "bad.yaml: row r1: training.micro_batchsize: unknown field"),
    # An unknown published metric.
    ("suite: bad\nflops: mcore-2024-model\nrows:\n  - id: r1\n    published: {mfu: 0.5}\n",
     "row r1: published needs iteration_time_ms or tokens_per_s_per_gpu or tflops_per_gpu, "
     "got ['mfu']"),
    # A non-positive published number.
    ("suite: bad\nrows:\n  - id: r1\n    published: {iteration_time_ms: -3}\n",
     "row r1: published.iteration_time_ms must be a positive number, got -3"),
    # TFLOP/s without a FLOP formula.
    ("suite: bad\nrows:\n  - id: r1\n    published: {tflops_per_gpu: 3}\n",
     "row r1 publishes tflops_per_gpu but the suite's flops is 'missing'"),
    # A row without published numbers, and a repeated id.
    ("suite: bad\nflops: mcore-2024-model\nrows:\n  - id: r1\n",
     "row 1 needs an id and a published mapping"),
    ("suite: bad\nrows:\n  - {id: r1, published: {iteration_time_ms: 1}}\n"
     "  - {id: r1, published: {iteration_time_ms: 2}}\n", "row r1: id used twice"),
    # A row simtrain cannot express is named, with what it needs.
    (UNEXPRESSIBLE, "bad.yaml: row r1: not expressible: FP4 training (training.dtype:"),
    # Broken YAML gets its line.
    ("suite: bad\nrows: [ {id: r1\n", "bad.yaml:3: not valid YAML"),
])
def test_cli_calibrate_bad_suite_files(text: str, message: str, tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(text)
    result = runner.invoke(app, ["calibrate", "--dir", str(tmp_path), "--suite", "bad", "-q"])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_cli_calibrate_help_names_the_extra() -> None:
    result = runner.invoke(app, ["calibrate", "--help"])
    assert "pip install 'simtrain[calibrate]'" in " ".join(result.output.split())


def test_cli_calibrate_without_scipy_says_how_to_install(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    # The brackets of the extra must survive the console's markup.
    import builtins

    real_import = builtins.__import__

    def no_scipy(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "scipy" or name.startswith("scipy."):
            raise ImportError("no scipy here")
        return real_import(name, *args, **kwargs)

    directory = _suite(tmp_path, {"gemm_efficiency": 0.6})
    monkeypatch.setattr(builtins, "__import__", no_scipy)
    result = runner.invoke(app, ["calibrate", "--dir", str(directory), "--suite", "synthetic"])
    assert result.exit_code == 2
    assert "pip install 'simtrain[calibrate]'" in " ".join(result.output.split())


def test_fit_with_a_fixed_parameter_and_a_microsecond_one(tmp_path: Path) -> None:
    # Memory efficiency held at the truth (0.7); the launch overhead that made the
    # measurements (10 us per kernel, against the 3 us default) is found in microseconds.
    truth = {"memory_efficiency": 0.7, "launch_overhead": 10e-6}
    directory = _suite(tmp_path, truth)
    obs = observations(["synthetic"], directory)
    (result,) = fit(obs, ["launch_overhead"], fixed={"memory_efficiency": 0.7},
                    max_evaluations=20)
    assert result.params["launch_overhead"] == pytest.approx(10e-6, rel=0.05)
    with pytest.raises(ValueError, match="both fitted and fixed"):
        fit(obs, ["launch_overhead"], fixed={"launch_overhead": 1e-6})


def test_cli_calibrate_fix_option(tmp_path: Path) -> None:
    directory = _suite(tmp_path, {"gemm_efficiency": 0.6, "memory_efficiency": 0.7})
    out = tmp_path / "fit.yaml"
    result = runner.invoke(app, ["calibrate", "--dir", str(directory), "--suite", "synthetic",
                                 "-p", "gemm_efficiency", "--fix", "memory_efficiency=0.7",
                                 "--write", str(out), "-q", "-j", "1"])
    assert result.exit_code == 0, result.output
    written = YAML(typ="safe").load(out.read_text())["ampere"]["compute"]
    assert written["memory_efficiency"] == 0.7
    assert written["gemm_efficiency"] == pytest.approx(0.6, abs=0.01)
    bad = runner.invoke(app, ["calibrate", "--dir", str(directory), "--suite", "synthetic",
                              "--fix", "memory_efficiency=fast"])
    assert bad.exit_code == 2 and "expected NAME=VALUE" in " ".join(bad.output.split())


def test_cli_calibrate_arch_filter_names_the_missing_architecture(tmp_path: Path) -> None:
    # One A100 row (dgx-a100): --arch hopper leaves nothing to fit, said in one line, exit 2.
    draft = {"suite": "one", "flops": "mcore-2024-model", "base": BASE,
             "rows": [{**ROWS[0], "published": {"iteration_time_ms": 1.0}}]}
    (tmp_path / "one.yaml").write_text(json.dumps(draft))
    result = runner.invoke(app, ["calibrate", "--dir", str(tmp_path), "--suite", "one",
                                 "--arch", "hopper", "-q"])
    assert result.exit_code == 2, result.output
    assert ("--arch 'hopper': no row of these suites runs on it (architectures present: "
            "ampere)") in " ".join(result.output.split())

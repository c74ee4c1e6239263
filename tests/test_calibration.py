"""`simtrain calibrate`: the fit recovers parameters that generated synthetic measurements."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML
from typer.testing import CliRunner

from simtrain.calibration import fit, observations, simulated_steps, with_params
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


def _suite(tmp_path: Path, truth: dict[str, float]) -> Path:
    """A suite whose 'published' step times are simtrain's own with ``truth``."""
    draft = {"suite": "synthetic", "flops": "mcore-2024-model", "base": BASE,
             "rows": [{**r, "published": {"iteration_time_ms": 1.0}} for r in ROWS]}
    (tmp_path / "synthetic.yaml").write_text(json.dumps(draft))
    obs = observations(["synthetic"], tmp_path)
    steps = simulated_steps(obs, truth)
    for row, step in zip(draft["rows"], steps, strict=True):
        row["published"] = {"iteration_time_ms": float(step) * 1e3}
    yaml = YAML()
    with (tmp_path / "synthetic.yaml").open("w") as fh:
        yaml.dump(draft, fh)
    return tmp_path


def test_fit_recovers_the_parameters_that_made_the_measurements(tmp_path: Path) -> None:
    directory = _suite(tmp_path, TRUE)
    obs = observations(["synthetic"], directory)
    assert {o.arch for o in obs} == {"ampere"}
    (result,) = fit(obs, ["gemm_efficiency", "memory_efficiency"])
    # Defaults (0.80, 0.85) are off by 45% and 21%; the fit lands on the truth.
    assert result.start == {"gemm_efficiency": 0.8, "memory_efficiency": 0.85}
    assert result.params["gemm_efficiency"] == pytest.approx(0.55, abs=0.01)
    assert result.params["memory_efficiency"] == pytest.approx(0.7, abs=0.02)
    assert result.mape("before") > 0.1
    assert result.mape("after") < 0.005


def test_tflops_rows_become_step_times(tmp_path: Path) -> None:
    # mcore formula for tiny-gpt at the row's shape, divided by TFLOP/s x GPUs = step.
    from simtrain.scenario import load_scenario
    from simtrain.validation import formula_flops

    body = {**BASE, "training": {**BASE["training"], "seq_len": 256}}
    flops = formula_flops("mcore-2024-model", load_scenario(body))
    suite = {"suite": "t", "flops": "mcore-2024-model", "base": BASE,
             "rows": [{"id": "r", "published": {"tflops_per_gpu": 100.0},
                       "scenario": {"training": {"seq_len": 256}}}]}
    (tmp_path / "t.yaml").write_text(json.dumps(suite))
    (obs,) = observations(["t"], tmp_path)
    assert obs.measured_step_s == pytest.approx(flops / (100e12 * 8), rel=1e-12)


def test_with_params_keeps_other_compute_settings() -> None:
    body = {"compute": {"launch_overhead": 1e-6}}
    assert with_params(body, {"gemm_efficiency": 0.5})["compute"] == {
        "launch_overhead": 1e-6, "gemm_efficiency": 0.5}
    assert body == {"compute": {"launch_overhead": 1e-6}}


def test_cli_calibrate_writes_yaml_and_json(tmp_path: Path) -> None:
    directory = _suite(tmp_path, {"gemm_efficiency": 0.6})
    out = tmp_path / "fit.yaml"
    result = runner.invoke(app, ["calibrate", "--dir", str(directory), "--suite", "synthetic",
                                 "--param", "gemm_efficiency", "--write", str(out), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    (f,) = payload["fits"]
    assert f["params"]["gemm_efficiency"] == pytest.approx(0.6, abs=0.01)
    written = YAML(typ="safe").load(out.read_text())
    assert written["ampere"]["compute"]["gemm_efficiency"] == pytest.approx(0.6, abs=0.01)


@pytest.mark.parametrize(("args", "message"), [
    (["--param", "warp_speed"], "cannot fit or fix 'warp_speed'"),
    (["--fix", "warp_speed=2"], "cannot fit or fix 'warp_speed'"),
    (["-p", "gemm_efficiency", "--fix", "gemm_efficiency=0.7"],
     "'gemm_efficiency' is both fitted and fixed"),
    (["--suite", "nope"], "no suite file"),
    (["--suite", "nccl"], "calibrate the network"),
])
def test_cli_calibrate_bad_input(args: list[str], message: str, tmp_path: Path) -> None:
    (tmp_path / "nccl.yaml").write_text("suite: nccl\nrows: []\n")
    result = runner.invoke(app, ["calibrate", "--dir", str(tmp_path), *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


@pytest.mark.parametrize(("text", "message"), [
    # A typo in a row's scenario names the file, the row and the field.
    ("suite: bad\nflops: mcore-2024-model\nbase: {model: {preset: tiny-gpt}}\nrows:\n"
     "  - id: r1\n    published: {iteration_time_ms: 10}\n"
     "    scenario: {training: {micro_batchsize: 4}}\n",
     "bad.yaml: row r1: training.micro_batchsize: unknown field"),
    # An unknown published metric.
    ("suite: bad\nflops: mcore-2024-model\nrows:\n  - id: r1\n    published: {mfu: 0.5}\n",
     "published needs iteration_time_ms or tflops_per_gpu, got ['mfu']"),
    # A row without published numbers.
    ("suite: bad\nflops: mcore-2024-model\nrows:\n  - id: r1\n",
     "row 1 needs an id and a published mapping"),
    # Broken YAML gets its line.
    ("suite: bad\nrows: [ {id: r1\n", "bad.yaml:3: not valid YAML"),
])
def test_cli_calibrate_bad_suite_files(text: str, message: str, tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(text)
    result = runner.invoke(app, ["calibrate", "--dir", str(tmp_path), "--suite", "bad", "-q"])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())


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
    # measurements (20 us per kernel, against the 3 us default) is found in microseconds.
    truth = {"memory_efficiency": 0.7, "launch_overhead": 20e-6}
    directory = _suite(tmp_path, truth)
    obs = observations(["synthetic"], directory)
    (result,) = fit(obs, ["launch_overhead"], fixed={"memory_efficiency": 0.7})
    assert result.params["launch_overhead"] == pytest.approx(20e-6, rel=0.05)
    with pytest.raises(ValueError, match="both fitted and fixed"):
        fit(obs, ["launch_overhead"], fixed={"launch_overhead": 1e-6})


def test_cli_calibrate_fix_option(tmp_path: Path) -> None:
    directory = _suite(tmp_path, {"gemm_efficiency": 0.6, "memory_efficiency": 0.7})
    out = tmp_path / "fit.yaml"
    result = runner.invoke(app, ["calibrate", "--dir", str(directory), "--suite", "synthetic",
                                 "-p", "gemm_efficiency", "--fix", "memory_efficiency=0.7",
                                 "--write", str(out), "-q"])
    assert result.exit_code == 0, result.output
    written = YAML(typ="safe").load(out.read_text())["ampere"]["compute"]
    assert written["memory_efficiency"] == 0.7
    assert written["gemm_efficiency"] == pytest.approx(0.6, abs=0.01)
    bad = runner.invoke(app, ["calibrate", "--dir", str(directory), "--suite", "synthetic",
                              "--fix", "memory_efficiency=fast"])
    assert bad.exit_code == 2 and "expected NAME=VALUE" in " ".join(bad.output.split())

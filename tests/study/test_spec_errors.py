"""Sweep file errors name the file, the line and the key (issues 18 and 20)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simtrain import simulate
from simtrain.errors import ScenarioError
from simtrain.study.spec import OBJECTIVE_METRICS, is_objective_metric, load_sweep


def _sweep(tmp_path: Path, body: str) -> Path:
    (tmp_path / "base.yaml").write_text(
        "cluster: {preset: dgx-a100, nodes: 1}\nmodel: {preset: tiny-gpt}\n"
        "training: {global_batch_size: 8}\n")
    path = tmp_path / "s.yaml"
    path.write_text("base: base.yaml\n" + body)
    return path


@pytest.mark.parametrize(("body", "line", "says"), [
    ("axes: {model.num_layers: [1, 2]}\nobjective: {metric: step_time}\n", 3,
     "did you mean 'step_time_s'"),
    ("axes: {model.num_layers: [1, 2]}\nobjective: {metric: tokens_per_s, goal: best}\n", 3,
     "goal: min|max"),
    ("axes: {model.num_layers: [1, 2]}\nextra: 1\n", 3, "unknown key(s) extra"),
    ("axes: [1, 2]\n", 2, "'axes' must map"),
    ("axes:\n  model.num_layers: []\n", 3, "non-empty list"),
    ("axes:\n  model.num_layers: {start: 1, stop: .inf, step: 1}\n", 3, "finite number"),
    ("zip: 3\n", 2, "'zip' must be a list"),
    ("axes:\n  a: [1]\nzip:\n  - a: [2]\n", 5, "axis given twice"),
])
def test_sweep_errors_have_a_line(tmp_path: Path, body: str, line: int, says: str) -> None:
    path = _sweep(tmp_path, body)
    with pytest.raises(ScenarioError) as err:
        load_sweep(path)
    assert err.value.source == str(path) and err.value.line == line, str(err.value)
    assert says in str(err.value)


def test_yaml_faults_in_a_sweep_file_are_project_errors(tmp_path: Path) -> None:
    for raw, says in ((b"base: x\x00\n", "NUL byte"), (b"base: \xff\n", "not UTF-8"),
                      (b"base: [" * 100, "nested deeper"), (b"!!int : 3\n", "not valid YAML")):
        path = tmp_path / "bad.yaml"
        path.write_bytes(raw)
        with pytest.raises(ScenarioError, match=says):
            load_sweep(path)


def test_every_objective_metric_is_a_number_in_a_real_summary() -> None:
    summary = simulate({"cluster": {"preset": "dgx-a100", "nodes": 1},
                        "model": {"preset": "tiny-gpt"},
                        "training": {"global_batch_size": 8}}).summary
    for metric in OBJECTIVE_METRICS:
        assert isinstance(summary[metric], int | float), metric
    assert is_objective_metric("exposed_comm_by_kind.dp_comm")
    assert is_objective_metric("variability.p99_step_s")  # with sim.variability in the base
    assert not is_objective_metric("exposed_comm_by_kind.") and not is_objective_metric("x")

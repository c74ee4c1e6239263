"""Sweep files: ranges, grid and zip expansion, stable point ids, errors that name the axis."""

from __future__ import annotations

from pathlib import Path

import pytest

from simtrain.errors import ScenarioError
from simtrain.study.spec import expand_range, load_sweep, point_id

BASE = {"cluster": {"preset": "dgx-a100", "nodes": 1}, "model": {"preset": "gpt2-small"},
        "training": {"global_batch_size": 64, "micro_batch_size": 8, "seq_len": 1024}}


def test_mul_range_is_geometric_and_includes_stop() -> None:
    assert expand_range({"start": 1, "stop": 64, "mul": 2}) == [1, 2, 4, 8, 16, 32, 64]
    assert expand_range({"start": 1, "stop": 100, "mul": 10}) == [1, 10, 100]
    assert expand_range({"start": 3, "stop": 20, "mul": 2}) == [3, 6, 12]


def test_step_range_is_arithmetic_inclusive_and_keeps_ints() -> None:
    values = expand_range({"start": 1, "stop": 9, "step": 4})
    assert values == [1, 5, 9] and all(isinstance(v, int) for v in values)
    assert expand_range({"start": 0.5, "stop": 1.0, "step": 0.25}) == [0.5, 0.75, 1.0]
    assert expand_range({"start": 8, "stop": 2, "step": -3}) == [8, 5, 2]


@pytest.mark.parametrize("bad, words", [
    ({"start": 1, "stop": 8}, "exactly one of step or mul"),
    ({"start": 1, "stop": 8, "step": 1, "mul": 2}, "exactly one of step or mul"),
    ({"start": 1, "stop": 8, "step": -1}, "sign of stop - start"),
    ({"start": 0, "stop": 8, "mul": 2}, "0 < start"),
    ({"start": 1, "stop": 8, "mul": 1}, "mul > 1"),
    ({"start": 1, "stop": 8, "by": 1}, "unknown range key(s) by"),
    ({"start": "a", "stop": 8, "step": 1}, "start must be a number"),
])
def test_bad_ranges_say_what_to_write(bad: dict[str, object], words: str) -> None:
    with pytest.raises(ValueError, match=".*".join(map(_re, words.split()))):
        expand_range(bad)


def _re(word: str) -> str:
    import re
    return re.escape(word)


def test_grid_is_the_product_first_axis_slowest() -> None:
    spec = load_sweep({"base": BASE, "axes": {"model.num_layers": [1, 2],
                                              "cluster.nic_bandwidth": ["200Gbps", "400Gbps"]}})
    points = spec.points()
    assert len(spec) == 4 and [p.index for p in points] == [0, 1, 2, 3]
    assert [p.as_dict() for p in points] == [
        {"model.num_layers": 1, "cluster.nic_bandwidth": "200Gbps"},
        {"model.num_layers": 1, "cluster.nic_bandwidth": "400Gbps"},
        {"model.num_layers": 2, "cluster.nic_bandwidth": "200Gbps"},
        {"model.num_layers": 2, "cluster.nic_bandwidth": "400Gbps"},
    ]
    # values reach load_scenario as YAML (JSON) overrides: strings stay strings
    assert points[1].overrides == ['model.num_layers=1', 'cluster.nic_bandwidth="400Gbps"']


def test_zip_groups_advance_together_and_are_one_grid_dimension() -> None:
    spec = load_sweep({"base": BASE, "axes": {"model.num_layers": [1, 2]},
                       "zip": [{"cluster.nodes": [1, 2, 4],
                                "training.global_batch_size": [64, 128, 256]}]})
    assert len(spec) == 6
    assert spec.points()[4].as_dict() == {"model.num_layers": 2, "cluster.nodes": 2,
                                          "training.global_batch_size": 128}
    # dimensions follow the file's order: zip first here
    zipped_first = load_sweep({"base": BASE, "zip": [{"cluster.nodes": [1, 2, 4],
                                                      "training.global_batch_size": [64, 128,
                                                                                     256]}],
                               "axes": {"model.num_layers": [1, 2]}})
    assert zipped_first.axes == ["cluster.nodes", "training.global_batch_size",
                                 "model.num_layers"]
    assert zipped_first.points()[1].as_dict() == {"cluster.nodes": 1,
                                                  "training.global_batch_size": 64,
                                                  "model.num_layers": 2}


def test_zip_of_unequal_lengths_names_the_axes_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("base: {}\nzip:\n  - cluster.nodes: [1, 2]\n"
                    "    training.global_batch_size: [64, 128, 256]\n")
    with pytest.raises(ScenarioError) as info:
        load_sweep(path)
    text = str(info.value)
    assert text.startswith(f"{path}:3: axis cluster.nodes: zipped axes must have equal lengths")
    assert "cluster.nodes has 2, training.global_batch_size has 3" in text
    assert "move one to 'axes'" in text


def test_point_ids_are_stable_and_depend_on_base_and_values() -> None:
    def ids(base: dict[str, object], layers: list[int]) -> list[str]:
        return [p.point_id for p in load_sweep({"base": base,
                                                 "axes": {"model.num_layers": layers}}).points()]

    assert ids(BASE, [1, 2]) == ids(dict(BASE), [1, 2])
    # a point keeps its id when other points are added (resume after editing axes)
    assert ids(BASE, [1, 2])[1] == ids(BASE, [0, 2, 5])[1]
    other = {**BASE, "training": {**BASE["training"], "seq_len": 512}}  # type: ignore[dict-item]
    assert not set(ids(BASE, [1, 2])) & set(ids(other, [1, 2]))
    assert point_id("d", [("a", 1)]) != point_id("d", [("a", "1")])
    assert len(ids(BASE, [1])[0]) == 16


def test_base_path_is_relative_to_the_sweep_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "base.yaml").write_text(
        "cluster: {preset: dgx-a100}\nmodel: {preset: gpt2-small}\n"
        "training: {global_batch_size: 64, micro_batch_size: 8}\n")
    sweep = tmp_path / "sub" / "layers.yaml"
    sweep.write_text("base: ../base.yaml\naxes:\n  model.num_layers: {start: 1, stop: 4, "
                     "mul: 2}\n")
    spec = load_sweep(sweep)
    assert spec.name == "layers" and spec.base_path == tmp_path / "base.yaml"
    assert spec.base["name"] == "base" and spec.axes == ["model.num_layers"]
    assert [p.as_dict()["model.num_layers"] for p in spec.points()] == [1, 2, 4]


@pytest.mark.parametrize("doc, words", [
    ({"axes": {"a.b": [1]}}, "missing 'base'"),
    ({"base": BASE, "axis": {"a.b": [1]}}, "unknown key(s) axis"),
    ({"base": BASE}, "no axes"),
    ({"base": BASE, "axes": {"model.num_layers": []}}, "axis model.num_layers: expected a "
                                                         "non-empty list"),
    ({"base": BASE, "axes": {"model.num_layers": 4}}, "axis model.num_layers: expected a "
                                                        "non-empty list"),
    ({"base": BASE, "axes": {"model.num_layers": [2, 2]}}, "points 0 and 1 are the same"),
    ({"base": BASE, "axes": {"model.num_layers": {"start": 1, "stop": 4}}},
     "axis model.num_layers: a range needs"),
    ({"base": BASE, "axes": {"m": [1]}, "zip": [{"m": [1]}]}, "axis m: axis given twice"),
    ({"base": BASE, "axes": {"m": [1]}, "objective": {"goal": "best"}}, "objective must be"),
    ({"base": BASE, "axes": {"m": [1]}, "objective": "tokens_per_sec"},
     "unknown summary metric 'tokens_per_sec'; did you mean 'tokens_per_s'?"),
    ({"base": 3, "axes": {"m": [1]}}, "'base' must be a scenario path or mapping"),
])
def test_bad_sweep_files_are_scenario_errors(doc: dict[str, object], words: str) -> None:
    with pytest.raises(ScenarioError) as info:
        load_sweep(doc).points()
    assert words in str(info.value)


def test_missing_base_file_is_named(tmp_path: Path) -> None:
    sweep = tmp_path / "s.yaml"
    sweep.write_text("base: nowhere.yaml\naxes: {model.num_layers: [1]}\n")
    with pytest.raises(ScenarioError, match="nowhere.yaml: cannot read file"):
        load_sweep(sweep)

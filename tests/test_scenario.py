"""Scenario loading: presets, overrides, and one-line errors that name file, line and field."""

from __future__ import annotations

import textwrap

import pytest

from simtrain import ScenarioError, load_scenario

GOOD = """\
name: t
cluster:
  preset: dgx-h100
  nodes: 2
  nic_bandwidth: 200Gbps
model:
  preset: llama3-8b
  num_layers: 4
training:
  global_batch_size: 32
  micro_batch_size: 2
  seq_len: 4096
parallelism:
  ddp:
    bucket_cap_mb: 50
"""


def _write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_presets_merge_with_overrides_and_units_convert(tmp_path):
    s = load_scenario(_write(tmp_path, GOOD))
    assert s.cluster.nodes == 2 and s.cluster.gpu == "h100-sxm"
    assert s.cluster.nic_bandwidth == 25e9  # 200 Gbit/s = 25e9 B/s
    assert s.model.num_layers == 4 and s.model.hidden_size == 4096  # override + preset
    assert s.parallelism.ddp.bucket_cap_bytes == 50 * 2**20
    assert s.parallelism.ddp.first_bucket_bytes == 2**20


def test_command_line_overrides(tmp_path):
    s = load_scenario(_write(tmp_path, GOOD), ["cluster.nodes=4", "parallelism.ddp.overlap=false",
                                               "training.global_batch_size=64"])
    assert s.cluster.nodes == 4 and s.parallelism.ddp.overlap is False


def test_dict_input_and_name_from_file(tmp_path):
    s = load_scenario(_write(tmp_path, GOOD.replace("name: t\n", ""), name="mine.yaml"))
    assert s.name == "mine"
    d = load_scenario({"cluster": {"preset": "dgx-a100"}, "model": {"preset": "tiny-gpt"},
                       "training": {"global_batch_size": 8}})
    assert d.cluster.gpu == "a100-80gb"


@pytest.mark.parametrize(("edit", "where", "says"), [
    # unknown key, line 8 is "num_layers" -> replaced by a typo
    (("  num_layers: 4", "  num_layer: 4"), ":8: model.num_layer:",
     "unknown field 'num_layer'; did you mean 'num_layers'? Expected one of:"),
    # wrong unit on line 5
    (("200Gbps", "200Gbs"), ":5: cluster.nic_bandwidth:", "expected a bandwidth such as 400Gbps"),
    # world size: 2 nodes x 8 = 16 GPUs, dp 12 on line 14
    (("  ddp:", "  dp: 12\n  ddp:"), ":14: parallelism.dp:",
     "dp=12 does not match the cluster's 16"),
    # wrong type on line 11
    (("micro_batch_size: 2", "micro_batch_size: two"), ":11: training.micro_batch_size:",
     "valid integer"),
    # unknown preset on line 3
    (("preset: dgx-h100", "preset: dgx-h1000"), ":3: cluster.preset:", "unknown cluster preset"),
    # batch not divisible: 30 / (16 x 2)
    (("global_batch_size: 32", "global_batch_size: 30"), ":10: training.global_batch_size:",
     "use a multiple of 32"),
])
def test_bad_input_is_one_line_with_file_line_and_field(tmp_path, edit, where, says):
    path = _write(tmp_path, GOOD.replace(*edit))
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(str(path) + where), message
    assert says in message


def test_bad_override_names_the_assignment(tmp_path):
    with pytest.raises(ScenarioError, match=r"^--set cluster.nodes=x: .*valid integer"):
        load_scenario(_write(tmp_path, GOOD), ["cluster.nodes=x"])
    with pytest.raises(ScenarioError, match="expected KEY=VALUE"):
        load_scenario(_write(tmp_path, GOOD), ["cluster.nodes"])


def test_yaml_syntax_error_has_a_line(tmp_path):
    with pytest.raises(ScenarioError, match=r"s.yaml:4: not valid YAML"):
        load_scenario(_write(tmp_path, "cluster:\n  preset: dgx-a100\n  nodes: [1\n"))


def test_missing_section_and_file(tmp_path):
    with pytest.raises(ScenarioError, match="training: required field is missing"):
        load_scenario(_write(tmp_path, "cluster: {preset: dgx-a100}\nmodel: {preset: tiny-gpt}\n"))
    with pytest.raises(ScenarioError, match="cannot read scenario file"):
        load_scenario(tmp_path / "nope.yaml")


def test_large_scenarios_load_and_fit_in_memory():
    # Loading checks the plan (degrees, divisibility); the memory model runs without
    # simulating (these take minutes; they are run by hand, see scenarios/large/).
    from pathlib import Path

    from simtrain.hardware.topology import build_cluster
    from simtrain.simulate import build_plan, memory_report

    root = Path(__file__).resolve().parents[1] / "scenarios" / "large"
    for path in sorted(root.glob("*.yaml")):
        s = load_scenario(path)
        cluster = build_cluster(s.cluster)
        plan = build_plan(s, cluster)
        assert plan.dims.tp * plan.dims.pp * plan.dims.dp == cluster.num_gpus
        assert memory_report(s, cluster, plan).fits(), path.stem


def test_parallelism_and_sim_fields_round_trip(tmp_path):
    text = GOOD.replace("  ddp:\n", "  tp: 2\n  pp: 2\n  sp: true\n  zero: 1\n  ddp:\n")
    s = load_scenario(_write(tmp_path, text + "sim:\n  granularity: layer\n"
                             "  ignore_memory: true\n"))
    dims = s.parallelism.dims(16)
    assert (dims.tp, dims.pp, dims.dp, dims.sp, dims.zero) == (2, 2, 4, True, 1)
    assert s.sim.granularity == "layer" and s.sim.ignore_memory
    with pytest.raises(ScenarioError, match=r"parallelism.zero: .*got 4"):
        load_scenario(_write(tmp_path, text.replace("zero: 1", "zero: 4")))


@pytest.mark.parametrize(("edit", "says"), [
    (("nodes: 2", "nodes: true"), "cluster.nodes: expected a number, got true"),
    (("bucket_cap_mb: 50", "overlap: 1"), "parallelism.ddp.overlap: expected true or false"),
    (("bucket_cap_mb: 50", "bucket_cap_mb: .nan"), "must be a finite number"),
    (("nic_bandwidth: 200Gbps", "nic_bandwidth: 1e400Gbps"), "must be a finite number"),
    (("nodes: 2", "nodes: 1000000"), "1,000,000 nodes is beyond the 131,072"),
    (("num_layers: 4", "num_layers: 1000000000"), "beyond the 8,192"),
])
def test_values_pydantic_would_accept_but_mean_nothing(tmp_path, edit, says):
    with pytest.raises(ScenarioError, match=says.replace(".", r"\.")):
        load_scenario(_write(tmp_path, GOOD.replace(*edit)))


@pytest.mark.parametrize(("sim", "field", "says"), [
    ("hangs: {16: 1ms}", "sim.hangs.16", "rank 16 is not in the cluster; accepted: ranks 0..15"),
    ("stragglers: {-1: {delay: 1ms}}", "sim.stragglers.-1", "rank -1 is not in the cluster"),
    ("hangs: {3: .nan}", "sim.hangs.3", "finite"),
    ("stragglers: {1: {slowdown: 1e300}}", "sim.stragglers.1.slowdown", "1..1000"),
    ("stragglers: {1: {delay: 2d}}", "sim.stragglers.1.delay", "expected a duration"),
    ("stragglers: {1: {delay: 48h}}", "sim.stragglers.1.delay", "at most 86,400 s"),
])
def test_fault_ranks_and_times_are_checked(tmp_path, sim, field, says):
    path = _write(tmp_path, GOOD + f"sim:\n  {sim}\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value).startswith(f"{path}:17: {field}: ") and says in str(err.value)


def test_merge_keys_load_and_merged_keys_get_their_mapping_line(tmp_path):
    text = ("base: &b {preset: dgx-a100, nodes: 1, gpus_per_nodes: 8}\n"
            "cluster:\n  <<: *b\nmodel: {preset: tiny-gpt}\ntraining: {global_batch_size: 8}\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(_write(tmp_path, text))  # used to be a KeyError
    assert ":2: cluster.gpus_per_nodes: unknown field" in str(err.value)


def test_override_keys_and_values_are_checked(tmp_path):
    path = _write(tmp_path, GOOD)
    for assignment, says in (("none=<<: ", "not valid YAML"), (".=*a", "not a dotted key"),
                             ("True=!!int ", "not valid YAML"), ("a=&x [*x]", "itself")):
        with pytest.raises(ScenarioError, match=says):
            load_scenario(path, [assignment])


def test_errors_found_while_simulating_name_the_file_and_line(tmp_path):
    from simtrain import simulate
    from simtrain.scenario import scenario_error

    # GPT-3 175B on 8 A100s: ~350 GB of bf16 weights alone, far beyond 8 x 80 GB. The
    # error used to name the scenario ("s"), not the file and the line of parallelism.
    path = _write(tmp_path, "cluster: {preset: dgx-a100, nodes: 1}\nmodel: {preset: "
                  "gpt3-175b}\ntraining: {global_batch_size: 8, seq_len: 2048}\n"
                  "parallelism:\n  tp: 8\n")
    with pytest.raises(ScenarioError) as err:
        simulate(load_scenario(path))
    assert str(err.value).startswith(f"{path}:4: parallelism: out of memory")
    s = load_scenario(path, ["sim.seed=3"])
    assert str(scenario_error(s, "sim.seed", "x")) == "--set sim.seed=3: x"

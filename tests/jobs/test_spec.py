"""Loading scenarios with jobs: placement, overrides, per-job checks and their messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from simtrain.errors import ScenarioError
from simtrain.jobs import is_jobs_file, load_jobs

ROOT = Path(__file__).resolve().parents[2]
TEXT = """\
name: pair
cluster:
  preset: dgx-h100
  nodes: 4
jobs:
  a:
    gpus: 16
    placement: spread
    model:
      preset: gpt2-small
    training:
      global_batch_size: 32
      micro_batch_size: 1
      seq_len: 1024
    parallelism:
      tp: 4
  b:
    placement: "4-7,12-15"
    model:
      preset: gpt2-small
    training:
      global_batch_size: 16
      micro_batch_size: 2
      seq_len: 1024
"""


def _write(tmp_path: Path, text: str = TEXT) -> Path:
    path = tmp_path / "pair.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_jobs_are_placed_and_validated_on_their_own_size(tmp_path):
    scenario = load_jobs(_write(tmp_path))
    a, b = scenario.jobs
    # explicit b first (4-7, 12-15), then a spread over the free GPUs: 4 per server
    assert b.gpus == (4, 5, 6, 7, 12, 13, 14, 15) and b.policy is None
    assert a.gpus == (0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27)
    assert a.scenario.parallelism.dims(16).dp == 4
    assert a.scenario.sim.fidelity == "explicit"
    assert (scenario.name, a.scenario.name) == ("pair", "a")


def test_overrides_reach_one_job(tmp_path):
    path = _write(tmp_path)
    scenario = load_jobs(path, ["jobs.b.placement=pack", "jobs.b.gpus=8"])
    # b is placed after a now (a spread first): the lowest free GPUs
    assert scenario.jobs[1].gpus == (4, 5, 6, 7, 12, 13, 14, 15)
    with pytest.raises(ScenarioError, match=r"--set jobs.a.placement=0-3: lists 4 GPUs "
                                            r"but gpus is 16"):
        load_jobs(path, ["jobs.a.placement=0-3"])


def test_a_job_field_error_names_the_job_and_its_line(tmp_path):
    path = _write(tmp_path, TEXT.replace("      tp: 4", "      tp: 5"))
    with pytest.raises(ScenarioError) as info:
        load_jobs(path)
    assert str(info.value).startswith(f"{path}:15: jobs.a.parallelism: tp x cp x pp = 5")


def test_spread_with_tp_larger_than_its_share_of_a_server_is_refused(tmp_path):
    # 8 GPUs spread over 4 servers are 2 per server: tp=4 would straddle servers
    text = TEXT.replace("    gpus: 16", "    gpus: 8")
    with pytest.raises(ScenarioError, match=r"jobs.a.parallelism.tp: tp=4 does not divide "
                                            r"the 2 GPUs per node"):
        load_jobs(_write(tmp_path, text))


def test_a_world_size_mismatch_says_it_is_the_jobs_share(tmp_path):
    text = TEXT + "    parallelism:\n      dp: 4\n"
    with pytest.raises(ScenarioError, match=r"jobs.b.parallelism.dp: .* \(the cluster of job "
                                            r"'b' is its 8 GPUs\)"):
        load_jobs(_write(tmp_path, text))


@pytest.mark.parametrize("edit, fragment", [
    (("name: pair", "name: pair\nmodel: {preset: gpt2-small}"),
     "model: unknown field 'model'; a scenario with jobs has: name, description, cluster"),
    (("  nodes: 4\n", "  nodes: 4\nplacement: packed\n"), "placement: expected one of pack"),
    (("  nodes: 4\n", "  nodes: 4\nsim:\n  hangs: {3: 1ms}\n"),
     "sim.hangs: sim.hangs is not supported with jobs yet"),
    (("    gpus: 16\n", "    gpus: 0\n"), "jobs.a.gpus: expected a whole number of GPUs >= 1"),
    (("  nodes: 4\n", "  nodes: 0\n"), "cluster.nodes"),
    (("  a:\n", "  a.1:\n"), "job name 'a.1': use letters, digits, _ and - only"),
])
def test_bad_top_level_input_is_one_line(tmp_path, edit, fragment):
    with pytest.raises(ScenarioError) as info:
        load_jobs(_write(tmp_path, TEXT.replace(*edit)))
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_is_jobs_file(tmp_path):
    assert is_jobs_file(ROOT / "scenarios" / "two_jobs.yaml")
    assert not is_jobs_file(ROOT / "scenarios" / "quickstart.yaml")
    assert not is_jobs_file(tmp_path / "missing.yaml")
    assert not is_jobs_file(_write(tmp_path, "jobs: [unclosed\n"))


def test_the_top_level_placement_is_the_default_of_jobs_that_name_none(tmp_path):
    text = TEXT.replace("    placement: spread\n", "").replace("  nodes: 4\n",
                                                              "  nodes: 4\nplacement: spread\n")
    a = load_jobs(_write(tmp_path, text)).jobs[0]
    assert a.policy == "spread" and a.gpus[:5] == (0, 1, 2, 3, 8)

"""Uneven pipeline stages with interleaving: one layer count per model chunk (pp_layers)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from simtrain.cli import app
from simtrain.hardware.topology import build_cluster
from simtrain.parallel.shard import stage_layers
from simtrain.scenario import ScenarioError, load_scenario
from simtrain.simulate import build_plan

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_llama3_405b_interleaves_126_layers_on_16_stages():
    # 126 layers, pp 16, vpp 2: 32 model chunks, 126 = 32·4 - 2, so the first and last
    # model chunks take 3 (Dubey et al. 2024, Sec. 3.3.2: one layer less on the end stages).
    # Stage 0 chunk 0 is model chunk 0: layers 0-2; stage 0 chunk 1 is model chunk 16,
    # starting after 3 + 15·4 = 63: layers 63-66; stage 15 chunk 1 is model chunk 31: the
    # last 3, 123-125.
    counts = [3] + [4] * 30 + [3]
    ranges = stage_layers(126, 16, 2, counts)
    assert ranges[0] == [range(0, 3), range(63, 67)]
    assert ranges[15] == [range(59, 63), range(123, 126)]
    assert sorted(i for stage in ranges for r in stage for i in r) == list(range(126))


def test_even_split_is_the_default_and_one_count_per_stage_still_works():
    # 24 layers, pp 2, vpp 2: chunks of 6; chunk c of stage i is model chunk 2c + i.
    assert stage_layers(24, 2, 2) == [[range(0, 6), range(12, 18)],
                                      [range(6, 12), range(18, 24)]]
    assert stage_layers(16, 2, 1, [7, 9]) == [[range(0, 7)], [range(7, 16)]]


def test_uneven_interleaved_scenario_builds_the_listed_chunks():
    # pp_interleaved_uneven: 30 layers as [3, 4, 4, 4, 4, 4, 4, 3] over pp 4, vpp 2; stage 0
    # holds model chunks 0 and 4 (3 + 4 layers), stage 3 model chunks 3 and 7 (4 + 3).
    scenario = load_scenario(SCENARIOS / "pp_interleaved_uneven.yaml")
    plan = build_plan(scenario, build_cluster(scenario.cluster))
    layers = [[sum(1 for u in chunk if u.layer >= 0) for chunk in stage] for stage in plan.units]
    assert layers == [[3, 4], [4, 4], [4, 4], [4, 3]]


@pytest.mark.parametrize(("counts", "says"), [
    ([3, 4, 4, 4, 4, 4, 4, 4], "summing to num_layers=30; got 8 summing to 31"),
    ([7, 8, 8, 7], "must list pp x vpp = 4 x 2 = 8 positive layer counts"),
    ([0, 4, 4, 4, 4, 4, 4, 6], "positive layer counts"),
])
def test_wrong_layer_counts_are_one_line_and_exit_2(counts, says):
    override = f"parallelism.pp_layers=[{','.join(map(str, counts))}]"
    with pytest.raises(ScenarioError, match=says.replace("(", r"\(")):
        load_scenario(SCENARIOS / "pp_interleaved_uneven.yaml", overrides=[override])
    result = CliRunner().invoke(app, ["run", str(SCENARIOS / "pp_interleaved_uneven.yaml"),
                                      "--set", override, "--no-report"])
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and says in lines[0]

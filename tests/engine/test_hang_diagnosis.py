"""Hang diagnosis on bundled pipeline and MoE jobs names the hung rank (issue 18).

In pp_1f1b a hang at rank 9 used to be reported as "wait for rank 8" and in moe_mixtral a
hang at rank 17 as a list of ranks 16, 18, 20, ... that never included 17: those are
victims blocked on the hung rank. The diagnosis walks the wait-for graph to the rank that
stopped issuing work. The scenarios are shrunk (fewer layers, microbatches) to keep the
tests fast; the communication pattern, and so the wait-for graph, is the same.
"""

from __future__ import annotations

import re

import pytest

from simtrain import SimulationDeadlock, load_scenario, simulate

CASES = [("pp_1f1b", r, ["model.num_layers=8", "training.global_batch_size=8"])
         for r in (9, 2, 4, 15)]
CASES += [("moe_mixtral", r, ["model.num_layers=2"]) for r in (17, 5, 30)]


@pytest.mark.parametrize(("name", "rank", "shrink"), CASES)
def test_the_hung_rank_is_named_first_with_the_chain_behind_it(name, rank, shrink):
    scenario = load_scenario(f"scenarios/{name}.yaml", [f"sim.hangs={{{rank}: 1ms}}", *shrink])
    with pytest.raises(SimulationDeadlock) as err:
        simulate(scenario)
    msg = str(err.value)
    named = re.findall(r"rank (\d+)", msg)
    assert int(named[0]) == rank, msg
    assert f"rank {rank} stopped issuing work" in msg
    # the chain of waits ends at the hung rank
    chain = msg.split("the longest chain: ")[1]
    assert re.search(rf"(for|from) rank {rank}\b[^;]*$", chain), msg
    # every other rank is blocked, directly or through others, on the hung one
    world = scenario.cluster.nodes * scenario.cluster.gpus_per_node
    assert f"{world - 1} ranks wait on it" in msg
    assert err.value.blocked[rank][2].startswith("stopped")
    assert err.value.timeline is not None and len(err.value.timeline) > 0

"""Two jobs on a shared 2-tier fabric: each is slower than alone by its share of the links.

The hand-computed case (every number below follows from the scenario by arithmetic):

- Cluster: 2 DGX H100 servers, fat tree with one server per leaf; each leaf has 8 NIC
  ports down (400 Gb/s = 50 GB/s each, reference/hardware.yaml NDR) and, at
  oversubscription 8, one spine and an uplink of 8 x 50 / 8 = 50 GB/s per direction.
- Each job: GPT-2 small cut to 2 layers, data-parallel over 2 GPUs (one per server),
  gradients fp32, one step of one microbatch, overlap off, ``comm.backend: ideal`` (line
  rate, no software latency) and a forced ring. Parameters: token embedding 50,257 x 768 =
  38,597,376, positions 1,024 x 768 = 786,432, 2 layers x (12 x 768^2 + 13 x 768) =
  2 x 7,087,872 = 14,175,744, final norm 2 x 768 = 1,536; total 53,561,088. Gradient
  bytes n = 4 x 53,561,088 = 214,244,352 B.
- A 2-rank ring all-reduce sends 2(P-1)/P x n = n bytes each way between the two GPUs,
  over GPU -> NIC -> leaf -> spine -> leaf -> NIC -> GPU.
- Job a on GPUs (0, 8), job b on GPUs (1, 9): different NICs (nic0, nic1), the same
  leaf0 -> spine0 and spine0 -> leaf1 links (and back). Max-min fair share on the shared
  uplink: 50 / 2 = 25 GB/s per flow; the NIC links (50 GB/s, one flow each) do not bind.
- Alone a flow runs at min(50, 50) = 50 GB/s: n / 50e9 = 4.28488704 ms of wire time.
  Together: n / 25e9 = 8.56977408 ms. Both jobs are identical, so their all-reduces run
  at the same time the whole way: each step grows by exactly 4.28488704 ms.
- Job b moved to GPUs (1, 2) (one server, NVLink only): no link is shared, so neither
  job is slowed.
"""

from __future__ import annotations

from typing import Any

import pytest

from simtrain.errors import ScenarioError
from simtrain.jobs import load_jobs, simulate_jobs

GRAD_BYTES = 4 * 53_561_088  # fp32 gradients of the 2-layer GPT-2 small (docstring)
UPLINK = 50e9  # B/s: 8 NICs x 50 GB/s / oversubscription 8, over one spine


def _job(gpus: list[int]) -> dict[str, Any]:
    return {"placement": gpus, "model": {"preset": "gpt2-small", "num_layers": 2},
            "training": {"global_batch_size": 2, "micro_batch_size": 1, "seq_len": 1024,
                         "dtype": "bf16"},
            "parallelism": {"ddp": {"overlap": False, "grad_dtype": "fp32"}}}


def scenario(b_gpus: list[int]) -> dict[str, Any]:
    return {"name": "maxmin",
            "cluster": {"preset": "dgx-h100", "nodes": 2, "fabric": "fat-tree",
                        "nodes_per_leaf": 1, "oversubscription": 8},
            "comm": {"backend": "ideal", "algorithm": "ring"},
            "compute": {"comm_interference": 0},
            "jobs": {"a": _job([0, 8]), "b": _job(b_gpus)}}


@pytest.fixture(scope="module")
def crossing():
    return simulate_jobs(load_jobs(scenario([1, 9])))


def test_each_job_is_slower_by_its_share_of_the_shared_uplink(crossing):
    extra = GRAD_BYTES / (UPLINK / 2) - GRAD_BYTES / UPLINK  # 4.28488704 ms
    assert extra == pytest.approx(4.28488704e-3, rel=1e-9)
    for name in ("a", "b"):
        job = crossing.summary["jobs"][name]
        assert job["step_time_s"] - job["step_time_alone_s"] == pytest.approx(extra, rel=1e-6)
        assert job["slowdown"] == pytest.approx(
            (job["step_time_alone_s"] + extra) / job["step_time_alone_s"], rel=1e-6)
    # uplinks leaf0->spine0, spine0->leaf1 and back: 4 links carry both jobs
    assert crossing.summary["shared_links"] == 4


def test_every_flow_over_the_spine_runs_at_half_the_uplink(crossing):
    links = crossing.cluster.links
    over_spine = [f for f in crossing.timeline.flows
                  if any("spine" in links[i].dst for i in f.route)]
    assert len(over_spine) >= 4  # both jobs, both directions
    for flow in over_spine:
        assert flow.nbytes / (flow.end - flow.start) == pytest.approx(UPLINK / 2, rel=1e-9)


def test_jobs_that_share_no_link_run_as_fast_as_alone():
    result = simulate_jobs(load_jobs(scenario([1, 2])))
    assert result.summary["shared_links"] == 0
    for job in result.summary["jobs"].values():
        assert job["slowdown"] == 1.0
    assert any("do not interact" in n for n in result.summary["notes"])


def test_per_job_timelines_hold_their_own_ranks_and_job_names(crossing):
    own = crossing.job_timelines["b"]
    assert own.num_ranks == 2 and {s.rank for s in own.spans} == {0, 1}
    assert {s.rank for s in crossing.timeline.spans} == {0, 1, 8, 9}
    # every task's span names its job (for the report's hover); host waits are not tasks
    assert {s.meta.get("job") for s in crossing.timeline.spans
            if s.rank in (1, 9) and s.kind != "host"} == {"b"}
    assert crossing.job_of(8) == "a" and crossing.job_of(5) == ""
    assert crossing.summary["fidelity"] == "explicit"
    assert "symmetric" in crossing.summary["fidelity_note"]


def test_the_analytic_network_says_that_jobs_do_not_contend():
    doc = scenario([1, 9])
    doc["sim"] = {"network": "analytic"}
    result = simulate_jobs(load_jobs(doc))
    assert all(job["slowdown"] == 1.0 for job in result.summary["jobs"].values())
    assert any("do not contend" in n for n in result.summary["notes"])


def test_jobs_whose_interference_models_differ_are_refused():
    # fp32 GEMMs run at another peak than bf16 ones: one executor cannot model both jobs'
    # compute/communication interference, and says so at the job's dtype.
    doc = scenario([1, 9])
    doc["compute"] = {"comm_interference": None}  # the SM/HBM model, not a fixed factor
    doc["jobs"]["b"]["training"]["dtype"] = "fp32"
    with pytest.raises(ScenarioError, match=r"jobs.b.training.dtype: the interference model "
                                            r"of job 'b' differs from that of job 'a'"):
        simulate_jobs(load_jobs(doc))
